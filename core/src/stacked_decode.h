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
// On CUDA, a page selection (HSA, Quest: PagedSelectionBase) over a channel stage whose compact
// layout the kernels read (ChannelPruningBase::reads_rows) runs fused and in the CUDA graph: the
// pages summarise the recovered keys (page_select's upkeep takes the compact part of the page
// where the dense keys begin from PageMinMax::compact_edge), and the selected rows are attended by
// the compact-key kernel, which counts the compact rows it read for the byte count. Other
// selections (SparQ, Exact-TopK, RocketKV-MT) step eagerly through LibTorch, without a graph.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kvscope/core/policy.h"

namespace kvscope {

struct LayerKv;
namespace policies {
class ChannelPruningBase;
class PagedSelectionBase;
}  // namespace policies

class StackedDecode final : public DecodeAttentionPolicy {
 public:
  /// `channel` and `selection` are the pipeline's own stages (they outlive this).
  StackedDecode(DecodeAttentionPolicy& channel, DecodeAttentionPolicy& selection);
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

  // The CUDA graph (class comment): both stages prepare; the selection's step; bytes as stored.
  bool prepare_graph(const KvCache& cache, int64_t steps) override;
  at::Tensor attend_device(int64_t layer, const at::Tensor& q, const KvCache& cache, const at::Tensor& offset_dev,
                           const at::Tensor& length_dev) override {
    return selection_.attend_device(layer, q, cache, offset_dev, length_dev);
  }
  /// The selection's bytes with each compact row it read counted as stored (one device read).
  int64_t after_graph_step(const KvCache& cache) override;
  bool stages_graph_selections() const override { return selection_.stages_graph_selections(); }
  void stage_graph_selections() override { selection_.stage_graph_selections(); }
  StepSelections staged_graph_selections() const override { return selection_.staged_graph_selections(); }
  std::pair<at::Tensor, at::Tensor> device_selection(int64_t layer) const override {
    return selection_.device_selection(layer);
  }

 private:
  /// Bytes n compact entries of head h of `L` take at the head's average bytes per entry (keys, and
  /// values where compact too) less the 2·D·itemsize per entry of dense rows (negative), rounded.
  static int64_t compact_rows_saving(const LayerKv& L, int64_t h, int64_t n);
  DecodeAttentionPolicy& channel_;
  DecodeAttentionPolicy& selection_;
  policies::ChannelPruningBase* pruning_ = nullptr;  // channel_, where it is one
  policies::PagedSelectionBase* paged_ = nullptr;    // selection_, where it is one
  int64_t bytes_last_ = 0;
};

}  // namespace kvscope
