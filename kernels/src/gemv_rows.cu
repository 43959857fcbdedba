// GEMV for a decode batch's 2..8 rows on tensor cores (see gemv.h, gemv_rows.cuh).
//
// A product with 8 rows is as memory-bound as one with 1 (every weight is read once per step), but
// the CUDA-core GEMV would do 8 products per weight, with 8 x values per weight to convert and
// fetch. mma.sync m16n8k16 takes 16 rows of W as its A operand and the (up to) 8 rows of x as the 8
// columns of B ("swap AB" for skinny products): one instruction covers 16 x 16 weights.
//
// Block: 16 rows of W and 8 warps (4 when that takes the matrix in one wave: launch); warp w takes
// the k chunks w, w + 8, ... (one chunk = 128 values of each of the 16 rows, 256 bytes of bf16), so
// a block reads every row contiguously, chunk after chunk.
// Fragments come straight from global memory: lane (g, t) = (lane / 4, lane % 4) loads, per slot u
// of a chunk, one 16-byte vector of row g, of row g + 8 and of x row g at vector index u·4 + t (a
// slot's four lanes read 64 contiguous bytes of each row). The 8 values of such a vector are the
// lane's k positions 2t, 2t+1, 2t+8, 2t+9 of two successive mma instructions. A dot product does
// not depend on the order of its k terms, and A and B use the same mapping from (lane, register) to
// k, so this permutation of k costs nothing and needs no shared memory or ldmatrix.
// The next chunk's weight loads are issued before the current chunk's x loads and mma. Before the
// programmatic-dependent wait (pdl.cuh) a block loads its first chunk's weights (no kernel writes
// them) and, for rows within the first kL2PrefetchBytes of W, asks L2 for the rest of its rows
// (lane: one row, one 128-byte half of each of its warp's chunks). The warps' partial 16 x 8
// tiles meet in shared memory; one thread per output adds them and the bias and stores the sum at
// its place in the output's column segments (y_split). With swiglu a tile holds 8 gate rows and
// their 8 up rows, and its epilogue writes silu(gate) * up.
// RMSNorm without a launch (GemvArgs::norm_sumsq / next_norm_g): a producing tile also stores g ⊙ y
// and one Σ y² per row of x (a 16-lane shuffle over its rows). In a consuming tile, warp w copies
// the partial sums of x row w (w + 4 with 4 warps) into shared memory with cp.async right after the
// wait, so they arrive during the products without holding registers, and adds them after the
// loop; the epilogue scales each row's sums once.
#include <type_traits>

#include "device_props.cuh"
#include "dtype.cuh"
#include "gemv_rows.cuh"
#include "mma.cuh"
#include "pdl.cuh"

namespace kvscope::kernels::detail {
namespace {

// Warps per block: 8 (two blocks per SM), or 4 (four per SM) for matrices whose tiles need more
// than one wave of 8-warp blocks but fit in one of 4-warp blocks (see launch). Either way 16 warps
// per SM with the registers capped at 120.
constexpr int kThreadsPerSm = 512;
constexpr int kRows = kTileRows;        // rows of W per block (the mma's M)
constexpr int kCols = 8;                // rows of x (the mma's N)
constexpr int kSlots = 4;               // 16-byte vectors per lane and row in a chunk
constexpr int kChunkVecs = kSlots * 4;  // vectors of a row per chunk (4 lanes per row)

/// 16 bytes of W: evict-first (each weight is read once per step), and on an L2 miss L2 fetches
/// the whole 128-byte line from DRAM (`.L2::128B`, PTX ISA "ld"). A slot's load instruction takes
/// 64 bytes of each of 8 rows, so a line is asked for by two successive instructions; with the
/// hint the first brings it whole (bench_kernels, H200, 8 rows: gate/up 63.1 -> 59.8 us, down
/// 30.9 -> 29.0 us; 256-byte fetches gain less: 60.9 / 29.3 us).
__device__ __forceinline__ uint4 ld_w(const uint4* p) {
  uint4 r;
  asm volatile("ld.global.cs.L2::128B.v4.u32 {%0,%1,%2,%3}, [%4];"
               : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
               : "l"(p));
  return r;
}

/// Asynchronous copy of kBytes (4 or 16; both addresses aligned to it) global -> shared (sm_80,
/// PTX "cp.async"); cp_async_wait_all() completes the thread's copies.
template <int kBytes>
__device__ __forceinline__ void cp_async(float* dst, const float* src) {
  const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.ca.shared.global [%0], [%1], %2;" ::"r"(d), "l"(src), "n"(kBytes) : "memory");
}
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_all;" ::: "memory"); }

/// One chunk's weights of a lane: rows g and g + 8 of the block's W tile.
struct Chunk {
  uint4 wa[kSlots], wb[kSlots];
};

// The W row of tile row i (0..15) of tile `tile`: rows 16 tile + i, or (kSwiGlu) the gate row
// 8 tile + i for i < 8 and the matching up row I + 8 tile + i - 8 after (GemvEpilogue::kSwiGlu),
// so a tile's outputs meet their gate and up values in its own epilogue. -1 past the matrix.
template <bool kSwiGlu>
__device__ __forceinline__ int64_t tile_row(int64_t tile, int i, int64_t n) {
  if constexpr (kSwiGlu) {
    const int64_t col = tile * (kRows / 2) + (i & 7);
    return col >= n / 2 ? -1 : i < 8 ? col : n / 2 + col;
  } else {
    const int64_t row = tile * kRows + i;
    return row < n ? row : -1;
  }
}

template <typename T, bool kF32Out, int kWarps, bool kSwiGlu>
__global__ void __launch_bounds__(kWarps * 32, kThreadsPerSm / (kWarps * 32)) gemv_rows_kernel(const GemvArgs a) {
  __shared__ float part[kWarps][kRows][kCols];
  __shared__ float s_scale[kCols];                 // norm_sumsq: rsqrt(Σ / k + eps) of each row of x
  extern __shared__ __align__(16) float s_norm[];  // norm_sumsq: [m][norm_parts], staged by cp.async
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  pdl_trigger();
  const int64_t tile = blockIdx.x, row0 = tile * kRows;  // row0: rows of W before the tile in block order
  const int64_t nvec = a.k / 8, nchunks = (nvec + kChunkVecs - 1) / kChunkVecs;
  const int64_t row_a = tile_row<kSwiGlu>(tile, g, a.n), row_b = tile_row<kSwiGlu>(tile, g + 8, a.n);
  const bool ra = row_a >= 0, rb = row_b >= 0, rx = g < a.m;
  const uint4* wa = reinterpret_cast<const uint4*>(static_cast<const T*>(a.w) + (ra ? row_a : 0) * a.k);
  const uint4* wb = reinterpret_cast<const uint4*>(static_cast<const T*>(a.w) + (rb ? row_b : 0) * a.k);
  const uint4* xr = reinterpret_cast<const uint4*>(static_cast<const T*>(a.x) + (rx ? g : 0) * a.k);
  const uint4 zero = make_uint4(0, 0, 0, 0);
  auto load_w = [&](Chunk& c, int64_t chunk) {
#pragma unroll
    for (int u = 0; u < kSlots; ++u) {
      const int64_t v = chunk * kChunkVecs + u * 4 + t;
      c.wa[u] = ra && v < nvec ? ld_w(wa + v) : zero;
      c.wb[u] = rb && v < nvec ? ld_w(wb + v) : zero;
    }
  };
  auto load_x = [&](uint4(&x)[kSlots], int64_t chunk) {
#pragma unroll
    for (int u = 0; u < kSlots; ++u) {
      const int64_t v = chunk * kChunkVecs + u * 4 + t;
      x[u] = rx && v < nvec ? __ldg(xr + v) : zero;
    }
  };
  float acc[4] = {0.f, 0.f, 0.f, 0.f};
  int64_t chunk = warp;
  Chunk cur;
  if (chunk < nchunks) load_w(cur, chunk);  // before the wait: weights only
  const int64_t row_bytes = a.k * static_cast<int64_t>(sizeof(T)), pr = tile_row<kSwiGlu>(tile, lane >> 1, a.n);
  if ((row0 + kRows) * row_bytes <= kL2PrefetchBytes && pr >= 0) {
    const char* p = static_cast<const char*>(a.w) + pr * row_bytes + (lane & 1) * 128;
    for (int64_t c = chunk + kWarps; c < nchunks; c += kWarps)
      if (c * kChunkVecs * 16 + (lane & 1) * 128 < row_bytes) prefetch_l2(p + c * kChunkVecs * 16);
  }
  pdl_wait();
  const int64_t parts = a.norm_parts;
  const bool norm_vec = (parts & 3) == 0 && (reinterpret_cast<uintptr_t>(a.norm_sumsq) & 15) == 0;  // 16-byte copies
  if (a.norm_sumsq)
    for (int c = warp; c < a.m; c += kWarps) {
      float* dst = s_norm + c * parts;
      const float* src = a.norm_sumsq + c * parts;
      if (norm_vec)
        for (int64_t i = 4 * lane; i < parts; i += 128) cp_async<16>(dst + i, src + i);
      else
        for (int64_t i = lane; i < parts; i += 32) cp_async<4>(dst + i, src + i);
    }
  for (; chunk < nchunks; chunk += kWarps) {  // warp-uniform
    Chunk next;
    const bool more = chunk + kWarps < nchunks;
    if (more) load_w(next, chunk + kWarps);
    uint4 x[kSlots];  // x is small and read by every block: L1 / L2 hits, loaded when needed
    load_x(x, chunk);
#pragma unroll
    for (int u = 0; u < kSlots; ++u) {
      mma16816<T>(acc, cur.wa[u].x, cur.wb[u].x, cur.wa[u].y, cur.wb[u].y, x[u].x, x[u].y);
      mma16816<T>(acc, cur.wa[u].z, cur.wb[u].z, cur.wa[u].w, cur.wb[u].w, x[u].z, x[u].w);
    }
    if (more) cur = next;
  }
  if (a.norm_sumsq) {  // the warp's rows of x: its own copies only, so a warp barrier suffices
    cp_async_wait_all();
    __syncwarp();
    for (int c = warp; c < a.m; c += kWarps) {
      float sum = 0.f;
      if (norm_vec) {
        for (int64_t i = 4 * lane; i < parts; i += 128) {
          const float4 v = *reinterpret_cast<const float4*>(s_norm + c * parts + i);
          sum += (v.x + v.y) + (v.z + v.w);
        }
      } else {
        for (int64_t i = lane; i < parts; i += 32) sum += s_norm[c * parts + i];
      }
      const float scale = norm_scale(sum, a.k, a.norm_eps);
      if (lane == 0) s_scale[c] = scale;
    }
  }
  // acc: (row g, x row 2t), (row g, 2t + 1), (row g + 8, 2t), (row g + 8, 2t + 1).
  part[warp][g][2 * t] = acc[0];
  part[warp][g][2 * t + 1] = acc[1];
  part[warp][g + 8][2 * t] = acc[2];
  part[warp][g + 8][2 * t + 1] = acc[3];
  __syncthreads();
  const T* bias = static_cast<const T*>(a.b);
  if constexpr (kSwiGlu) {  // output (col, 8 tile + r) = silu(gate row r) * (up row r + 8)
    const int r = threadIdx.x % (kRows / 2), col = threadIdx.x / (kRows / 2);
    const int64_t gate_row = tile_row<true>(tile, r, a.n), up_row = tile_row<true>(tile, r + 8, a.n);
    if (col >= a.m || gate_row < 0) return;
    float sg = 0.f, su = 0.f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      sg += part[w][r][col];
      su += part[w][r + 8][col];
    }
    if (a.norm_sumsq) {
      sg *= s_scale[col];
      su *= s_scale[col];
    }
    if (bias) {
      sg += dtype::to_f<T>(bias[col * a.b_stride + gate_row]);
      su += dtype::to_f<T>(bias[col * a.b_stride + up_row]);
    }
    // Both rounded to dtype first: the values the two-kernel path's gate_up tensor would hold.
    const float g = dtype::round_to<T>(sg), u = dtype::round_to<T>(su);
    static_cast<T*>(a.y)[col * (a.n / 2) + gate_row] =
        dtype::from_f<T>(a.epilogue == GemvEpilogue::kGeGlu ? dtype::geglu(g, u) : dtype::swiglu(g, u));
    return;
  }
  const int r = threadIdx.x % kRows, col = threadIdx.x / kRows;  // consecutive threads: consecutive rows of y
  const bool active = col < a.m && row0 + r < a.n;
  const bool norm_out = !kF32Out && a.next_norm_g;  // then every thread reaches the shuffles below
  if (!active && !norm_out) return;
  float s = 0.f;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) s += part[w][r][col];
  const int64_t row = row0 + r;
  if (a.norm_sumsq && active) s *= s_scale[col];
  if (bias && active) s += dtype::to_f<T>(bias[col * a.b_stride + row]);
  if constexpr (!kF32Out) {
    if (norm_out) {  // y, g ⊙ y and Σ y² over the tile's rows (GemvArgs::next_norm_g; no y_split)
      const float v = active ? dtype::round_to<T>(s) : 0.f;
      if (active) {
        static_cast<T*>(a.y)[col * a.n + row] = dtype::from_f<T>(v);
        static_cast<T*>(a.next_norm_gx)[col * a.n + row] =
            dtype::from_f<T>(dtype::to_f<T>(static_cast<const T*>(a.next_norm_g)[row]) * v);
      }
      float sq = v * v;
#pragma unroll
      for (int off = kRows / 2; off > 0; off >>= 1)
        sq += __shfl_xor_sync(0xffffffffu, sq, off);  // a half-warp: one col
      if (r == 0 && col < a.m) a.next_norm_sumsq[col * gridDim.x + tile] = sq;
      return;
    }
  }
  // The output segment [first, end) holding this column (gemv.h: y_split).
  const int64_t s0 = a.y_split[0], s1 = a.y_split[1];
  const int64_t first = row >= s1 ? s1 : row >= s0 ? s0 : 0, end = row >= s1 ? a.n : row >= s0 ? s1 : s0;
  const int64_t at = a.m * first + col * (end - first) + (row - first);
  if constexpr (kF32Out)
    static_cast<float*>(a.y)[at] = s;
  else
    static_cast<T*>(a.y)[at] = dtype::from_f<T>(s);
}

template <typename T, int kWarps>
cudaError_t launch_warps(const GemvArgs& a, unsigned tiles, cudaStream_t stream) {
  const size_t smem = a.norm_sumsq ? static_cast<size_t>(a.m * a.norm_parts) * sizeof(float) : 0;
  if (a.epilogue == GemvEpilogue::kSwiGlu || a.epilogue == GemvEpilogue::kGeGlu)
    return launch_pdl(gemv_rows_kernel<T, false, kWarps, true>, tiles, kWarps * 32, smem, stream, a);
  return a.y_fp32 ? launch_pdl(gemv_rows_kernel<T, true, kWarps, false>, tiles, kWarps * 32, smem, stream, a)
                  : launch_pdl(gemv_rows_kernel<T, false, kWarps, false>, tiles, kWarps * 32, smem, stream, a);
}

template <typename T>
cudaError_t launch(const GemvArgs& a, cudaStream_t stream) {
  const int64_t tiles = (a.n + kRows - 1) / kRows, sms = sm_count();  // swiglu: n even, 8 gate + 8 up rows a tile
  // A second, partial wave of 8-warp blocks (e.g. Llama-3.1-8B's QKV: 384 tiles on 2 x 132 slots)
  // leaves most SMs idle at its end; 4-warp blocks take such a matrix in one wave (bench_kernels,
  // H200, 8 rows: 16.3 against 17.7 us). With one wave either way (o, down) or many (gate_up),
  // 8-warp blocks stream faster (o: 10.7 against 12.3 us).
  const bool one_wave_of_4 = tiles > 2 * sms && tiles <= 4 * sms;
  return one_wave_of_4 ? launch_warps<T, 4>(a, static_cast<unsigned>(tiles), stream)
                       : launch_warps<T, 8>(a, static_cast<unsigned>(tiles), stream);
}

}  // namespace

cudaError_t gemv_rows(const GemvArgs& a, cudaStream_t stream) {
  switch (a.dtype) {
    case DType::kBFloat16:
      return launch<__nv_bfloat16>(a, stream);
    case DType::kFloat16:
      return launch<__half>(a, stream);
    case DType::kFloat32:
      break;
  }
  return cudaErrorInvalidValue;
}

}  // namespace kvscope::kernels::detail
