// The page-summary kernels (ops/page_ops.h: HSA / Quest page selection with the last-page upkeep)
// against their fp32 LibTorch references (ops/reference_ops.h), on ragged caches of awkward
// lengths (1, 37, 1000, 32768 entries), head_dim 64 / 96 / 128 / 256, GQA groups 1, 3, 4, 8 and every dtype.
// Skipped without a CUDA device or without the kernels in the build.
//
// Selections are compared as sets. The kernel and the reference compute the same fp32 scores in a
// different order, so a page whose score ties the k-th best within fp32 rounding may be swapped;
// the rule allows that only for pages whose reference scores differ by less than 1e-4 relative.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "../../core/src/ops/cuda_ops.h"
#include "../../core/src/ops/page_ops.h"
#include "../../core/src/ops/reference_ops.h"

namespace kvscope {
namespace {

const at::ScalarType kDtypes[] = {at::kFloat, at::kBFloat16, at::kHalf};

class CudaPageSelect : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!ops::cuda_kernels_available()) GTEST_SKIP() << "built without the CUDA kernels";
    if (!at::hasCUDA()) GTEST_SKIP() << "no CUDA device";
    at::manual_seed(2026);  // every test starts from the same generator state: reproducible draws
  }
};

/// A ragged layer: head h has length[h] entries at rows offset[h]..; keys in dtype on the GPU.
struct Layer {
  std::vector<int64_t> offset, length;
  at::Tensor k, v;
};

Layer make_layer(int64_t Hkv, int64_t n_tok, int64_t D, at::ScalarType dt, std::mt19937& rng) {
  Layer L;
  std::uniform_int_distribution<int64_t> len(std::max<int64_t>(1, n_tok / 3), n_tok);
  int64_t rows = 0;
  for (int64_t h = 0; h < Hkv; ++h) {
    L.length.push_back(h == 0 ? n_tok : len(rng));
    L.offset.push_back(rows);
    rows += L.length.back() + 5;  // slack rows between heads
  }
  const auto o = at::TensorOptions().device(at::kCUDA).dtype(dt);
  // Keys with a per-channel scale, as real keys have outlier channels.
  at::Tensor scale = at::rand({1, D}, o.dtype(at::kFloat)) * 3 + 0.2;
  L.k = (at::randn({rows, D}, o.dtype(at::kFloat)) * scale).to(dt);
  L.v = at::randn({rows, D}, o);
  return L;
}

at::Tensor head_keys(const Layer& L, int64_t h) { return L.k.narrow(0, L.offset[h], L.length[h]); }

/// Summaries as the policies lay them out: [Hkv, page capacity, D] in the cache dtype.
std::pair<at::Tensor, at::Tensor> summaries(const Layer& L, int64_t page, int64_t capacity) {
  const int64_t Hkv = static_cast<int64_t>(L.length.size()), D = L.k.size(1);
  at::Tensor lo = at::zeros({Hkv, capacity, D}, L.k.options()), hi = at::zeros_like(lo);
  for (int64_t h = 0; h < Hkv; ++h) {
    auto [a, b] = ops::ref::page_minmax(head_keys(L, h), page);
    lo[h].narrow(0, 0, a.size(0)).copy_(a);
    hi[h].narrow(0, 0, b.size(0)).copy_(b);
  }
  return {lo, hi};
}

int64_t max_pages_of(const Layer& L, int64_t page) {
  int64_t m = 1;
  for (int64_t n : L.length) m = std::max(m, (n + page - 1) / page);
  return m;
}

/// Checks one selection against the reference; returns the number of rows that differ.
int64_t differing_rows(const at::Tensor& got, const at::Tensor& want) {
  const at::Tensor a = got.cpu().to(at::kLong), b = want.cpu();
  return (a.numel() - at::isin(a, b).sum().item<int64_t>()) + (b.numel() - at::isin(b, a).sum().item<int64_t>());
}

void check_selection(bool hsa, at::ScalarType dt, int64_t D, int64_t G, int64_t n_tok, int64_t page, int64_t k1,
                     int64_t keep, std::mt19937& rng, int64_t Hkv = 3) {
  Layer L = make_layer(Hkv, n_tok, D, dt, rng);
  const int64_t cap = max_pages_of(L, page) + 1;
  auto [lo, hi] = summaries(L, page, cap);
  const at::Tensor q = at::randn({Hkv * G, D}, L.k.options().dtype(at::kFloat)).to(dt);
  const at::Tensor heads = ops::upload_heads(L.offset, L.length, L.k.device());
  auto [index, count] = ops::page_select(hsa ? ops::PageScore::kHsa : ops::PageScore::kQuest, q, lo, hi, heads[1],
                                         max_pages_of(L, page), G, page, k1, keep);
  const at::Tensor cnt = count.cpu();
  for (int64_t h = 0; h < Hkv; ++h) {
    const int64_t n = L.length[h], c = cnt[h].item<int64_t>();
    const std::string what = std::string(hsa ? "hsa" : "quest") + " dtype " + c10::toString(dt) +
                             " D=" + std::to_string(D) + " G=" + std::to_string(G) + " n=" + std::to_string(n) +
                             " page=" + std::to_string(page) + " keep=" + std::to_string(keep) + " head " +
                             std::to_string(h) + " of " + std::to_string(Hkv);
    const at::Tensor got = index[h].narrow(0, 0, c).cpu().to(at::kLong);
    ASSERT_TRUE(at::equal(got, std::get<0>(at::sort(got)))) << what << ": rows not ascending";
    const at::Tensor want = ops::ref::page_select_rows(hsa, q.narrow(0, h * G, G), lo[h], hi[h], n, page, k1, keep);
    if (hsa) EXPECT_EQ(c, std::min(n, keep)) << what;
    // Near-ties may swap one page at the boundary (see the header); anything more is a bug.
    EXPECT_LE(differing_rows(got, want), 2 * page) << what;
  }
}

TEST_F(CudaPageSelect, HsaSelectsTheReferenceTokens) {
  std::mt19937 rng(2);
  for (at::ScalarType dt : kDtypes)
    for (int64_t D : {64, 96, 128, 256})
      for (int64_t G : {1, 3, 4, 8})
        for (int64_t n_tok : {1, 37, 1000, 32768}) {
          const int64_t page = n_tok > 1000 ? 8 : 4, k1 = D / 4, keep = std::max<int64_t>(1, n_tok / 8);
          check_selection(true, dt, D, G, n_tok, page, k1, keep, rng);
        }
}

TEST_F(CudaPageSelect, SelectionPathsBySizeSelectTheReferenceTokens) {
  // A cluster of 8 blocks splits each head's pages; a block stages its chunk's scores in shared
  // memory up to 184 KB and keeps 4 keys per thread (2048 pages) in registers. Cover each side of
  // both limits: G 16, page 1: 4096 pages per block x 16 x 4 B = 256 KB (workspace, keys re-read;
  // CUDA-core scoring, the tensor-core path taking groups of up to 8); G 4, page 2: 2048 pages per
  // block, 32 KB (staged, every key in registers); G 8, page 8: 512 pages per block, 16 KB. Head
  // dims 20 (16-bit rows not 16-byte aligned: element loads) and 36 (a partial slot of lanes), both
  // on CUDA cores (the tensor-core path needs a multiple of 32).
  std::mt19937 rng(4);
  for (at::ScalarType dt : kDtypes) {
    check_selection(true, dt, 64, 16, 32768, 1, 16, 4096, rng);
    check_selection(true, dt, 128, 4, 32768, 2, 64, 2048, rng);
    check_selection(true, dt, 64, 8, 32768, 8, 16, 1024, rng);
    check_selection(true, dt, 20, 3, 1000, 4, 5, 100, rng);
    check_selection(false, dt, 36, 3, 1000, 4, 0, 25, rng);
  }
}

TEST_F(CudaPageSelect, ManyKvHeadsTakeSmallerClusters) {
  // With more KV heads than fit the SMs at 8 blocks each (a batch: B x n_head_kv heads), a head
  // gets 4 or 2 blocks (on 132 SMs: 20 heads -> 4, 40 and 64 heads -> 2), each owning a larger
  // chunk: staged scores of up to 8,192 pages per block, keys past the registers re-read.
  std::mt19937 rng(5);
  for (int64_t Hkv : {20, 40, 64}) {
    check_selection(true, at::kBFloat16, 128, 4, 32768, 2, 70, 2048, rng, Hkv);
    check_selection(true, at::kFloat, 64, 3, 1000, 4, 16, 125, rng, Hkv);
    check_selection(false, at::kBFloat16, 128, 4, 32768, 16, 0, 32, rng, Hkv);
  }
}

TEST_F(CudaPageSelect, QuestSelectsTheReferencePages) {
  std::mt19937 rng(3);
  for (at::ScalarType dt : kDtypes)
    for (int64_t D : {64, 96, 128, 256})
      for (int64_t G : {1, 3, 4, 8})
        for (int64_t n_tok : {1, 37, 1000, 32768}) {
          const int64_t page = 16, keep = std::max<int64_t>(1, n_tok / 16 / 8);
          check_selection(false, dt, D, G, n_tok, page, 0, keep, rng);
        }
}

TEST_F(CudaPageSelect, LastPageUpkeepRecomputesTheSummariesAndSelectsAsIfFresh) {
  // page_select with k / offset first recomputes each head's last page (the decode append): from
  // poisoned last pages it must leave exactly the reference summaries of every page, and select
  // the same rows as a selection over fresh summaries without the upkeep.
  std::mt19937 rng(1);
  for (bool hsa : {true, false})
    for (at::ScalarType dt : kDtypes)
      for (int64_t D : {64, 96, 128, 256})
        for (int64_t n_tok : {1, 37, 1000, 32768})
          for (int64_t page : {1, 7, 16}) {
            const int64_t G = 4, k1 = D / 4, keep = std::max<int64_t>(1, hsa ? n_tok / 8 : n_tok / page / 8);
            Layer L = make_layer(3, n_tok, D, dt, rng);
            const int64_t cap = max_pages_of(L, page) + 2;
            auto [fresh_lo, fresh_hi] = summaries(L, page, cap);
            at::Tensor lo = fresh_lo.clone(), hi = fresh_hi.clone();
            for (int64_t h = 0; h < 3; ++h) {  // poison every last page
              const int64_t last = (L.length[h] - 1) / page;
              lo[h][last].fill_(1e4);
              hi[h][last].fill_(-1e4);
            }
            const at::Tensor q = at::randn({3 * G, D}, L.k.options().dtype(at::kFloat)).to(dt);
            const at::Tensor heads = ops::upload_heads(L.offset, L.length, L.k.device());
            const auto mode = hsa ? ops::PageScore::kHsa : ops::PageScore::kQuest;
            const int64_t max_pages = max_pages_of(L, page);
            auto [index, count] =
                ops::page_select(mode, q, lo, hi, heads[1], max_pages, G, page, k1, keep, L.k, heads[0]);
            auto [index2, count2] =
                ops::page_select(mode, q, fresh_lo, fresh_hi, heads[1], max_pages, G, page, k1, keep);
            const std::string what = std::string(hsa ? "hsa " : "quest ") + c10::toString(dt) +
                                     " D=" + std::to_string(D) + " n=" + std::to_string(n_tok) +
                                     " page=" + std::to_string(page);
            for (int64_t h = 0; h < 3; ++h) {
              auto [rlo, rhi] = ops::ref::page_minmax(head_keys(L, h), page);
              const int64_t P = rlo.size(0);
              EXPECT_TRUE(at::equal(lo[h].narrow(0, 0, P).to(at::kFloat).cpu(), rlo.cpu())) << what << " head " << h;
              EXPECT_TRUE(at::equal(hi[h].narrow(0, 0, P).to(at::kFloat).cpu(), rhi.cpu())) << what << " head " << h;
            }
            ASSERT_TRUE(at::equal(count.cpu(), count2.cpu())) << what;
            for (int64_t h = 0; h < 3; ++h) {
              const int64_t c = count.cpu()[h].item<int64_t>();
              EXPECT_TRUE(at::equal(index[h].narrow(0, 0, c).cpu(), index2[h].narrow(0, 0, c).cpu()))
                  << what << " head " << h;
            }
          }
}

TEST_F(CudaPageSelect, CompactEntriesOfTheLastPageComeFromTheEdgeNotFromK) {
  // A layer whose first entries hold compact keys (channel pruning under the selection) has no row
  // of K for them: the upkeep takes their min / max from the edge and reads K from k_first on.
  // Head 0: the last page starts with compact entries (edge used); head 1: the dense keys begin
  // that page (no edge); head 2: they begin an earlier page. Those entries' rows of K are poisoned.
  std::mt19937 rng(6);
  for (at::ScalarType dt : kDtypes)
    for (int64_t D : {64, 96, 128, 256})
      for (int64_t page : {7, 16}) {
        const std::string what =
            std::string(c10::toString(dt)) + " D=" + std::to_string(D) + " page=" + std::to_string(page);
        const int64_t G = 2, Hkv = 3;
        Layer L = make_layer(Hkv, 300, D, dt, rng);  // head 0: 300 entries, its last page starts at 294 / 288
        std::vector<int64_t> first(Hkv);
        for (int64_t h = 0; h < Hkv; ++h) {
          const int64_t n = L.length[h], start = (n - 1) / page * page;
          first[h] = h == 0 ? n - 1 : h == 1 ? start : std::max<int64_t>(0, start - 3);
        }
        ASSERT_GT(first[0] % page, 0) << what;
        const int64_t cap = max_pages_of(L, page) + 1;
        auto [lo, hi] = summaries(L, page, cap);
        const auto [want_lo, want_hi] = std::make_pair(lo.clone(), hi.clone());
        at::Tensor edge_lo = at::zeros({Hkv, D}, L.k.options()), edge_hi = at::zeros_like(edge_lo);
        at::Tensor k = L.k.clone();
        for (int64_t h = 0; h < Hkv; ++h) {
          const int64_t n = L.length[h], p0 = first[h] / page * page, last = (n - 1) / page;
          if (first[h] > p0) {
            const at::Tensor rows = head_keys(L, h).narrow(0, p0, first[h] - p0);
            edge_lo[h].copy_(std::get<0>(rows.min(0)));
            edge_hi[h].copy_(std::get<0>(rows.max(0)));
          }
          k.narrow(0, L.offset[h], first[h]).fill_(1e4);  // no K row for a compact entry
          lo[h][last].fill_(1e4);                         // a stale last page
          hi[h][last].fill_(-1e4);
        }
        const ops::CompactPageEdge edge{ops::upload_int64(first, L.k.device()), edge_lo, edge_hi};
        const at::Tensor q = at::randn({Hkv * G, D}, L.k.options().dtype(at::kFloat)).to(dt);
        const at::Tensor heads = ops::upload_heads(L.offset, L.length, L.k.device());
        (void)ops::page_select(ops::PageScore::kQuest, q, lo, hi, heads[1], max_pages_of(L, page), G, page, 0, 2, k,
                               heads[0], &edge);
        EXPECT_TRUE(at::equal(lo.cpu(), want_lo.cpu())) << what;
        EXPECT_TRUE(at::equal(hi.cpu(), want_hi.cpu())) << what;
      }
}

TEST_F(CudaPageSelect, PartialLastPageAndDenseHeads) {
  // HSA keeps the first entries of a tie page only up to k2; a head shorter than k2 is dense.
  std::mt19937 rng(4);
  check_selection(true, at::kFloat, 128, 4, 37, 5, 32, 13, rng);  // 13 = 2 pages + 3 entries
  check_selection(true, at::kFloat, 128, 4, 10, 4, 32, 64, rng);  // every head dense
  check_selection(false, at::kFloat, 64, 2, 37, 16, 0, 2, rng);   // Quest: partial last page
}

TEST_F(CudaPageSelect, SelectionFeedsTheGatherKernel) {
  // page_select's index/count drive decode_attention_gather; compare with the fp32 gather reference.
  std::mt19937 rng(5);
  for (at::ScalarType dt : kDtypes) {
    const int64_t D = 128, G = 4, Hkv = 3, page = 8, keep = 256;
    Layer L = make_layer(Hkv, 4096, D, dt, rng);
    auto [lo, hi] = summaries(L, page, max_pages_of(L, page));
    const at::Tensor q = at::randn({Hkv * G, D}, L.k.options().dtype(at::kFloat)).to(dt);
    const at::Tensor heads = ops::upload_heads(L.offset, L.length, L.k.device());
    auto [index, count] =
        ops::page_select(ops::PageScore::kHsa, q, lo, hi, heads[1], max_pages_of(L, page), G, page, 32, keep);
    const at::Tensor got = ops::decode_attention_gather(q, L.k, L.v, heads[0], index, count, keep, G);
    std::vector<int64_t> cnt;
    for (int64_t h = 0; h < Hkv; ++h) cnt.push_back(count[h].item<int64_t>());
    const at::Tensor ref = ops::ref::decode_attention_gather(q, L.k, L.v, L.offset, index, cnt, G);
    const at::Tensor base = ops::ref::decode_attention_gather(q, L.k, L.v, L.offset, index, cnt, G, 0.0, dt);
    const double err = (got.to(at::kFloat) - ref).abs().max().item<double>();
    const double base_err = (base - ref).abs().max().item<double>();
    EXPECT_LE(err, 2 * base_err + 1e-5 * ref.abs().max().item<double>()) << c10::toString(dt);
  }
}

TEST_F(CudaPageSelect, RejectsBadArguments) {
  const auto o = at::TensorOptions().device(at::kCUDA).dtype(at::kBFloat16);
  const at::Tensor q = at::randn({8, 128}, o), lo = at::zeros({2, 4, 128}, o), hi = at::zeros({2, 4, 128}, o);
  const at::Tensor len = at::full({2}, 16, o.dtype(at::kLong));
  EXPECT_THROW(ops::page_select(ops::PageScore::kHsa, q, lo, hi, len, 4, 3, 4, 8, 8), std::invalid_argument);  // 8 % 3
  EXPECT_THROW(ops::page_select(ops::PageScore::kHsa, q, lo, hi, len, 4, 4, 4, 0, 8), std::invalid_argument);  // k1 0
  EXPECT_THROW(ops::page_select(ops::PageScore::kHsa, q, lo, hi, len, 9, 4, 4, 8, 8), std::invalid_argument);  // pages
  EXPECT_THROW(ops::page_select(ops::PageScore::kQuest, q, lo.to(at::kFloat), hi, len, 4, 4, 4, 0, 1),
               std::invalid_argument);  // dtype mismatch
  // A compact edge of the wrong shape or dtype (the upkeep would read past it).
  const at::Tensor k = at::zeros({64, 128}, o), off = at::zeros({2}, o.dtype(at::kLong));
  const ops::CompactPageEdge short_edge{off, at::zeros({1, 128}, o), at::zeros({2, 128}, o)};
  EXPECT_THROW(ops::page_select(ops::PageScore::kQuest, q, lo, hi, len, 4, 4, 4, 0, 1, k, off, &short_edge),
               std::invalid_argument);
  const ops::CompactPageEdge fp32_edge{off, at::zeros({2, 128}, o.dtype(at::kFloat)), at::zeros({2, 128}, o)};
  EXPECT_THROW(ops::page_select(ops::PageScore::kQuest, q, lo, hi, len, 4, 4, 4, 0, 1, k, off, &fp32_edge),
               std::invalid_argument);
  const ops::CompactPageEdge int32_first{off.to(at::kInt), at::zeros({2, 128}, o), at::zeros({2, 128}, o)};
  EXPECT_THROW(ops::page_select(ops::PageScore::kQuest, q, lo, hi, len, 4, 4, 4, 0, 1, k, off, &int32_first),
               std::invalid_argument);
}

}  // namespace
}  // namespace kvscope
