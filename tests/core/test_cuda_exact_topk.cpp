// The exact top-k oracle kernels (ops::exact_topk over kernels/exact_topk.h) against an fp64
// brute force on the same rounded inputs: ragged heads inside a larger storage, bf16 / fp16 / fp32,
// awkward head_dim and group sizes, selections that are empty, partial or dense. Skipped without a
// CUDA device or without the kernels in the build.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <set>
#include <vector>

#include <ATen/ATen.h>

#include "../../core/src/ops/capture_ops.h"
#include "../../core/src/ops/cuda_ops.h"

namespace kvscope {
namespace {

class CudaExactTopk : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!ops::cuda_kernels_available()) GTEST_SKIP() << "built without the CUDA kernels";
    if (!at::hasCUDA()) GTEST_SKIP() << "no CUDA device";
  }
};

/// Indices of the k largest of v; `margin` receives the gap between the k-th and (k+1)-th values
/// (a large number when k covers v).
std::vector<int64_t> top_k(const std::vector<double>& v, int64_t k, double* margin) {
  std::vector<int64_t> idx(v.size());
  std::iota(idx.begin(), idx.end(), 0);
  std::sort(idx.begin(), idx.end(), [&](int64_t a, int64_t b) { return v[a] > v[b]; });
  *margin = k < static_cast<int64_t>(v.size()) ? v[idx[k - 1]] - v[idx[k]] : 1e30;
  idx.resize(static_cast<size_t>(k));
  return idx;
}

TEST_F(CudaExactTopk, UnionRecallAndExactSetsMatchABruteForce) {
  std::mt19937 rng(17);
  for (at::ScalarType dt : {at::kBFloat16, at::kHalf, at::kFloat})
    for (int64_t D : {64, 96, 128})
      for (int64_t G : {1, 4, 7}) {
        const int64_t Hkv = 3, H = Hkv * G, cap = 700, union_k = 37;
        const std::vector<int64_t> len = {1, 333, 700}, offset = {0, cap, 2 * cap};
        const at::Tensor keys = at::randn({Hkv * cap, D}).to(dt);
        const at::Tensor q = at::randn({H, D}).to(dt);
        const at::Tensor pos = at::randperm(Hkv * cap, at::kLong);  // any positions, all distinct
        const int64_t P = Hkv * cap;
        // Selections: head 0 dense (k >= len), head 1 partial, head 2 nothing.
        const int64_t S = 64;
        std::vector<int32_t> sel(static_cast<size_t>(Hkv * S), 0);
        std::vector<int64_t> count = {1, 50, 0};
        std::vector<int64_t> rows1(static_cast<size_t>(len[1]));
        std::iota(rows1.begin(), rows1.end(), 0);
        std::shuffle(rows1.begin(), rows1.end(), rng);
        for (int64_t i = 0; i < count[1]; ++i) sel[static_cast<size_t>(S + i)] = static_cast<int32_t>(rows1[i]);
        const auto cuda = at::TensorOptions().device(at::kCUDA);
        const at::Tensor seen = at::zeros({H, P}, cuda.dtype(at::kBool));
        const at::Tensor recall = at::full({Hkv}, -1.f, cuda.dtype(at::kFloat));
        const at::Tensor exact = at::full({Hkv, (cap + 31) / 32}, -1, cuda.dtype(at::kInt));
        const at::Tensor ws = at::empty({ops::exact_topk_workspace_bytes(Hkv, G, cap)}, cuda.dtype(at::kByte));
        ops::exact_topk(q.to(at::kCUDA), keys.to(at::kCUDA), pos.to(at::kCUDA),
                        at::tensor(offset, at::kLong).to(at::kCUDA), at::tensor(len, at::kLong).to(at::kCUDA), cap,
                        union_k, seen, at::tensor(sel, at::kInt).view({Hkv, S}).to(at::kCUDA),
                        at::tensor(count, at::kLong).to(at::kCUDA), recall, exact, ws);
        const at::Tensor seen_h = seen.cpu(), recall_h = recall.cpu(), exact_h = exact.cpu();
        const at::Tensor logits = at::mm(q.to(at::kDouble), keys.to(at::kDouble).t());  // [H, Hkv * cap]
        SCOPED_TRACE("dtype " + std::string(c10::toString(dt)) + " D " + std::to_string(D) + " G " + std::to_string(G));
        for (int64_t h = 0; h < Hkv; ++h) {
          const int64_t n = len[h];
          std::vector<double> sum(static_cast<size_t>(n), 0.0);
          for (int64_t g = 0; g < G; ++g) {
            std::vector<double> s(static_cast<size_t>(n));
            for (int64_t r = 0; r < n; ++r) s[r] = logits[h * G + g][offset[h] + r].item<double>();
            for (int64_t r = 0; r < n; ++r) sum[r] += s[r];
            double margin = 0;
            const auto top = top_k(s, std::min(union_k, n), &margin);
            if (margin < 1e-3) continue;  // a near-tie at the k-th score: either choice is exact
            std::set<int64_t> want;
            for (int64_t r : top) want.insert(pos[offset[h] + r].item<int64_t>());
            std::set<int64_t> got;
            const at::Tensor row = seen_h[h * G + g].nonzero().flatten();
            for (int64_t i = 0; i < row.numel(); ++i) got.insert(row[i].item<int64_t>());
            EXPECT_EQ(got, want) << "union of KV head " << h << " query head " << g;
          }
          const float rec = recall_h[h].item<float>();
          if (count[h] == 0 || count[h] >= n) {
            EXPECT_TRUE(std::isnan(rec)) << "head " << h << ": no selection or a dense step";
            continue;
          }
          double margin = 0;
          const auto top = top_k(sum, count[h], &margin);
          if (margin < 1e-3) continue;
          const std::set<int64_t> exact_want(top.begin(), top.end());
          int64_t hits = 0;
          for (int64_t i = 0; i < count[h]; ++i) hits += exact_want.count(sel[static_cast<size_t>(h * S + i)]);
          EXPECT_NEAR(rec, double(hits) / double(count[h]), 1e-6) << "recall of head " << h;
          std::set<int64_t> exact_got;
          for (int64_t r = 0; r < cap; ++r)
            if ((static_cast<uint32_t>(exact_h[h][r / 32].item<int32_t>()) >> (r % 32)) & 1u) exact_got.insert(r);
          EXPECT_EQ(exact_got, exact_want) << "exact set of head " << h;
        }
      }
}

TEST_F(CudaExactTopk, BadInputsAreRefused) {
  const auto cuda = at::TensorOptions().device(at::kCUDA);
  const at::Tensor q = at::zeros({4, 64}, cuda.dtype(at::kBFloat16)),
                   k = at::zeros({100, 64}, cuda.dtype(at::kBFloat16));
  const at::Tensor pos = at::zeros({100}, cuda.dtype(at::kLong)), off = at::zeros({2}, cuda.dtype(at::kLong));
  const at::Tensor ws = at::empty({ops::exact_topk_workspace_bytes(2, 2, 50)}, cuda.dtype(at::kByte));
  EXPECT_THROW(ops::exact_topk(q, k.to(at::kHalf), pos, off, off, 50, 8, {}, {}, {}, {}, {}, ws),
               std::invalid_argument);
  EXPECT_THROW(ops::exact_topk(q, k, pos, off.narrow(0, 0, 1).repeat({3}), off, 50, 8, {}, {}, {}, {}, {}, ws),
               std::invalid_argument);
  EXPECT_THROW(ops::exact_topk(q, k, pos, off, off, 50, 8, {}, {}, {}, {}, {}, ws.narrow(0, 0, 4)),
               std::invalid_argument);
  EXPECT_NO_THROW(ops::exact_topk(q, k, pos, off, off, 50, 8, {}, {}, {}, {}, {}, ws));
}

}  // namespace
}  // namespace kvscope
