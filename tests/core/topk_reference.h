#pragma once
// The brute-force top-k the selection tests compare policies against.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <string>
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

/// Empty when `picked` (distinct) are k items a top-k of `score` may return: none scores more than
/// `tol` below an item left out (any order among near ties). Else what is wrong.
inline std::string top_k_error(const std::vector<double>& score, std::vector<int64_t> picked, int64_t k, double tol) {
  std::sort(picked.begin(), picked.end());
  if (std::adjacent_find(picked.begin(), picked.end()) != picked.end()) return "repeated items";
  const auto n = static_cast<int64_t>(score.size());
  if (static_cast<int64_t>(picked.size()) != std::min(k, n))
    return std::to_string(picked.size()) + " items picked, want " + std::to_string(std::min(k, n));
  std::vector<bool> in(score.size(), false);
  double low = INFINITY, high = -INFINITY;
  for (int64_t i : picked) {
    if (i < 0 || i >= n) return "item " + std::to_string(i) + " out of range";
    in[i] = true;
    low = std::min(low, score[i]);
  }
  for (int64_t i = 0; i < n; ++i)
    if (!in[i]) high = std::max(high, score[i]);
  if (low < high - tol) return "picked score " + std::to_string(low) + " below left-out " + std::to_string(high);
  return "";
}

}  // namespace kvscope::test
