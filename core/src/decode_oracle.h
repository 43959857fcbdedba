#pragma once
// DecodeOracle: capture full's exact top-k oracle inside the CUDA-graph decode step. After each
// layer's attention (a DeviceLayerHook, engine.h) it enqueues the K-only exact top-k kernels
// (kernels/exact_topk.h): the union record of RocketKV Fig. 2 into TopkUnion's flags, and the
// recall of the decode policy's selection (its device_selection) per KV head. No host read per
// step: stage() copies the step's recall to pinned memory, read after the next synchronisation.
// Internal to kvscope_core (generate.cpp); CUDA builds only do anything.
#include <cstdint>
#include <vector>

#include <ATen/core/Tensor.h>

#include "kvscope/core/capture.h"
#include "kvscope/core/kv_cache.h"

namespace kvscope {

class DecodeAttentionPolicy;

class DecodeOracle {
 public:
  /// True when the kernels run for this cache (CUDA build, CUDA cache, G <= 16, D a multiple of 8,
  /// no layer holding compact keys: the exact top-k kernel reads dense keys).
  static bool supported(const KvCache& cache, int64_t n_head);
  /// `topk`: the union record to fill (outlives the oracle). `policy`: its device_selection() is
  /// measured (optional). `exact`: also keep each step's exact top-k as row bits (the timeline's
  /// per-token heads). Buffers are sized for the cache's capacities.
  DecodeOracle(const KvCache& cache, int64_t n_head, TopkUnion& topk, const DecodeAttentionPolicy* policy, bool exact);
  /// The hook body: one layer of one step (see DeviceLayerHook).
  void add(int64_t layer, const at::Tensor& q, const KvCache& cache, const at::Tensor& offset,
           const at::Tensor& length);
  /// Enqueues the copy of the last step's recall to pinned host memory; returns at once.
  void stage();
  /// The staged recall, [n_layer * n_head_kv] (NaN: no selection or a dense step); valid once the
  /// stream has passed the copy (any later synchronisation).
  std::vector<float> staged_recall() const;
  /// The staged exact top-k of (layer, head) as rows within the head, ascending (empty without
  /// `exact` or where the step measured nothing).
  std::vector<int64_t> staged_exact_rows(int64_t layer, int64_t head) const;
  bool measures_recall() const { return policy_ != nullptr; }

 private:
  TopkUnion& topk_;
  const DecodeAttentionPolicy* policy_;
  std::vector<int64_t> max_len_;                     // per layer: the largest head capacity
  at::Tensor workspace_, recall_dev_, recall_host_;  // recall: fp32 [n_layer, n_head_kv]
  at::Tensor exact_dev_, exact_host_;                // int32 [n_layer, n_head_kv, words]: row bits
};

}  // namespace kvscope
