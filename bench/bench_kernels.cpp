// bench_kernels: the decode projections' GEMV (kernels/gemv.h: 1 and 8 rows on the Llama-3.1-8B
// projection shapes) and split-K decode attention (kernels/decode.h) against the memory roofline.
// n_head 32, n_head_kv 8, head_dim 128, bf16 (Llama-3-8B shapes), n_tok 4K / 32K / 128K per KV
// head. Reports the median time of many calls (CUDA events), both launched one by one on a stream
// (host launch cost included when it exceeds the GPU time) and replayed from a CUDA graph (GPU
// time), the achieved K+V read bandwidth of the graph time, and a device-to-device copy's
// bandwidth (bytes read + written) as the ceiling. K/V sets rotate so the L2 never holds a whole
// working set. Cases per n_tok: dense (every head n_tok rows), ragged (odd heads n_tok / 4) and
// gather (2048 random rows a head); GB/s counts the K/V rows actually attended. Built only with
// KVSCOPE_HAVE_CUDA_KERNELS; otherwise it prints a message and exits 0.
//   bench_kernels [--splits]   (--splits: also sweep forced split counts)
#include <cstdio>
#include <cstring>

#ifndef KVSCOPE_HAVE_CUDA_KERNELS
int main() {
  std::printf("bench_kernels: built without the CUDA kernels (KVSCOPE_WITH_CUDA=OFF); nothing to do\n");
  return 0;
}
#else
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <random>
#include <vector>

#include <cuda_runtime_api.h>

#include "kvscope/kernels/decode.h"
#include "kvscope/kernels/gemv.h"
#include "kvscope/kernels/page_select.h"
#include "kvscope/kernels/snapkv_scores.h"

namespace kk = kvscope::kernels;

#define CHECK(call)                                                                                 \
  do {                                                                                              \
    const cudaError_t err_ = (call);                                                                \
    if (err_ != cudaSuccess) {                                                                      \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(err_)); \
      std::exit(1);                                                                                 \
    }                                                                                               \
  } while (0)

namespace {

double median(std::vector<double> xs) {
  std::nth_element(xs.begin(), xs.begin() + xs.size() / 2, xs.end());
  return xs[xs.size() / 2];
}

/// Median over `trials` of the mean time (ms) of `per_trial` back-to-back calls of fn(i).
template <typename F>
double time_ms(F&& fn, int trials, int per_trial) {
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  for (int i = 0; i < 5; ++i) fn(i);  // warm-up
  CHECK(cudaDeviceSynchronize());
  std::vector<double> ms;
  int call = 0;
  for (int t = 0; t < trials; ++t) {
    CHECK(cudaEventRecord(a));
    for (int i = 0; i < per_trial; ++i) fn(call++);
    CHECK(cudaEventRecord(b));
    CHECK(cudaEventSynchronize(b));
    float x = 0;
    CHECK(cudaEventElapsedTime(&x, a, b));
    ms.push_back(x / per_trial);
  }
  CHECK(cudaEventDestroy(a));
  CHECK(cudaEventDestroy(b));
  return median(ms);
}

/// Median over `trials` of the mean time (ms) of one call, the calls fn(0 .. per_trial - 1)
/// captured once into a CUDA graph on `stream` and replayed.
template <typename F>
double time_graph_ms(F&& fn, cudaStream_t stream, int trials, int per_trial) {
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  for (int i = 0; i < per_trial; ++i) fn(i);
  CHECK(cudaStreamEndCapture(stream, &graph));
  CHECK(cudaGraphInstantiate(&exec, graph, 0));
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  for (int i = 0; i < 3; ++i) CHECK(cudaGraphLaunch(exec, stream));  // warm-up
  CHECK(cudaStreamSynchronize(stream));
  std::vector<double> ms;
  for (int t = 0; t < trials; ++t) {
    CHECK(cudaEventRecord(a, stream));
    CHECK(cudaGraphLaunch(exec, stream));
    CHECK(cudaEventRecord(b, stream));
    CHECK(cudaEventSynchronize(b));
    float x = 0;
    CHECK(cudaEventElapsedTime(&x, a, b));
    ms.push_back(x / per_trial);
  }
  CHECK(cudaEventDestroy(a));
  CHECK(cudaEventDestroy(b));
  CHECK(cudaGraphExecDestroy(exec));
  CHECK(cudaGraphDestroy(graph));
  return median(ms);
}

/// Random bf16 bits (N(0,1)-ish values; never zeros).
std::vector<uint16_t> random_bf16(size_t n, std::mt19937& rng) {
  std::normal_distribution<float> nd(0.f, 1.f);
  std::vector<uint16_t> out(n);
  for (auto& x : out) {
    const float f = nd(rng);
    uint32_t bits;
    std::memcpy(&bits, &f, 4);
    x = static_cast<uint16_t>((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  const bool sweep = argc > 1 && std::strcmp(argv[1], "--splits") == 0;
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) {
    std::printf("bench_kernels: no CUDA device; nothing to do\n");
    return 0;
  }
  cudaDeviceProp prop{};
  CHECK(cudaGetDeviceProperties(&prop, dev));
  std::printf("device: %s, %d SMs, L2 %.0f MiB\n", prop.name, prop.multiProcessorCount, prop.l2CacheSize / 1048576.0);

  // Ceiling: a 1 GiB device-to-device copy, counting bytes read + written.
  const size_t copy_bytes = size_t{1} << 30;
  void *src = nullptr, *dst = nullptr;
  CHECK(cudaMalloc(&src, copy_bytes));
  CHECK(cudaMalloc(&dst, copy_bytes));
  CHECK(cudaMemset(src, 1, copy_bytes));
  const double copy_ms =
      time_ms([&](int) { CHECK(cudaMemcpyAsync(dst, src, copy_bytes, cudaMemcpyDeviceToDevice)); }, 20, 3);
  const double copy_gbs = 2.0 * copy_bytes / (copy_ms * 1e-3) / 1e9;
  std::printf("device-to-device copy: %.1f GB/s (read + write)\n\n", copy_gbs);
  CHECK(cudaFree(src));
  CHECK(cudaFree(dst));

  const int n_head = 32, n_head_kv = 8, group = n_head / n_head_kv, D = 128;
  std::mt19937 rng(42);
  cudaStream_t stream;
  CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));

  // Decode projections (kernels/gemv.h), Llama-3.1-8B shapes, bf16: m = 1 (CUDA cores) and m = 2, 4, 8
  // rows (a decode batch, tensor cores). Weight copies rotate over 512 MB so that L2 never holds
  // the matrix; GB/s counts the weight bytes of one call (graph replay).
  {
    std::printf("%-8s %6s %6s %3s %10s %9s %8s\n", "gemv", "n", "k", "m", "graph_us", "GB/s", "of_copy");
    const size_t pool_bytes = size_t{512} << 20;
    void *pool = nullptr, *x = nullptr, *y = nullptr;
    CHECK(cudaMalloc(&pool, pool_bytes));
    CHECK(cudaMemset(pool, 0x3c, pool_bytes));  // bf16 0x3c3c: a finite value
    CHECK(cudaMalloc(&x, 8 * 14336 * 2));
    CHECK(cudaMemset(x, 0x3c, 8 * 14336 * 2));
    CHECK(cudaMalloc(&y, 8 * 28672 * 4));
    struct Proj {
      const char* name;
      int64_t n, k;
    };
    for (const Proj& pr :
         {Proj{"qkv", 6144, 4096}, Proj{"o", 4096, 4096}, Proj{"gate_up", 28672, 4096}, Proj{"down", 4096, 14336}})
      for (const int64_t m : {int64_t{1}, int64_t{2}, int64_t{4}, int64_t{8}}) {
        const size_t wbytes = static_cast<size_t>(pr.n * pr.k * 2);
        const int copies = static_cast<int>(pool_bytes / wbytes);
        kk::GemvArgs ga;
        ga.m = m;
        ga.n = pr.n;
        ga.k = pr.k;
        ga.x = x;
        ga.y = y;
        const double ms = time_graph_ms(
            [&](int i) {
              ga.w = static_cast<const char*>(pool) + (i % copies) * wbytes;
              CHECK(kk::gemv(ga, stream));
            },
            stream, 20, 16);
        const double gbs = wbytes / (ms * 1e-3) / 1e9;
        std::printf("%-8s %6lld %6lld %3lld %10.1f %9.1f %7.1f%%\n", pr.name, static_cast<long long>(pr.n),
                    static_cast<long long>(pr.k), static_cast<long long>(m), ms * 1e3, gbs, 100 * gbs / copy_gbs);
      }
    for (void* p : {pool, x, y}) CHECK(cudaFree(p));
    std::printf("\n");
  }
  std::printf("%8s %7s %7s %7s %10s %10s %9s %8s\n", "n_tok", "case", "blocks", "chunk", "stream_us", "graph_us",
              "GB/s", "of_copy");
  for (const int64_t n_tok : {int64_t{4096}, int64_t{32768}, int64_t{131072}}) {
    const size_t rows = static_cast<size_t>(n_head_kv) * n_tok;
    const size_t kv_bytes = 2 * rows * D * sizeof(uint16_t);  // K + V of the dense case
    // Enough K/V sets that their total exceeds 4x the L2 (at most 16 sets).
    const int n_sets = static_cast<int>(std::clamp<size_t>(4 * prop.l2CacheSize / kv_bytes + 1, 1, 16));
    std::vector<void*> ks(n_sets), vs(n_sets);
    const std::vector<uint16_t> host = random_bf16(rows * D, rng);
    for (int s = 0; s < n_sets; ++s) {
      CHECK(cudaMalloc(&ks[s], rows * D * 2));
      CHECK(cudaMalloc(&vs[s], rows * D * 2));
      CHECK(cudaMemcpy(ks[s], host.data(), rows * D * 2, cudaMemcpyHostToDevice));
      CHECK(cudaMemcpy(vs[s], host.data(), rows * D * 2, cudaMemcpyHostToDevice));
    }
    const std::vector<uint16_t> hq = random_bf16(static_cast<size_t>(n_head) * D, rng);
    void *q = nullptr, *o = nullptr, *dmeta = nullptr, *dindex = nullptr;
    CHECK(cudaMalloc(&q, hq.size() * 2));
    CHECK(cudaMalloc(&o, hq.size() * 2));
    CHECK(cudaMalloc(&dmeta, 2 * n_head_kv * sizeof(int64_t)));
    CHECK(cudaMemcpy(q, hq.data(), hq.size() * 2, cudaMemcpyHostToDevice));

    // Cases: dense uniform lengths (with the split sweep), ragged lengths (Ada-KV-like budgets:
    // alternate heads keep a quarter), and index gather (2048 random rows a head, top-k decode).
    const int64_t topk = std::min<int64_t>(2048, n_tok);
    for (const char* kind : {"dense", "ragged", "gather"}) {
      const bool gather = std::strcmp(kind, "gather") == 0;
      std::vector<int64_t> meta(2 * n_head_kv);
      int64_t live = 0, max_len = 0;
      for (int h = 0; h < n_head_kv; ++h) {
        meta[h] = h * n_tok;  // offset
        meta[n_head_kv + h] = gather ? topk : (std::strcmp(kind, "ragged") == 0 && h % 2) ? n_tok / 4 : n_tok;
        live += meta[n_head_kv + h];
        max_len = std::max(max_len, meta[n_head_kv + h]);
      }
      CHECK(cudaMemcpy(dmeta, meta.data(), meta.size() * 8, cudaMemcpyHostToDevice));
      if (gather) {
        std::vector<int32_t> idx(static_cast<size_t>(n_head_kv) * topk);
        std::uniform_int_distribution<int32_t> pick(0, static_cast<int32_t>(n_tok - 1));
        for (auto& x : idx) x = pick(rng);
        CHECK(cudaMalloc(&dindex, idx.size() * 4));
        CHECK(cudaMemcpy(dindex, idx.data(), idx.size() * 4, cudaMemcpyHostToDevice));
      }
      const double bytes = 2.0 * live * D * 2;  // K + V rows read
      std::vector<int> splits = {0};
      if (sweep && std::strcmp(kind, "dense") == 0) splits.insert(splits.end(), {8, 16, 24, 32, 48, 64, 96, 128, 256});
      for (int forced : splits) {
        const kk::DecodeAttentionPlan plan =
            kk::plan_decode_attention(kk::DType::kBFloat16, n_head, n_head_kv, D, max_len, live, forced);
        void* ws = nullptr;
        if (plan.workspace_bytes) CHECK(cudaMalloc(&ws, plan.workspace_bytes));
        kk::DecodeAttentionArgs a;
        a.dtype = kk::DType::kBFloat16;
        a.n_head = n_head;
        a.n_head_kv = n_head_kv;
        a.group = group;
        a.head_dim = D;
        a.q = q;
        a.q_stride = D;
        a.offset = static_cast<const int64_t*>(dmeta);
        a.length = static_cast<const int64_t*>(dmeta) + n_head_kv;
        if (gather) {
          a.index = static_cast<const int32_t*>(dindex);
          a.index_stride = topk;
        }
        a.scale = 0.08838834764831845f;
        a.o = o;
        auto call = [&](int i, cudaStream_t st) {
          a.k = ks[i % n_sets];
          a.v = vs[i % n_sets];
          CHECK(kk::decode_attention(a, plan, ws, st));
        };
        const double ms_stream = time_ms([&](int i) { call(i, nullptr); }, 50, 20);
        const double ms = time_graph_ms([&](int i) { call(i, stream); }, stream, 50, 20);
        CHECK(cudaGetLastError());
        const double gbs = bytes / (ms * 1e-3) / 1e9;
        std::printf("%8lld %7s %7d %7lld %10.2f %10.2f %9.1f %7.0f%%%s\n", static_cast<long long>(n_tok), kind,
                    plan.n_items, static_cast<long long>(plan.chunk), ms_stream * 1e3, ms * 1e3, gbs,
                    100.0 * gbs / copy_gbs, forced ? "" : "  (auto)");
        if (ws) CHECK(cudaFree(ws));
      }
      if (dindex) CHECK(cudaFree(dindex));
      dindex = nullptr;
    }
    for (int s = 0; s < n_sets; ++s) {
      CHECK(cudaFree(ks[s]));
      CHECK(cudaFree(vs[s]));
    }
    CHECK(cudaFree(q));
    CHECK(cudaFree(o));
    CHECK(cudaFree(dmeta));
  }
  // Sparse-decode selection of one layer (32 query / 8 KV heads, D 128, bf16), as RocketKV (HSA
  // after SnapKV at S = 32K: t = 1024 keeps C = 5793 entries, page 3, k1 67, k2 512; t = 4096 keeps
  // C = 14.9K, page 2, k1 70, k2 2048) and Quest (32K and 128K entries, page 16, 32 pages) run it:
  // scoring + selection alone, and with the last page's min/max recomputed in the same launch (the
  // decode step).
  std::printf("\n%-8s %8s %6s %5s %6s %12s %14s\n", "method", "entries", "page", "k1", "keep", "select_us",
              "with_upkeep_us");
  struct SelCase {
    const char* name;
    kk::PageScore mode;
    int64_t n;
    int page, k1;
    int64_t keep;
  };
  for (const SelCase& sc :
       {SelCase{"hsa", kk::PageScore::kHsa, 5793, 3, 67, 512}, SelCase{"hsa", kk::PageScore::kHsa, 14900, 2, 70, 2048},
        SelCase{"quest", kk::PageScore::kQuest, 32768, 16, 0, 32},
        SelCase{"quest", kk::PageScore::kQuest, 131072, 16, 0, 32}}) {
    const int64_t pages = (sc.n + sc.page - 1) / sc.page + 1, rows = static_cast<int64_t>(n_head_kv) * sc.n;
    void *k = nullptr, *kmin = nullptr, *kmax = nullptr, *q = nullptr, *meta = nullptr, *index = nullptr,
         *count = nullptr, *ws = nullptr;
    const std::vector<uint16_t> hk = random_bf16(static_cast<size_t>(rows) * D, rng);
    const std::vector<uint16_t> hs = random_bf16(static_cast<size_t>(n_head_kv) * pages * D, rng);
    const std::vector<uint16_t> hq = random_bf16(static_cast<size_t>(n_head) * D, rng);
    CHECK(cudaMalloc(&k, hk.size() * 2));
    CHECK(cudaMalloc(&kmin, hs.size() * 2));
    CHECK(cudaMalloc(&kmax, hs.size() * 2));
    CHECK(cudaMalloc(&q, hq.size() * 2));
    CHECK(cudaMemcpy(k, hk.data(), hk.size() * 2, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(kmin, hs.data(), hs.size() * 2, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(kmax, hs.data(), hs.size() * 2, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(q, hq.data(), hq.size() * 2, cudaMemcpyHostToDevice));
    std::vector<int64_t> m(2 * n_head_kv);
    for (int h = 0; h < n_head_kv; ++h) m[h] = h * sc.n, m[n_head_kv + h] = sc.n;
    CHECK(cudaMalloc(&meta, m.size() * 8));
    CHECK(cudaMemcpy(meta, m.data(), m.size() * 8, cudaMemcpyHostToDevice));
    const int64_t width = sc.mode == kk::PageScore::kHsa ? sc.keep : sc.keep * sc.page;
    CHECK(cudaMalloc(&index, static_cast<size_t>(n_head_kv) * width * 4));
    CHECK(cudaMalloc(&count, n_head_kv * 8));
    kk::PageSelectArgs ps;
    ps.dtype = kk::DType::kBFloat16;
    ps.mode = sc.mode;
    ps.n_head_kv = n_head_kv;
    ps.group = group;
    ps.head_dim = D;
    ps.page = sc.page;
    ps.k1 = sc.k1;
    ps.keep = sc.keep;
    ps.q = q;
    ps.q_stride = D;
    ps.kmin = kmin;
    ps.kmax = kmax;
    ps.page_capacity = pages;
    ps.length = static_cast<const int64_t*>(meta) + n_head_kv;
    ps.max_pages = pages;
    ps.index = static_cast<int32_t*>(index);
    ps.index_stride = width;
    ps.count = static_cast<int64_t*>(count);
    CHECK(cudaMalloc(&ws, kk::page_select_workspace_bytes(ps)));
    const double sel_ms = time_graph_ms([&](int) { CHECK(kk::page_select(ps, ws, stream)); }, stream, 50, 20);
    ps.k = k;
    ps.offset = static_cast<const int64_t*>(meta);
    const double fused_ms = time_graph_ms([&](int) { CHECK(kk::page_select(ps, ws, stream)); }, stream, 50, 20);
    std::printf("%-8s %8lld %6d %5d %6lld %12.2f %14.2f\n", sc.name, static_cast<long long>(sc.n), sc.page, sc.k1,
                static_cast<long long>(sc.keep), sel_ms * 1e3, fused_ms * 1e3);
    for (void* p : {k, kmin, kmax, q, meta, index, count, ws}) CHECK(cudaFree(p));
  }
  // SnapKV observation-window voting of one prefill layer (kernels/snapkv_scores.h): 32 query / 8 KV
  // heads, D 128, bf16, window 32, n = 8K / 32K keys, then max-pool 7 + group mean. Two Q·Kᵀ
  // passes on tensor cores: TFLOP/s counts both (2 · 2 · H · w · n · D).
  std::printf("\n%-12s %8s %7s %12s %10s\n", "snapkv vote", "n_tok", "window", "time_us", "TFLOP/s");
  for (const int64_t n : {int64_t{8192}, int64_t{32768}}) {
    const int w = 32;
    void *k = nullptr, *q = nullptr, *vote = nullptr, *score = nullptr, *ws = nullptr;
    const std::vector<uint16_t> hk = random_bf16(static_cast<size_t>(n_head_kv) * n * D, rng);
    const std::vector<uint16_t> hq = random_bf16(static_cast<size_t>(w) * n_head * D, rng);
    CHECK(cudaMalloc(&k, hk.size() * 2));
    CHECK(cudaMalloc(&q, hq.size() * 2));
    CHECK(cudaMemcpy(k, hk.data(), hk.size() * 2, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(q, hq.data(), hq.size() * 2, cudaMemcpyHostToDevice));
    kk::WindowVoteArgs va;
    va.dtype = kk::DType::kBFloat16;
    va.n_head_kv = n_head_kv;
    va.group = group;
    va.head_dim = D;
    va.n = n;
    va.window = w;
    va.scale = 1.f / std::sqrt(static_cast<float>(D));
    va.q = q;
    va.q_row_stride = static_cast<int64_t>(n_head) * D;
    va.k = k;
    va.k_head_stride = n * D;
    CHECK(cudaMalloc(&vote, static_cast<size_t>(n_head) * (n - w) * 4));
    CHECK(cudaMalloc(&score, static_cast<size_t>(n_head_kv) * (n - w) * 4));
    CHECK(cudaMalloc(&ws, kk::window_vote_workspace_bytes(va)));
    va.out = static_cast<float*>(vote);
    kk::PoolGroupsArgs pa;
    pa.n_head_kv = n_head_kv;
    pa.group = group;
    pa.len = n - w;
    pa.kernel = 7;
    pa.max_pool = true;
    pa.in = static_cast<const float*>(vote);
    pa.out = static_cast<float*>(score);
    pa.out_stride = n - w;
    const double ms = time_ms(
        [&](int) {
          CHECK(kk::window_vote(va, ws, nullptr));  // time_ms times the default stream
          CHECK(kk::pool_groups(pa, nullptr));
        },
        10, 5);
    const double flop = 4.0 * n_head * w * static_cast<double>(n) * D;
    std::printf("%-12s %8lld %7d %12.1f %10.1f\n", "bf16", static_cast<long long>(n), w, ms * 1e3,
                flop / (ms * 1e-3) / 1e12);
    for (void* p : {k, q, vote, score, ws}) CHECK(cudaFree(p));
  }
  CHECK(cudaStreamDestroy(stream));
  return 0;
}
#endif
