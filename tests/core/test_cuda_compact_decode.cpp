// kernels/compact_decode (ops::compact_decode_attention) against an fp64 reference: softmax(q·k̂ᵀ/√D)·V
// with k̂ the keys KvCache::head_keys recovers from the compact layout (CompactKeys::recover) and the
// dense decode-time keys after them. Head dims 64/96/128/256, GQA groups 1/4/8, fp32 and bf16,
// SPARK's sign refill, no refill, ThinK's shared mask, compact values (SPARK App. D), ragged heads
// (one without compact entries),
// and lengths that need several splits. Needs a GPU; the table builder is checked on the CPU too.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include <ATen/ATen.h>

#include "../../core/src/ops/compact_ops.h"
#include "../../core/src/ops/cuda_ops.h"
#include "kvscope/core/compact_keys.h"
#include "kvscope/core/kv_cache.h"
#include "small_config.h"

namespace kvscope {
namespace {

enum class Recovery { kSign, kZero, kShared, kSignValues };

/// A one-layer cache on `dev` whose head h holds n[h] compact entries then `extra` dense ones
/// (with `values`, the compact entries' values compact too).
KvCache compact_cache(const ModelConfig& cfg, const std::vector<int64_t>& n, int64_t extra, Recovery rec,
                      at::ScalarType dt, c10::Device dev, bool values = false) {
  const int64_t Hkv = cfg.n_head_kv, D = cfg.head_dim;
  const int64_t most = *std::max_element(n.begin(), n.end());
  KvCache cache(cfg, most + extra + 2, dev, dt);
  const auto opts = at::TensorOptions().device(dev).dtype(dt);
  cache.append(0, at::randn({Hkv, most, D}, opts), at::randn({Hkv, most, D}, opts),
               at::arange(most, opts.dtype(at::kLong)));
  cache.advance_position(most);
  std::vector<at::Tensor> kept;
  for (int64_t h = 0; h < Hkv; ++h) kept.push_back(at::arange(n[h], opts.dtype(at::kLong)));
  cache.retain(0, kept, extra + 2);
  const int64_t T = D / 2 + 3;
  std::vector<CompactKeys> packed, packed_v;
  for (int64_t h = 0; h < Hkv; ++h) {
    if (values)
      packed_v.push_back(CompactKeys::pack(
          cache.head_values(0, h), std::get<1>(at::rand({n[h], D}, opts.dtype(at::kFloat)).sort(1)).lt(D / 4 + 1)));
    const at::Tensor k = cache.head_keys(0, h);
    const int64_t rows = rec == Recovery::kShared ? 1 : n[h];
    // T kept channels per entry, chosen at random.
    const at::Tensor order = std::get<1>(at::rand({rows, D}, opts.dtype(at::kFloat)).sort(1));
    const at::Tensor mask = order.lt(T);
    packed.push_back(rec == Recovery::kSign || rec == Recovery::kSignValues
                         ? CompactKeys::pack(k, mask, at::rand({n[h]}, opts.dtype(at::kFloat)),
                                             at::rand({D}, opts.dtype(at::kFloat)))
                         : CompactKeys::pack(k, mask));
  }
  cache.compact_keys(0, std::move(packed), std::move(packed_v));
  for (int64_t i = 0; i < extra; ++i) {
    cache.append(0, at::randn({Hkv, 1, D}, opts), at::randn({Hkv, 1, D}, opts),
                 at::full({1}, cache.next_position(), opts.dtype(at::kLong)));
    cache.advance_position(1);
  }
  return cache;
}

/// The value and key rows' bases of every head (LayerKv::value_row / key_row of entry 0) on `dev`.
std::pair<at::Tensor, at::Tensor> row_bases(const LayerKv& L, c10::Device dev) {
  std::vector<int64_t> v, k;
  for (size_t h = 0; h < L.offset.size(); ++h) {
    v.push_back(L.value_row(static_cast<int64_t>(h), 0));
    k.push_back(L.key_row(static_cast<int64_t>(h), 0));
  }
  return {ops::upload_int64(v, dev), ops::upload_int64(k, dev)};
}

/// fp64 softmax(q·k̂ᵀ·scale)·V per query head over the cache's (recovered) keys.
at::Tensor reference(const at::Tensor& q, const KvCache& cache, int64_t G) {
  const int64_t D = cache.head_dim();
  std::vector<at::Tensor> out;
  for (int64_t h = 0; h < cache.n_head_kv(); ++h) {
    const at::Tensor k = cache.head_keys(0, h).to(at::kDouble), v = cache.head_values(0, h).to(at::kDouble);
    const at::Tensor s = at::matmul(q.narrow(0, h * G, G).to(at::kDouble), k.t()) / std::sqrt(double(D));
    out.push_back(k.size(0) == 0 ? at::zeros({G, D}, s.options()) : at::matmul(at::softmax(s, -1), v));
  }
  return at::cat(out, 0);
}

TEST(CompactDecodeTable, NoTableOffTheGpuOrForPerEntryCounts) {
  const ModelConfig cfg = test::small_config(1, 2, 2, 64);
  KvCache cache(cfg, 8, c10::Device(c10::kCPU), at::kFloat);
  EXPECT_FALSE(ops::compact_layer_table(cache.layer(0), 64).has_value());  // no compact keys
  cache.append(0, at::randn({2, 6, 64}), at::randn({2, 6, 64}), at::arange(6, at::kLong));
  std::vector<CompactKeys> packed;
  for (int64_t h = 0; h < 2; ++h) packed.push_back(CompactKeys::pack(cache.head_keys(0, h), at::rand({6, 64}).lt(0.5)));
  cache.compact_keys(0, std::move(packed));
  EXPECT_FALSE(ops::compact_layer_table(cache.layer(0), 64).has_value());  // CPU keys
}

class CudaCompactDecode : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!ops::cuda_kernels_available()) GTEST_SKIP() << "built without the CUDA kernels";
    if (!at::hasCUDA()) GTEST_SKIP() << "no CUDA device";
  }
};

TEST_F(CudaCompactDecode, MatchesTheRecoveredKeysReference) {
  at::manual_seed(99);
  const c10::Device dev("cuda:0");
  for (const at::ScalarType dt : {at::kFloat, at::kBFloat16})
    for (const int64_t D : {64, 96, 128, 256})
      for (const int64_t G : {1, 4, 8})
        for (const Recovery rec : {Recovery::kSign, Recovery::kZero, Recovery::kShared, Recovery::kSignValues}) {
          const std::string what = std::string(dt == at::kFloat ? "fp32" : "bf16") + " D=" + std::to_string(D) +
                                   " G=" + std::to_string(G) + " recovery " + std::to_string(int(rec));
          SCOPED_TRACE(what);
          const ModelConfig cfg = test::small_config(1, 3, G, D);
          // Ragged: head 2 has no compact entry; head 0 needs several splits.
          const KvCache cache = compact_cache(cfg, {700, 37, 0}, 5, rec, dt, dev, rec == Recovery::kSignValues);
          const auto table = ops::compact_layer_table(cache.layer(0), D);
          ASSERT_TRUE(table.has_value());
          const LayerKv& L = cache.layer(0);
          const at::Tensor q = at::randn({3 * G, D}, at::TensorOptions().device(dev).dtype(dt));
          const auto [value_base, key_base] = row_bases(L, dev);
          const at::Tensor got = ops::compact_decode_attention(q, L, *table, value_base, key_base,
                                                               ops::upload_int64(L.length, dev), 705, G);
          const at::Tensor ref = reference(q, cache, G);
          const double err = (got.to(at::kDouble) - ref).abs().max().item<double>();
          const double tol = dt == at::kFloat ? 2e-5 : 1e-2 * std::max(1.0, ref.abs().max().item<double>());
          EXPECT_LE(err, tol) << what;
        }
}

TEST_F(CudaCompactDecode, AttendsToASelectionOnlyAndCountsItsCompactRows) {
  // A decode-time selection stacked over the compact keys (StackedDecode): each head attends the
  // entries its index lists, compact ones recovered; compact_read counts them per head.
  at::manual_seed(7);
  const c10::Device dev("cuda:0");
  for (const at::ScalarType dt : {at::kFloat, at::kBFloat16})
    for (const int64_t D : {64, 96, 128, 256})
      for (const int64_t G : {1, 4, 8}) {
        const std::string what =
            std::string(dt == at::kFloat ? "fp32" : "bf16") + " D=" + std::to_string(D) + " G=" + std::to_string(G);
        SCOPED_TRACE(what);
        const ModelConfig cfg = test::small_config(1, 3, G, D);
        const KvCache cache = compact_cache(cfg, {700, 37, 0}, 9, Recovery::kSignValues, dt, dev, true);
        const LayerKv& L = cache.layer(0);
        const auto table = ops::compact_layer_table(L, D);
        ASSERT_TRUE(table.has_value());
        // Head 0: 300 of 709 entries (both kinds), head 1: 20 of 46, head 2 (no compact entry): 0.
        const int64_t S = 300;
        const std::vector<int64_t> take = {300, 20, 0};
        at::Tensor index = at::full({3, S}, -1, at::kInt);  // unused slots poisoned
        std::vector<int64_t> want_compact;
        std::vector<at::Tensor> picked;
        for (int64_t h = 0; h < 3; ++h) {
          const at::Tensor rows = std::get<0>(at::randperm(L.length[h], at::kLong).narrow(0, 0, take[h]).sort());
          index[h].narrow(0, 0, take[h]).copy_(rows);
          want_compact.push_back(rows.lt(L.compact_entries(h)).sum().item<int64_t>());
          picked.push_back(rows);
        }
        ops::CompactSelection sel{index.to(dev), ops::upload_int64(take, dev),
                                  at::full({3}, -1, at::TensorOptions().device(dev).dtype(at::kLong))};
        const at::Tensor q = at::randn({3 * G, D}, at::TensorOptions().device(dev).dtype(dt));
        const auto [value_base, key_base] = row_bases(L, dev);
        const at::Tensor got =
            ops::compact_decode_attention(q, L, *table, value_base, key_base, sel.count, S, G, 0.0, &sel);
        std::vector<at::Tensor> ref;
        for (int64_t h = 0; h < 3; ++h) {
          const at::Tensor r = picked[h].to(dev);
          const at::Tensor k = cache.head_keys(0, h).index_select(0, r).to(at::kDouble);
          const at::Tensor v = cache.head_values(0, h).index_select(0, r).to(at::kDouble);
          const at::Tensor s = at::matmul(q.narrow(0, h * G, G).to(at::kDouble), k.t()) / std::sqrt(double(D));
          ref.push_back(take[h] == 0 ? at::zeros({G, D}, s.options()) : at::matmul(at::softmax(s, -1), v));
        }
        const at::Tensor want = at::cat(ref, 0);
        const double err = (got.to(at::kDouble) - want).abs().max().item<double>();
        EXPECT_LE(err, dt == at::kFloat ? 2e-5 : 1e-2 * std::max(1.0, want.abs().max().item<double>()));
        const at::Tensor read = sel.compact_read.cpu();
        for (int64_t h = 0; h < 3; ++h) EXPECT_EQ(read[h].item<int64_t>(), want_compact[h]) << "head " << h;
        EXPECT_GT(want_compact[0], 0);
        EXPECT_LT(want_compact[0], take[0]) << "head 0 should read dense rows too";
      }
}

TEST_F(CudaCompactDecode, RejectsBadArguments) {
  const c10::Device dev("cuda:0");
  const ModelConfig cfg = test::small_config(1, 2, 4, 64);
  const KvCache cache = compact_cache(cfg, {10, 10}, 1, Recovery::kZero, at::kBFloat16, dev);
  const LayerKv& L = cache.layer(0);
  const auto table = ops::compact_layer_table(L, 64);
  ASSERT_TRUE(table.has_value());
  const auto [off, koff] = row_bases(L, dev);
  const at::Tensor len = ops::upload_int64(L.length, dev);
  const auto opts = at::TensorOptions().device(dev).dtype(at::kBFloat16);
  EXPECT_THROW(ops::compact_decode_attention(at::randn({7, 64}, opts), L, *table, off, koff, len, 11, 4),
               std::invalid_argument);  // 7 query heads for 2 x 4
  EXPECT_THROW(
      ops::compact_decode_attention(at::randn({8, 64}, opts), L, *table, off, koff, len.narrow(0, 0, 1), 11, 4),
      std::invalid_argument);
  // A selection whose index is not int32 [n_head_kv, S], or whose counts are not int64 [n_head_kv].
  const at::Tensor q = at::randn({8, 64}, opts);
  const ops::CompactSelection int64_index{at::zeros({2, 4}, opts.dtype(at::kLong)), len, {}};
  EXPECT_THROW(ops::compact_decode_attention(q, L, *table, off, koff, len, 11, 4, 0.0, &int64_index),
               std::invalid_argument);
  const ops::CompactSelection one_head{at::zeros({1, 4}, opts.dtype(at::kInt)), len, {}};
  EXPECT_THROW(ops::compact_decode_attention(q, L, *table, off, koff, len, 11, 4, 0.0, &one_head),
               std::invalid_argument);
  const ops::CompactSelection short_count{at::zeros({2, 4}, opts.dtype(at::kInt)), len.narrow(0, 0, 1), {}};
  EXPECT_THROW(ops::compact_decode_attention(q, L, *table, off, koff, len, 11, 4, 0.0, &short_count),
               std::invalid_argument);
}

}  // namespace
}  // namespace kvscope
