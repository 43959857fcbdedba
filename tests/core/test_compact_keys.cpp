// CompactKeys (kept channels + bitmask + SPARK's sign refill) and KvCache::compact_keys: recovery
// against a hand loop, the cache's rows after compaction (append, grow, clone, retain), the bytes
// it frees, and the bad paths.
#include <gtest/gtest.h>

#include <stdexcept>
#include <vector>

#include <ATen/ATen.h>

#include "kvscope/core/compact_keys.h"
#include "kvscope/core/kv_cache.h"
#include "small_config.h"

namespace kvscope {
namespace {

/// A random mask [n, D] keeping `kept` channels per row (or a random count per row when kept < 0).
at::Tensor random_mask(int64_t n, int64_t D, int64_t kept) {
  at::Tensor mask = at::zeros({n, D}, at::kBool);
  for (int64_t t = 0; t < n; ++t) {
    const int64_t c = kept >= 0 ? kept : at::randint(0, D + 1, {1}).item<int64_t>();
    if (c > 0) mask[t].index_fill_(0, at::randperm(D).narrow(0, 0, c), true);
  }
  return mask;
}

/// k̂ by hand: kept channels as they are, the others ±scale·inv_a by the key's sign (or 0).
at::Tensor hand_recover(const at::Tensor& k, const at::Tensor& mask, const at::Tensor& scale, const at::Tensor& inv_a) {
  const int64_t n = k.size(0), D = k.size(1);
  const at::Tensor m = mask.expand({n, D}).contiguous();
  at::Tensor out = at::zeros({n, D}, at::kFloat);
  auto K = k.to(at::kFloat).contiguous();
  auto Ka = K.accessor<float, 2>();
  auto Ma = m.accessor<bool, 2>();
  auto Oa = out.accessor<float, 2>();
  for (int64_t t = 0; t < n; ++t)
    for (int64_t j = 0; j < D; ++j) {
      if (Ma[t][j])
        Oa[t][j] = Ka[t][j];
      else if (scale.defined())
        Oa[t][j] = (Ka[t][j] < 0 ? -1.f : 1.f) * (scale[t].item<float>() * inv_a[j].item<float>());
    }
  return out.to(k.scalar_type());
}

TEST(CompactKeys, BitsRoundTrip) {
  at::manual_seed(3);
  for (int64_t cols : {1, 7, 8, 13, 64, 100}) {
    const at::Tensor bits = at::rand({5, cols}).lt(0.4);
    const at::Tensor packed = pack_bits(bits);
    EXPECT_EQ(packed.sizes(), (at::IntArrayRef{5, (cols + 7) / 8}));
    EXPECT_EQ(packed.scalar_type(), at::kByte);
    EXPECT_TRUE(at::equal(unpack_bits(packed, cols), bits)) << cols;
  }
  // Bit j is bit j % 8 of byte j / 8.
  at::Tensor one = at::zeros({1, 16}, at::kBool);
  one[0][9] = true;
  EXPECT_EQ(pack_bits(one)[0][1].item<int>(), 2);
}

TEST(CompactKeys, RecoverMatchesTheHandLoop) {
  at::manual_seed(5);
  const int64_t n = 40, D = 24;
  for (const at::ScalarType dt : {at::kFloat, at::kBFloat16})
    for (const int64_t kept : {int64_t(10), int64_t(0), D, int64_t(-1)})
      for (const bool refill : {false, true}) {
        SCOPED_TRACE("kept " + std::to_string(kept) + (refill ? " refill" : "") +
                     (dt == at::kFloat ? " fp32" : " bf16"));
        const at::Tensor k = at::randn({n, D}).to(dt);
        const at::Tensor mask = random_mask(n, D, kept);
        const at::Tensor scale = refill ? at::rand({n}) : at::Tensor();
        at::Tensor inv_a = refill ? at::rand({D}) : at::Tensor();
        if (refill) inv_a[3] = 0.f;  // a channel no query reads: recovers as 0
        const CompactKeys c = CompactKeys::pack(k, mask, scale, inv_a);
        EXPECT_EQ(c.n, n);
        EXPECT_EQ(c.row.defined(), kept < 0);
        EXPECT_EQ(c.values.numel(), mask.sum().item<int64_t>());
        EXPECT_TRUE(at::equal(c.kept_mask(), mask));
        EXPECT_TRUE(at::equal(c.recover(), hand_recover(k, mask, scale, inv_a)));
        EXPECT_TRUE(at::equal(c.clone().recover(), c.recover()));
      }
  // One channel set for every entry (ThinK): one bitmask row.
  const at::Tensor k = at::randn({9, 16});
  const at::Tensor shared = random_mask(1, 16, 5);
  const CompactKeys c = CompactKeys::pack(k, shared);
  EXPECT_EQ(c.kept.size(0), 1);
  EXPECT_EQ(c.bytes(), 9 * 5 * 4 + 2);
  EXPECT_TRUE(at::equal(c.recover(), k * shared.to(at::kFloat)));
}

TEST(CompactKeys, PackRejectsMismatchedShapes) {
  EXPECT_THROW(CompactKeys::pack(at::randn({4, 8}), at::ones({4, 7}, at::kBool)), std::invalid_argument);
  EXPECT_THROW(CompactKeys::pack(at::randn({4, 8}), at::ones({3, 8}, at::kBool)), std::invalid_argument);
  EXPECT_THROW(CompactKeys::pack(at::randn({4, 8}), at::ones({4, 8}, at::kBool), at::rand({4})), std::invalid_argument);
  EXPECT_THROW(CompactKeys::pack(at::randn({4, 8}), at::ones({4, 8}, at::kBool), at::rand({4}), at::rand({7})),
               std::invalid_argument);
}

/// A one-layer cache of `n` entries per head (capacity n + reserve) and its keys.
struct Filled {
  ModelConfig cfg = test::small_config(1, 2, 2, 16);
  KvCache cache;
  at::Tensor k, v;
  Filled(int64_t n, int64_t reserve)
      : cache(cfg, n + reserve, c10::Device(c10::kCPU), at::kFloat),
        k(at::randn({2, n, 16})),
        v(at::randn({2, n, 16})) {
    cache.append(0, k, v, at::arange(n, at::kLong));
    cache.advance_position(n);
  }
  std::vector<CompactKeys> pack(const std::vector<at::Tensor>& masks) const {
    std::vector<CompactKeys> out;
    for (int64_t h = 0; h < 2; ++h) out.push_back(CompactKeys::pack(cache.head_keys(0, h), masks[h]));
    return out;
  }
  void append_one(const at::Tensor& kk, const at::Tensor& vv) {
    cache.append(0, kk, vv, at::full({1}, cache.next_position(), at::kLong));
    cache.advance_position(1);
  }
};

TEST(CompactKeysInCache, ReadsAppendsGrowthCloneAndRetain) {
  at::manual_seed(11);
  Filled f(12, 2);
  const std::vector<at::Tensor> masks = {random_mask(12, 16, 6), random_mask(12, 16, 6)};
  const int64_t before = f.cache.bytes_allocated();
  std::vector<CompactKeys> packed = f.pack(masks);
  const int64_t compact = packed[0].bytes() + packed[1].bytes();
  f.cache.compact_keys(0, std::move(packed));
  // K rows of the 12 compact entries are gone; the 2 reserve rows per head stay dense.
  EXPECT_EQ(f.cache.bytes_allocated(), before - 2 * 12 * 16 * 4 + compact);
  EXPECT_EQ(f.cache.layer(0).compact_entries(1), 12);
  for (int64_t h = 0; h < 2; ++h) EXPECT_TRUE(at::equal(f.cache.head_keys(0, h), f.k[h] * masks[h].to(at::kFloat)));
  EXPECT_TRUE(at::equal(f.cache.head_values(0, 1), f.v[1]));
  // Decode-time entries land after the compact ones, also past the capacity (growth).
  std::vector<at::Tensor> added;
  for (int i = 0; i < 5; ++i) {
    const at::Tensor kk = at::randn({2, 1, 16}), vv = at::randn({2, 1, 16});
    f.append_one(kk, vv);
    added.push_back(kk);
  }
  const at::Tensor tail = at::cat(added, 1);  // [2, 5, 16]
  EXPECT_GE(f.cache.layer(0).capacity[0], 17);
  for (int64_t h = 0; h < 2; ++h) {
    const at::Tensor keys = f.cache.head_keys(0, h);
    ASSERT_EQ(keys.size(0), 17);
    EXPECT_TRUE(at::equal(keys.narrow(0, 12, 5), tail[h]));
    EXPECT_TRUE(at::equal(keys.narrow(0, 0, 12), f.k[h] * masks[h].to(at::kFloat)));
  }
  EXPECT_EQ(f.cache.keys(0).sizes(), (at::IntArrayRef{2, 17, 16}));
  // A clone is independent.
  KvCache copy = f.cache.clone();
  copy.append(0, at::randn({2, 1, 16}), at::randn({2, 1, 16}), at::full({1}, 99, at::kLong));
  EXPECT_EQ(f.cache.head_keys(0, 0).size(0), 17);
  EXPECT_TRUE(at::equal(copy.head_keys(0, 0).narrow(0, 0, 17), f.cache.head_keys(0, 0)));
  // A later turn's eviction makes the keys dense (the recovered ones) and keeps the chosen rows.
  const at::Tensor all = f.cache.head_keys(0, 1).clone();
  const at::Tensor rows = at::tensor({0, 5, 13, 16}, at::kLong);
  f.cache.retain(0, {rows, rows}, 1);
  EXPECT_TRUE(f.cache.layer(0).compact.empty());
  EXPECT_TRUE(at::equal(f.cache.head_keys(0, 1), all.index_select(0, rows)));
}

TEST(CompactKeysInCache, RaggedHeadsAndExpand) {
  at::manual_seed(13);
  Filled f(10, 3);
  f.cache.retain(0, {at::arange(10, at::kLong), at::tensor({1, 4, 7}, at::kLong)}, 3);
  std::vector<CompactKeys> packed = {CompactKeys::pack(f.cache.head_keys(0, 0), random_mask(10, 16, -1)),
                                     CompactKeys::pack(f.cache.head_keys(0, 1), random_mask(3, 16, 4))};
  const at::Tensor r0 = packed[0].recover(), r1 = packed[1].recover();
  f.cache.compact_keys(0, std::move(packed));
  const at::Tensor kk = at::randn({2, 1, 16});
  f.append_one(kk, at::randn({2, 1, 16}));
  EXPECT_TRUE(at::equal(f.cache.head_keys(0, 0), at::cat({r0, kk[0]})));
  EXPECT_TRUE(at::equal(f.cache.head_keys(0, 1), at::cat({r1, kk[1]})));
  f.cache.expand_keys(0);
  EXPECT_TRUE(f.cache.layer(0).compact.empty());
  EXPECT_EQ(f.cache.layer(0).k.size(0), f.cache.layer(0).v.size(0));
  EXPECT_TRUE(at::equal(f.cache.head_keys(0, 1), at::cat({r1, kk[1]})));
}

TEST(CompactKeysInCache, ValuesToo) {
  at::manual_seed(19);
  Filled f(12, 2);
  const std::vector<at::Tensor> kmasks = {random_mask(12, 16, 6), random_mask(12, 16, 6)};
  const std::vector<at::Tensor> vmasks = {random_mask(12, 16, 9), random_mask(12, 16, 9)};
  const int64_t before = f.cache.bytes_allocated();
  std::vector<CompactKeys> keys = f.pack(kmasks), values;
  for (int64_t h = 0; h < 2; ++h) values.push_back(CompactKeys::pack(f.cache.head_values(0, h), vmasks[h]));
  const int64_t compact = keys[0].bytes() + keys[1].bytes() + values[0].bytes() + values[1].bytes();
  f.cache.compact_keys(0, std::move(keys), std::move(values));
  EXPECT_EQ(f.cache.bytes_allocated(), before - 2 * 2 * 12 * 16 * 4 + compact);  // K and V rows of 12 entries
  EXPECT_EQ(f.cache.layer(0).compact_value_entries(0), 12);
  for (int64_t h = 0; h < 2; ++h) EXPECT_TRUE(at::equal(f.cache.head_values(0, h), f.v[h] * vmasks[h].to(at::kFloat)));
  std::vector<at::Tensor> added;
  for (int i = 0; i < 4; ++i) {  // past the reserve of 2: growth
    const at::Tensor vv = at::randn({2, 1, 16});
    f.append_one(at::randn({2, 1, 16}), vv);
    added.push_back(vv);
  }
  const at::Tensor tail = at::cat(added, 1);
  for (int64_t h = 0; h < 2; ++h) {
    const at::Tensor vals = f.cache.head_values(0, h);
    ASSERT_EQ(vals.size(0), 16);
    EXPECT_TRUE(at::equal(vals.narrow(0, 12, 4), tail[h]));
    EXPECT_TRUE(at::equal(vals.narrow(0, 0, 12), f.v[h] * vmasks[h].to(at::kFloat)));
    EXPECT_TRUE(at::equal(f.cache.head_positions(0, h), at::arange(16, at::kLong)));
  }
  EXPECT_EQ(f.cache.values(0).sizes(), (at::IntArrayRef{2, 16, 16}));
  const at::Tensor all = f.cache.head_values(0, 1).clone();
  f.cache.expand_keys(0);
  EXPECT_TRUE(f.cache.layer(0).compact_v.empty());
  EXPECT_TRUE(at::equal(f.cache.head_values(0, 1), all));
  // Values need compact keys of the same entries.
  Filled g(8, 1);
  std::vector<CompactKeys> short_values = {
      CompactKeys::pack(g.cache.head_values(0, 0).narrow(0, 0, 7), random_mask(7, 16, 3)),
      CompactKeys::pack(g.cache.head_values(0, 1), random_mask(8, 16, 3))};
  EXPECT_THROW(g.cache.compact_keys(0, g.pack({random_mask(8, 16, 4), random_mask(8, 16, 4)}), std::move(short_values)),
               std::invalid_argument);
}

TEST(CompactKeysInCache, BadPaths) {
  at::manual_seed(17);
  Filled f(8, 2);
  const std::vector<at::Tensor> masks = {random_mask(8, 16, 4), random_mask(8, 16, 4)};
  // Wrong head count, wrong entry count.
  EXPECT_THROW(f.cache.compact_keys(0, {CompactKeys::pack(f.cache.head_keys(0, 0), masks[0])}), std::invalid_argument);
  EXPECT_THROW(
      f.cache.compact_keys(0, {CompactKeys::pack(f.cache.head_keys(0, 0).narrow(0, 0, 7), masks[0][0].view({1, 16})),
                               CompactKeys::pack(f.cache.head_keys(0, 1), masks[1])}),
      std::invalid_argument);
  f.cache.compact_keys(0, f.pack(masks));
  EXPECT_THROW(f.cache.compact_keys(0, f.pack(masks)), std::logic_error);  // twice
  EXPECT_THROW(f.cache.set_window(0, 0, 2, 6), std::logic_error);
  EXPECT_THROW(f.cache.drop_lowest(0, at::zeros({2, 8}), 8), std::logic_error);
  // A ring-buffer head overwrites rows in place: no compact keys there.
  Filled g(8, 0);
  g.cache.set_window(0, 1, 2, 6);
  EXPECT_THROW(g.cache.compact_keys(0, g.pack(masks)), std::logic_error);
  // A sliding-window layer keeps its window dense.
  ModelConfig sliding = test::small_config(1, 2, 2, 16);
  sliding.sliding_window = 4;
  sliding.layer_window = {4};
  KvCache s(sliding, 8, c10::Device(c10::kCPU), at::kFloat);
  ASSERT_EQ(s.layer(0).window, 4);
  EXPECT_THROW(s.compact_keys(0, {}), std::logic_error);
}

}  // namespace
}  // namespace kvscope
