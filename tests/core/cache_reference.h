#pragma once
// fp64 references over a KV cache's current rows, for the decode-selection tests that compare a
// policy step by step with a recomputation from what the cache holds (ring heads included).
#include <cmath>
#include <cstdint>
#include <vector>

#include <ATen/ATen.h>

#include "kvscope/core/kv_cache.h"

namespace kvscope::test {

/// The elements of an integer tensor (any device) as int64.
inline std::vector<int64_t> to_vec(const at::Tensor& t) {
  const at::Tensor c = t.to(at::kLong).contiguous().cpu();
  return {c.data_ptr<int64_t>(), c.data_ptr<int64_t>() + c.numel()};
}

/// fp64 attention of query head hq (its KV head h = hq / G) of layer l over the rows `rows`:
/// softmax(K q / sqrt(D))ᵀ V, q [n_head, D] on any device; returns fp64 [D] on the CPU.
inline at::Tensor attention(const KvCache& cache, int64_t l, const at::Tensor& q, int64_t hq, int64_t G,
                            const std::vector<int64_t>& rows) {
  const int64_t h = hq / G;
  const at::Tensor idx = at::tensor(rows, at::kLong);
  const at::Tensor K = cache.head_keys(l, h).to(at::kCPU, at::kDouble).index_select(0, idx);
  const at::Tensor V = cache.head_values(l, h).to(at::kCPU, at::kDouble).index_select(0, idx);
  const at::Tensor s = at::mv(K, q[hq].to(at::kDouble)) / std::sqrt(static_cast<double>(q.size(1)));
  return at::mv(V.t(), at::softmax(s, 0));
}

}  // namespace kvscope::test
