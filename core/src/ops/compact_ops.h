#pragma once
// LibTorch adapter over kernels/compact_decode.h: decode attention that reads a layer's compact
// (channel-pruned) keys directly (SPARK / ThinK, CompactKeys). Internal to kvscope_core.
#include <cstdint>
#include <optional>

#include <ATen/core/Tensor.h>

#include "kvscope/core/kv_cache.h"

namespace kvscope::ops {

/// What the kernel needs of one layer's compact keys (and values) besides the step's offsets: per
/// KV head its compact entry count and the device addresses of kept, values, sign, scale, inv_a,
/// and of the compact values' kept bits and values (int64 [8, n_head_kv] on the cache device), and
/// the layout every head shares.
struct CompactLayerTable {
  at::Tensor table;
  int64_t kept_row_bytes = 0, stride = 0, sign_bytes = 0, v_stride = 0;
  bool sign = false, values = false;
};

/// The rows a selection attends in a compact layer: index int32 [n_head_kv, S] (entries, ascending),
/// count int64 [n_head_kv] (as ops::page_select writes them), and optionally compact_read, int64
/// [n_head_kv] on the device, where the step writes how many of each head's rows were compact.
struct CompactSelection {
  at::Tensor index, count, compact_read;
};

/// The table of layer `layer`, or nullopt when the kernel cannot read it: no compact keys, an
/// entry count that differs per entry (SPARK-p), layouts that differ across heads, a head_dim
/// other than 64 / 96 / 128 / 256, or keys not on CUDA. Valid while the layer stays compact (the
/// compact tensors never move). One upload.
std::optional<CompactLayerTable> compact_layer_table(const LayerKv& layer, int64_t head_dim);

/// Decode attention of one token over `layer`: q [n_head, D] (or [1, n_head, D]); value_base_dev,
/// key_base_dev, length_dev int64 [n_head_kv] on the device (LayerKv::value_row(h, 0),
/// ::key_row(h, 0), the live lengths including the step's entry); max_len >= every length (host bound, plans the
/// split). Softmax scale 1/sqrt(D) when scale <= 0. Returns [n_head, D] in q's dtype. Throws
/// std::invalid_argument on mismatched shapes, std::runtime_error without the CUDA kernels.
/// With `selection`, each head attends only to the entries it lists (a decode-time selection over
/// the compact layer), max_len then bounding the counts.
at::Tensor compact_decode_attention(const at::Tensor& q, const LayerKv& layer, const CompactLayerTable& table,
                                    const at::Tensor& value_base_dev, const at::Tensor& key_base_dev,
                                    const at::Tensor& length_dev, int64_t max_len, int64_t group, double scale = 0.0,
                                    const CompactSelection* selection = nullptr);

}  // namespace kvscope::ops
