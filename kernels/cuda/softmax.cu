// Scale + mask + softmax over the last dim of attention scores, forward and
// backward, for the storage types (fp32 arithmetic, each stored T rounded
// once): kernels/cpu/softmax.cpp with expf. One warp per row, the row held in
// registers when it fits (s_k <= 32 * kMaxRegs), three passes over global
// memory otherwise.
#include <cstdint>
#include <type_traits>

#include "engine/core/status.h"
#include "kernels/kernels.h"
#include "kernels/cuda/storage.cuh"

namespace ptdp::cuda {

namespace {

// Butterflies: every lane ends with the same value.
__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

constexpr int kRowsPerBlock = 4;  // one warp per row
constexpr int kMaxRegs = 64;      // row values per lane (per array) kept in registers

// Forward with the row in registers: lane holds packs lane, lane + 32, ... (kPacks
// of kVec<T> values), masked entries as -inf. Packs past the causal bound are not
// read. Needs s_k % kVec<T> == 0 and 16-byte aligned P, S. P may alias S (the
// row is read before it is written).
template <class T, int kPacks>
__global__ void softmax_fwd_regs(T *P, const T *S, int rows, int s_q, int s_k, float scale,
                                 bool causal, const uint8_t *mask) {
  constexpr int V = kVec<T>;
  using Pack = Vec<T, V>;
  const int row = blockIdx.x * kRowsPerBlock + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (row >= rows) return;
  const int i = row % s_q, np = s_k / V;
  const int jend = causal ? min(i + 1, s_k) : s_k;  // visible: j < jend and not masked
  const uint8_t *mrow = mask ? mask + (size_t)i * s_k : nullptr;
  const Pack *src = reinterpret_cast<const Pack *>(S + (size_t)row * s_k);
  float v[kPacks][V];  // [pack, element]: scale * S, then exp(scale * S - max)
  float mx = -INFINITY;
#pragma unroll
  for (int k = 0; k < kPacks; k++) {
    const int p = k * 32 + lane, j0 = p * V;
    if (p < np && j0 < jend) {
      const Pack q = src[p];
#pragma unroll
      for (int e = 0; e < V; e++) {
        const bool visible = j0 + e < jend && !(mrow && mrow[j0 + e]);
        v[k][e] = visible ? to_f32(q.v[e]) * scale : -INFINITY;
        mx = fmaxf(mx, v[k][e]);
      }
    } else {
#pragma unroll
      for (int e = 0; e < V; e++) v[k][e] = -INFINITY;
    }
  }
  mx = warp_max(mx);
  const bool empty = mx == -INFINITY;  // fully masked row: zeros
  float sum = 0.f;
#pragma unroll
  for (int k = 0; k < kPacks; k++)
#pragma unroll
    for (int e = 0; e < V; e++) sum += v[k][e] = empty ? 0.f : expf(v[k][e] - mx);
  sum = warp_sum(sum);
  const float inv = empty ? 0.f : 1.f / sum;
  Pack *dst = reinterpret_cast<Pack *>(P + (size_t)row * s_k);
#pragma unroll
  for (int k = 0; k < kPacks; k++) {
    const int p = k * 32 + lane;
    if (p < np) {
      Pack o;
#pragma unroll
      for (int e = 0; e < V; e++) o.v[e] = from_f32<T>(v[k][e] * inv);
      dst[p] = o;
    }
  }
}

// Forward fallback (any s_k, any alignment): max, sum of exponentials, normalise,
// three passes over a row that stays in L1/L2. P may alias S: the last pass reads
// and writes each element in the same lane.
template <class T>
__global__ void softmax_fwd_loop(T *P, const T *S, int rows, int s_q, int s_k, float scale,
                                 bool causal, const uint8_t *mask) {
  const int row = blockIdx.x * kRowsPerBlock + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (row >= rows) return;
  const int i = row % s_q;
  const int jend = causal ? min(i + 1, s_k) : s_k;
  const uint8_t *mrow = mask ? mask + (size_t)i * s_k : nullptr;
  const T *src = S + (size_t)row * s_k;
  T *dst = P + (size_t)row * s_k;
  float mx = -INFINITY;
  for (int j = lane; j < jend; j += 32)
    if (!mrow || !mrow[j]) mx = fmaxf(mx, to_f32(src[j]) * scale);
  mx = warp_max(mx);
  const bool empty = mx == -INFINITY;
  float sum = 0.f;
  for (int j = lane; j < jend && !empty; j += 32)
    if (!mrow || !mrow[j]) sum += expf(to_f32(src[j]) * scale - mx);
  sum = warp_sum(sum);
  const float inv = empty ? 0.f : 1.f / sum;
  for (int j = lane; j < s_k; j += 32) {
    const bool visible = !empty && j < jend && (!mrow || !mrow[j]);
    dst[j] = from_f32<T>(visible ? expf(to_f32(src[j]) * scale - mx) * inv : 0.f);
  }
}

// Backward with the row in registers: dS = scale * P * (dP - sum_j P * dP).
// dS may alias dP (the row is read before it is written).
template <class T, int kPacks>
__global__ void softmax_bwd_regs(T *dS, const T *P, const T *dP, int rows, int s_k, float scale) {
  constexpr int V = kVec<T>;
  using Pack = Vec<T, V>;
  const int row = blockIdx.x * kRowsPerBlock + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (row >= rows) return;
  const int np = s_k / V;
  const Pack *pr = reinterpret_cast<const Pack *>(P + (size_t)row * s_k);
  const Pack *gr = reinterpret_cast<const Pack *>(dP + (size_t)row * s_k);
  float p[kPacks][V], g[kPacks][V];  // unset where pack >= np (never read)
  float dot = 0.f;
#pragma unroll
  for (int k = 0; k < kPacks; k++) {
    const int q = k * 32 + lane;
    if (q < np) {
      const Pack pq = pr[q], gq = gr[q];
#pragma unroll
      for (int e = 0; e < V; e++) {
        p[k][e] = to_f32(pq.v[e]);
        g[k][e] = to_f32(gq.v[e]);
        dot += p[k][e] * g[k][e];
      }
    }
  }
  dot = warp_sum(dot);
  Pack *dst = reinterpret_cast<Pack *>(dS + (size_t)row * s_k);
#pragma unroll
  for (int k = 0; k < kPacks; k++) {
    const int q = k * 32 + lane;
    if (q < np) {
      Pack o;
#pragma unroll
      for (int e = 0; e < V; e++) o.v[e] = from_f32<T>(scale * p[k][e] * (g[k][e] - dot));
      dst[q] = o;
    }
  }
}

// Backward fallback: two passes over the row; dS may alias dP.
template <class T>
__global__ void softmax_bwd_loop(T *dS, const T *P, const T *dP, int rows, int s_k, float scale) {
  const int row = blockIdx.x * kRowsPerBlock + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (row >= rows) return;
  const T *p = P + (size_t)row * s_k, *g = dP + (size_t)row * s_k;
  T *d = dS + (size_t)row * s_k;
  float dot = 0.f;
  for (int j = lane; j < s_k; j += 32) dot += to_f32(p[j]) * to_f32(g[j]);
  dot = warp_sum(dot);
  for (int j = lane; j < s_k; j += 32)
    d[j] = from_f32<T>(scale * to_f32(p[j]) * (to_f32(g[j]) - dot));
}

// Packs per lane when a row of s_k fits the register kernels, else 0.
template <class T>
int packs_per_lane(int s_k, const void *a, const void *b, const void *c = nullptr) {
  constexpr int V = kVec<T>;
  const int per_lane = (s_k / V + 31) / 32;
  const bool ok = s_k % V == 0 && per_lane * V <= kMaxRegs && aligned16(a) && aligned16(b) &&
                  aligned16(c);
  return ok ? per_lane : 0;
}

}  // namespace

template <class T>
void scale_mask_softmax_forward(T *P, const T *S, int batch, int s_q, int s_k, float scale,
                                bool causal, const uint8_t *mask, cudaStream_t stream) {
  const int rows = batch * s_q;
  if (rows <= 0 || s_k <= 0) return;
  const int blocks = (rows + kRowsPerBlock - 1) / kRowsPerBlock, threads = 32 * kRowsPerBlock;
  if (const int per_lane = packs_per_lane<T>(s_k, P, S))
    with_packs<T, kMaxRegs>(per_lane, [&](auto packs) {
      softmax_fwd_regs<T, decltype(packs)::value>
          <<<blocks, threads, 0, stream>>>(P, S, rows, s_q, s_k, scale, causal, mask);
    });
  else
    softmax_fwd_loop<T><<<blocks, threads, 0, stream>>>(P, S, rows, s_q, s_k, scale, causal, mask);
  check_launch("scale_mask_softmax_forward");
}

template <class T>
void scale_mask_softmax_backward(T *dS, const T *P, const T *dP, int batch, int s_q, int s_k,
                                 float scale, cudaStream_t stream) {
  const int rows = batch * s_q;
  if (rows <= 0 || s_k <= 0) return;
  const int blocks = (rows + kRowsPerBlock - 1) / kRowsPerBlock, threads = 32 * kRowsPerBlock;
  if (const int per_lane = packs_per_lane<T>(s_k, dS, P, dP))
    with_packs<T, kMaxRegs>(per_lane, [&](auto packs) {
      softmax_bwd_regs<T, decltype(packs)::value>
          <<<blocks, threads, 0, stream>>>(dS, P, dP, rows, s_k, scale);
    });
  else
    softmax_bwd_loop<T><<<blocks, threads, 0, stream>>>(dS, P, dP, rows, s_k, scale);
  check_launch("scale_mask_softmax_backward");
}

#define PTDP_INSTANTIATE(T)                                                                     \
  template void scale_mask_softmax_forward<T>(T *, const T *, int, int, int, float, bool,        \
                                              const uint8_t *, cudaStream_t);                   \
  template void scale_mask_softmax_backward<T>(T *, const T *, const T *, int, int, int, float, \
                                               cudaStream_t);
PTDP_CUDA_STORAGE_TYPES(PTDP_INSTANTIATE)
#undef PTDP_INSTANTIATE

}  // namespace ptdp::cuda
