// LibTorch adapter over kernels/compact_decode (see compact_ops.h).
#include "ops/compact_ops.h"
#include "ops/no_kernels.h"

#include <cmath>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#ifdef KVSCOPE_HAVE_CUDA_KERNELS
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

#include "kvscope/kernels/compact_decode.h"
#include "ops/cuda_ops.h"
#include "ops/cuda_util.h"
#endif

namespace kvscope::ops {

std::optional<CompactLayerTable> compact_layer_table(const LayerKv& layer, int64_t head_dim) {
  if (layer.compact.empty() || !layer.v.is_cuda()) return std::nullopt;
  if (head_dim != 64 && head_dim != 96 && head_dim != 128 && head_dim != 256) return std::nullopt;
  // The layout of the heads that hold entries (an empty head is never read).
  const CompactKeys* first = nullptr;
  for (const CompactKeys& c : layer.compact)
    if (c.n > 0 && (!first || first->n == 1)) first = &c;
  if (!first) return std::nullopt;
  CompactLayerTable t;
  t.kept_row_bytes = first->kept.size(0) == 1 && first->n > 1 ? 0 : first->kept.size(1);
  t.stride = first->stride;
  t.sign = first->sign.defined();
  t.sign_bytes = t.sign ? first->sign.size(1) : 0;
  t.values = !layer.compact_v.empty();
  const size_t H = layer.compact.size();
  if (t.values) t.v_stride = layer.compact_v[static_cast<size_t>(first - layer.compact.data())].stride;
  std::vector<int64_t> host(8 * H, 0);
  for (size_t h = 0; h < H; ++h) {
    const CompactKeys& c = layer.compact[h];
    host[h] = c.n;
    if (c.n == 0) continue;
    if (c.row.defined() || c.stride != t.stride || c.sign.defined() != t.sign ||
        (t.sign && c.sign.size(1) != t.sign_bytes) || (c.n > 1 && (c.kept.size(0) == 1) != (t.kept_row_bytes == 0)))
      return std::nullopt;
    host[H + h] = reinterpret_cast<int64_t>(c.kept.data_ptr());
    host[2 * H + h] = reinterpret_cast<int64_t>(c.values.data_ptr());
    if (t.sign) {
      host[3 * H + h] = reinterpret_cast<int64_t>(c.sign.data_ptr());
      host[4 * H + h] = reinterpret_cast<int64_t>(c.scale.data_ptr());
      host[5 * H + h] = reinterpret_cast<int64_t>(c.inv_a.data_ptr());
    }
    if (t.values) {
      const CompactKeys& v = layer.compact_v[h];
      if (v.row.defined() || v.stride != t.v_stride || v.kept.size(0) != v.n) return std::nullopt;
      host[6 * H + h] = reinterpret_cast<int64_t>(v.kept.data_ptr());
      host[7 * H + h] = reinterpret_cast<int64_t>(v.values.numel() > 0 ? v.values.data_ptr() : v.kept.data_ptr());
    }
  }
  t.table =
      at::tensor(host, at::TensorOptions().dtype(at::kLong)).view({8, static_cast<int64_t>(H)}).to(layer.v.device());
  return t;
}

#ifdef KVSCOPE_HAVE_CUDA_KERNELS

using namespace detail;

at::Tensor compact_decode_attention(const at::Tensor& q_in, const LayerKv& layer, const CompactLayerTable& t,
                                    const at::Tensor& value_base_dev, const at::Tensor& key_base_dev,
                                    const at::Tensor& length_dev, int64_t max_len, int64_t group, double scale,
                                    const CompactSelection* sel) {
  const char* op = "compact_decode_attention";
  const at::Tensor q = q_in.dim() == 3 && q_in.size(0) == 1 ? q_in.select(0, 0) : q_in;
  check_same(op, {&q, &layer.k, &layer.v});
  const int64_t H = q.size(0), D = q.size(1), Hkv = static_cast<int64_t>(layer.compact.size());
  if (q.dim() != 2 || q.stride(1) != 1 || H != Hkv * group || layer.v.size(1) != D || !layer.v.is_contiguous() ||
      !layer.k.is_contiguous())
    bad("compact_decode_attention: q must be [n_head, D] with rows contiguous, n_head = group x n_head_kv");
  for (const at::Tensor* m : {&value_base_dev, &key_base_dev, &length_dev})
    if (m->scalar_type() != at::kLong || m->numel() != Hkv || !m->is_contiguous() || m->device() != q.device())
      bad("compact_decode_attention: offsets and lengths must be contiguous int64 [n_head_kv] on q's device");
  if (t.table.numel() != 8 * Hkv) bad("compact_decode_attention: the table is for another layer");
  const c10::cuda::CUDAGuard guard(q.device());
  kk::CompactDecodeArgs a;
  a.dtype = kernel_dtype(q, op);
  a.n_head = static_cast<int>(H);
  a.n_head_kv = static_cast<int>(Hkv);
  a.group = static_cast<int>(group);
  a.head_dim = static_cast<int>(D);
  a.q = q.data_ptr();
  a.q_stride = q.stride(0);
  a.k = layer.k.numel() > 0 ? layer.k.data_ptr() : q.data_ptr();  // no dense key yet: never read
  a.k_offset = key_base_dev.data_ptr<int64_t>();
  a.v = layer.v.numel() > 0 ? layer.v.data_ptr() : q.data_ptr();
  a.offset = value_base_dev.data_ptr<int64_t>();
  a.length = length_dev.data_ptr<int64_t>();
  const int64_t* tab = t.table.data_ptr<int64_t>();
  a.n_compact = tab;
  a.kept = tab + Hkv;
  a.values = tab + 2 * Hkv;
  a.sign = t.sign ? tab + 3 * Hkv : nullptr;
  a.scale = tab + 4 * Hkv;
  a.inv_a = tab + 5 * Hkv;
  a.v_kept = t.values ? tab + 6 * Hkv : nullptr;
  a.v_values = tab + 7 * Hkv;
  a.v_stride = t.v_stride;
  a.kept_row_bytes = t.kept_row_bytes;
  a.stride = t.stride;
  a.sign_bytes = t.sign_bytes;
  a.softmax_scale = static_cast<float>(scale > 0 ? scale : 1.0 / std::sqrt(static_cast<double>(D)));
  if (sel) {
    const at::Tensor& ix = sel->index;
    if (ix.scalar_type() != at::kInt || ix.dim() != 2 || ix.size(0) != Hkv || !ix.is_contiguous() ||
        ix.device() != q.device())
      bad("compact_decode_attention: the selection's index must be contiguous int32 [n_head_kv, S] on q's device");
    if (!sel->count.defined()) bad("compact_decode_attention: a selection needs its counts");
    for (const at::Tensor* m : {&sel->count, &sel->compact_read})
      if (m->defined() &&
          (m->scalar_type() != at::kLong || m->numel() != Hkv || !m->is_contiguous() || m->device() != q.device()))
        bad("compact_decode_attention: the selection's counts must be contiguous int64 [n_head_kv] on q's device");
    a.index = ix.data_ptr<int32_t>();
    a.index_stride = ix.size(1);
    a.count = sel->count.data_ptr<int64_t>();
    a.compact_read = sel->compact_read.defined() ? sel->compact_read.data_ptr<int64_t>() : nullptr;
  }
  at::Tensor out = at::empty({H, D}, q.options());
  a.o = out.data_ptr();
  const kk::CompactDecodePlan plan = kk::plan_compact_decode(a.n_head, a.n_head_kv, a.head_dim, max_len);
  const at::Tensor ws = at::empty({static_cast<int64_t>(plan.workspace_bytes)}, q.options().dtype(at::kByte));
  check_cuda(kk::compact_decode_attention(a, plan, ws.data_ptr(), at::cuda::getCurrentCUDAStream()), op);
  return out;
}

#else  // !KVSCOPE_HAVE_CUDA_KERNELS

at::Tensor compact_decode_attention(const at::Tensor&, const LayerKv&, const CompactLayerTable&, const at::Tensor&,
                                    const at::Tensor&, const at::Tensor&, int64_t, int64_t, double,
                                    const CompactSelection*) {
  detail::unavailable("compact_decode_attention");
}

#endif

}  // namespace kvscope::ops
