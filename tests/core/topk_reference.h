#pragma once
// The brute-force top-k the selection tests compare policies against.
#include <algorithm>
#include <cstdint>
#include <numeric>
#include <vector>

namespace kvscope::test {

/// Indices of the k largest values of x (fp64), ties to the lower index (a stable sort, as the
/// policies' topk_stable), sorted ascending.
inline std::vector<int64_t> topk_ref(const std::vector<double>& x, int64_t k) {
  std::vector<int64_t> idx(x.size());
  std::iota(idx.begin(), idx.end(), 0);
  std::stable_sort(idx.begin(), idx.end(), [&](int64_t a, int64_t b) { return x[a] > x[b]; });
  idx.resize(std::min<size_t>(static_cast<size_t>(k), idx.size()));
  std::sort(idx.begin(), idx.end());
  return idx;
}

}  // namespace kvscope::test
