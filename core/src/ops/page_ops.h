#pragma once
// LibTorch adapters over the page-summary kernels (kernels/page_select.h): HSA / Quest page scoring
// and row selection for sparse decode, with the decode-append page min/max upkeep. Internal to
// kvscope_core; the bodies exist only with KVSCOPE_HAVE_CUDA_KERNELS, elsewhere every function
// throws std::runtime_error. Errors: std::invalid_argument for bad shapes / dtypes / devices,
// std::runtime_error for a failed launch.
#include <cstdint>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>

namespace kvscope::ops {

enum class PageScore { kHsa, kQuest };

/// The compact keys at the start of a layer's heads, as page_select's upkeep needs them: k_first
/// int64 [n_head_kv] (compact entries per head, on the device), min / max [n_head_kv, D] in the
/// cache dtype (those of the compact entries of the page holding entry k_first[h]; any value where
/// k_first[h] is a multiple of the page).
struct CompactPageEdge {
  at::Tensor k_first, min, max;
};

/// Scores the pages of every KV head against the decode query and selects the rows to attend
/// (RocketKV HSA §3.4 Alg. 1, or Quest §3.2 as RocketKV App. A.3 configures it for GQA; formulas
/// in kernels/page_select.h). q: [n_head, D] (n_head = group * n_head_kv); kmin / kmax: [n_head_kv,
/// page_capacity, D] contiguous, q's dtype (per-page key min / max);
/// length_dev: int64 [n_head_kv]; max_pages: host bound of ceil(length / page). keep: HSA tokens
/// k2 / Quest pages. k1: HSA channels (1..D). Returns {index int32 [n_head_kv, S], count int64
/// [n_head_kv]} on q's device, S = keep (HSA) or keep * page (Quest); rows ascending. With k
/// ([rows, D] contiguous cache keys) and offset_dev (int64 [n_head_kv]) given, the page holding
/// entry length[h] - 1 of every head is first recomputed from k and written to kmin / kmax in the
/// same launch (the decode-append case).
/// With `edge` also given (a layer whose first entries hold compact keys: kernels/page_select.h,
/// k_first), offset_dev holds the key rows' bases (LayerKv::key_row(h, 0)) and the upkeep takes the
/// compact entries of the recomputed page from edge.
std::pair<at::Tensor, at::Tensor> page_select(PageScore mode, const at::Tensor& q, const at::Tensor& kmin,
                                              const at::Tensor& kmax, const at::Tensor& length_dev, int64_t max_pages,
                                              int64_t group, int64_t page, int64_t k1, int64_t keep,
                                              const at::Tensor& k = {}, const at::Tensor& offset_dev = {},
                                              const CompactPageEdge* edge = nullptr);

/// offset and length of a layer's KV heads on `device` (one pinned, non-blocking upload): int64
/// [2, n_head_kv], row 0 offsets, row 1 lengths.
at::Tensor upload_heads(const std::vector<int64_t>& offset, const std::vector<int64_t>& length, c10::Device device);

}  // namespace kvscope::ops
