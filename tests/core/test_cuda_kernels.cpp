// The CUDA kernels (ops/cuda_ops.h) against their fp32 references (ops/reference_ops.h), on awkward
// shapes, ragged per-head lengths and every dtype. Skipped without a CUDA device or without the
// kernels in the build.
//
// Pass rule, per output: max|kernel - ref32| <= 2 * max|baseline - ref32| + floor, where baseline is
// the same op computed by plain LibTorch in the dtype (the engine's path) and floor is one ulp of
// the dtype (1e-5 for fp32) times max|ref32|. Outputs are poisoned with NaN first, so an element the
// kernel never wrote fails; cache padding holds NaN, so a read past a head's live rows fails too.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "../../core/src/ops/cuda_ops.h"
#include "../../core/src/ops/reference_ops.h"

#ifdef KVSCOPE_HAVE_CUDA_KERNELS
#include "kvscope/kernels/gemv.h"
#endif

namespace kvscope {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
const at::ScalarType kDtypes[] = {at::kFloat, at::kBFloat16, at::kHalf};

std::string name(at::ScalarType t) { return t == at::kFloat ? "fp32" : t == at::kBFloat16 ? "bf16" : "fp16"; }

double ulp(at::ScalarType t) { return t == at::kFloat ? 1e-5 : t == at::kBFloat16 ? 1.0 / 256 : 1.0 / 2048; }

double max_abs_diff(const at::Tensor& a, const at::Tensor& b) {
  return (a.to(at::kFloat) - b.to(at::kFloat)).abs().max().item<double>();
}

/// The pass rule above; `what` names the case in failures.
void expect_close(const at::Tensor& got, const at::Tensor& ref, const at::Tensor& baseline, at::ScalarType dtype,
                  const std::string& what, double floor_ulps = 1) {
  ASSERT_EQ(got.sizes(), ref.sizes()) << what;
  ASSERT_TRUE(at::isfinite(got.to(at::kFloat)).all().item<bool>()) << what << ": non-finite output (unwritten?)";
  const double err = max_abs_diff(got, ref), base = max_abs_diff(baseline, ref);
  const double floor = floor_ulps * ulp(dtype) * std::max(ref.abs().max().item<double>(), 1e-6);
  EXPECT_LE(err, 2 * base + floor) << what << ": kernel error " << err << ", LibTorch " << name(dtype) << " error "
                                   << base << ", floor " << floor;
}

class CudaKernels : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!ops::cuda_kernels_available()) GTEST_SKIP() << "built without the CUDA kernels";
    if (!at::hasCUDA()) GTEST_SKIP() << "no CUDA device";
    at::manual_seed(2026);  // every test starts from the same generator state: reproducible draws
  }
  at::TensorOptions opts(at::ScalarType t) const { return at::TensorOptions().device(at::kCUDA).dtype(t); }

  /// A decode projection's operands in dtype dt: x [m, k], w [n, k] (scaled so that outputs are
  /// O(1)), b undefined / [n] / [m, n] (bias 0 / 1 / 2: none, a bias, the residual stream); ref =
  /// x·Wᵀ (+ b) in fp32, base = the same through LibTorch's at::linear in dt.
  /// With sumsq defined the rows come with their RMSNorm pending (pending_case).
  struct LinearCase {
    at::Tensor x, w, b, ref, base, sumsq;
    ops::NormedRows rows() const { return sumsq.defined() ? ops::NormedRows(x, sumsq, kNormEps) : ops::NormedRows(x); }
  };
  static constexpr double kNormEps = 1e-5;
  LinearCase linear_case(at::ScalarType dt, int64_t m, int64_t n, int64_t k, int bias) const {
    LinearCase c;
    c.x = at::randn({m, k}, opts(at::kFloat)).to(dt);
    c.w = (at::randn({n, k}, opts(at::kFloat)) / std::sqrt(double(k))).to(dt);
    if (bias)
      c.b = at::randn(bias == 1 ? std::vector<int64_t>{n} : std::vector<int64_t>{m, n}, opts(at::kFloat)).to(dt);
    products(c, c.x.to(at::kFloat), c.x, bias);
    return c;
  }
  /// linear_case whose rows have their RMSNorm pending (ops::NormedRows): residual rows r (not
  /// O(1): the norm matters) and a norm weight g, x = g ⊙ r rounded to dt, sumsq = Σ r² in `parts`
  /// uneven chunks of each row. ref takes the fp32 norm of r, base LibTorch's HF-order norm in dt.
  LinearCase pending_case(at::ScalarType dt, int64_t m, int64_t n, int64_t k, int bias, int64_t parts) const {
    LinearCase c = linear_case(dt, m, n, k, bias);
    const at::Tensor r = (at::randn({m, k}, opts(at::kFloat)) * 3 + 0.5).to(dt);
    const at::Tensor g = (at::randn({k}, opts(at::kFloat)) * 0.5 + 1).to(dt);
    c.x = r * g;
    std::vector<at::Tensor> chunks;
    for (const at::Tensor& t : at::tensor_split(r.to(at::kFloat).pow(2), parts, 1)) chunks.push_back(t.sum(1, true));
    c.sumsq = at::cat(chunks, 1).contiguous();
    products(c, ops::ref::rms_norm(r, g, kNormEps), ops::ref::rms_norm(r, g, kNormEps, dt).to(dt), bias);
    return c;
  }
  /// c.ref = x32·Wᵀ (+ b) in fp32, c.base = LibTorch's at::linear of x_dt in the dtype.
  static void products(LinearCase& c, const at::Tensor& x32, const at::Tensor& x_dt, int bias) {
    c.ref = at::matmul(x32, c.w.to(at::kFloat).t());
    if (bias) c.ref = c.ref + c.b.to(at::kFloat);
    c.base = bias == 1 ? at::linear(x_dt, c.w, c.b) : bias == 2 ? at::linear(x_dt, c.w) + c.b : at::linear(x_dt, c.w);
  }
};

/// A ragged per-KV-head cache: head h holds length[h] live rows inside a segment of capacity[h]
/// rows; rows past the live ones are NaN.
struct RaggedCache {
  std::vector<int64_t> offset, capacity, length;
  at::Tensor k, v;  // [sum(capacity), D]
};

RaggedCache make_cache(int64_t n_head_kv, int64_t n_tok, int64_t D, at::ScalarType dt, std::mt19937& rng) {
  RaggedCache c;
  std::uniform_int_distribution<int64_t> len_dist(std::max<int64_t>(1, n_tok / 4), n_tok);
  std::uniform_int_distribution<int64_t> slack(1, 9);
  const int64_t longest = std::uniform_int_distribution<int64_t>(0, n_head_kv - 1)(rng);
  int64_t rows = 0;
  for (int64_t h = 0; h < n_head_kv; ++h) {
    c.length.push_back(h == longest ? n_tok : len_dist(rng));
    c.capacity.push_back(c.length.back() + slack(rng));
    c.offset.push_back(rows);
    rows += c.capacity.back();
  }
  const auto o = at::TensorOptions().device(at::kCUDA).dtype(dt);
  c.k = at::full({rows, D}, kNaN, o);
  c.v = at::full({rows, D}, kNaN, o);
  for (int64_t h = 0; h < n_head_kv; ++h) {
    c.k.narrow(0, c.offset[h], c.length[h]).copy_(at::randn({c.length[h], D}, o));
    c.v.narrow(0, c.offset[h], c.length[h]).copy_(at::randn({c.length[h], D}, o));
  }
  return c;
}

TEST_F(CudaKernels, DecodeAttentionRaggedMatchesReference) {
  std::mt19937 rng(1234);
  const int64_t n_head_kv = 3;
  for (at::ScalarType dt : kDtypes)
    for (int64_t D : {64, 96, 128, 256})
      for (int64_t G : {1, 3, 4, 8})
        for (int64_t n_tok : {1, 37, 1000, 32768}) {
          at::manual_seed(rng());
          const RaggedCache c = make_cache(n_head_kv, n_tok, D, dt, rng);
          const int64_t H = n_head_kv * G;
          const double q_scale = (rng() % 2) ? 1.0 : 4.0;  // 4: peaky softmax
          // q as a strided view (heads 2D apart), as a slice of a fused projection would be.
          const at::Tensor q = (at::randn({H, 2 * D}, opts(dt)) * q_scale).narrow(1, 0, D);
          const at::Tensor ref = ops::ref::decode_attention(q, c.k, c.v, c.offset, c.length, G);
          const at::Tensor base = ops::ref::decode_attention(q, c.k, c.v, c.offset, c.length, G, 0.0, dt);
          for (int n_split : {0, 1, 5}) {
            const std::string what = name(dt) + " D=" + std::to_string(D) + " G=" + std::to_string(G) +
                                     " n_tok=" + std::to_string(n_tok) + " n_split=" + std::to_string(n_split);
            at::Tensor out = at::full({H, D}, kNaN, opts(dt));
            ops::decode_attention(q, c.k, c.v, c.offset, c.length, G, 0.0, n_split, out);
            // fp32: the kernel's split-K order against LibTorch's, over D products per score.
            expect_close(out, ref, base, dt, what, dt == at::kFloat ? double(D) / 64 : 1.0);
          }
        }
}

TEST_F(CudaKernels, DecodeAttentionEmptyHeadGivesZeros) {
  const int64_t D = 128, G = 4;
  std::mt19937 rng(7);
  RaggedCache c = make_cache(3, 300, D, at::kBFloat16, rng);
  c.length = {0, 300, 0};
  const at::Tensor q = at::randn({3 * G, D}, opts(at::kBFloat16));
  for (int n_split : {0, 1, 3}) {
    at::Tensor out = at::full({3 * G, D}, kNaN, opts(at::kBFloat16));
    ops::decode_attention(q, c.k, c.v, c.offset, c.length, G, 0.0, n_split, out);
    EXPECT_TRUE(out.narrow(0, 0, G).eq(0).all().item<bool>()) << "n_split=" << n_split;
    EXPECT_TRUE(out.narrow(0, 2 * G, G).eq(0).all().item<bool>()) << "n_split=" << n_split;
    EXPECT_TRUE(at::isfinite(out.to(at::kFloat)).all().item<bool>()) << "n_split=" << n_split;
  }
}

TEST_F(CudaKernels, DecodeAttentionFindsEveryWorkItemAcrossManyHeads) {
  // A decode batch's cache: B x n_head_kv heads (here 300: three rounds of the block's 128-head
  // scan that maps a block to its head and split), ragged, two heads empty.
  std::mt19937 rng(5);
  const int64_t n_head_kv = 300, G = 4, D = 128;
  RaggedCache c = make_cache(n_head_kv, 700, D, at::kBFloat16, rng);
  c.length[5] = 0;
  c.length[257] = 0;
  const at::Tensor q = at::randn({n_head_kv * G, D}, opts(at::kBFloat16)) * 2;
  std::vector<int64_t> live;  // query heads of non-empty KV heads
  for (int64_t h = 0; h < n_head_kv * G; ++h)
    if (c.length[h / G] > 0) live.push_back(h);
  const at::Tensor rows = at::tensor(live, at::kLong).to(at::kCUDA);
  const at::Tensor ref = ops::ref::decode_attention(q, c.k, c.v, c.offset, c.length, G).index_select(0, rows);
  const at::Tensor base =
      ops::ref::decode_attention(q, c.k, c.v, c.offset, c.length, G, 0.0, at::kBFloat16).index_select(0, rows);
  for (int n_split : {0, 1, 3}) {
    at::Tensor out = at::full({n_head_kv * G, D}, kNaN, opts(at::kBFloat16));
    ops::decode_attention(q, c.k, c.v, c.offset, c.length, G, 0.0, n_split, out);
    expect_close(out.index_select(0, rows), ref, base, at::kBFloat16, "300 heads n_split=" + std::to_string(n_split));
    for (int64_t h : {5, 257})
      EXPECT_TRUE(out.narrow(0, h * G, G).eq(0).all().item<bool>()) << "empty head " << h << " n_split=" << n_split;
  }
}

TEST_F(CudaKernels, DecodeAttentionDeviceMetadataWithLooseBounds) {
  // offset / length already on the device; the planning bounds only need to be upper bounds.
  std::mt19937 rng(21);
  const int64_t n_head_kv = 4, G = 4, D = 128;
  const RaggedCache c = make_cache(n_head_kv, 5000, D, at::kBFloat16, rng);
  const at::Tensor q = at::randn({n_head_kv * G, D}, opts(at::kBFloat16));
  const at::Tensor offset = at::tensor(c.offset, at::kLong).to(at::kCUDA);
  const at::Tensor length = at::tensor(c.length, at::kLong).to(at::kCUDA);
  const at::Tensor ref = ops::ref::decode_attention(q, c.k, c.v, c.offset, c.length, G);
  const at::Tensor base = ops::ref::decode_attention(q, c.k, c.v, c.offset, c.length, G, 0.0, at::kBFloat16);
  const int64_t sum = std::accumulate(c.length.begin(), c.length.end(), int64_t{0});
  for (int64_t total : {int64_t{0}, sum, sum + 777, int64_t{4 * 8000}}) {
    at::Tensor out = at::full({n_head_kv * G, D}, kNaN, opts(at::kBFloat16));
    ops::decode_attention(q, c.k, c.v, offset, length, /*max_len=*/8000, total, G, 0.0, 0, out);
    expect_close(out, ref, base, at::kBFloat16, "total_len=" + std::to_string(total));
  }
}

TEST_F(CudaKernels, DecodeAttentionGatherMatchesReference) {
  std::mt19937 rng(99);
  const int64_t n_head_kv = 3;
  for (at::ScalarType dt : kDtypes)
    for (int64_t D : {64, 96, 128, 256})
      for (int64_t G : {1, 3, 4, 8})
        for (int64_t n_tok : {1, 37, 1000, 32768}) {
          at::manual_seed(rng());
          RaggedCache c = make_cache(n_head_kv, n_tok, D, dt, rng);
          // Selections: count[h] distinct live rows in random order; the padding of each index row
          // points at a NaN row (the segment's last), so reading past count[h] fails.
          const int64_t S = n_tok + 3;
          at::Tensor index = at::empty({n_head_kv, S}, at::kInt);
          std::vector<int64_t> count;
          for (int64_t h = 0; h < n_head_kv; ++h) {
            count.push_back(std::uniform_int_distribution<int64_t>(1, c.length[h])(rng));
            std::vector<int32_t> rows(c.length[h]);
            std::iota(rows.begin(), rows.end(), 0);
            std::shuffle(rows.begin(), rows.end(), rng);
            rows.resize(count[h]);
            rows.resize(S, static_cast<int32_t>(c.capacity[h] - 1));
            std::copy(rows.begin(), rows.end(), index[h].data_ptr<int32_t>());
          }
          index = index.to(at::kCUDA);
          const int64_t H = n_head_kv * G;
          const at::Tensor q = at::randn({H, D}, opts(dt)) * 2;
          const at::Tensor ref = ops::ref::decode_attention_gather(q, c.k, c.v, c.offset, index, count, G);
          const at::Tensor base = ops::ref::decode_attention_gather(q, c.k, c.v, c.offset, index, count, G, 0.0, dt);
          for (int n_split : {0, 1, 4}) {
            const std::string what = "gather " + name(dt) + " D=" + std::to_string(D) + " G=" + std::to_string(G) +
                                     " n_tok=" + std::to_string(n_tok) + " n_split=" + std::to_string(n_split);
            at::Tensor out = at::full({H, D}, kNaN, opts(dt));
            ops::decode_attention_gather(q, c.k, c.v, c.offset, index, count, G, 0.0, n_split, out);
            expect_close(out, ref, base, dt, what);
          }
        }
}

TEST_F(CudaKernels, RmsNormMatchesReference) {
  struct Shape {
    int64_t rows, hidden;
  };
  // 4100: not a multiple of 8 (scalar path); 32768 rows: many blocks.
  const Shape shapes[] = {{1, 64}, {1, 4096}, {37, 4100}, {1000, 2048}, {32768, 256}};
  for (at::ScalarType dt : kDtypes)
    for (const Shape& s : shapes) {
      const std::string what = name(dt) + " rows=" + std::to_string(s.rows) + " hidden=" + std::to_string(s.hidden);
      // x as a view with a padded row stride.
      const at::Tensor x = (at::randn({s.rows, s.hidden + 8}, opts(dt)) * 3).narrow(1, 0, s.hidden);
      const at::Tensor w = 1 + 0.2 * at::randn({s.hidden}, opts(dt));
      const double eps = 1e-5;
      at::Tensor out = at::full({s.rows, s.hidden}, kNaN, opts(dt));
      ops::rms_norm(x, w, eps, out);
      expect_close(out, ops::ref::rms_norm(x, w, eps), ops::ref::rms_norm(x, w, eps, dt), dt, what);
    }
}

TEST_F(CudaKernels, RmsNormResidualMatchesReference) {
  // Gemma's sandwich norm with the next norm left pending (kernels/norm.h): out = residual +
  // rmsnorm(y; w_post), next_gx = w_next ⊙ out, next_sumsq = Σ out². Reference in fp32; the
  // baseline is the same formula in HF's dtype order. hidden 1000: not a multiple of the block;
  // 8192: the largest row (eight elements a thread).
  const double eps = 1e-6;
  for (at::ScalarType dt : kDtypes)
    for (int64_t hidden : {64, 1000, 3840, 8192})
      for (int64_t rows : {1, 3})
        for (bool w_fp32 : {false, true})
          for (bool next : {false, true}) {
            const std::string what = name(dt) + " hidden=" + std::to_string(hidden) + " rows=" + std::to_string(rows) +
                                     (w_fp32 ? " fp32 weights" : "") + (next ? " next" : "");
            const at::ScalarType wt = w_fp32 ? at::kFloat : dt;
            const at::Tensor y = (at::randn({rows, hidden}, opts(at::kFloat)) * 3).to(dt);
            const at::Tensor res = at::randn({rows, hidden}, opts(at::kFloat)).to(dt);
            const at::Tensor w_post = (1 + 0.2 * at::randn({hidden}, opts(at::kFloat))).to(wt);
            const at::Tensor w_next = next ? (1 + 0.2 * at::randn({hidden}, opts(at::kFloat))).to(wt) : at::Tensor();
            const auto [out, pending] = ops::rms_norm_residual(y, w_post, res, w_next, eps);
            const at::Tensor yn = y.to(at::kFloat) * at::rsqrt(y.to(at::kFloat).pow(2).mean(-1, true) + eps);
            const at::Tensor ref = res.to(at::kFloat) + yn * w_post.to(at::kFloat);
            const at::Tensor normed = w_fp32 ? (yn * w_post).to(dt) : w_post * yn.to(dt);
            const at::Tensor base = res + normed;
            expect_close(out, ref, base, dt, what + " out");
            if (!next) {
              EXPECT_FALSE(pending.pending()) << what;
              continue;
            }
            ASSERT_TRUE(pending.pending()) << what;
            const at::Tensor ref_gx = w_next.to(at::kFloat) * ref;
            const at::Tensor base_gx = (w_next.to(at::kFloat) * base.to(at::kFloat)).to(dt);
            expect_close(pending.x, ref_gx, base_gx, dt, what + " next_gx");
            // Σ out² of the rows the kernel wrote, to fp32 summation order.
            const at::Tensor own = out.to(at::kFloat).pow(2).sum(-1);
            EXPECT_TRUE(at::allclose(pending.sumsq.view({rows}), own, 1e-4, 1e-3)) << what << " next_sumsq";
          }
  const at::Tensor wide = at::randn({1, 8200}, opts(at::kBFloat16));
  EXPECT_THROW(ops::rms_norm_residual(wide, at::ones({8200}, opts(at::kBFloat16)), wide, {}, eps),
               std::invalid_argument);  // above kRmsNormResidualMaxHidden
}

/// After one decode append into c (every head h's row offset[h] + length[h], c's lengths being those
/// before the append): those rows hold exactly k[h], v[h] and `position`; every other row of the
/// caches is as before (k_before, v_before, NaN padding included) and every other position -1.
void expect_appended(const RaggedCache& c, const at::Tensor& k_before, const at::Tensor& v_before,
                     const at::Tensor& pos, const at::Tensor& k, const at::Tensor& v, int64_t position,
                     const std::string& what) {
  at::Tensor written = at::zeros({c.k.size(0)}, at::TensorOptions().device(c.k.device()).dtype(at::kBool));
  for (size_t h = 0; h < c.offset.size(); ++h) {
    const int64_t row = c.offset[h] + c.length[h], i = static_cast<int64_t>(h);
    written[row] = true;
    EXPECT_TRUE(at::equal(c.k[row], k[i])) << what << " k cache head " << h;
    EXPECT_TRUE(at::equal(c.v[row], v[i])) << what << " v cache head " << h;
    EXPECT_EQ(pos[row].item<int64_t>(), position) << what << " pos head " << h;
  }
  const at::Tensor keep = written.logical_not();
  EXPECT_TRUE(at::equal(c.k.index({keep}).isnan(), k_before.index({keep}).isnan())) << what;
  EXPECT_TRUE(at::equal(at::nan_to_num(c.k.index({keep})), at::nan_to_num(k_before.index({keep})))) << what;
  EXPECT_TRUE(at::equal(at::nan_to_num(c.v.index({keep})), at::nan_to_num(v_before.index({keep})))) << what;
  EXPECT_TRUE(pos.index({keep}).eq(-1).all().item<bool>()) << what;
}

TEST_F(CudaKernels, RopeAppendMatchesReference) {
  std::mt19937 rng(5);
  for (at::ScalarType dt : kDtypes)
    for (int64_t D : {64, 128})
      for (int64_t G : {1, 3, 4, 8})
        for (RopeLayout layout : {RopeLayout::kRotateHalf, RopeLayout::kAdjacentPairs})
          for (int64_t position : {0, 37, 131071}) {
            const std::string what = name(dt) + " D=" + std::to_string(D) + " G=" + std::to_string(G) +
                                     (layout == RopeLayout::kRotateHalf ? " rotate-half" : " pairs") +
                                     " pos=" + std::to_string(position);
            at::manual_seed(rng());
            const int64_t n_head_kv = 3, H = n_head_kv * G;
            RaggedCache c = make_cache(n_head_kv, 50, D, dt, rng);
            at::Tensor pos = at::full({c.k.size(0)}, -1, opts(at::kLong));
            const at::Tensor k_before = c.k.clone(), v_before = c.v.clone();
            // cos/sin as HF: fp32 angles, cast to the dtype.
            at::Tensor inv_freq = 1.0 / at::pow(10000.0, at::arange(0, D, 2, opts(at::kFloat)) / D);
            at::Tensor angles = inv_freq * static_cast<double>(position);
            const at::Tensor cos = angles.cos().to(dt), sin = angles.sin().to(dt);
            // q, k, v as views into one fused projection row, as the engine has them.
            at::Tensor qkv = at::randn({(H + 2 * n_head_kv) * D}, opts(dt));
            at::Tensor q = qkv.narrow(0, 0, H * D).view({H, D});
            at::Tensor k = qkv.narrow(0, H * D, n_head_kv * D).view({n_head_kv, D});
            at::Tensor v = qkv.narrow(0, (H + n_head_kv) * D, n_head_kv * D).view({n_head_kv, D});
            const at::Tensor q0 = q.clone(), k0 = k.clone();
            ops::rope_append(q, k, v, cos, sin, layout, c.k, c.v, pos, c.offset, c.length, position);
            expect_close(q, ops::ref::rope(q0, cos, sin, layout), ops::ref::rope(q0, cos, sin, layout, dt), dt,
                         what + " q");
            expect_close(k, ops::ref::rope(k0, cos, sin, layout), ops::ref::rope(k0, cos, sin, layout, dt), dt,
                         what + " k");
            expect_appended(c, k_before, v_before, pos, k, v, position, what);
          }
}

TEST_F(CudaKernels, RopeAppendNormsHeadsAndRotatesPartially) {
  // The family features of rope_append (kernels/rope.h): per-head q/k RMSNorm (Qwen3: dtype
  // weights; Gemma 3: fp32 1 + w) before RoPE, partial rotary (Phi-3: the first rotary_dim
  // channels rotate, the rest pass), head_dim 64 .. 256, one to eight query heads a KV head.
  // Reference: fp32 norm then fp32 rotation; baseline: HF's dtype order.
  std::mt19937 rng(17);
  const double eps = 1e-6;
  for (at::ScalarType dt : kDtypes)
    for (int64_t D : {64, 96, 128, 256})
      for (int64_t G : {1, 2, 8})
        for (int norm : {0, 1, 2})  // none, dtype weights, fp32 weights
          for (bool partial : {false, true})
            for (RopeLayout layout : {RopeLayout::kRotateHalf, RopeLayout::kAdjacentPairs}) {
              if (partial && D == 96) continue;  // 48 rotary channels: fine, but one partial case a size is enough
              const int64_t R = partial ? D / 2 : D, n_head_kv = 2, H = n_head_kv * G, position = 4099;
              const std::string what = name(dt) + " D=" + std::to_string(D) + " G=" + std::to_string(G) +
                                       " norm=" + std::to_string(norm) + (partial ? " partial" : "") +
                                       (layout == RopeLayout::kRotateHalf ? " rotate-half" : " pairs");
              at::manual_seed(rng());
              RaggedCache c = make_cache(n_head_kv, 30, D, dt, rng);
              at::Tensor pos = at::full({c.k.size(0)}, -1, opts(at::kLong));
              const at::Tensor k_before = c.k.clone(), v_before = c.v.clone();
              const at::Tensor inv_freq = 1.0 / at::pow(10000.0, at::arange(0, R, 2, opts(at::kFloat)) / R);
              const at::Tensor angles = inv_freq * static_cast<double>(position);
              const at::Tensor cos = angles.cos().to(dt), sin = angles.sin().to(dt);
              at::Tensor qkv = (at::randn({(H + 2 * n_head_kv) * D}, opts(at::kFloat)) * 2).to(dt);
              at::Tensor q = qkv.narrow(0, 0, H * D).view({H, D});
              at::Tensor k = qkv.narrow(0, H * D, n_head_kv * D).view({n_head_kv, D});
              at::Tensor v = qkv.narrow(0, (H + n_head_kv) * D, n_head_kv * D).view({n_head_kv, D});
              const at::Tensor q0 = q.clone(), k0 = k.clone();
              ops::QkvFeatures f;
              if (norm) {
                const at::ScalarType wt = norm == 2 ? at::kFloat : dt;
                f.q_norm = (1 + 0.3 * at::randn({D}, opts(at::kFloat))).to(wt);
                f.k_norm = (1 + 0.3 * at::randn({D}, opts(at::kFloat))).to(wt);
                f.norm_eps = eps;
              }
              const at::Tensor offset = at::tensor(c.offset, at::kLong).to(at::kCUDA);
              const at::Tensor length = at::tensor(c.length, at::kLong).to(at::kCUDA);
              ops::rope_append(q, k, v, cos, sin, layout, c.k, c.v, pos, offset, length,
                               at::full({1}, position, opts(at::kLong)), f);
              // x normalised (fp32 ref / dtype base), then its first R channels rotated.
              auto expect = [&](const at::Tensor& got, const at::Tensor& x0, const at::Tensor& w, const char* which) {
                const at::Tensor xf = x0.to(at::kFloat);
                const at::Tensor xn = norm ? xf * at::rsqrt(xf.pow(2).mean(-1, true) + eps) : xf;
                const at::Tensor ref_n = norm ? xn * w.to(at::kFloat) : xn;
                const at::Tensor base_n = !norm ? x0 : norm == 2 ? (xn * w).to(dt) : w * xn.to(dt);
                auto rotate = [&](const at::Tensor& x, at::ScalarType compute) {
                  const at::Tensor r = ops::ref::rope(x.narrow(-1, 0, R), cos, sin, layout, compute);
                  return R == D ? r : at::cat({r, x.narrow(-1, R, D - R).to(r.scalar_type())}, -1);
                };
                expect_close(got, rotate(ref_n, at::kFloat), rotate(base_n, dt), dt, what + " " + which, 2);
              };
              expect(q, q0, f.q_norm, "q");
              expect(k, k0, f.k_norm, "k");
              expect_appended(c, k_before, v_before, pos, k, v, position, what);
              const at::Tensor length_after = length.cpu();
              for (int64_t h = 0; h < n_head_kv; ++h)
                EXPECT_EQ(length_after[h].item<int64_t>(), c.length[h] + 1) << what << " length head " << h;
            }
}

TEST_F(CudaKernels, QkvRopeAppendMatchesTheProjectionThenRope) {
  // The QKV projection with RoPE and the cache append in its epilogue (one launch) against the fp32
  // reference rope(x·Wᵀ + b); LibTorch in the dtype (at::linear, then rope in the dtype) is the
  // baseline. m sequences of n_head_kv KV heads each (a decode batch's cache of m x n_head_kv
  // heads), ragged and NaN-padded: the appended rows must hold exactly the returned k and v, the
  // lengths advance by one, the tickets come back zero, and nothing else in the caches moves.
  // m = 1 takes the fused GEMV (every dtype), batches the two-launch path.
  std::mt19937 rng(11);
  struct Shape {
    int64_t m, n_head_kv, G, D, hidden;
  };
  const Shape shapes[] = {{1, 3, 4, 128, 256}, {1, 2, 3, 64, 4096}, {3, 2, 1, 64, 256},
                          {8, 1, 8, 128, 512}, {5, 3, 8, 128, 256}, {9, 1, 2, 64, 256}};
  for (at::ScalarType dt : kDtypes)
    for (const Shape& sh : shapes)
      for (RopeLayout layout : {RopeLayout::kRotateHalf, RopeLayout::kAdjacentPairs})
        for (int bias : {0, 1})
          for (bool pending : {false, true}) {  // the attention norm left pending (ops::NormedRows)
            const int64_t m = sh.m, Hkv = sh.n_head_kv, H = Hkv * sh.G, D = sh.D, n = (H + 2 * Hkv) * D,
                          position = 4097;
            const std::string what = name(dt) + " m=" + std::to_string(m) + " Hkv=" + std::to_string(Hkv) +
                                     " G=" + std::to_string(sh.G) + " D=" + std::to_string(D) +
                                     " hidden=" + std::to_string(sh.hidden) +
                                     (layout == RopeLayout::kRotateHalf ? " rotate-half" : " pairs") +
                                     (bias ? " bias" : "") + (pending ? " pending norm" : "");
            at::manual_seed(rng());
            const LinearCase c = pending ? pending_case(dt, m, n, sh.hidden, bias, sh.hidden / 8)
                                         : linear_case(dt, m, n, sh.hidden, bias);
            RaggedCache cache = make_cache(m * Hkv, 40, D, dt, rng);
            at::Tensor pos = at::full({cache.k.size(0)}, -1, opts(at::kLong));
            const at::Tensor k_before = cache.k.clone(), v_before = cache.v.clone();
            const at::Tensor offset = at::tensor(cache.offset, at::kLong).to(at::kCUDA);
            const at::Tensor length = at::tensor(cache.length, at::kLong).to(at::kCUDA);
            const at::Tensor tickets = at::zeros({Hkv}, opts(at::kLong));
            const at::Tensor position_dev = at::full({1}, position, opts(at::kLong));
            at::Tensor inv_freq = 1.0 / at::pow(10000.0, at::arange(0, D, 2, opts(at::kFloat)) / D);
            at::Tensor angles = inv_freq * static_cast<double>(position);
            const at::Tensor cos = angles.cos().to(dt), sin = angles.sin().to(dt);
            const auto [q, k, v] =
                ops::qkv_rope_append(c.rows(), c.w, bias ? c.b : at::Tensor(), H, Hkv, cos, sin, layout, cache.k,
                                     cache.v, pos, offset, length, tickets, position_dev);
            // References: heads of sequence b at b * H .. (q) and b * Hkv .. (k, v).
            auto heads = [&](const at::Tensor& y, int64_t from, int64_t count) {
              return y.narrow(1, from * D, count * D).reshape({m * count, D});
            };
            const at::Tensor ref_q = ops::ref::rope(heads(c.ref, 0, H), cos, sin, layout);
            const at::Tensor ref_k = ops::ref::rope(heads(c.ref, H, Hkv), cos, sin, layout);
            const at::Tensor base_q = ops::ref::rope(heads(c.base, 0, H), cos, sin, layout, dt);
            const at::Tensor base_k = ops::ref::rope(heads(c.base, H, Hkv), cos, sin, layout, dt);
            expect_close(q, ref_q, base_q, dt, what + " q");
            expect_close(k, ref_k, base_k, dt, what + " k");
            expect_close(v, heads(c.ref, H + Hkv, Hkv), heads(c.base, H + Hkv, Hkv), dt, what + " v");
            expect_appended(cache, k_before, v_before, pos, k, v, position, what);
            const at::Tensor length_after = length.cpu();
            for (int64_t i = 0; i < m * Hkv; ++i)
              EXPECT_EQ(length_after[i].item<int64_t>(), cache.length[i] + 1) << what << " length head " << i;
            EXPECT_TRUE(tickets.eq(0).all().item<bool>()) << what << ": tickets left non-zero";
          }
  // Bad operands are refused by name.
  const LinearCase c = linear_case(at::kBFloat16, 1, 6 * 64, 128, 0);
  RaggedCache cache = make_cache(1, 8, 64, at::kBFloat16, rng);
  const at::Tensor meta = at::zeros({2}, opts(at::kLong)), tickets = at::zeros({1}, opts(at::kLong));
  const at::Tensor cs = at::ones({32}, opts(at::kBFloat16));
  EXPECT_THROW(ops::qkv_rope_append(c.x, c.w, {}, 5, 1, cs, cs, RopeLayout::kRotateHalf, cache.k, cache.v, {},
                                    meta.narrow(0, 0, 1), meta.narrow(0, 1, 1), tickets, meta.narrow(0, 0, 1)),
               std::invalid_argument);  // 7 heads of rows for 6 of W
  EXPECT_THROW(
      ops::qkv_rope_append(c.x, c.w, {}, 4, 1, cs, cs, RopeLayout::kRotateHalf, cache.k, cache.v, {},
                           meta.narrow(0, 0, 1), meta.narrow(0, 1, 1), tickets.to(at::kInt), meta.narrow(0, 0, 1)),
      std::invalid_argument);  // int32 tickets
  EXPECT_THROW(
      ops::qkv_rope_append(c.x, c.w, {}, 4, 1, cs.narrow(0, 0, 16), cs, RopeLayout::kRotateHalf, cache.k, cache.v, {},
                           meta.narrow(0, 0, 1), meta.narrow(0, 1, 1), tickets, meta.narrow(0, 0, 1)),
      std::invalid_argument);  // cos of 16 for head_dim 64
}

TEST_F(CudaKernels, SiluMulMatchesReference) {
  struct Shape {
    int64_t rows, inter;
  };
  // 100: not a multiple of 8 (scalar path).
  const Shape shapes[] = {{1, 64}, {1, 14336}, {37, 100}, {1000, 1408}, {32768, 128}};
  for (at::ScalarType dt : kDtypes)
    for (const Shape& s : shapes) {
      const std::string what = name(dt) + " rows=" + std::to_string(s.rows) + " inter=" + std::to_string(s.inter);
      // gate_up as a view with a padded row stride; values spread over silu's curved range.
      const at::Tensor gu = (at::randn({s.rows, 2 * s.inter + 16}, opts(dt)) * 4).narrow(1, 0, 2 * s.inter);
      at::Tensor out = at::full({s.rows, s.inter}, kNaN, opts(dt));
      ops::silu_mul(gu, out);
      expect_close(out, ops::ref::silu_mul(gu), ops::ref::silu_mul(gu, dt), dt, what);
    }
}

TEST_F(CudaKernels, LinearRowMatchesReference) {
  // The decode projections' GEMV against x·Wᵀ in fp32; LibTorch's at::linear in the dtype is the
  // baseline. m = 1: the CUDA-core GEMV; m = 2, 3, 8 (a batch's rows, with a bias or the residual
  // stream): the tensor-core GEMV for bf16 / fp16 (n = 37: a partial 16-row tile; k = 128, 4096,
  // 14336: one and several 128-value chunks per warp; k = 64: half a chunk), cuBLAS for fp32;
  // m = 9: cuBLAS.
  // k = 100 (bf16/fp16: 200 bytes, not a multiple of 16) takes the at::linear fallback.
  struct Shape {
    int64_t n, k;
  };
  const Shape shapes[] = {{1, 64}, {37, 128}, {1000, 4096}, {4096, 14336}, {32768, 256}, {5, 100}};
  for (at::ScalarType dt : kDtypes)
    for (const Shape& s : shapes)
      for (int64_t m : {1, 2, 3, 8, 9})
        for (int bias : {0, 1, 2})  // none, [n], [m, n] (the residual stream)
          for (bool fp32_out : {false, true}) {
            if (m == 1 && bias == 2) continue;
            const LinearCase c = linear_case(dt, m, s.n, s.k, bias);
            const at::Tensor got = ops::linear_row(c.x, c.w, c.b, fp32_out);
            ASSERT_EQ(got.scalar_type(), fp32_out ? at::kFloat : dt);
            // An fp32 output skips the final rounding, so compare it with the fp32-output baseline.
            expect_close(got, c.ref, fp32_out ? c.base.to(at::kFloat) : c.base, fp32_out ? at::kFloat : dt,
                         "linear_row " + name(dt) + " m=" + std::to_string(m) + " n=" + std::to_string(s.n) +
                             " k=" + std::to_string(s.k) +
                             (bias == 1   ? " bias"
                              : bias == 2 ? " residual"
                                          : "") +
                             (fp32_out ? " fp32-out" : ""));
          }
}

TEST_F(CudaKernels, ProjectionsApplyAPendingRmsNorm) {
  // The decode step's RMSNorm folded into the projection that consumes it (ops::NormedRows): x =
  // g ⊙ r and the partial sums of r², against the fp32 reference norm(r)·Wᵀ (+ b); LibTorch's
  // HF-order norm in the dtype, then at::linear, is the baseline. m = 1: CUDA-core GEMV (parts
  // k / 8: float4 loads; 7: scalar loads); 2, 3, 8: tensor cores, the partial sums staged by
  // cp.async (fp32 batches: cuBLAS on the normalised rows); 9: the LibTorch fallback.
  struct Shape {
    int64_t n, k;
  };
  const Shape shapes[] = {{37, 128}, {1000, 4096}, {4096, 14336}};
  for (at::ScalarType dt : kDtypes)
    for (const Shape& s : shapes)
      for (int64_t m : {1, 2, 3, 8, 9})
        for (int64_t parts : {s.k / 8, int64_t{7}}) {
          const std::string what = name(dt) + " m=" + std::to_string(m) + " n=" + std::to_string(s.n) +
                                   " k=" + std::to_string(s.k) + " parts=" + std::to_string(parts);
          for (int bias : {0, 1})
            for (bool fp32_out : {false, true}) {
              const LinearCase c = pending_case(dt, m, s.n, s.k, bias, parts);
              const at::Tensor got = ops::linear_row(c.rows(), c.w, c.b, fp32_out);
              expect_close(got, c.ref, fp32_out ? c.base.to(at::kFloat) : c.base, fp32_out ? at::kFloat : dt,
                           "linear_row " + what + (bias ? " bias" : "") + (fp32_out ? " fp32-out" : ""));
            }
          const LinearCase c = pending_case(dt, m, 2 * s.n, s.k, 0, parts);  // gate / up: n rows each
          expect_close(ops::linear_row_swiglu(c.rows(), c.w), ops::ref::silu_mul(c.ref), ops::ref::silu_mul(c.base, dt),
                       dt, "linear_row_swiglu " + what);
        }
  // A pending norm's sums must be fp32 [m, parts].
  LinearCase c = pending_case(at::kBFloat16, 2, 37, 128, 0, 16);
  EXPECT_THROW(ops::linear_row(ops::NormedRows(c.x, c.sumsq.to(at::kBFloat16), kNormEps), c.w), std::invalid_argument);
  EXPECT_THROW(ops::linear_row(ops::NormedRows(c.x, c.sumsq.narrow(0, 0, 1), kNormEps), c.w), std::invalid_argument);
}

TEST_F(CudaKernels, LinearRowNormOutLeavesTheNextRmsNormPending) {
  // The o / down projection adding the residual stream, which also leaves the next RMSNorm pending:
  // y against the fp32 reference x·Wᵀ + b, g ⊙ y exactly as LibTorch rounds it, the partial sums
  // adding up to Σ y² of each row, and the projection that consumes them (gate/up with its SwiGLU)
  // against the fp32 norm of the y it was given. m = 1: CUDA-core GEMV (n = 37: a partial block of
  // 8 rows); 2, 8: tensor cores (a partial 16-row tile); fp32 batches and m = 9: LibTorch. The
  // fixture's seed matters here: with n = 37 the consumer (k = 37) takes LibTorch's path, and over
  // 600 outputs of 37 terms one rounding flip of a gate near a bf16 boundary can put its max error
  // past twice LibTorch's (seen once in 60 unseeded runs, 3.4x).
  struct Shape {
    int64_t n, k;
  };
  const Shape shapes[] = {{37, 128}, {4096, 14336}, {1000, 256}};
  for (at::ScalarType dt : kDtypes)
    for (const Shape& s : shapes)
      for (int64_t m : {1, 2, 8, 9}) {
        const std::string what =
            name(dt) + " m=" + std::to_string(m) + " n=" + std::to_string(s.n) + " k=" + std::to_string(s.k);
        const LinearCase c = linear_case(dt, m, s.n, s.k, m == 1 ? 1 : 2);
        const at::Tensor g = (at::randn({s.n}, opts(at::kFloat)) * 0.5 + 1).to(dt);
        const auto [y, next] = ops::linear_row_norm_out(c.x, c.w, c.b, g, kNormEps);
        expect_close(y, c.ref, c.base, dt, "y " + what);
        ASSERT_TRUE(next.pending()) << what;
        EXPECT_TRUE(at::equal(next.x, y * g)) << what << ": g ⊙ y";
        const at::Tensor sum = next.sumsq.sum(1), want = y.to(at::kFloat).pow(2).sum(1);
        EXPECT_LE((sum - want).abs().max().item<double>(), 1e-5 * want.abs().max().item<double>()) << what << ": Σ y²";
        const int64_t inter = 300;
        const at::Tensor w_gu = (at::randn({2 * inter, s.n}, opts(at::kFloat)) / std::sqrt(double(s.n))).to(dt);
        const at::Tensor ref =
            ops::ref::silu_mul(at::matmul(ops::ref::rms_norm(y, g, kNormEps), w_gu.to(at::kFloat).t()));
        const at::Tensor base = ops::ref::silu_mul(at::linear(ops::ref::rms_norm(y, g, kNormEps, dt).to(dt), w_gu), dt);
        expect_close(ops::linear_row_swiglu(next, w_gu), ref, base, dt, "swiglu of the pending norm " + what);
      }
  const LinearCase c = linear_case(at::kBFloat16, 2, 37, 64, 2);
  EXPECT_THROW(ops::linear_row_norm_out(c.x, c.w, c.b, at::ones({36}, opts(at::kBFloat16)), kNormEps),
               std::invalid_argument);  // g of 36 for 37 outputs
}

TEST_F(CudaKernels, LinearRowSplitCutsTheOutputColumnsIntoBlocks) {
  // The fused QKV projection of a decode batch: one product whose columns [0, s0), [s0, s1),
  // [s1, n) come back as three contiguous [m, width] blocks (q, k, v). Each block must equal its
  // columns of the unsplit reference; empty segments are allowed. m = 1 and 8: the GEMV kernels
  // (8 rows of fp32: cuBLAS), m = 9: cuBLAS for every dtype.
  struct Split {
    int64_t n, k, s0, s1;
  };
  const Split splits[] = {{6144, 4096, 4096, 5120}, {37, 128, 12, 18}, {37, 64, 0, 37}, {48, 64, 16, 16}};
  for (at::ScalarType dt : kDtypes)
    for (const Split& s : splits)
      for (int64_t m : {1, 8, 9}) {
        const LinearCase c = linear_case(dt, m, s.n, s.k, /*bias=*/1);
        const auto got = ops::linear_row_split(c.x, c.w, c.b, s.s0, s.s1);
        const int64_t first[] = {0, s.s0, s.s1}, end[] = {s.s0, s.s1, s.n};
        for (int i = 0; i < 3; ++i) {
          const std::string what = "linear_row_split " + name(dt) + " m=" + std::to_string(m) +
                                   " n=" + std::to_string(s.n) + " segment " + std::to_string(i);
          ASSERT_EQ(got[i].sizes(), at::IntArrayRef({m, end[i] - first[i]})) << what;
          ASSERT_TRUE(got[i].is_contiguous()) << what;
          if (end[i] == first[i]) continue;
          expect_close(got[i], c.ref.narrow(1, first[i], end[i] - first[i]),
                       c.base.narrow(1, first[i], end[i] - first[i]), dt, what);
        }
      }
  const LinearCase c = linear_case(at::kBFloat16, 2, 37, 64, 0);
  EXPECT_THROW(ops::linear_row_split(c.x, c.w, c.b, 20, 10), std::invalid_argument);  // s0 > s1
  EXPECT_THROW(ops::linear_row_split(c.x, c.w, c.b, 0, 38), std::invalid_argument);   // s1 > n
}

TEST_F(CudaKernels, LinearRowSwigluMatchesSiluOfTheGateTimesTheUp) {
  // The MLP's gate/up projection with its activation: silu(x·W_gateᵀ) ⊙ (x·W_upᵀ) against the fp32
  // reference of the same formula; LibTorch in the dtype (at::linear, then silu·mul) is the
  // baseline. m = 1: CUDA-core GEMV; 2, 8 (bf16 / fp16): tensor cores (inter 3000: 375 tiles,
  // 4-warp blocks on a 132-SM GPU); fp32 batches and m = 9: at::linear + the silu_mul kernel.
  struct Shape {
    int64_t inter, k;
  };
  const Shape shapes[] = {{37, 128}, {3000, 4096}, {4500, 256}};
  for (at::ScalarType dt : kDtypes)
    for (const Shape& s : shapes)
      for (int64_t m : {1, 2, 8, 9}) {
        const LinearCase c = linear_case(dt, m, 2 * s.inter, s.k, 0);
        const at::Tensor got = ops::linear_row_swiglu(c.x, c.w);
        ASSERT_EQ(got.scalar_type(), dt);
        expect_close(got, ops::ref::silu_mul(c.ref), ops::ref::silu_mul(c.base, dt), dt,
                     "linear_row_swiglu " + name(dt) + " m=" + std::to_string(m) + " inter=" + std::to_string(s.inter) +
                         " k=" + std::to_string(s.k));
      }
  const LinearCase c = linear_case(at::kBFloat16, 2, 37, 64, 0);  // 37 rows: no gate/up halves
  EXPECT_THROW(ops::linear_row_swiglu(c.x, c.w), std::invalid_argument);
}

#ifdef KVSCOPE_HAVE_CUDA_KERNELS
TEST_F(CudaKernels, GemvKernelFusesTheSwigluActivation) {
  // The kernel API (linear_row_swiglu would fall back to two launches unnoticed): W = [gate; up],
  // y [m, inter] = silu(gate) * up, into NaN-poisoned outputs, with and without a bias.
  namespace kk = kvscope::kernels;
  for (at::ScalarType dt : kDtypes)
    for (int64_t m : {1, 2, 8})
      for (int64_t inter : {37, 3000})
        for (int bias : {0, 1}) {
          if (dt == at::kFloat && m > 1) continue;  // tensor cores: bf16 / fp16
          const LinearCase c = linear_case(dt, m, 2 * inter, 4096, bias);
          at::Tensor y = at::full({m, inter}, kNaN, opts(dt));
          kk::GemvArgs a;
          a.dtype = dt == at::kHalf    ? kk::DType::kFloat16
                    : dt == at::kFloat ? kk::DType::kFloat32
                                       : kk::DType::kBFloat16;
          a.m = m;
          a.n = 2 * inter;
          a.k = 4096;
          a.w = c.w.data_ptr();
          a.x = c.x.data_ptr();
          a.b = c.b.defined() ? c.b.data_ptr() : nullptr;
          a.y = y.data_ptr();
          a.epilogue = kk::GemvEpilogue::kSwiGlu;
          ASSERT_TRUE(kk::gemv_supported(a));
          ASSERT_EQ(kk::gemv(a, nullptr), cudaSuccess);
          expect_close(y, ops::ref::silu_mul(c.ref), ops::ref::silu_mul(c.base, dt), dt,
                       "gemv swiglu " + name(dt) + " m=" + std::to_string(m) + " inter=" + std::to_string(inter) +
                           (bias ? " bias" : ""));
        }
  kk::GemvArgs a;
  a.n = 34;
  a.k = 64;
  a.w = a.x = a.y = reinterpret_cast<void*>(256);
  a.epilogue = kk::GemvEpilogue::kSwiGlu;
  EXPECT_TRUE(kk::gemv_supported(a));
  a.n = 33;  // no gate/up halves
  EXPECT_FALSE(kk::gemv_supported(a));
  a.n = 34;
  a.y_fp32 = true;  // the activation's output is the dtype's
  EXPECT_FALSE(kk::gemv_supported(a));
  a.y_fp32 = false;
  a.y_split[1] = 10;  // no column segments
  EXPECT_FALSE(kk::gemv_supported(a));
  // The RoPE + append epilogue: one row, the QKV shape and its column segments, head_dim % 16 == 0,
  // every operand present.
  a = kk::GemvArgs{};
  a.k = 64;
  a.w = a.x = a.y = reinterpret_cast<void*>(256);
  a.epilogue = kk::GemvEpilogue::kRopeAppend;
  kk::GemvRopeAppend& r = a.rope;
  r.n_head = 4;
  r.n_head_kv = 2;
  r.head_dim = 64;
  r.cos = r.sin = r.k_cache = r.v_cache = reinterpret_cast<void*>(256);
  r.offset = r.length = reinterpret_cast<int64_t*>(256);
  r.tickets = reinterpret_cast<unsigned long long*>(256);
  a.n = 8 * 64;
  a.y_split[0] = 4 * 64;
  a.y_split[1] = 6 * 64;
  EXPECT_TRUE(kk::gemv_supported(a));
  a.m = 2;  // batch-1 only
  EXPECT_FALSE(kk::gemv_supported(a));
  a.m = 1;
  a.y_split[1] = 5 * 64;  // k and v segments not per the heads
  EXPECT_FALSE(kk::gemv_supported(a));
  a.y_split[1] = 6 * 64;
  r.head_dim = 24;  // not a multiple of 16 (the tiles' pairs would straddle heads)
  a.n = 8 * 24;
  a.y_split[0] = 4 * 24;
  a.y_split[1] = 6 * 24;
  EXPECT_FALSE(kk::gemv_supported(a));
  r.head_dim = 64;
  a.n = 8 * 64;
  a.y_split[0] = 4 * 64;
  a.y_split[1] = 6 * 64;
  r.tickets = nullptr;
  EXPECT_FALSE(kk::gemv_supported(a));
}

TEST_F(CudaKernels, GemvKernelTakesBatchRowsOnTensorCores) {
  // The kernel API itself (linear_row would fall back to cuBLAS unnoticed): 2..8 rows of bf16 /
  // fp16 are the tensor-core kernel's, into NaN-poisoned outputs, with a shared or per-row bias.
  namespace kk = kvscope::kernels;
  for (at::ScalarType dt : {at::kBFloat16, at::kHalf})
    for (int64_t m : {2, 5, 8})
      for (int64_t n : {37, 4096, 6000})  // 6000: 375 tiles, 4-warp blocks on a 132-SM GPU
        for (int64_t k : {64, 4096})
          for (int bias : {0, 1, 2}) {
            const LinearCase c = linear_case(dt, m, n, k, bias);
            // Unsplit, and in three column segments (y_split: [m, width] blocks one after the other).
            const bool split = bias == 1;
            const int64_t s0 = split ? n / 3 : 0, s1 = split ? n / 2 : 0;
            at::Tensor y = at::full({m * n}, kNaN, opts(dt));
            kk::GemvArgs a;
            a.dtype = dt == at::kHalf ? kk::DType::kFloat16 : kk::DType::kBFloat16;
            a.m = m;
            a.n = n;
            a.k = k;
            a.w = c.w.data_ptr();
            a.x = c.x.data_ptr();
            a.b = c.b.defined() ? c.b.data_ptr() : nullptr;
            a.b_stride = bias == 2 ? n : 0;
            a.y = y.data_ptr();
            a.y_split[0] = s0;
            a.y_split[1] = s1;
            ASSERT_TRUE(kk::gemv_supported(a));
            ASSERT_EQ(kk::gemv(a, nullptr), cudaSuccess);  // LibTorch's default stream: the legacy stream
            const at::Tensor got =
                at::cat({y.narrow(0, 0, m * s0).view({m, s0}), y.narrow(0, m * s0, m * (s1 - s0)).view({m, s1 - s0}),
                         y.narrow(0, m * s1, m * (n - s1)).view({m, n - s1})},
                        1);
            expect_close(got, c.ref, c.base, dt,
                         "gemv " + name(dt) + " m=" + std::to_string(m) + " n=" + std::to_string(n) +
                             " k=" + std::to_string(k) +
                             (bias == 1   ? " bias, split output"
                              : bias == 2 ? " per-row bias"
                                          : ""));
          }
  kk::GemvArgs a;
  a.n = 16;
  a.k = 64;
  a.w = a.x = a.y = reinterpret_cast<void*>(256);
  a.m = 9;  // more rows than the mma's 8 columns
  EXPECT_FALSE(kk::gemv_supported(a));
  EXPECT_EQ(kk::gemv(a, nullptr), cudaErrorInvalidValue);
  a.m = 0;
  EXPECT_FALSE(kk::gemv_supported(a));
  a.m = 2;
  a.dtype = kk::DType::kFloat32;  // tensor cores take bf16 / fp16 only
  EXPECT_FALSE(kk::gemv_supported(a));
  a.m = 1;
  EXPECT_TRUE(kk::gemv_supported(a));
  a.y_split[0] = 10;  // splits out of order
  a.y_split[1] = 5;
  EXPECT_FALSE(kk::gemv_supported(a));
  a.y_split[0] = 0;
  a.y_split[1] = 17;  // past n
  EXPECT_FALSE(kk::gemv_supported(a));
  // The folded norms (norm_sumsq, next_norm_g).
  a.y_split[1] = 0;
  a.dtype = kk::DType::kBFloat16;
  a.m = 8;
  a.norm_sumsq = reinterpret_cast<const float*>(256);
  a.norm_parts = kk::kGemvMaxNormParts;
  EXPECT_TRUE(kk::gemv_supported(a));
  a.norm_parts = kk::kGemvMaxNormParts + 1;  // more partial sums than a tile stages
  EXPECT_FALSE(kk::gemv_supported(a));
  a.norm_parts = 0;
  EXPECT_FALSE(kk::gemv_supported(a));
  a.norm_sumsq = nullptr;
  a.next_norm_g = a.next_norm_gx = reinterpret_cast<void*>(256);
  EXPECT_FALSE(kk::gemv_supported(a));  // no sums output
  a.next_norm_sumsq = reinterpret_cast<float*>(256);
  EXPECT_TRUE(kk::gemv_supported(a));
  a.y_fp32 = true;  // the pending norm's rows are dtype outputs
  EXPECT_FALSE(kk::gemv_supported(a));
  a.y_fp32 = false;
  a.epilogue = kk::GemvEpilogue::kSwiGlu;  // plain outputs only
  EXPECT_FALSE(kk::gemv_supported(a));
  EXPECT_EQ(kk::gemv_norm_parts(1, 4096), 512);
  EXPECT_EQ(kk::gemv_norm_parts(8, 4100), 257);
}
#endif

// Eviction while decoding at its cap (kernels/evict.h): every head drops at::argmin's entry (ties:
// the first; a NaN: the smallest) and the rows after it move down one, K, V and positions moved
// bit for bit, rows past n untouched, the device lengths one lower. Reference: the same shift by
// indexing on the CPU. Shapes cover one row, chunk boundaries (512 / 256 / 128 rows a chunk) and
// a drop at either end.
TEST_F(CudaKernels, DropLowestShiftsEveryHeadPastItsArgmin) {
  std::mt19937 rng(5);
  int cases = 0;
  for (at::ScalarType dt : {at::kFloat, at::kBFloat16})
    for (int64_t D : {64, 96, 128, 256})
      for (auto [n, cap] : std::vector<std::pair<int64_t, int64_t>>{{1, 1}, {5, 8}, {257, 300}, {1025, 1025}}) {
        SCOPED_TRACE(name(dt) + " D " + std::to_string(D) + " n " + std::to_string(n) + " cap " + std::to_string(cap));
        const int64_t H = 4;
        at::Tensor scores = at::rand({H, n}, at::kFloat);
        // head 0: its minimum twice (the first wins); head 1: the drop at the last row; head 2: at
        // row 0; head 3: a NaN (smaller than everything).
        const int64_t a = std::uniform_int_distribution<int64_t>(0, n - 1)(rng);
        scores[0][a] = -1;
        if (a + 1 < n) scores[0][n - 1] = -1;
        scores[1][n - 1] = -2;
        scores[2][0] = -3;
        if (n > 2) scores[3][n / 2] = std::numeric_limits<float>::quiet_NaN();
        const at::Tensor k = at::randn({H * cap, D}).to(dt), v = at::randn({H * cap, D}).to(dt);
        const at::Tensor pos = at::randint(0, 1 << 20, {H * cap}, at::kLong);
        const at::Tensor length = at::full({H}, n, at::kLong);
        // Reference on the CPU: head h keeps rows [0, d) then [d + 1, n) in place from row 0.
        at::Tensor k_ref = k.clone(), v_ref = v.clone(), pos_ref = pos.clone();
        const at::Tensor drop = scores.argmin(1);
        for (int64_t h = 0; h < H; ++h) {
          const int64_t d = drop[h].item<int64_t>(), b = h * cap;
          if (d + 1 < n)
            for (const auto& [dst, src] : {std::pair{&k_ref, &k}, std::pair{&v_ref, &v}})
              dst->narrow(0, b + d, n - 1 - d).copy_(src->narrow(0, b + d + 1, n - 1 - d));
          if (d + 1 < n) pos_ref.narrow(0, b + d, n - 1 - d).copy_(pos.narrow(0, b + d + 1, n - 1 - d));
        }
        EXPECT_EQ(drop[3].item<int64_t>(), n > 2 ? n / 2 : drop[3].item<int64_t>());
        const at::Tensor kd = k.cuda(), vd = v.cuda(), pd = pos.cuda(), ld = length.cuda();
        ops::drop_lowest(scores.cuda(), kd, vd, pd, cap, ld);
        EXPECT_TRUE(at::equal(kd.cpu(), k_ref));
        EXPECT_TRUE(at::equal(vd.cpu(), v_ref));
        EXPECT_TRUE(at::equal(pd.cpu(), pos_ref));
        EXPECT_TRUE(at::equal(ld.cpu(), at::full({H}, n - 1, at::kLong)));
        ++cases;
        if (n <= 16) continue;
        // H2O's form: the argmin over all but the newest 16 (head 1's -2 is among them, so kept),
        // the scores themselves shifted alongside the rows (its running totals).
        const int64_t candidates = n - 16;
        const at::Tensor drop_c = scores.narrow(1, 0, candidates).argmin(1);
        at::Tensor s_ref = scores.clone();
        for (int64_t h = 0; h < H; ++h) {
          const int64_t d = drop_c[h].item<int64_t>();
          s_ref[h].narrow(0, d, n - 1 - d).copy_(scores[h].narrow(0, d + 1, n - 1 - d));
        }
        EXPECT_LT(drop_c[1].item<int64_t>(), candidates);
        const at::Tensor sd = scores.cuda(), kc = k.cuda(), vc = v.cuda(), pc = pos.cuda();
        ops::drop_lowest(sd, kc, vc, pc, cap, {}, candidates, sd);
        EXPECT_TRUE(at::equal(sd.cpu(), s_ref));
        for (int64_t h = 0; h < H; ++h) {  // each head moved past its own row
          const int64_t d = drop_c[h].item<int64_t>(), b = h * cap;
          EXPECT_TRUE(at::equal(pc.cpu().narrow(0, b, d), pos.narrow(0, b, d)));
          EXPECT_TRUE(at::equal(pc.cpu().narrow(0, b + d, n - 1 - d), pos.narrow(0, b + d + 1, n - 1 - d)));
          EXPECT_TRUE(at::equal(kc.cpu().narrow(0, b + d, n - 1 - d), k.narrow(0, b + d + 1, n - 1 - d)));
        }
        ++cases;
      }
  EXPECT_EQ(cases, 48);
  const at::Tensor k = at::zeros({8, 64}, opts(at::kBFloat16)), pos = at::zeros({8}, opts(at::kLong));
  EXPECT_THROW(ops::drop_lowest(at::zeros({2, 5}, opts(at::kFloat)), k, k, pos, 3, {}),
               std::invalid_argument);  // 2 x 3 rows, not 8
  EXPECT_THROW(ops::drop_lowest(at::zeros({2, 4}, opts(at::kBFloat16)), k, k, pos, 4, {}),
               std::invalid_argument);  // bf16 scores
  EXPECT_THROW(ops::drop_lowest(at::zeros({2, 4}, opts(at::kFloat)), k, k, pos, 4, {}, 5),
               std::invalid_argument);  // more candidates than entries
  EXPECT_THROW(
      ops::drop_lowest(at::zeros({2, 4}, opts(at::kFloat)), k, k, pos, 4, {}, 0, at::zeros({2, 3}, opts(at::kFloat))),
      std::invalid_argument);  // alongside shorter than the entries
  // Rows under 128 bytes (head_dim 32 in bf16) are left to KvCache's LibTorch shift.
  EXPECT_TRUE(ops::drop_lowest_supported(k, 64));
  EXPECT_FALSE(ops::drop_lowest_supported(k, 32));
  EXPECT_TRUE(ops::drop_lowest_supported(k.to(at::kFloat), 32));
}

TEST_F(CudaKernels, RejectsBadArguments) {
  const at::Tensor q = at::randn({8, 80}, opts(at::kBFloat16));  // head_dim 80: unsupported
  const at::Tensor kv = at::randn({10, 80}, opts(at::kBFloat16));
  EXPECT_THROW(ops::decode_attention(q, kv, kv, {0, 5}, {5, 5}, 4), std::invalid_argument);
  const at::Tensor q2 = at::randn({8, 64}, opts(at::kBFloat16));
  const at::Tensor kv2 = at::randn({10, 64}, opts(at::kBFloat16));
  EXPECT_THROW(ops::decode_attention(q2, kv2, kv2, {0, 5}, {5, 5}, 3), std::invalid_argument);  // 8 != 2 * 3
  EXPECT_THROW(ops::decode_attention(q2, kv2.to(at::kFloat), kv2, {0, 5}, {5, 5}, 4), std::invalid_argument);
}

}  // namespace
}  // namespace kvscope
