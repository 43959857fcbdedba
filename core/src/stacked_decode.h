#pragma once
// A channel-pruning stage (S4: SPARK, ThinK) stacked under a decode-time selection (S5: RocketKV's
// HSA, Quest, SparQ, Exact-TopK; S7: RocketKV-MT), as one DecodeAttentionPolicy of a Pipeline
// (docs/methods.md §4.10). Internal to kvscope_core (pipeline.cpp).
//
// SPARK calls itself orthogonal to other KV compression (Liao et al. 2025 §1) without defining the
// combination with decode-time selection; kvscope's reading: the channel stage prunes the keys the
// eviction kept and stores them compactly (KvCache::compact_keys), then the selection builds its side
// stores from, scores and attends over the recovered keys k̂ (what every read of a compact key
// gives), so a step's logits are q·k̂ over the selected entries. Bytes read per step: the
// selection's side-store bytes plus, for every row it gathers, the row as stored (a compact key:
// its kept channels, bitmask, signs and μ; a dense key or value: D values).
// On CUDA the step runs eagerly through LibTorch (the selection's fused kernels read dense keys):
// no CUDA graph.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kvscope/core/policy.h"

namespace kvscope {

class StackedDecode final : public DecodeAttentionPolicy {
 public:
  /// `channel` and `selection` are the pipeline's own stages (they outlive this).
  StackedDecode(DecodeAttentionPolicy& channel, DecodeAttentionPolicy& selection)
      : channel_(channel), selection_(selection) {}
  std::string name() const override { return channel_.name() + "+" + selection_.name(); }
  Stage stage() const override { return selection_.stage(); }
  ParamValues params() const override { return {}; }
  int64_t prefill_queries() const override;
  /// channel's on_prefill (the layer's keys become compact), then the selection's over them.
  void on_prefill(int64_t layer, const LayerPrefill& in, KvCache& cache) override;
  std::optional<int64_t> eviction_budget(const RunBudget& budget) const override {
    return selection_.eviction_budget(budget);
  }
  void configure(const RunBudget& budget, const ModelConfig& config) override;
  /// The selection's step over the recovered keys; counts the bytes as stored (class comment).
  at::Tensor attend(int64_t layer, const at::Tensor& q, const KvCache& cache) override;
  int64_t bytes_read_last() const override { return bytes_last_; }
  int64_t side_store_bytes() const override { return channel_.side_store_bytes() + selection_.side_store_bytes(); }
  std::vector<at::Tensor> last_selection() const override { return selection_.last_selection(); }

 private:
  DecodeAttentionPolicy& channel_;
  DecodeAttentionPolicy& selection_;
  int64_t bytes_last_ = 0;
};

}  // namespace kvscope
