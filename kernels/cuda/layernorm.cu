// LayerNorm and RMSNorm over the last dim for the storage types (fp32
// arithmetic, each stored T rounded once): the arithmetic of
// kernels/cpu/layernorm.cpp and rmsnorm.cpp up to the order of the sums.
// RMSNorm is LayerNorm with the mean taken as 0 and no bias (kRms): the same
// kernels, its backward without the mean(dxhat) term and without db. Forward: one warp per row held in registers when it fits
// (h <= 32 * kMaxRegs with 16-byte rows), else one block per row. Backward: one
// block per chunk of rows computes dx and the chunk's dw, db partial sums (rows
// in registers where they fit); a second kernel adds the chunks in a fixed
// order (the same bits every run).
#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "engine/core/status.h"
#include "kernels/kernels.h"
#include "kernels/cuda/storage.cuh"

namespace ptdp::cuda {

namespace {

constexpr int kRowsPerBlock = 4;  // forward: one warp per row
constexpr int kMaxRegs = 64;      // forward: row values per lane kept in registers
constexpr int kThreads = 256;     // forward fallback and backward blocks
constexpr int kChunk = 8;         // backward fallback: rows per block (one dw, db partial each)
// Backward in registers: rows per block (one dw, db partial each), from 8 to
// 64 so that there are about 256 blocks (a function of N alone: the sums'
// order, and so their bits, do not depend on the GPU).
inline int bwd_rows_per_block(int N) { return std::max(8, std::min(64, (N + 255) / 256)); }
// Backward in registers: threads a row, and row values per thread (dout and x
// packed, plus fp32 dw and db sums for each): h <= 4096 for 16-bit types.
constexpr int kTeam = 128;
constexpr int kMaxBwdValues = 32;

// Forward with the row in registers: lane holds packs lane, lane + 32, ...
// (kPacks of kVec<T> values); two passes (mean, then the squared deviations)
// as the CPU. Needs h % kVec<T> == 0 and 16-byte aligned pointers.
template <class T, int kPacks, bool kRms>
__global__ void layernorm_fwd_regs(T *out, float *mean, float *rstd, const T *x, const T *w,
                                   const T *b, int N, int h, float eps) {
  constexpr int V = kVec<T>;
  using Pack = Vec<T, V>;
  const int row = blockIdx.x * kRowsPerBlock + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (row >= N) return;
  const int np = h / V;
  const Pack *xr = reinterpret_cast<const Pack *>(x + (size_t)row * h);
  float v[kPacks][V];  // [pack, element]; unset where pack >= np (never read)
  float s = 0.f;
#pragma unroll
  for (int k = 0; k < kPacks; k++) {
    const int p = k * 32 + lane;
    if (p < np) {
      const Pack q = xr[p];
#pragma unroll
      for (int e = 0; e < V; e++) s += v[k][e] = to_f32(q.v[e]);
    }
  }
  const float m = kRms ? 0.f : warp_sum(s) / h;
  float ss = 0.f;
#pragma unroll
  for (int k = 0; k < kPacks; k++)
    if (k * 32 + lane < np)
#pragma unroll
      for (int e = 0; e < V; e++) ss += (v[k][e] - m) * (v[k][e] - m);
  const float r = 1.f / sqrtf(warp_sum(ss) / h + eps);  // IEEE, as the CPU's 1 / sqrt
  const Pack *wp = reinterpret_cast<const Pack *>(w), *bp = reinterpret_cast<const Pack *>(b);
  Pack *yr = reinterpret_cast<Pack *>(out + (size_t)row * h);
#pragma unroll
  for (int k = 0; k < kPacks; k++) {
    const int p = k * 32 + lane;
    if (p < np) {
      const Pack wq = wp[p];
      Pack o;
#pragma unroll
      for (int e = 0; e < V; e++) {
        const float y = (v[k][e] - m) * r * to_f32(wq.v[e]);
        o.v[e] = from_f32<T>(kRms ? y : y + to_f32(bp[p].v[e]));
      }
      yr[p] = o;
    }
  }
  if (lane == 0) {
    if (!kRms) mean[row] = m;
    rstd[row] = r;
  }
}

// Sum over the block (blockDim.x a multiple of 32, <= 1024); every thread gets it.
__device__ float block_sum(float v, float *shared) {
  v = warp_sum(v);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  v = lane < (int)blockDim.x / 32 ? shared[lane] : 0.f;
  v = warp_sum(v);
  __syncthreads();  // shared is reused by the next reduction
  return v;
}

// Forward fallback (any h, any alignment): one block per row, three passes over
// a row that stays in L1.
template <class T, bool kRms>
__global__ void layernorm_fwd_loop(T *out, float *mean, float *rstd, const T *x, const T *w,
                                   const T *b, int h, float eps) {
  __shared__ float shared[32];
  const T *xr = x + (size_t)blockIdx.x * h;
  T *yr = out + (size_t)blockIdx.x * h;
  float m = 0.f;
  if (!kRms) {
    float s = 0.f;
    for (int j = threadIdx.x; j < h; j += blockDim.x) s += to_f32(xr[j]);
    m = block_sum(s, shared) / h;
  }
  float ss = 0.f;
  for (int j = threadIdx.x; j < h; j += blockDim.x) ss += (to_f32(xr[j]) - m) * (to_f32(xr[j]) - m);
  const float r = 1.f / sqrtf(block_sum(ss, shared) / h + eps);
  for (int j = threadIdx.x; j < h; j += blockDim.x) {
    const float y = (to_f32(xr[j]) - m) * r * to_f32(w[j]);
    yr[j] = from_f32<T>(kRms ? y : y + to_f32(b[j]));
  }
  if (threadIdx.x == 0) {
    if (!kRms) mean[blockIdx.x] = m;
    rstd[blockIdx.x] = r;
  }
}

// Backward fallback (rows too long for registers, or not 16-byte packs): one
// block per chunk of kChunk rows, W elements per access (kVec<T>, or 1 when h
// or the pointers do not allow 16 bytes). Reads dout and x twice.
// 1. one warp per row: the means of dxhat = dout * w and of dxhat * xhat;
// 2. one thread per W columns, rows in order: dx += (dxhat - mean(dxhat) - xhat *
//    mean(dxhat * xhat)) * rstd, and the chunk's sums of dout * xhat and dout.
// partial: [chunks, 2, h] (dw, then db).
template <class T, int W, bool kRms>
__global__ void layernorm_bwd_chunk(T *__restrict__ dx, float *__restrict__ partial,
                                    const T *__restrict__ dout, const T *__restrict__ x,
                                    const T *__restrict__ w, const float *__restrict__ mean,
                                    const float *__restrict__ rstd, int N, int h) {
  using Pack = Vec<T, W>;
  __shared__ float s_m[kChunk], s_r[kChunk], s_g[kChunk], s_gx[kChunk];
  const int r0 = blockIdx.x * kChunk, rows = min(kChunk, N - r0), np = h / W;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const Pack *wp = reinterpret_cast<const Pack *>(w);
  const Pack *gp = reinterpret_cast<const Pack *>(dout) + (size_t)r0 * np;
  const Pack *xp = reinterpret_cast<const Pack *>(x) + (size_t)r0 * np;
  Pack *dxp = reinterpret_cast<Pack *>(dx) + (size_t)r0 * np;

  for (int i = warp; i < rows; i += blockDim.x / 32) {
    const float m = kRms ? 0.f : mean[r0 + i], r = rstd[r0 + i];
    float sg = 0.f, sgx = 0.f;
    for (int p = lane; p < np; p += 32) {
      const Pack gq = gp[(size_t)i * np + p], xq = xp[(size_t)i * np + p], wq = wp[p];
#pragma unroll
      for (int e = 0; e < W; e++) {
        const float dxhat = to_f32(gq.v[e]) * to_f32(wq.v[e]);
        sg += dxhat;
        sgx += dxhat * (to_f32(xq.v[e]) - m) * r;
      }
    }
    sg = warp_sum(sg);
    sgx = warp_sum(sgx);
    if (lane == 0) s_m[i] = m, s_r[i] = r, s_g[i] = kRms ? 0.f : sg / h, s_gx[i] = sgx / h;
  }
  __syncthreads();

  float *pw = partial + (size_t)blockIdx.x * 2 * h, *pb = pw + h;
  for (int p = threadIdx.x; p < np; p += blockDim.x) {
    const Pack wq = wp[p];
    float aw[W] = {}, ab[W] = {};
#pragma unroll 4
    for (int i = 0; i < rows; i++) {
      const size_t o = (size_t)i * np + p;
      const Pack gq = gp[o], xq = xp[o], dq = dxp[o];
      Pack d;
#pragma unroll
      for (int e = 0; e < W; e++) {
        const float g = to_f32(gq.v[e]), xhat = (to_f32(xq.v[e]) - s_m[i]) * s_r[i];
        d.v[e] = from_f32<T>(to_f32(dq.v[e]) +
                             (g * to_f32(wq.v[e]) - s_g[i] - xhat * s_gx[i]) * s_r[i]);
        aw[e] += g * xhat;
        ab[e] += g;
      }
      dxp[o] = d;
    }
#pragma unroll
    for (int e = 0; e < W; e++) pw[p * W + e] = aw[e], pb[p * W + e] = ab[e];
  }
}

// Backward with the rows in registers (h <= kTeam kPacks kVec<T>, 16-byte
// rows), so dout and x are read once. Block = chunk of `rows` rows; a team of
// four warps (kTeam threads: thread u holds packs u, u + kTeam, ...) takes
// rows team, team + 2, ... in order (loading the next while it computes one)
// and computes each as layernorm_bwd_chunk does, the row's two sums added over
// the team's warps through shared memory;
// a thread keeps its columns' sums of dout * xhat and dout over the team's
// rows, then the block adds the teams' sums in team order into
// partial[chunk]. (A team of two warps, 64 columns' sums a thread, ran one
// block an SM and at 30% of copy on an H100.)
template <class T, int kPacks, bool kRms>
__global__ void __launch_bounds__(kThreads)
    layernorm_bwd_rows(T *__restrict__ dx, float *__restrict__ partial, const T *__restrict__ dout,
                       const T *__restrict__ x, const T *__restrict__ w,
                       const float *__restrict__ mean, const float *__restrict__ rstd, int N,
                       int h, int rows) {
  constexpr int V = kVec<T>, kTeams = kThreads / kTeam, kTeamWarps = kTeam / 32;
  using Pack = Vec<T, V>;
  extern __shared__ float s_sum[];                    // [2h]: the block's dw, then db sums
  __shared__ float s_row[kTeams][2][kTeamWarps][2];  // [team][row parity][warp][sg, sgx]
  const int team = threadIdx.x / kTeam, u = threadIdx.x % kTeam, tw = u / 32, np = h / V;
  const int r0 = blockIdx.x * rows, r1 = min(N, r0 + rows);
  const Pack *wp = reinterpret_cast<const Pack *>(w);
  float aw[kPacks][V] = {}, ab[kPacks][V] = {};
  // dout and x of a row into g, xv (rows past r1: nothing).
  auto load_row = [&](int row, Pack(&g)[kPacks], Pack(&xv)[kPacks]) {
    const Pack *gp = reinterpret_cast<const Pack *>(dout + (size_t)row * h);
    const Pack *xp = reinterpret_cast<const Pack *>(x + (size_t)row * h);
#pragma unroll
    for (int k = 0; k < kPacks; k++)
      if (row < r1 && k * kTeam + u < np) g[k] = gp[k * kTeam + u], xv[k] = xp[k * kTeam + u];
  };
  Pack g[kPacks], xv[kPacks];
  load_row(r0 + team, g, xv);
  int parity = 0;
  // Every team runs the same number of rounds (the barrier needs all its warps).
  for (int row = r0 + team; row - team < r1; row += kTeams, parity ^= 1) {
    Pack g_next[kPacks], x_next[kPacks];  // the team's next row, loading meanwhile
    load_row(row + kTeams, g_next, x_next);
    const bool live = row < r1;
    const float m = kRms || !live ? 0.f : mean[row], r = live ? rstd[row] : 0.f;
    float sg = 0.f, sgx = 0.f;
#pragma unroll
    for (int k = 0; k < kPacks; k++)
      if (live && k * kTeam + u < np) {
        const Pack wq = wp[k * kTeam + u];
#pragma unroll
        for (int e = 0; e < V; e++) {
          const float dxhat = to_f32(g[k].v[e]) * to_f32(wq.v[e]);
          sg += dxhat;
          sgx += dxhat * (to_f32(xv[k].v[e]) - m) * r;
        }
      }
    sg = warp_sum(sg);
    sgx = warp_sum(sgx);
    if (u % 32 == 0) s_row[team][parity][tw][0] = sg, s_row[team][parity][tw][1] = sgx;
    asm volatile("bar.sync %0, %1;\n" ::"r"(team + 1), "n"(kTeam));  // the team's warps
    if (live) {
      sg = sgx = 0.f;
#pragma unroll
      for (int i = 0; i < kTeamWarps; i++)
        sg += s_row[team][parity][i][0], sgx += s_row[team][parity][i][1];
      const float mg = kRms ? 0.f : sg / h, mgx = sgx / h;
      Pack *dxp = reinterpret_cast<Pack *>(dx + (size_t)row * h);
#pragma unroll
      for (int k = 0; k < kPacks; k++)
        if (k * kTeam + u < np) {
          const Pack wq = wp[k * kTeam + u], dq = dxp[k * kTeam + u];
          Pack d;
#pragma unroll
          for (int e = 0; e < V; e++) {
            const float gv = to_f32(g[k].v[e]), xhat = (to_f32(xv[k].v[e]) - m) * r;
            d.v[e] = from_f32<T>(to_f32(dq.v[e]) + (gv * to_f32(wq.v[e]) - mg - xhat * mgx) * r);
            aw[k][e] += gv * xhat;
            ab[k][e] += gv;
          }
          dxp[k * kTeam + u] = d;
        }
    }
#pragma unroll
    for (int k = 0; k < kPacks; k++) g[k] = g_next[k], xv[k] = x_next[k];
  }
  for (int t = 0; t < kTeams; t++) {  // the teams' sums, in order
    if (team == t)
#pragma unroll
      for (int k = 0; k < kPacks; k++)
        if (k * kTeam + u < np)
#pragma unroll
          for (int e = 0; e < V; e++) {
            const int c = (k * kTeam + u) * V + e;
            s_sum[c] = (t ? s_sum[c] : 0.f) + aw[k][e];
            s_sum[h + c] = (t ? s_sum[h + c] : 0.f) + ab[k][e];
          }
    __syncthreads();
  }
  for (int c = threadIdx.x; c < 2 * h; c += kThreads)
    partial[(size_t)blockIdx.x * 2 * h + c] = s_sum[c];
}

// dw[j] += sum over chunks of partial[k, 0, j], db[j] likewise with [k, 1, j]:
// column c of the [chunks, 2h] partials summed by the 8 threads y (chunks y,
// y + 8, ...), then their 8 sums in order.
__global__ void layernorm_bwd_sum(float *__restrict__ dw, float *__restrict__ db,
                                  const float *__restrict__ partial, int chunks, int h) {
  __shared__ float s[8][33];
  const int c = blockIdx.x * 32 + threadIdx.x, y = threadIdx.y;
  float a = 0.f;
  if (c < 2 * h)
#pragma unroll 8
    for (int k = y; k < chunks; k += 8) a += partial[(size_t)k * 2 * h + c];
  s[y][threadIdx.x] = a;
  __syncthreads();
  if (y == 0 && c < 2 * h) {
    float t = 0.f;
    for (int k = 0; k < 8; k++) t += s[k][threadIdx.x];
    if (c < h)
      dw[c] += t;
    else if (db)  // RMSNorm: none
      db[c - h] += t;
  }
}

// Both norms' launchers; mean and b are null for RMSNorm.
template <class T, bool kRms>
void norm_forward(T *out, float *mean, float *rstd, const T *x, const T *w, const T *b, int N, int h,
                  float eps, cudaStream_t stream, const char *what) {
  if (N <= 0 || h <= 0) return;
  constexpr int V = kVec<T>;
  const int per_lane = (h / V + 31) / 32;  // packs per lane in the register kernel
  if (h % V == 0 && per_lane * V <= kMaxRegs && aligned16(out) && aligned16(x) &&
      aligned16(w) && (kRms || aligned16(b))) {
    const int blocks = (N + kRowsPerBlock - 1) / kRowsPerBlock;
    with_packs<T, kMaxRegs>(per_lane, [&](auto packs) {
      layernorm_fwd_regs<T, decltype(packs)::value, kRms>
          <<<blocks, 32 * kRowsPerBlock, 0, stream>>>(out, mean, rstd, x, w, b, N, h, eps);
    });
  } else {
    layernorm_fwd_loop<T, kRms><<<N, kThreads, 0, stream>>>(out, mean, rstd, x, w, b, h, eps);
  }
  check_launch(what);
}

template <class T, bool kRms>
void norm_backward(T *dx, float *dw, float *db, const T *dout, const T *x, const T *w,
                   const float *mean, const float *rstd, int N, int h, cudaStream_t stream,
                   const char *what) {
  if (N <= 0 || h <= 0) return;
  constexpr int V = kVec<T>;
  const bool vec = h % V == 0 && aligned16(dx) && aligned16(dout) && aligned16(x) && aligned16(w);
  const int per_thread = (h / V + kTeam - 1) / kTeam;  // packs per thread in the register kernel
  if (vec && per_thread * V <= kMaxBwdValues) {
    const int rows = bwd_rows_per_block(N), chunks = (N + rows - 1) / rows;
    const StreamScratch scratch(sizeof(float) * 2 * h * chunks, stream, what);
    with_packs<T, kMaxBwdValues>(per_thread, [&](auto packs) {
      layernorm_bwd_rows<T, decltype(packs)::value, kRms>
          <<<chunks, kThreads, sizeof(float) * 2 * h, stream>>>(dx, scratch.as<float>(), dout, x,
                                                                 w, mean, rstd, N, h, rows);
    });
    check_launch(what);
    layernorm_bwd_sum<<<(2 * h + 31) / 32, dim3(32, 8), 0, stream>>>(dw, db, scratch.as<float>(),
                                                                    chunks, h);
    check_launch(what);
    return;
  }
  const int chunks = (N + kChunk - 1) / kChunk;
  const StreamScratch scratch(sizeof(float) * 2 * h * chunks, stream, what);
  float *partial = scratch.as<float>();
  if (vec)
    layernorm_bwd_chunk<T, kVec<T>, kRms>
        <<<chunks, kThreads, 0, stream>>>(dx, partial, dout, x, w, mean, rstd, N, h);
  else
    layernorm_bwd_chunk<T, 1, kRms>
        <<<chunks, kThreads, 0, stream>>>(dx, partial, dout, x, w, mean, rstd, N, h);
  check_launch(what);
  layernorm_bwd_sum<<<(2 * h + 31) / 32, dim3(32, 8), 0, stream>>>(dw, db, partial, chunks, h);
  check_launch(what);
}

}  // namespace

template <class T>
void layernorm_forward(T *out, float *mean, float *rstd, const T *x, const T *w, const T *b, int N,
                       int h, float eps, cudaStream_t stream) {
  norm_forward<T, false>(out, mean, rstd, x, w, b, N, h, eps, stream, "layernorm_forward");
}

template <class T>
void layernorm_backward(T *dx, float *dw, float *db, const T *dout, const T *x, const T *w,
                        const float *mean, const float *rstd, int N, int h, cudaStream_t stream) {
  norm_backward<T, false>(dx, dw, db, dout, x, w, mean, rstd, N, h, stream, "layernorm_backward");
}

template <class T>
void rmsnorm_forward(T *out, float *rstd, const T *x, const T *w, int N, int h, float eps,
                     cudaStream_t stream) {
  norm_forward<T, true>(out, nullptr, rstd, x, w, nullptr, N, h, eps, stream, "rmsnorm_forward");
}

template <class T>
void rmsnorm_backward(T *dx, float *dw, const T *dout, const T *x, const T *w, const float *rstd,
                      int N, int h, cudaStream_t stream) {
  norm_backward<T, true>(dx, dw, nullptr, dout, x, w, nullptr, rstd, N, h, stream,
                         "rmsnorm_backward");
}

#define PTDP_INSTANTIATE(T)                                                                     \
  template void layernorm_forward<T>(T *, float *, float *, const T *, const T *, const T *, int, \
                                     int, float, cudaStream_t);                                 \
  template void layernorm_backward<T>(T *, float *, float *, const T *, const T *, const T *,     \
                                      const float *, const float *, int, int, cudaStream_t);    \
  template void rmsnorm_forward<T>(T *, float *, const T *, const T *, int, int, float,          \
                                   cudaStream_t);                                               \
  template void rmsnorm_backward<T>(T *, float *, const T *, const T *, const T *, const float *, \
                                    int, int, cudaStream_t);
PTDP_CUDA_STORAGE_TYPES(PTDP_INSTANTIATE)
#undef PTDP_INSTANTIATE

}  // namespace ptdp::cuda
