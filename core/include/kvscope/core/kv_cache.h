#pragma once
// KvCache: per (layer, KV head) key/value storage for one sequence, with the true RoPE position of
// every entry, so eviction never renumbers positions.
#include <cstdint>
#include <vector>

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include "kvscope/core/compact_keys.h"
#include "kvscope/core/model_config.h"

namespace kvscope {

/// Storage of one layer. Each KV head h owns the segment [offset[h], offset[h] + capacity[h]) of
/// the flat buffers; its first length[h] rows are live. Keys are stored post-RoPE.
struct LayerKv {
  at::Tensor k;                                   // dtype [sum(capacity), head_dim]
  at::Tensor v;                                   // dtype [sum(capacity), head_dim]
  at::Tensor pos;                                 // int64 [sum(capacity)]: true token position of each entry
  std::vector<int64_t> offset, capacity, length;  // per KV head, in entries
  /// Retention mode "window" (streaming heads, StreamingLLM §3 / DuoAttention): per head, 0 = off,
  /// else the head is a ring buffer of ring_sink sink entries + ring_window recent entries; once
  /// full, each append overwrites the oldest non-sink entry (slot ring_next). Its length then stays
  /// at ring_sink + ring_window while its rows change: a side store kept up to date by length (page
  /// min/max, running sums) must not take an unchanged length for unchanged rows.
  std::vector<int64_t> ring_sink, ring_window, ring_next;
  /// Sliding-window layer (ModelConfig::window, Mistral / Gemma 2/3 / Qwen3's local layers): a query
  /// at position p sees positions > p - window, so between forwards each head keeps only its last
  /// `window` positions, position p at row offset + p % window (`ringed`): memory is the window's,
  /// whatever the context, and a decode append overwrites the oldest entry in place. A block of
  /// several tokens is appended in order (ringed false) and KvCache::ring_windows folds it back.
  /// Never compressed (Pipeline). 0 = a full-attention layer.
  int64_t window = 0;
  bool ringed = false;
  /// Keys held compactly (KvCache::compact_keys; key-channel pruning, SPARK / ThinK): per head h,
  /// the keys of its first compact[h].n entries live in compact[h] (recovered when read) and `k`
  /// holds only the later entries' keys, entry r >= compact[h].n at row k_offset[h] + r of k (its
  /// value and position stay at row offset[h] + r of v and pos). Both empty while every key of the
  /// layer is dense; key_row gives the row either way.
  std::vector<CompactKeys> compact;
  std::vector<int64_t> k_offset;
  /// Values held compactly the same way (SPARK's value-channel pruning, App. D): the first
  /// compact_v[h].n entries' values (as many as its compact keys) live in compact_v[h], the later
  /// ones at row v_offset[h] + r of v. Positions stay at row offset[h] + r of pos.
  std::vector<CompactKeys> compact_v;
  std::vector<int64_t> v_offset;
  /// Row of `k` that holds entry r of head h (r >= compact_entries(h)).
  int64_t key_row(int64_t h, int64_t r) const { return (compact.empty() ? offset[h] : k_offset[h]) + r; }
  /// Row of `v` that holds entry r of head h (r >= its compact values).
  int64_t value_row(int64_t h, int64_t r) const { return (compact_v.empty() ? offset[h] : v_offset[h]) + r; }
  /// Entries of head h whose values are held compactly (0 without).
  int64_t compact_value_entries(int64_t h) const { return compact_v.empty() ? 0 : compact_v[h].n; }
  /// Entries of head h whose keys are held compactly (0 without a compact prefix).
  int64_t compact_entries(int64_t h) const { return compact.empty() ? 0 : compact[h].n; }
  /// True when the layer holds keys or values compactly.
  bool has_compact() const { return !compact.empty() || !compact_v.empty(); }
  /// key_row(h, 0) / value_row(h, 0) of every head: the bases a kernel adds entry r to.
  std::vector<int64_t> key_bases() const;
  std::vector<int64_t> value_bases() const;
  /// True when every head has the same capacity and length: the buffers view as [n_head_kv, cap, D].
  bool uniform() const;
  /// True when KV head h is a ring buffer (ring_window[h] > 0); has_ring: when any head is.
  bool ring(int64_t h) const { return h < static_cast<int64_t>(ring_window.size()) && ring_window[h] > 0; }
  bool has_ring() const;
};

/// The cache of one sequence (batch 1) across all layers.
class KvCache {
 public:
  /// Allocates `capacity` entries per (layer, KV head) on `device` in `dtype`.
  KvCache(const ModelConfig& config, int64_t capacity, c10::Device device, c10::ScalarType dtype);

  int64_t n_layer() const { return static_cast<int64_t>(layers_.size()); }
  int64_t n_head_kv() const { return n_head_kv_; }
  int64_t head_dim() const { return head_dim_; }
  const LayerKv& layer(int64_t l) const { return layers_[l]; }

  /// Appends T entries to every head of layer l. k, v: [n_head_kv, T, head_dim] (dtype of the
  /// cache); positions: int64 [T] on the cache device. Grows capacity (doubling) when full.
  void append(int64_t l, const at::Tensor& k, const at::Tensor& v, const at::Tensor& positions);

  /// Makes room for `n` more entries in every head of layer l (growing as append does). For
  /// kernels that write entries in place (rope_append); follow with commit_append(l, n). A
  /// sliding-window layer is ringed first (its kernels write row offset + position % window).
  /// Returns false if the layer has streaming ring-buffer heads (those must go through append()).
  bool reserve_append(int64_t l, int64_t n);
  /// Counts `n` entries written in place at each head's end as live (a sliding-window layer: up to
  /// its window).
  void commit_append(int64_t l, int64_t n);

  /// Folds every sliding-window layer back to its ring (LayerKv::window): keeps the entries of the
  /// last `window` positions, at rows position % window, in a segment of at most `window` entries
  /// per head (less while the sequence is shorter), freeing the rest. Engine::prefill calls it
  /// after the prompt; a single-token append calls it for its layer.
  void ring_windows();

  /// Stores the keys of every live entry of full-attention layer l compactly: heads[h] holds the
  /// keys of head h's length[h] entries (CompactKeys::pack of them). The layer's dense K buffer is
  /// re-allocated to hold only the entries appended later (capacity - length rows per head), so
  /// the dense key bytes of those entries are really freed; values and positions stay. Reads of
  /// the keys (keys, head_keys) return the recovered keys k̂. Throws std::invalid_argument on a
  /// head count, entry count or head_dim that does not match, std::logic_error on a sliding-window
  /// layer, a layer with ring-buffer heads or one already compact.
  /// `values`, when not empty, stores the values of the same entries compactly too (one per head,
  /// the same entry counts; pruned value channels read as 0) and frees their dense rows.
  void compact_keys(int64_t l, std::vector<CompactKeys> heads, std::vector<CompactKeys> values = {});
  /// Makes layer l's keys (and values) dense again (the recovered ones); no-op when they are.
  /// retain does this first (a later turn re-compresses a compact layer).
  void expand_keys(int64_t l);

  /// Dense views of a uniform layer: [n_head_kv, length, head_dim] (and int64 [n_head_kv, length]).
  /// Throws std::logic_error if the layer is ragged (use head_keys/head_values). A layer with
  /// compact keys returns a new tensor of the recovered keys (not a view).
  at::Tensor keys(int64_t l) const;
  at::Tensor values(int64_t l) const;
  at::Tensor positions(int64_t l) const;
  /// Live entries of one KV head: [length[h], head_dim] and int64 [length[h]] (keys and values:
  /// recovered, a new tensor, where the layer holds them compactly).
  at::Tensor head_keys(int64_t l, int64_t h) const;
  at::Tensor head_values(int64_t l, int64_t h) const;
  at::Tensor head_positions(int64_t l, int64_t h) const;

  /// Physical eviction (retention mode "evict"): keeps, for every KV head h of layer l, only the
  /// live entries whose row indices are kept[h] (int64, sorted, unique, < length[h]; any device),
  /// with their true positions. The layer is re-packed into segments of kept[h].size() + reserve
  /// entries, so memory is really freed (no padding: head-wise budgets make it ragged).
  /// Throws std::invalid_argument on a wrong head count or an index out of range.
  void retain(int64_t l, const std::vector<at::Tensor>& kept, int64_t reserve);
  /// Same with a reserve per KV head (streaming heads need none: their ring never grows).
  void retain(int64_t l, const std::vector<at::Tensor>& kept, const std::vector<int64_t>& reserve);

  /// Drops the lowest-scored entry of every KV head of uniform layer l in place, keeping the others
  /// in order: head h's rows after argmin_j scores[h, j] (at::argmin's choice) move down one row
  /// (K, V and positions). The eviction of a decode step at its cap (Pipeline::evict_decode_device):
  /// nothing is allocated on the host side nor read back, so a CUDA graph can capture it (on CUDA
  /// one kernel, kernels/evict.h). n: the live entries per head on the device, which inside a
  /// captured step run one ahead of the host lengths (the step's append), at most the capacity;
  /// scores: fp32 [n_head_kv, n] on the cache device. `length` (int64 [n_head_kv] on the cache
  /// device, the step's device lengths), when defined, is decremented by one; the host lengths are
  /// left as they are (commit_drop). `candidates` (1..n; 0: all n): the argmin ranges over the
  /// first `candidates` entries only, the later ones are kept (H2O's recent window). `alongside`
  /// (fp32 [n_head_kv, >= n] on the cache device, e.g. `scores` itself), when defined, drops the
  /// same column (H2O's running totals follow the rows). Throws std::logic_error on a ragged or
  /// compact layer or an n past the capacity, std::invalid_argument on scores of another shape or
  /// candidates outside [0, n].
  void drop_lowest(int64_t l, const at::Tensor& scores, int64_t n, const at::Tensor& length = {},
                   int64_t candidates = 0, const at::Tensor& alongside = {});
  /// Keeps, in every KV head of uniform layer l, the rows `kept` [n_head_kv, m] (int64, ascending,
  /// each < n, on the cache device) of its n live entries, in place and in order: rows [0, m) of
  /// head h become its rows kept[h] (K, V and positions). The eviction of a decode step every
  /// `interval` steps (kvpress DecodingPress, Pipeline::evict_decode_device): one gather and one
  /// copy per tensor, no host read, so a CUDA graph can capture it. n, `length`: as drop_lowest
  /// (`length` falls by n - m). Throws std::logic_error on a ragged or compact layer or an n past
  /// the capacity, std::invalid_argument on `kept` of another shape or m > n.
  void keep_in_place(int64_t l, const at::Tensor& kept, int64_t n, const at::Tensor& length = {});
  /// Counts `count` entries fewer in every head of layer l: the host side of drop_lowest (1) and
  /// keep_in_place (n - m). Throws std::logic_error when a head holds fewer.
  void commit_drop(int64_t l, int64_t count = 1);

  /// Replaces layer l with the given entries (all heads the same count n), leaving room for
  /// `reserve` appended entries per head. k, v: [n_head_kv, n, head_dim]; pos: int64 [n_head_kv, n].
  /// Used for per-turn filtered copies (RocketKV-MT keeps the full cache and decodes over a copy).
  void assign_layer(int64_t l, const at::Tensor& k, const at::Tensor& v, const at::Tensor& pos, int64_t reserve);

  /// Turns head h of layer l into a ring buffer of `sink` + `window` entries (retention mode
  /// "window"). Its live entries must already be the sinks followed by the most recent ones, at
  /// most sink + window of them, and its capacity at least that. Attention is order-free once RoPE
  /// is applied, so overwriting in place is exact. Throws std::invalid_argument otherwise.
  void set_window(int64_t l, int64_t h, int64_t sink, int64_t window);

  /// Every head's live positions on the host, in storage order ([layer][KV head]), fetched in one
  /// device read (int32: positions stay below 2^31).
  std::vector<std::vector<std::vector<int32_t>>> host_positions() const;

  /// A deep copy: the same entries, positions and layout in new buffers, so compressing or
  /// appending to one leaves the other as it was (prefill once, compress many: SharedPrefill).
  KvCache clone() const;

  /// Position the next appended token gets (one past the largest position seen).
  int64_t next_position() const { return next_position_; }
  void advance_position(int64_t n) { next_position_ += n; }

  /// Bytes allocated for K and V (all layers, all heads), compact keys included.
  int64_t bytes_allocated() const;
  /// Bytes of live K and V entries: sum over (layer, head) of length * head_dim * itemsize for V,
  /// the same for dense keys, plus the compact keys' bytes.
  int64_t bytes_live() const;

 private:
  void grow(int64_t l, int64_t min_capacity);
  void ring_window_layer(int64_t l);
  void append_window(int64_t l, const at::Tensor& k, const at::Tensor& v, const at::Tensor& positions);
  void append_ring(int64_t l, int64_t h, const at::Tensor& k, const at::Tensor& v, const at::Tensor& positions);
  int64_t n_head_kv_, head_dim_;
  int64_t next_position_ = 0;
  std::vector<LayerKv> layers_;
};

}  // namespace kvscope
