// LibTorch adapters over kvscope_kernels (see cuda_ops.h). Everything CUDA sits behind
// KVSCOPE_HAVE_CUDA_KERNELS: <ATen/cuda/CUDAContext.h> exists only in a CUDA LibTorch.
#include "ops/cuda_ops.h"
#include "ops/no_kernels.h"

#include <stdexcept>
#include <string>

#ifdef KVSCOPE_HAVE_CUDA_KERNELS
#include <algorithm>
#include <array>
#include <cmath>

#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

#include "kvscope/kernels/decode.h"
#include "kvscope/kernels/evict.h"
#include "kvscope/kernels/gemv.h"
#include "kvscope/kernels/mlp.h"
#include "kvscope/kernels/norm.h"
#include "kvscope/kernels/rope.h"
#include "ops/cuda_util.h"
#endif

namespace kvscope::ops {

#ifdef KVSCOPE_HAVE_CUDA_KERNELS

namespace {

using namespace detail;

/// q as [n_head, D] with unit inner stride and 16-byte aligned rows (copied when not).
at::Tensor as_heads(const at::Tensor& q, const char* op) {
  at::Tensor q2 = q.dim() == 3 && q.size(0) == 1 ? q.select(0, 0) : q;
  if (q2.dim() != 2) bad(std::string(op) + ": q must be [n_head, D] or [1, n_head, D]");
  const bool aligned =
      reinterpret_cast<uintptr_t>(q2.data_ptr()) % 16 == 0 && (q2.stride(0) * q2.element_size()) % 16 == 0;
  return q2.stride(1) == 1 && aligned ? q2 : q2.contiguous();
}

int64_t heads_of(const at::Tensor& q) { return q.dim() == 3 ? q.size(1) : q.size(0); }

at::Tensor run_decode(const at::Tensor& q_in, const at::Tensor& k, const at::Tensor& v, const at::Tensor& offset_dev,
                      const at::Tensor& length_dev, const at::Tensor* index, int64_t max_len, int64_t total_len,
                      int64_t group, double scale, int n_split, at::Tensor out, double softcap = 0.0) {
  const char* op = "decode_attention";
  check_same(op, {&q_in, &k, &v});
  const at::Tensor q = as_heads(q_in, op);
  const int64_t n_head = q.size(0), D = q.size(1);
  if (!kk::decode_attention_head_dim_supported(static_cast<int>(D)))
    bad("decode_attention: head_dim must be 64, 96, 128 or 256");
  if (k.dim() != 2 || v.dim() != 2 || k.size(1) != D || v.size(1) != D || !k.is_contiguous() || !v.is_contiguous())
    bad("decode_attention: k and v must be contiguous [rows, head_dim]");
  if (group <= 0 || n_head % group != 0) bad("decode_attention: n_head must be a multiple of group");
  const int64_t n_head_kv = n_head / group;
  for (const at::Tensor* t : {&offset_dev, &length_dev})
    if (t->scalar_type() != at::kLong || t->numel() < n_head_kv || !t->is_contiguous() || t->device() != q.device())
      bad("decode_attention: offset/length must be int64 [n_head_kv] on q's device");
  if (index && (index->scalar_type() != at::kInt || index->dim() != 2 || index->size(0) != n_head_kv ||
                index->stride(1) != 1 || index->device() != q.device()))
    bad("decode_attention_gather: index must be int32 [n_head_kv, S] on q's device");
  if (reinterpret_cast<uintptr_t>(k.data_ptr()) % 16 != 0 || reinterpret_cast<uintptr_t>(v.data_ptr()) % 16 != 0)
    bad("decode_attention: k and v must be 16-byte aligned");

  const c10::cuda::CUDAGuard guard(q.device());
  out = make_out(out, {n_head, D}, q.options(), op);
  const kk::DecodeAttentionPlan plan =
      kk::plan_decode_attention(kernel_dtype(q, op), static_cast<int>(n_head), static_cast<int>(n_head_kv),
                                static_cast<int>(D), max_len, total_len, n_split);
  at::Tensor ws;
  if (plan.workspace_bytes > 0)
    ws = at::empty({static_cast<int64_t>(plan.workspace_bytes)}, q.options().dtype(at::kByte));
  kk::DecodeAttentionArgs a;
  a.dtype = kernel_dtype(q, op);
  a.n_head = static_cast<int>(n_head);
  a.n_head_kv = static_cast<int>(n_head_kv);
  a.group = static_cast<int>(group);
  a.head_dim = static_cast<int>(D);
  a.q = q.data_ptr();
  a.q_stride = q.stride(0);
  a.k = k.data_ptr();
  a.v = v.data_ptr();
  a.offset = offset_dev.data_ptr<int64_t>();
  a.length = length_dev.data_ptr<int64_t>();
  if (index) {
    a.index = index->data_ptr<int32_t>();
    a.index_stride = index->stride(0);
  }
  a.scale = static_cast<float>(scale > 0 ? scale : 1.0 / std::sqrt(static_cast<double>(D)));
  a.softcap = static_cast<float>(softcap);
  a.o = out.data_ptr();
  check_cuda(kk::decode_attention(a, plan, ws.defined() ? ws.data_ptr() : nullptr, at::cuda::getCurrentCUDAStream()),
             op);
  return out;
}

int64_t max_of(const std::vector<int64_t>& xs) {
  int64_t m = 0;
  for (int64_t x : xs) m = std::max(m, x);
  return m;
}

int64_t sum_of(const std::vector<int64_t>& xs) {
  int64_t s = 0;
  for (int64_t x : xs) s += std::max<int64_t>(x, 0);
  return s;
}

/// x as 2-D [rows, hidden] with unit inner stride.
at::Tensor as_rows(const at::Tensor& x) {
  at::Tensor x2 = x.dim() == 1 ? x.unsqueeze(0) : x.dim() == 2 ? x : x.reshape({-1, x.size(-1)});
  return x2.stride(1) == 1 ? x2 : x2.contiguous();
}

}  // namespace

bool cuda_kernels_available() { return true; }

at::Tensor upload_int64(const std::vector<int64_t>& values, c10::Device device) { return upload(values, {}, device); }

at::Tensor decode_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                            const std::vector<int64_t>& offset, const std::vector<int64_t>& length, int64_t group,
                            double scale, int n_split, at::Tensor out) {
  if (offset.size() != length.size()) bad("decode_attention: offset and length differ in size");
  if (!q.is_cuda()) bad("decode_attention: tensors must be on a CUDA device");
  const at::Tensor meta = upload(offset, length, q.device());
  const int64_t n = static_cast<int64_t>(offset.size());
  if (group <= 0 || heads_of(q) != n * group) bad("decode_attention: n_head != group * offset.size()");
  return run_decode(q, k, v, meta.narrow(0, 0, n), meta.narrow(0, n, n), nullptr, max_of(length), sum_of(length), group,
                    scale, n_split, std::move(out));
}

at::Tensor decode_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& offset_dev,
                            const at::Tensor& length_dev, int64_t max_len, int64_t total_len, int64_t group,
                            double scale, int n_split, at::Tensor out, double softcap) {
  return run_decode(q, k, v, offset_dev, length_dev, nullptr, max_len, total_len, group, scale, n_split, std::move(out),
                    softcap);
}

at::Tensor decode_attention(const at::Tensor& q, const LayerKv& layer, int64_t group, double scale) {
  if (layer.has_compact()) bad("decode_attention: the layer holds compact keys (its channel stage attends)");
  return decode_attention(q, layer.k, layer.v, layer.offset, layer.length, group, scale);
}

at::Tensor decode_attention_gather(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                   const std::vector<int64_t>& offset, const at::Tensor& index,
                                   const std::vector<int64_t>& count, int64_t group, double scale, int n_split,
                                   at::Tensor out) {
  if (offset.size() != count.size()) bad("decode_attention_gather: offset and count differ in size");
  if (!q.is_cuda()) bad("decode_attention_gather: tensors must be on a CUDA device");
  const int64_t n = static_cast<int64_t>(offset.size());
  if (index.dim() == 2 && max_of(count) > index.size(1)) bad("decode_attention_gather: count exceeds index width");
  if (group <= 0 || heads_of(q) != n * group) bad("decode_attention_gather: n_head != group * offset.size()");
  const at::Tensor meta = upload(offset, count, q.device());
  return run_decode(q, k, v, meta.narrow(0, 0, n), meta.narrow(0, n, n), &index, max_of(count), sum_of(count), group,
                    scale, n_split, std::move(out));
}

at::Tensor decode_attention_gather(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                   const at::Tensor& offset_dev, const at::Tensor& index, const at::Tensor& count_dev,
                                   int64_t max_count, int64_t group, double scale, at::Tensor out) {
  if (index.dim() == 2 && max_count > index.size(1)) bad("decode_attention_gather: max_count exceeds index width");
  const int64_t n_head_kv = group > 0 ? heads_of(q) / group : 0;
  return run_decode(q, k, v, offset_dev, count_dev, &index, max_count, max_count * n_head_kv, group, scale, 0,
                    std::move(out));
}

namespace {

/// GemvArgs of x [m, k] (or [k]) through w [n, k]: dtype, shapes and operands. Throws
/// std::invalid_argument naming `op` on mismatched devices or dtypes, or shapes that do not match.
kk::GemvArgs gemv_args(const char* op, const at::Tensor& x, const at::Tensor& w) {
  check_same(op, {&x, &w});
  if (w.dim() != 2) bad(std::string(op) + ": w must be [n, k]");
  const int64_t n = w.size(0), k = w.size(1), m = k > 0 ? x.numel() / k : 0;
  if (k == 0 || x.numel() != m * k || m < 1) bad(std::string(op) + ": x must be [m, k] for w [n, k]");
  kk::GemvArgs a;
  a.dtype = kernel_dtype(x, op);
  a.m = m;
  a.n = n;
  a.k = k;
  a.w = w.data_ptr();
  a.x = x.data_ptr();
  return a;
}

/// Checks a GEMV's bias b against x [m, k] and the n outputs of `a`: undefined, [n] or [m, n] (the
/// residual stream), on x's device and dtype. Throws std::invalid_argument naming `op`.
void check_bias(const char* op, const at::Tensor& x, const at::Tensor& b, const kk::GemvArgs& a) {
  if (!b.defined()) return;
  check_same(op, {&x, &b});
  if (b.numel() != a.n && b.numel() != a.m * a.n) bad(std::string(op) + ": b must be [n] or [m, n]");
}

/// Points a at the bias b (checked by check_bias): [m, n] rows b_stride = n apart, [n] shared.
void set_bias(kk::GemvArgs& a, const at::Tensor& b) {
  a.b = b.defined() ? b.data_ptr() : nullptr;
  a.b_stride = b.defined() && b.numel() == a.m * a.n && a.m > 1 ? a.n : 0;
}

/// True when x, w and b (if any) are contiguous, as the GEMV kernels take them.
bool gemv_operands_plain(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b) {
  return w.is_contiguous() && x.is_contiguous() && (!b.defined() || b.is_contiguous());
}

/// Sets a's folded RMSNorm (kernels/gemv.h: norm_sumsq) from rows' pending norm, if any. Throws
/// std::invalid_argument naming `op` for a sumsq that is not contiguous fp32 [m, parts] on x's device.
void set_norm_in(kk::GemvArgs& a, const NormedRows& rows, const char* op) {
  if (!rows.pending()) return;
  const at::Tensor& s = rows.sumsq;
  if (s.scalar_type() != at::kFloat || s.dim() != 2 || s.size(0) != a.m || s.size(1) < 1 || !s.is_contiguous() ||
      s.device() != rows.x.device())
    bad(std::string(op) + ": a pending norm's sumsq must be contiguous fp32 [m, parts] on x's device");
  a.norm_sumsq = s.data_ptr<float>();
  a.norm_parts = s.size(1);
  a.norm_eps = static_cast<float>(rows.eps);
}

/// linear_row's product with its output in the column segments [0, s0), [s0, s1), [s1, n)
/// (kernels/gemv.h: y_split), returned as those three [m, width] tensors (contiguous; views of one
/// buffer on the GEMV path). in's pending norm, if any, is applied (NormedRows).
std::array<at::Tensor, 3> linear_segments(const NormedRows& in, const at::Tensor& w, const at::Tensor& b, bool fp32_out,
                                          int64_t s0, int64_t s1) {
  const char* op = "linear_row";
  const at::Tensor& x = in.x;
  kk::GemvArgs a = gemv_args(op, x, w);
  set_norm_in(a, in, op);
  const int64_t m = a.m, n = a.n, k = a.k;
  check_bias(op, x, b, a);
  if (s0 < 0 || s0 > s1 || s1 > n) bad("linear_row_split: column splits must satisfy 0 <= s0 <= s1 <= n");
  a.y_split[0] = s0;
  a.y_split[1] = s1;
  const bool plain = gemv_operands_plain(x, w, b);
  a.y = plain ? reinterpret_cast<void*>(16) : nullptr;  // placeholder: the output is allocated below
  if (!plain || !kk::gemv_supported(a)) {               // over 8 rows, fp32 rows, strided or unaligned operands: cuBLAS
    const at::Tensor x2 = normalized(in).reshape({m, k});
    at::Tensor y = !b.defined()     ? at::linear(x2, w)
                   : b.numel() == n ? at::linear(x2, w, b.reshape({n}))
                                    : at::linear(x2, w) + b.reshape({m, n});
    if (fp32_out) y = y.to(at::kFloat);
    return {y.narrow(1, 0, s0).contiguous(), y.narrow(1, s0, s1 - s0).contiguous(),
            y.narrow(1, s1, n - s1).contiguous()};
  }
  const c10::cuda::CUDAGuard guard(x.device());
  at::Tensor y = at::empty({m * n}, x.options().dtype(fp32_out ? at::kFloat : x.scalar_type()));
  set_bias(a, b);
  a.y = y.data_ptr();
  a.y_fp32 = fp32_out;
  check_cuda(kk::gemv(a, at::cuda::getCurrentCUDAStream()), op);
  return {y.narrow(0, 0, m * s0).view({m, s0}), y.narrow(0, m * s0, m * (s1 - s0)).view({m, s1 - s0}),
          y.narrow(0, m * s1, m * (n - s1)).view({m, n - s1})};
}

}  // namespace

at::Tensor normalized(const NormedRows& rows) {
  if (!rows.pending()) return rows.x;
  const int64_t k = rows.x.size(-1);
  const at::Tensor x2 = rows.x.reshape({-1, k}).to(at::kFloat);
  const at::Tensor inv = at::rsqrt(rows.sumsq.sum(-1, /*keepdim=*/true) / static_cast<double>(k) + rows.eps);
  return (x2 * inv).to(rows.x.scalar_type()).view(rows.x.sizes());
}

at::Tensor linear_row(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b, bool fp32_out) {
  return linear_segments(NormedRows(x), w, b, fp32_out, 0, 0)[2];
}

at::Tensor linear_row(const NormedRows& x, const at::Tensor& w, const at::Tensor& b, bool fp32_out) {
  return linear_segments(x, w, b, fp32_out, 0, 0)[2];
}

std::pair<at::Tensor, NormedRows> linear_row_norm_out(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b,
                                                      const at::Tensor& g, double eps) {
  const char* op = "linear_row_norm_out";
  kk::GemvArgs a = gemv_args(op, x, w);
  const int64_t m = a.m, n = a.n;
  check_bias(op, x, b, a);
  check_same(op, {&x, &g});
  if (g.numel() != n || !g.is_contiguous()) bad("linear_row_norm_out: g must be contiguous [n]");
  a.y = a.next_norm_gx = reinterpret_cast<void*>(16);  // placeholders: the outputs are allocated below
  a.next_norm_sumsq = reinterpret_cast<float*>(16);
  a.next_norm_g = g.data_ptr();
  if (!gemv_operands_plain(x, w, b) || !kk::gemv_supported(a)) {  // LibTorch: one sum of squares per row
    const at::Tensor y = linear_row(x, w, b).view({m, n});
    return {y, NormedRows(y * g.view({1, n}), y.to(at::kFloat).pow(2).sum(-1, /*keepdim=*/true), eps)};
  }
  const c10::cuda::CUDAGuard guard(x.device());
  at::Tensor y = at::empty({m, n}, x.options()), gx = at::empty({m, n}, x.options());
  at::Tensor sumsq = at::empty({m, kk::gemv_norm_parts(m, n)}, x.options().dtype(at::kFloat));
  set_bias(a, b);
  a.y = y.data_ptr();
  a.next_norm_gx = gx.data_ptr();
  a.next_norm_sumsq = sumsq.data_ptr<float>();
  check_cuda(kk::gemv(a, at::cuda::getCurrentCUDAStream()), op);
  return {y, NormedRows(gx, sumsq, eps)};
}

std::array<at::Tensor, 3> linear_row_split(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b, int64_t s0,
                                           int64_t s1) {
  return linear_segments(x, w, b, false, s0, s1);
}

at::Tensor linear_row_swiglu(const NormedRows& in, const at::Tensor& w_gate_up, GatedActivation act) {
  const char* op = "linear_row_swiglu";
  const at::Tensor& x = in.x;
  kk::GemvArgs a = gemv_args(op, x, w_gate_up);
  if (a.n % 2 != 0) bad("linear_row_swiglu: w_gate_up must be [2 * inter, k] (an even row count)");
  set_norm_in(a, in, op);
  const bool gelu = act == GatedActivation::kGeluTanh;
  a.epilogue = gelu ? kk::GemvEpilogue::kGeGlu : kk::GemvEpilogue::kSwiGlu;
  a.y = reinterpret_cast<void*>(16);  // placeholder: the output is allocated below
  if (!gemv_operands_plain(x, w_gate_up, {}) || !kk::gemv_supported(a)) {
    // two launches (cuBLAS for what the GEMV does not take)
    if (!gelu) return silu_mul(linear_row(in, w_gate_up));
    const at::Tensor gu = linear_row(in, w_gate_up);
    const int64_t I = gu.size(-1) / 2;
    return at::gelu(gu.narrow(-1, 0, I), "tanh") * gu.narrow(-1, I, I);
  }
  const c10::cuda::CUDAGuard guard(x.device());
  at::Tensor y = at::empty({a.m, a.n / 2}, x.options());
  a.y = y.data_ptr();
  check_cuda(kk::gemv(a, at::cuda::getCurrentCUDAStream()), op);
  return y;
}

std::pair<at::Tensor, NormedRows> rms_norm_residual(const at::Tensor& y, const at::Tensor& w_post,
                                                    const at::Tensor& residual, const at::Tensor& w_next, double eps) {
  const char* op = "rms_norm_residual";
  check_same(op, {&y, &residual});
  const at::Tensor y2 = as_rows(y).contiguous(), r2 = as_rows(residual).contiguous();
  const int64_t m = y2.size(0), hidden = y2.size(1);
  if (r2.sizes() != y2.sizes()) bad("rms_norm_residual: y and residual must both be [m, hidden]");
  if (hidden > kk::kRmsNormResidualMaxHidden)
    bad("rms_norm_residual: hidden " + std::to_string(hidden) + " is above the kernel's " +
        std::to_string(kk::kRmsNormResidualMaxHidden));
  auto check_w = [&](const at::Tensor& w, const char* name) {
    if (w.numel() != hidden || !w.is_contiguous() || w.device() != y.device() ||
        (w.scalar_type() != y.scalar_type() && w.scalar_type() != at::kFloat))
      bad(std::string("rms_norm_residual: ") + name + " must be contiguous [hidden] in y's dtype or fp32");
  };
  check_w(w_post, "w_post");
  if (w_next.defined()) check_w(w_next, "w_next");
  const c10::cuda::CUDAGuard guard(y.device());
  at::Tensor out = at::empty_like(y2);
  kk::RmsNormResidualArgs a;
  a.dtype = kernel_dtype(y, op);
  a.rows = m;
  a.hidden = hidden;
  a.y = y2.data_ptr();
  a.w_post = w_post.data_ptr();
  a.w_post_fp32 = w_post.scalar_type() == at::kFloat;
  a.residual = r2.data_ptr();
  a.out = out.data_ptr();
  a.eps = static_cast<float>(eps);
  at::Tensor gx, sumsq;
  if (w_next.defined()) {
    gx = at::empty_like(y2);
    sumsq = at::empty({m, 1}, y.options().dtype(at::kFloat));
    a.w_next = w_next.data_ptr();
    a.w_next_fp32 = w_next.scalar_type() == at::kFloat;
    a.next_gx = gx.data_ptr();
    a.next_sumsq = sumsq.data_ptr<float>();
  }
  check_cuda(kk::rms_norm_residual(a, at::cuda::getCurrentCUDAStream()), op);
  if (!w_next.defined()) return {out, NormedRows(out)};
  return {out, NormedRows(gx, sumsq, eps)};
}

void drop_lowest(const at::Tensor& scores, const at::Tensor& k, const at::Tensor& v, const at::Tensor& pos,
                 int64_t capacity, const at::Tensor& length, int64_t candidates, const at::Tensor& alongside) {
  const char* op = "drop_lowest";
  check_same(op, {&k, &v});
  if (scores.dim() != 2 || scores.scalar_type() != at::kFloat || !scores.is_contiguous() ||
      scores.device() != k.device())
    bad("drop_lowest: scores must be contiguous fp32 [n_head_kv, n] on the cache's device");
  const int64_t Hkv = scores.size(0), n = scores.size(1);
  if (k.dim() != 2 || !k.is_contiguous() || !v.is_contiguous() || k.sizes() != v.sizes() || k.size(0) != Hkv * capacity)
    bad("drop_lowest: k and v must be contiguous [n_head_kv * capacity, head_dim]");
  if (pos.scalar_type() != at::kLong || pos.numel() != Hkv * capacity || !pos.is_contiguous() ||
      pos.device() != k.device())
    bad("drop_lowest: pos must be contiguous int64 [n_head_kv * capacity] on the cache's device");
  if (length.defined() && (length.scalar_type() != at::kLong || length.numel() != Hkv || !length.is_contiguous() ||
                           length.device() != k.device()))
    bad("drop_lowest: length must be contiguous int64 [n_head_kv] on the cache's device");
  if (candidates < 0 || candidates > n) bad("drop_lowest: candidates outside [0, n]");
  if (alongside.defined() &&
      (alongside.dim() != 2 || alongside.scalar_type() != at::kFloat || alongside.size(0) != Hkv ||
       alongside.size(1) < n || alongside.stride(1) != 1 || alongside.device() != k.device()))
    bad("drop_lowest: alongside must be fp32 [n_head_kv, >= n] with contiguous rows on the cache's device");
  const c10::cuda::CUDAGuard guard(k.device());
  kk::DropLowestArgs a;
  a.dtype = kernel_dtype(k, op);
  a.n_head_kv = static_cast<int>(Hkv);
  a.head_dim = static_cast<int>(k.size(1));
  a.n = n;
  a.scores = scores.data_ptr<float>();
  a.k = k.data_ptr();
  a.v = v.data_ptr();
  a.pos = pos.data_ptr<int64_t>();
  a.capacity = capacity;
  a.length = length.defined() ? length.data_ptr<int64_t>() : nullptr;
  a.candidates = candidates;
  if (alongside.defined()) {
    a.alongside = alongside.data_ptr<float>();
    a.alongside_stride = alongside.stride(0);
  }
  check_cuda(kk::drop_lowest(a, at::cuda::getCurrentCUDAStream()), op);
}

bool drop_lowest_supported(const at::Tensor& k, int64_t head_dim) {
  const at::ScalarType t = k.scalar_type();
  if (t != at::kFloat && t != at::kBFloat16 && t != at::kHalf) return false;
  return kk::drop_lowest_supported(kernel_dtype(k, "drop_lowest"), static_cast<int>(head_dim));
}

at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& w, double eps, at::Tensor out) {
  check_same("rms_norm", {&x, &w});
  const at::Tensor x2 = as_rows(x);
  const int64_t hidden = x2.size(1);
  if (w.numel() != hidden || !w.is_contiguous()) bad("rms_norm: weight must be contiguous [hidden]");
  const c10::cuda::CUDAGuard guard(x.device());
  out = make_out(out, x.sizes(), x.options(), "rms_norm");
  check_cuda(kernels::rms_norm(kernel_dtype(x, "rms_norm"), x2.data_ptr(), x2.stride(0), w.data_ptr(), out.data_ptr(),
                               hidden, x2.size(0), hidden, static_cast<float>(eps), at::cuda::getCurrentCUDAStream()),
             "rms_norm");
  return out;
}

namespace {

/// Shape checks shared by both rope_append overloads; returns q, k, v as [heads, D].
std::array<at::Tensor, 3> check_rope_append(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                            const at::Tensor& cos, const at::Tensor& sin, const at::Tensor& k_cache,
                                            const at::Tensor& v_cache, const at::Tensor& pos_cache) {
  const char* op = "rope_append";
  check_same(op, {&q, &k, &v, &cos, &sin, &k_cache, &v_cache});
  const at::Tensor qh = q.dim() == 3 && q.size(0) == 1 ? q.select(0, 0) : q;
  const at::Tensor kh = k.dim() == 3 && k.size(0) == 1 ? k.select(0, 0) : k;
  const at::Tensor vh = v.dim() == 3 && v.size(0) == 1 ? v.select(0, 0) : v;
  if (qh.dim() != 2 || kh.dim() != 2 || vh.dim() != 2) bad("rope_append: q, k, v must be [heads, D]");
  const int64_t D = qh.size(1), n_head_kv = kh.size(0);
  if (kh.size(1) != D || vh.size(1) != D || vh.size(0) != n_head_kv || D % 2 != 0)
    bad("rope_append: q, k, v head_dim mismatch (or odd head_dim)");
  if (D > kk::kRopeAppendMaxHeadDim)
    bad("rope_append: head_dim " + std::to_string(D) + " is above the kernel's " +
        std::to_string(kk::kRopeAppendMaxHeadDim));
  if (qh.stride(1) != 1 || kh.stride(1) != 1 || vh.stride(1) != 1) bad("rope_append: q, k, v rows must be contiguous");
  if (cos.numel() != sin.numel() || cos.numel() < 1 || cos.numel() > D / 2 || !cos.is_contiguous() ||
      !sin.is_contiguous())
    bad("rope_append: cos/sin must be contiguous with rotary_dim/2 <= head_dim/2 elements");
  if (k_cache.dim() != 2 || v_cache.dim() != 2 || k_cache.size(1) != D || v_cache.size(1) != D ||
      !k_cache.is_contiguous() || !v_cache.is_contiguous())
    bad("rope_append: caches must be contiguous [rows, head_dim]");
  if (pos_cache.defined() && (pos_cache.scalar_type() != at::kLong || !pos_cache.is_contiguous() ||
                              pos_cache.device() != q.device() || pos_cache.numel() < k_cache.size(0)))
    bad("rope_append: pos must be contiguous int64 [rows] on the same device");
  return {qh, kh, vh};
}

/// The device metadata of a decode append (offset / length int64 [n_head_kv], position int64 [1],
/// all on `device`); throws std::invalid_argument naming `op` otherwise.
void check_rope_meta(const char* op, const at::Tensor& offset_dev, const at::Tensor& length_dev,
                     const at::Tensor& position_dev, int64_t n_head_kv, c10::Device device) {
  for (const at::Tensor* t : {&offset_dev, &length_dev})
    if (t->scalar_type() != at::kLong || t->numel() != n_head_kv || !t->is_contiguous() || t->device() != device)
      bad(std::string(op) + ": offset/length must be contiguous int64 [n_head_kv] on q's device");
  if (position_dev.scalar_type() != at::kLong || position_dev.numel() != 1 || position_dev.device() != device)
    bad(std::string(op) + ": position must be one int64 on q's device");
}

/// The QkvFeatures of a decode append against head_dim D and q's dtype / device.
void check_features(const QkvFeatures& f, const at::Tensor& q, int64_t D) {
  if (f.q_norm.defined() != f.k_norm.defined()) bad("rope_append: q_norm and k_norm go together");
  for (const at::Tensor* w : {&f.q_norm, &f.k_norm})
    if (w->defined() && (w->numel() != D || !w->is_contiguous() || w->device() != q.device() ||
                         (w->scalar_type() != q.scalar_type() && w->scalar_type() != at::kFloat) ||
                         w->scalar_type() != f.q_norm.scalar_type()))
      bad("rope_append: q_norm / k_norm must be contiguous [head_dim] in q's dtype or fp32, on q's device");
  if (f.ring < 0) bad("rope_append: ring must be >= 0");
  for (const at::Tensor* o : {&f.k_offset, &f.v_offset})
    if (o->defined() &&
        (o->scalar_type() != at::kLong || !o->is_contiguous() || o->device() != q.device() || f.ring > 0))
      bad("rope_append: k_offset / v_offset must be contiguous int64 [n_head_kv] on q's device, and not with a ring");
}

void launch_rope_append(const std::array<at::Tensor, 3>& qkv, const at::Tensor& cos, const at::Tensor& sin,
                        RopeLayout layout, const at::Tensor& k_cache, const at::Tensor& v_cache,
                        const at::Tensor& pos_cache, const int64_t* offset, int64_t* length, int64_t position,
                        const int64_t* position_dev, const QkvFeatures& f = {}) {
  const char* op = "rope_append";
  const auto& [qh, kh, vh] = qkv;
  check_features(f, qh, qh.size(1));
  kk::RopeAppendArgs a;
  a.rotary_dim = static_cast<int>(2 * cos.numel());
  if (f.q_norm.defined()) {
    a.q_norm = f.q_norm.data_ptr();
    a.k_norm = f.k_norm.data_ptr();
    a.norm_fp32 = f.q_norm.scalar_type() == at::kFloat;
    a.norm_eps = static_cast<float>(f.norm_eps);
  }
  a.ring = f.ring;
  a.dtype = kernel_dtype(qh, op);
  a.mode = layout == RopeLayout::kAdjacentPairs ? kk::RopeMode::kAdjacentPairs : kk::RopeMode::kRotateHalf;
  a.n_head = static_cast<int>(qh.size(0));
  a.n_head_kv = static_cast<int>(kh.size(0));
  a.head_dim = static_cast<int>(qh.size(1));
  a.q = qh.data_ptr();
  a.q_stride = qh.stride(0);
  a.k = kh.data_ptr();
  a.k_stride = kh.stride(0);
  a.v = vh.data_ptr();
  a.v_stride = vh.stride(0);
  a.cos = cos.data_ptr();
  a.sin = sin.data_ptr();
  a.k_cache = k_cache.data_ptr();
  a.v_cache = v_cache.data_ptr();
  a.pos = pos_cache.defined() ? pos_cache.data_ptr<int64_t>() : nullptr;
  a.offset = offset;
  a.k_offset = f.k_offset.defined() ? f.k_offset.data_ptr<int64_t>() : nullptr;
  a.v_offset = f.v_offset.defined() ? f.v_offset.data_ptr<int64_t>() : nullptr;
  a.length = length;
  a.position = position;
  a.position_dev = position_dev;
  check_cuda(kk::rope_append(a, at::cuda::getCurrentCUDAStream()), op);
}

}  // namespace

void rope_append(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& cos,
                 const at::Tensor& sin, RopeLayout layout, const at::Tensor& k_cache, const at::Tensor& v_cache,
                 const at::Tensor& pos_cache, const std::vector<int64_t>& offset, const std::vector<int64_t>& length,
                 int64_t position) {
  const auto qkv = check_rope_append(q, k, v, cos, sin, k_cache, v_cache, pos_cache);
  const int64_t n_head_kv = qkv[1].size(0);
  if (static_cast<int64_t>(offset.size()) != n_head_kv || static_cast<int64_t>(length.size()) != n_head_kv)
    bad("rope_append: offset/length must have n_head_kv entries");
  for (int64_t h = 0; h < n_head_kv; ++h)
    if (offset[h] < 0 || length[h] < 0 || offset[h] + length[h] >= k_cache.size(0) ||
        offset[h] + length[h] >= v_cache.size(0))
      bad("rope_append: cache row out of range");
  const c10::cuda::CUDAGuard guard(q.device());
  const at::Tensor meta = upload(offset, length, q.device());
  launch_rope_append(qkv, cos, sin, layout, k_cache, v_cache, pos_cache, meta.data_ptr<int64_t>(),
                     meta.data_ptr<int64_t>() + n_head_kv, position, nullptr);
}

void rope_append(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& cos,
                 const at::Tensor& sin, RopeLayout layout, const at::Tensor& k_cache, const at::Tensor& v_cache,
                 const at::Tensor& pos_cache, const at::Tensor& offset_dev, const at::Tensor& length_dev,
                 const at::Tensor& position_dev, const QkvFeatures& features) {
  const auto qkv = check_rope_append(q, k, v, cos, sin, k_cache, v_cache, pos_cache);
  check_rope_meta("rope_append", offset_dev, length_dev, position_dev, qkv[1].size(0), q.device());
  const c10::cuda::CUDAGuard guard(q.device());
  launch_rope_append(qkv, cos, sin, layout, k_cache, v_cache, pos_cache, offset_dev.data_ptr<int64_t>(),
                     length_dev.data_ptr<int64_t>(), 0, position_dev.data_ptr<int64_t>(), features);
}

void rope_append(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& cos,
                 const at::Tensor& sin, RopeLayout layout, const LayerKv& layer, int64_t position) {
  if (layer.has_compact()) bad("rope_append: the layer holds compact keys (use the device-offset overload)");
  for (size_t h = 0; h < layer.length.size(); ++h)
    if (layer.length[h] >= layer.capacity[h]) bad("rope_append: KV head " + std::to_string(h) + " is full");
  rope_append(q, k, v, cos, sin, layout, layer.k, layer.v, layer.pos, layer.offset, layer.length, position);
}

std::array<at::Tensor, 3> qkv_rope_append(const NormedRows& in, const at::Tensor& w_qkv, const at::Tensor& b_qkv,
                                          int64_t n_head, int64_t n_head_kv, const at::Tensor& cos,
                                          const at::Tensor& sin, RopeLayout layout, const at::Tensor& k_cache,
                                          const at::Tensor& v_cache, const at::Tensor& pos_cache,
                                          const at::Tensor& offset_dev, const at::Tensor& length_dev,
                                          const at::Tensor& tickets, const at::Tensor& position_dev,
                                          const QkvFeatures& features) {
  const char* op = "qkv_rope_append";
  const at::Tensor& x = in.x;
  kk::GemvArgs a = gemv_args(op, x, w_qkv);
  set_norm_in(a, in, op);
  const int64_t m = a.m, n = a.n, D = n_head > 0 && n_head_kv > 0 ? n / (n_head + 2 * n_head_kv) : 0;
  if (D <= 0 || n != (n_head + 2 * n_head_kv) * D)
    bad("qkv_rope_append: w_qkv must be [(n_head + 2 * n_head_kv) * head_dim, hidden]");
  if (b_qkv.defined() && (b_qkv.numel() != n || b_qkv.device() != x.device() || b_qkv.scalar_type() != x.scalar_type()))
    bad("qkv_rope_append: b_qkv must be [(n_head + 2 * n_head_kv) * head_dim] in x's dtype and device");
  if (tickets.scalar_type() != at::kLong || tickets.numel() < n_head_kv || !tickets.is_contiguous() ||
      tickets.device() != x.device())
    bad("qkv_rope_append: tickets must be contiguous int64 [n_head_kv] (zeros) on x's device");
  const int64_t s0 = n_head * D, s1 = (n_head + n_head_kv) * D;
  a.y_split[0] = s0;
  a.y_split[1] = s1;
  a.epilogue = kk::GemvEpilogue::kRopeAppend;
  kk::GemvRopeAppend& r = a.rope;
  r.mode = layout == RopeLayout::kAdjacentPairs ? kk::RopeMode::kAdjacentPairs : kk::RopeMode::kRotateHalf;
  r.n_head = static_cast<int>(n_head);
  r.n_head_kv = static_cast<int>(n_head_kv);
  r.head_dim = static_cast<int>(D);
  r.ring = features.ring;
  // Placeholders for the support check (the operands are checked below, the output allocated).
  r.cos = r.sin = r.k_cache = r.v_cache = a.y = reinterpret_cast<void*>(16);
  r.offset = r.length = reinterpret_cast<int64_t*>(16);
  r.tickets = reinterpret_cast<unsigned long long*>(16);
  // The epilogue rotates whole heads of plain projections: q / k norms and partial rotary take rope_append.
  const bool fused = gemv_operands_plain(x, w_qkv, b_qkv) && kk::gemv_supported(a) && !features.q_norm.defined() &&
                     2 * cos.numel() == D;
  if (!fused) {  // two launches: the projection (cuBLAS past the GEMV's shapes), then rope_append
    const auto [q, k, v] = linear_segments(in, w_qkv, b_qkv, false, s0, s1);
    const at::Tensor qh = q.view({m * n_head, D}), kh = k.view({m * n_head_kv, D}), vh = v.view({m * n_head_kv, D});
    rope_append(qh, kh, vh, cos, sin, layout, k_cache, v_cache, pos_cache, offset_dev, length_dev, position_dev,
                features);
    return {qh, kh, vh};
  }
  const c10::cuda::CUDAGuard guard(x.device());
  at::Tensor y = at::empty({m * n}, x.options());
  const at::Tensor qh = y.narrow(0, 0, m * s0).view({m * n_head, D});
  const at::Tensor kh = y.narrow(0, m * s0, m * (s1 - s0)).view({m * n_head_kv, D});
  const at::Tensor vh = y.narrow(0, m * s1, m * (n - s1)).view({m * n_head_kv, D});
  (void)check_rope_append(qh, kh, vh, cos, sin, k_cache, v_cache, pos_cache);
  check_rope_meta(op, offset_dev, length_dev, position_dev, m * n_head_kv, x.device());
  r.cos = cos.data_ptr();
  r.sin = sin.data_ptr();
  r.k_cache = k_cache.data_ptr();
  r.v_cache = v_cache.data_ptr();
  r.pos = pos_cache.defined() ? pos_cache.data_ptr<int64_t>() : nullptr;
  r.offset = offset_dev.data_ptr<int64_t>();
  check_features(features, qh, D);
  for (const at::Tensor* o : {&features.k_offset, &features.v_offset})
    if (o->defined() && o->numel() != m * n_head_kv)
      bad("qkv_rope_append: k_offset / v_offset must have m * n_head_kv entries");
  r.k_offset = features.k_offset.defined() ? features.k_offset.data_ptr<int64_t>() : nullptr;
  r.v_offset = features.v_offset.defined() ? features.v_offset.data_ptr<int64_t>() : nullptr;
  r.length = length_dev.data_ptr<int64_t>();
  r.position_dev = position_dev.data_ptr<int64_t>();
  r.tickets = reinterpret_cast<unsigned long long*>(tickets.data_ptr<int64_t>());
  a.b = b_qkv.defined() ? b_qkv.data_ptr() : nullptr;
  a.y = y.data_ptr();
  check_cuda(kk::gemv(a, at::cuda::getCurrentCUDAStream()), op);
  return {qh, kh, vh};
}

at::Tensor silu_mul(const at::Tensor& gate_up, at::Tensor out) {
  check_same("silu_mul", {&gate_up});
  const at::Tensor g2 = as_rows(gate_up);
  if (g2.size(1) % 2 != 0) bad("silu_mul: last dim must be 2 * intermediate");
  const int64_t inter = g2.size(1) / 2;
  std::vector<int64_t> sizes(gate_up.sizes().begin(), gate_up.sizes().end());
  sizes.back() = inter;
  const c10::cuda::CUDAGuard guard(gate_up.device());
  out = make_out(out, sizes, gate_up.options(), "silu_mul");
  check_cuda(kernels::silu_mul(kernel_dtype(gate_up, "silu_mul"), g2.data_ptr(), g2.stride(0), out.data_ptr(), inter,
                               g2.size(0), inter, at::cuda::getCurrentCUDAStream()),
             "silu_mul");
  return out;
}

#else  // !KVSCOPE_HAVE_CUDA_KERNELS

using detail::unavailable;

bool cuda_kernels_available() { return false; }

at::Tensor upload_int64(const std::vector<int64_t>&, c10::Device) { unavailable("upload_int64"); }

at::Tensor decode_attention(const at::Tensor&, const at::Tensor&, const at::Tensor&, const std::vector<int64_t>&,
                            const std::vector<int64_t>&, int64_t, double, int, at::Tensor) {
  unavailable("decode_attention");
}
at::Tensor decode_attention(const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&,
                            const at::Tensor&, int64_t, int64_t, int64_t, double, int, at::Tensor, double) {
  unavailable("decode_attention");
}
at::Tensor decode_attention(const at::Tensor&, const LayerKv&, int64_t, double) { unavailable("decode_attention"); }
at::Tensor decode_attention_gather(const at::Tensor&, const at::Tensor&, const at::Tensor&, const std::vector<int64_t>&,
                                   const at::Tensor&, const std::vector<int64_t>&, int64_t, double, int, at::Tensor) {
  unavailable("decode_attention_gather");
}
at::Tensor decode_attention_gather(const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                   const at::Tensor&, const at::Tensor&, int64_t, int64_t, double, at::Tensor) {
  unavailable("decode_attention_gather");
}
at::Tensor normalized(const NormedRows&) { unavailable("normalized"); }
at::Tensor linear_row(const at::Tensor&, const at::Tensor&, const at::Tensor&, bool) { unavailable("linear_row"); }
at::Tensor linear_row(const NormedRows&, const at::Tensor&, const at::Tensor&, bool) { unavailable("linear_row"); }
std::pair<at::Tensor, NormedRows> linear_row_norm_out(const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                                      const at::Tensor&, double) {
  unavailable("linear_row_norm_out");
}
std::array<at::Tensor, 3> linear_row_split(const at::Tensor&, const at::Tensor&, const at::Tensor&, int64_t, int64_t) {
  unavailable("linear_row_split");
}
at::Tensor linear_row_swiglu(const NormedRows&, const at::Tensor&, GatedActivation) {
  unavailable("linear_row_swiglu");
}
std::array<at::Tensor, 3> qkv_rope_append(const NormedRows&, const at::Tensor&, const at::Tensor&, int64_t, int64_t,
                                          const at::Tensor&, const at::Tensor&, RopeLayout, const at::Tensor&,
                                          const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                          const at::Tensor&, const at::Tensor&, const QkvFeatures&) {
  unavailable("qkv_rope_append");
}
at::Tensor rms_norm(const at::Tensor&, const at::Tensor&, double, at::Tensor) { unavailable("rms_norm"); }
void rope_append(const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&,
                 RopeLayout, const at::Tensor&, const at::Tensor&, const at::Tensor&, const std::vector<int64_t>&,
                 const std::vector<int64_t>&, int64_t) {
  unavailable("rope_append");
}
void rope_append(const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&,
                 RopeLayout, const LayerKv&, int64_t) {
  unavailable("rope_append");
}
void rope_append(const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&,
                 RopeLayout, const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&,
                 const at::Tensor&, const at::Tensor&, const QkvFeatures&) {
  unavailable("rope_append");
}
at::Tensor silu_mul(const at::Tensor&, at::Tensor) { unavailable("silu_mul"); }
std::pair<at::Tensor, NormedRows> rms_norm_residual(const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                                    const at::Tensor&, double) {
  unavailable("rms_norm_residual");
}
void drop_lowest(const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&, int64_t, const at::Tensor&,
                 int64_t, const at::Tensor&) {
  unavailable("drop_lowest");
}
bool drop_lowest_supported(const at::Tensor&, int64_t) { return false; }

#endif

}  // namespace kvscope::ops
