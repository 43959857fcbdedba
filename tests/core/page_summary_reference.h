#pragma once
// Page summaries recomputed from a cache's current rows (Quest / HSA, PageMinMax), and a paged
// selection policy made from the registry: what tests compare PagedSelectionBase against.
#include <algorithm>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include "kvscope/core/kv_cache.h"
#include "kvscope/core/policy.h"
#include "policies/decode_selection.h"

namespace kvscope::test {

/// Element-wise min and max of the current keys of (l, h), per page: fp64 [n_pages, D] each.
inline std::pair<at::Tensor, at::Tensor> page_bounds(const KvCache& cache, int64_t l, int64_t h, int64_t page) {
  const at::Tensor K = cache.head_keys(l, h).to(at::kCPU, at::kDouble);
  const int64_t N = K.size(0);
  std::vector<at::Tensor> mn, mx;
  for (int64_t p = 0; p * page < N; ++p) {
    const at::Tensor rows = K.narrow(0, p * page, std::min(page, N - p * page));
    mn.push_back(rows.amin(0));
    mx.push_back(rows.amax(0));
  }
  if (mn.empty()) return {at::empty({0, K.size(1)}, K.options()), at::empty({0, K.size(1)}, K.options())};
  return {at::stack(mn), at::stack(mx)};
}

/// Pages of (l, h) the store serves that differ from the min/max of the head's current rows (the
/// store may also serve no pages at all for a head; it may never serve wrong ones).
inline int64_t stale_pages(const policies::PageMinMax& store, const KvCache& cache, int64_t l, int64_t h) {
  const int64_t n = store.n_pages(l, h);
  if (n == 0) return 0;
  const auto [mn, mx] = page_bounds(cache, l, h, store.page());
  if (mn.size(0) != n) return std::max<int64_t>(n, mn.size(0));  // the wrong page count
  const at::Tensor smin = store.kmin(l, h, 1)[0].to(at::kCPU, at::kDouble);
  const at::Tensor smax = store.kmax(l, h, 1)[0].to(at::kCPU, at::kDouble);
  return smin.ne(mn).any(1).logical_or(smax.ne(mx).any(1)).sum().item<int64_t>();
}

inline std::unique_ptr<policies::PagedSelectionBase> make_paged(const std::string& name, const ParamValues& params) {
  PolicyRegistry reg;
  register_builtin_policies(reg);
  auto made = reg.make(name, params);
  auto* p = dynamic_cast<policies::PagedSelectionBase*>(made.get());
  EXPECT_NE(p, nullptr) << name;
  made.release();
  return std::unique_ptr<policies::PagedSelectionBase>(p);
}

}  // namespace kvscope::test
