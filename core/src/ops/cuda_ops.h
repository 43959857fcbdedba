#pragma once
// LibTorch adapters over the CUDA kernels of kvscope_kernels (decode attention, RMSNorm, RoPE +
// cache append, SwiGLU). Internal to kvscope_core (and its tests); this header needs no CUDA
// headers. The bodies exist only in builds with KVSCOPE_HAVE_CUDA_KERNELS; elsewhere every
// function but cuda_kernels_available() throws std::runtime_error.
//
// Common contract: every tensor on one CUDA device, one dtype among fp32 / bf16 / fp16; the kernels
// run on at::cuda::getCurrentCUDAStream(). Errors: std::invalid_argument for bad shapes, dtypes or
// devices; std::runtime_error for a failed launch (with the CUDA error string).
#include <array>
#include <cstdint>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>

#include "kvscope/core/kv_cache.h"
#include "kvscope/core/model_config.h"

namespace kvscope::ops {

/// Host int64 values copied to `device` through pinned memory without blocking: int64 [n].
at::Tensor upload_int64(const std::vector<int64_t>& values, c10::Device device);

/// True when this build carries the CUDA kernels (says nothing about a device being present).
bool cuda_kernels_available();

/// Split-K decode attention of one token over a ragged per-KV-head cache.
/// q: [n_head, D] or [1, n_head, D] (rows of D contiguous, any head stride), D in {64, 96, 128, 256};
/// k, v: [rows, D] contiguous (LayerKv::k / ::v); offset / length: per KV head (host), entries of
/// head h are rows offset[h] .. offset[h] + length[h] - 1; n_head == group * offset.size().
/// scale <= 0 means 1 / sqrt(D); n_split > 0 forces the split count (tests, tuning).
/// out: optional [n_head, D] contiguous destination. Returns [n_head, D] in q's dtype.
/// Uploads offset/length (pinned host memory, non-blocking) on every call.
at::Tensor decode_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                            const std::vector<int64_t>& offset, const std::vector<int64_t>& length, int64_t group,
                            double scale = 0.0, int n_split = 0, at::Tensor out = {});

/// Same with offset / length already on the device (int64 [n_head_kv]) and host upper bounds
/// max_len >= every length and total_len >= their sum (0: max_len * n_head_kv), which plan the
/// split: no upload, no host sync. softcap > 0: logits cap * tanh(x / cap) (Gemma 2).
at::Tensor decode_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& offset_dev,
                            const at::Tensor& length_dev, int64_t max_len, int64_t total_len, int64_t group,
                            double scale = 0.0, int n_split = 0, at::Tensor out = {}, double softcap = 0.0);

/// Convenience over one layer of a KvCache (its live entries).
at::Tensor decode_attention(const at::Tensor& q, const LayerKv& layer, int64_t group, double scale = 0.0);

/// Sparse (index-gather) decode attention: head h attends to rows offset[h] + index[h][j] for
/// j < count[h]. index: int32 [n_head_kv, S] on the device (S >= max count; entries past count[h]
/// are ignored); indices must be < the capacity of head h.
at::Tensor decode_attention_gather(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                   const std::vector<int64_t>& offset, const at::Tensor& index,
                                   const std::vector<int64_t>& count, int64_t group, double scale = 0.0,
                                   int n_split = 0, at::Tensor out = {});

/// Same with the per-head counts on the device (int64 [n_head_kv], e.g. written by page_select) and
/// offsets too: offset_dev int64 [n_head_kv]; max_count: a host upper bound of every count (usually
/// index.size(1)). No upload, no host sync.
at::Tensor decode_attention_gather(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                   const at::Tensor& offset_dev, const at::Tensor& index, const at::Tensor& count_dev,
                                   int64_t max_count, int64_t group, double scale = 0.0, at::Tensor out = {});

/// Rows entering a decode projection, with their RMSNorm possibly left for that projection to apply
/// (kernels/gemv.h: norm_sumsq), so that the norm needs no launch of its own. Pending (sumsq
/// defined): x = g ⊙ r, the norm's weight times the residual rows r (dtype [m, k], one rounding), and
/// sumsq = fp32 [m, parts] partial sums of r², a row's parts adding up to Σ_j r_j²; the rows the
/// projection takes are then x · rsqrt(Σ sumsq / k + eps) (RMSNorm: Zhang & Sennrich 2019, eq. 4;
/// HF's LlamaRMSNorm sums the squares in fp32 of the dtype rows too). Built by linear_row_norm_out;
/// a plain tensor converts to rows with nothing pending.
struct NormedRows {
  at::Tensor x;
  at::Tensor sumsq;
  double eps = 0.0;
  NormedRows(at::Tensor rows) : x(std::move(rows)) {}  // NOLINT(google-explicit-constructor): plain rows
  NormedRows(at::Tensor gx, at::Tensor sumsq_parts, double epsilon)
      : x(std::move(gx)), sumsq(std::move(sumsq_parts)), eps(epsilon) {}
  bool pending() const { return sumsq.defined(); }
};

/// The normalised rows `rows` stands for (x itself when nothing is pending), computed with LibTorch
/// in fp32 and rounded once to x's dtype: the paths that take no pending norm.
at::Tensor normalized(const NormedRows& rows);

/// The decode rows through a linear layer (the decode step's projections): x [m, k] (or [k]),
/// w [n, k] (contiguous), b [n] (a bias) or [m, n] (e.g. the residual stream) or undefined.
/// Returns [m, n] in x's dtype, or fp32 when fp32_out (logits). Up to 8 rows use the GEMV kernels
/// (kernels/gemv.h: one row on the CUDA cores, 2..8 rows of bf16 / fp16 on tensor cores); more rows,
/// fp32 batches and the cases the kernels do not take (k * itemsize not a multiple of 16, unaligned
/// or strided operands) go through at::linear (cuBLAS).
at::Tensor linear_row(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b = {}, bool fp32_out = false);

/// linear_row of rows whose RMSNorm may be pending (NormedRows): the GEMV scales each output row
/// once; where the kernels do not take the shape, normalized(x) goes through linear_row. Throws
/// std::invalid_argument for a pending norm whose sumsq is not contiguous fp32 [m, parts] on x's
/// device (as linear_row_swiglu and qkv_rope_append do).
at::Tensor linear_row(const NormedRows& x, const at::Tensor& w, const at::Tensor& b = {}, bool fp32_out = false);

/// y = linear_row(x, w, b) (b: [m, n], the residual stream, or [n]) that also leaves the RMSNorm
/// with weight g [n] and epsilon eps of y pending for the projection that consumes it: returns y
/// [m, n] and NormedRows{g ⊙ y, Σ y² per GEMV block, eps} (kernels/gemv.h: next_norm_g), from the
/// same launch. Where the kernels do not take the shape: LibTorch, sumsq [m, 1]. Throws
/// std::invalid_argument when g is not [n] in x's dtype and device.
std::pair<at::Tensor, NormedRows> linear_row_norm_out(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b,
                                                      const at::Tensor& g, double eps);

/// linear_row with its output columns cut at 0 <= s0 <= s1 <= n: returns [m, s0], [m, s1 - s0] and
/// [m, n - s1], each contiguous, from one GEMV launch (kernels/gemv.h: y_split; on the cuBLAS path
/// copies of at::linear's columns). The decode step's fused QKV projection: q, k and v of every
/// row of a batch, viewable as [m * heads, head_dim]. Throws std::invalid_argument on bad splits.
std::array<at::Tensor, 3> linear_row_split(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b, int64_t s0,
                                           int64_t s1);

/// The Llama MLP's gate/up projection and SwiGLU activation: silu(x·W_gateᵀ) ⊙ (x·W_upᵀ) for
/// w_gate_up = [W_gate; W_up] [2 * inter, k], x [m, k]; returns [m, inter] in x's dtype, each
/// product rounded to the dtype before the activation (= silu_mul(linear_row(x, w_gate_up))). One
/// GEMV launch (kernels/gemv.h: swiglu) where the kernels take the shape, else those two calls.
/// Throws std::invalid_argument on an odd row count or mismatched shapes.
/// x's RMSNorm may be pending (NormedRows; then applied to the products before the activation).
/// act kGeluTanh: GeGLU, gelu_tanh(x·W_gateᵀ) ⊙ (x·W_upᵀ) (Gemma 2/3), the same way.
at::Tensor linear_row_swiglu(const NormedRows& x, const at::Tensor& w_gate_up,
                             GatedActivation act = GatedActivation::kSilu);

/// Gemma 2/3's sandwich norm closing a sublayer (kernels/norm.h: rms_norm_residual): returns
/// out = residual + rmsnorm(y; w_post) (HF order, dtype) and, with w_next defined, the next norm
/// pending: NormedRows{w_next ⊙ out, Σ out² [m, 1], eps}. y, residual: [m, hidden] in one dtype;
/// w_post, w_next: [hidden] in that dtype or fp32 (Gemma's 1 + w). One launch. Throws
/// std::invalid_argument on mismatched shapes, dtypes or devices.
std::pair<at::Tensor, NormedRows> rms_norm_residual(const at::Tensor& y, const at::Tensor& w_post,
                                                    const at::Tensor& residual, const at::Tensor& w_next, double eps);

/// Eviction while decoding at its cap in one launch (kernels/evict.h): in each of the n_head_kv
/// heads of a uniform layer (k, v: dtype [n_head_kv * capacity, D], head h's rows from h *
/// capacity; pos: int64 [n_head_kv * capacity]) drops the live entry (of the first n) with the
/// lowest score (fp32 [n_head_kv, n], at::argmin's choice over the first `candidates`, 0: all n)
/// and moves the later ones down a row; decrements length (int64 [n_head_kv], the device lengths)
/// when it is defined; shifts `alongside` (fp32 [n_head_kv, >= n], contiguous rows; may be
/// `scores`) with the rows when it is defined. Throws std::invalid_argument on mismatched shapes,
/// dtypes or devices.
void drop_lowest(const at::Tensor& scores, const at::Tensor& k, const at::Tensor& v, const at::Tensor& pos,
                 int64_t capacity, const at::Tensor& length, int64_t candidates = 0, const at::Tensor& alongside = {});
/// Whether drop_lowest takes a cache of `k`'s dtype and `head_dim` (kernels/evict.h); false without
/// the kernels.
bool drop_lowest_supported(const at::Tensor& k, int64_t head_dim);

/// What a family adds to the decode step's q / k path (ModelConfig): per-head q / k RMSNorm
/// before RoPE (Qwen3, Gemma 3: q_norm / k_norm [head_dim], in the dtype or fp32), and the
/// sliding-window ring of a layer of window W (kernels/rope.h: ring; rows offset + position % W).
/// Partial rotary (Phi-3/4) needs nothing here: cos / sin then cover rotary_dim / 2 channels.
struct QkvFeatures {
  at::Tensor q_norm, k_norm;
  double norm_eps = 1e-6;
  int64_t ring = 0;
  /// int64 [n_head_kv] on the device: the key row of head h is k_offset[h] + length[h] instead of
  /// offset[h] + length[h] (LayerKv::k_offset: a layer holding compact keys); undefined = offset.
  at::Tensor k_offset;
  /// The same for the value rows (LayerKv::v_offset: compact values); undefined = offset.
  at::Tensor v_offset;
};

/// RMSNorm, HF order (fp32 normalise, cast, times weight in dtype). x: [rows, hidden] (last dim
/// contiguous, any row stride) or [hidden]; w: [hidden]. out: optional, same shape, contiguous.
at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& w, double eps, at::Tensor out = {});

/// RoPE for one token + cache append. q: [n_head, D] (or [1, n_head, D]) rotated in place; k:
/// [n_head_kv, D] rotated in place; v: [n_head_kv, D]; cos, sin: D/2 elements in the dtype (e.g.
/// RopeTable::cos of one position). Writes row offset[h] + length[h] of k_cache / v_cache and
/// pos_cache (int64, may be undefined) for every KV head h. `length` is NOT changed (the kernel
/// advances an uploaded copy).
void rope_append(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& cos,
                 const at::Tensor& sin, RopeLayout layout, const at::Tensor& k_cache, const at::Tensor& v_cache,
                 const at::Tensor& pos_cache, const std::vector<int64_t>& offset, const std::vector<int64_t>& length,
                 int64_t position);

/// Same with the heads' offset / length (int64 [n_head_kv]) and the position (int64 [1]) on the
/// device: no upload and no host read, so it can be captured in a CUDA graph. Advances
/// length_dev[h] by one on the device. The caller guarantees length[h] < capacity[h].
void rope_append(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& cos,
                 const at::Tensor& sin, RopeLayout layout, const at::Tensor& k_cache, const at::Tensor& v_cache,
                 const at::Tensor& pos_cache, const at::Tensor& offset_dev, const at::Tensor& length_dev,
                 const at::Tensor& position_dev, const QkvFeatures& features = {});

/// Same into a LayerKv (throws std::invalid_argument when a head is full: length == capacity). The
/// caller then increments layer.length and its own position counter.
void rope_append(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& cos,
                 const at::Tensor& sin, RopeLayout layout, const LayerKv& layer, int64_t position);

/// The decode step's QKV projection with RoPE and the KV-cache append of its token: for one row
/// of x one GEMV launch (kernels/gemv.h: GemvEpilogue::kRopeAppend) in place of linear_row_split +
/// rope_append (one dependent launch fewer per layer), with the same result:
///   q, k, v = the column blocks [0, H·D), [H·D, (H+Hkv)·D), [(H+Hkv)·D, n) of x·W_qkvᵀ (+ b_qkv),
///   as [m·H, D], [m·Hkv, D], [m·Hkv, D] (sequence b's heads at b·H .., b·Hkv ..); q and k rotated
///   and k, v appended as rope_append's device overload does, to the caches of m·Hkv heads.
/// x: [m, hidden], its RMSNorm possibly pending (NormedRows); w_qkv: [(H + 2 Hkv)·D, hidden]; b_qkv: [n] or undefined;
/// offset_dev / length_dev: int64 [m·Hkv] (length advanced by one); tickets: int64 [>= Hkv] zeros on the device, left
/// zero (the appending warps' counters); position_dev: int64 [1]. Batches (m > 1; the fused tiles were slower there),
/// head_dim % 16 != 0, strided operands, q / k norms and partial rotary take the two-launch path (tickets unused).
/// features: QkvFeatures. Throws std::invalid_argument on mismatched shapes, dtypes or devices.
std::array<at::Tensor, 3> qkv_rope_append(const NormedRows& x, const at::Tensor& w_qkv, const at::Tensor& b_qkv,
                                          int64_t n_head, int64_t n_head_kv, const at::Tensor& cos,
                                          const at::Tensor& sin, RopeLayout layout, const at::Tensor& k_cache,
                                          const at::Tensor& v_cache, const at::Tensor& pos_cache,
                                          const at::Tensor& offset_dev, const at::Tensor& length_dev,
                                          const at::Tensor& tickets, const at::Tensor& position_dev,
                                          const QkvFeatures& features = {});

/// SwiGLU: gate_up [rows, 2I] (last dim contiguous, gate first) -> silu(gate) * up [rows, I].
at::Tensor silu_mul(const at::Tensor& gate_up, at::Tensor out = {});

}  // namespace kvscope::ops
