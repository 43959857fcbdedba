// LibTorch adapters over kernels/page_select (see page_ops.h).
#include "ops/page_ops.h"
#include "ops/no_kernels.h"

#include <stdexcept>
#include <string>

#ifdef KVSCOPE_HAVE_CUDA_KERNELS
#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

#include "kvscope/kernels/page_select.h"
#include "ops/cuda_util.h"
#endif

namespace kvscope::ops {

#ifdef KVSCOPE_HAVE_CUDA_KERNELS

using namespace detail;

namespace {

void check_pages(const char* op, const at::Tensor& kmin, const at::Tensor& kmax, int64_t n_head_kv, int64_t D) {
  if (kmin.dim() != 3 || kmin.sizes() != kmax.sizes() || kmin.size(0) != n_head_kv || kmin.size(2) != D ||
      !kmin.is_contiguous() || !kmax.is_contiguous())
    bad(std::string(op) + ": kmin/kmax must be contiguous [n_head_kv, page_capacity, head_dim]");
}

void check_heads(const char* op, const at::Tensor& t, int64_t n_head_kv, c10::Device device) {
  if (t.scalar_type() != at::kLong || t.numel() != n_head_kv || !t.is_contiguous() || t.device() != device)
    bad(std::string(op) + ": offset/length must be contiguous int64 [n_head_kv] on the cache's device");
}

}  // namespace

at::Tensor upload_heads(const std::vector<int64_t>& offset, const std::vector<int64_t>& length, c10::Device device) {
  if (offset.size() != length.size()) bad("upload_heads: offset and length differ in size");
  return upload(offset, length, device).view({2, static_cast<int64_t>(offset.size())});
}

std::pair<at::Tensor, at::Tensor> page_select(PageScore mode, const at::Tensor& q_in, const at::Tensor& kmin,
                                              const at::Tensor& kmax, const at::Tensor& length_dev, int64_t max_pages,
                                              int64_t group, int64_t page, int64_t k1, int64_t keep,
                                              const at::Tensor& k, const at::Tensor& offset_dev,
                                              const CompactPageEdge* edge) {
  const char* op = "page_select";
  check_same(op, {&q_in, &kmin, &kmax});
  const at::Tensor q = q_in.dim() == 3 && q_in.size(0) == 1 ? q_in.select(0, 0) : q_in;
  if (q.dim() != 2 || q.stride(1) != 1) bad("page_select: q must be [n_head, head_dim] with contiguous rows");
  const int64_t D = q.size(1);
  if (group < 1 || q.size(0) % group != 0) bad("page_select: n_head must be a multiple of group");
  const int64_t n_head_kv = q.size(0) / group;
  check_pages(op, kmin, kmax, n_head_kv, D);
  check_heads(op, length_dev, n_head_kv, q.device());
  if (page < 1 || keep < 1 || max_pages < 1 || max_pages > kmin.size(1))
    bad("page_select: need page >= 1, keep >= 1 and 1 <= max_pages <= page_capacity");
  if (mode == PageScore::kHsa && (k1 < 1 || k1 > D)) bad("page_select: k1 must lie in [1, head_dim]");
  const c10::cuda::CUDAGuard guard(q.device());
  const int64_t width = mode == PageScore::kHsa ? keep : keep * page;
  at::Tensor index = at::empty({n_head_kv, width}, q.options().dtype(at::kInt));
  at::Tensor count = at::empty({n_head_kv}, q.options().dtype(at::kLong));
  kk::PageSelectArgs a;
  a.dtype = kernel_dtype(q, op);
  a.mode = mode == PageScore::kHsa ? kk::PageScore::kHsa : kk::PageScore::kQuest;
  a.n_head_kv = static_cast<int>(n_head_kv);
  a.group = static_cast<int>(group);
  a.head_dim = static_cast<int>(D);
  a.page = static_cast<int>(page);
  a.k1 = static_cast<int>(k1);
  a.keep = keep;
  a.q = q.data_ptr();
  a.q_stride = q.stride(0);
  a.kmin = kmin.data_ptr();
  a.kmax = kmax.data_ptr();
  a.page_capacity = kmin.size(1);
  a.length = length_dev.data_ptr<int64_t>();
  a.max_pages = max_pages;
  a.index = index.data_ptr<int32_t>();
  a.index_stride = width;
  a.count = count.data_ptr<int64_t>();
  if (k.defined()) {
    check_same(op, {&q, &k});
    if (k.dim() != 2 || !k.is_contiguous() || k.size(1) != D) bad("page_select: k must be contiguous [rows, head_dim]");
    check_heads(op, offset_dev, n_head_kv, q.device());
    a.k = k.data_ptr();
    a.offset = offset_dev.data_ptr<int64_t>();
    if (edge) {
      check_heads(op, edge->k_first, n_head_kv, q.device());
      for (const at::Tensor* m : {&edge->min, &edge->max})
        if (m->scalar_type() != q.scalar_type() || !m->is_contiguous() || m->numel() != n_head_kv * D ||
            m->device() != q.device())
          bad("page_select: the compact edge must be contiguous [n_head_kv, head_dim] in q's dtype and device");
      a.k_first = edge->k_first.data_ptr<int64_t>();
      a.edge_min = edge->min.data_ptr();
      a.edge_max = edge->max.data_ptr();
    }
  }
  at::Tensor ws = at::empty({static_cast<int64_t>(kk::page_select_workspace_bytes(a))}, q.options().dtype(at::kByte));
  check_cuda(kk::page_select(a, ws.data_ptr(), at::cuda::getCurrentCUDAStream()), op);
  return {index, count};
}

#else  // !KVSCOPE_HAVE_CUDA_KERNELS

using detail::unavailable;

at::Tensor upload_heads(const std::vector<int64_t>&, const std::vector<int64_t>&, c10::Device) {
  unavailable("upload_heads");
}
std::pair<at::Tensor, at::Tensor> page_select(PageScore, const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                              const at::Tensor&, int64_t, int64_t, int64_t, int64_t, int64_t,
                                              const at::Tensor&, const at::Tensor&, const CompactPageEdge*) {
  unavailable("page_select");
}

#endif

}  // namespace kvscope::ops
