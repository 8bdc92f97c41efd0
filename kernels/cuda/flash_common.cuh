// What the two fused-attention implementations share: the CUDA-core kernels
// (flash_attention.cu) and the tensor-core ones (flash_attention_mma.cu). Both
// number the dropout elements as dropout_attention does, keep each row's
// log-sum-exp, and sum the backward without atomics.
#pragma once
#include <cstddef>
#include <cstdint>

#include "engine/core/philox.h"
#include "engine/core/status.h"
#include "kernels/cuda/dropout_mask.cuh"
#include "kernels/cuda/storage.cuh"

namespace ptdp::cuda::flash {

constexpr int kMaxHeadDim = 128;
constexpr int kDotWarps = 4;  // dot_rows: rows per block

// v.v[k] for a run-time k in 0..3, as selects (a run-time index into an array
// would move it to local memory).
__device__ __forceinline__ uint32_t pick(const Philox4x32 &v, int k) {
  return k == 0 ? v.v[0] : k == 1 ? v.v[1] : k == 2 ? v.v[2] : v.v[3];
}

// Z_ij: the keep scale of probability (i, j) of (bi, head), 0 when dropped, as
// dropout_attention numbers it (element (head_offset + head)*s*s + i*s + j of
// sample sample_offset + bi). One Philox call per element.
__device__ __forceinline__ float keep_scale(const Drop &d, int bi, int head, int s, int i, int j) {
  if (!d.on) return 1.f;
  const uint64_t e = (uint64_t)(d.head_offset + head) * s * s + (uint64_t)i * s + j;
  const uint32_t bits = pick(dropout_quad(d.key, d.sample_offset + (uint32_t)bi, e >> 2), (int)(e & 3));
  return bits >= d.threshold ? d.scale : 0.f;
}

// The four draws of elements (i, j4 .. j4 + 3) of (bi, head): one Philox call.
// One quad of dropout_quad when s % 4 == 0 and j4 % 4 == 0 (then i*s + j4 starts a quad).
__device__ __forceinline__ Philox4x32 quad_draws(const Drop &d, int bi, int head, int s, int i, int j4) {
  const uint64_t e = (uint64_t)(d.head_offset + head) * s * s + (uint64_t)i * s + j4;
  return dropout_quad(d.key, d.sample_offset + (uint32_t)bi, e >> 2);
}
__device__ __forceinline__ float keep_of(const Drop &d, uint32_t bits) {
  return bits >= d.threshold ? d.scale : 0.f;
}

// Z of a lane's four elements of an m16n8 C tile whose rows are queries:
// z[2r + c] for query row[r], key j + c (j = the tile's first key + 2t, t =
// lane % 4). The lanes t and t ^ 1 hold the two halves of each row's quad, so
// when s % 4 == 0 each draws one quad (t even: row[0]'s, t odd: row[1]'s) and
// passes the other its half: one Philox call per four elements, the same bits
// as keep_scale. Called by all 32 lanes (it shuffles).
__device__ __forceinline__ void keep_rows(float (&z)[4], const Drop &d, int bi, int head, int s,
                                          const int (&row)[2], int j, int t) {
  if (s % 4 != 0) {
#pragma unroll
    for (int e = 0; e < 4; e++) z[e] = keep_scale(d, bi, head, s, row[e / 2], j + (e & 1));
    return;
  }
  const bool odd = t & 1;
  const Philox4x32 v = quad_draws(d, bi, head, s, odd ? row[1] : row[0], j & ~3);
  const uint32_t own0 = odd ? v.v[2] : v.v[0], own1 = odd ? v.v[3] : v.v[1];
  const uint32_t got0 = __shfl_xor_sync(0xffffffffu, odd ? v.v[0] : v.v[2], 1);
  const uint32_t got1 = __shfl_xor_sync(0xffffffffu, odd ? v.v[1] : v.v[3], 1);
  z[0] = keep_of(d, odd ? got0 : own0);
  z[1] = keep_of(d, odd ? got1 : own1);
  z[2] = keep_of(d, odd ? own0 : got0);
  z[3] = keep_of(d, odd ? own1 : got1);
}

// The same for a C tile whose rows are keys (the transposed products of the
// backward): z[2r + c] for key key0 + g + 8r, query i + c (i = the tile's
// first query + 2t; key0 % 4 == 0, g = lane / 4). The four lanes g = 4a .. 4a
// + 3 of one t hold, between them, four quads (queries i, i + 1 times keys
// key0 + 4a.., key0 + 4a + 8..); lane k = g % 4 draws quad k and element k of
// each quad reaches lane k in four shuffles. Called by all 32 lanes.
__device__ __forceinline__ void keep_cols(float (&z)[4], const Drop &d, int bi, int head, int s,
                                          int key0, int i, int g, int lane) {
  if (s % 4 != 0) {
#pragma unroll
    for (int e = 0; e < 4; e++) z[e] = keep_scale(d, bi, head, s, i + (e & 1), key0 + g + 8 * (e / 2));
    return;
  }
  const int k = g & 3;
  // Quad q (of lane k = q): query i + (q & 1), keys key0 + (g & ~3) + 8 (q >> 1) ...: element e = q.
  const Philox4x32 v = quad_draws(d, bi, head, s, i + (k & 1), key0 + (g & ~3) + 8 * (k >> 1));
  uint32_t got[4];  // got[r]: element k of quad (k + r) & 3
#pragma unroll
  for (int r = 0; r < 4; r++)
    got[r] = __shfl_sync(0xffffffffu, pick(v, (k - r) & 3), lane + 4 * (((k + r) & 3) - k));
#pragma unroll
  for (int e = 0; e < 4; e++) {
    const int r = (e - k) & 3;
    z[e] = keep_of(d, r == 0 ? got[0] : r == 1 ? got[1] : r == 2 ? got[2] : got[3]);
  }
}

// D[bh*s + i] = dO_i . O_i (= sum_j P_ij dP_ij), one warp per row of a head.
template <class T>
__global__ void __launch_bounds__(32 * kDotWarps)
    dot_rows(float *D, const T *dctx, const T *ctx, int s, int bhs, int hd) {
  const int64_t row = (int64_t)blockIdx.x * kDotWarps + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= (int64_t)bhs * s) return;
  const int bh = (int)(row / s), i = (int)(row % s);
  const size_t off = (size_t)i * bhs * hd + (size_t)bh * hd;  // ctx row stride b*heads*hd
  float acc = 0.f;
  for (int d = lane; d < hd; d += 32) acc += to_f32(dctx[off + d]) * to_f32(ctx[off + d]);
  acc = warp_sum(acc);
  if (lane == 0) D[row] = acc;
}

// D for the backward of [b * heads, s] rows, in stream-ordered scratch.
struct RowDots {
  StreamScratch scratch;
  float *D;
  template <class T>
  RowDots(const T *dctx, const T *ctx, int s, int bh, int hd, cudaStream_t stream)
      : scratch(sizeof(float) * (size_t)bh * s, stream, "flash_attention_backward scratch (D)"),
        D(scratch.as<float>()) {
    const int64_t rows = (int64_t)bh * s;
    dot_rows<T><<<(int)((rows + kDotWarps - 1) / kDotWarps), 32 * kDotWarps, 0, stream>>>(
        D, dctx, ctx, s, bh, hd);
    check_launch("flash_attention_backward (D)");
  }
};

inline void check_head_dim(int hd, const char *what) {
  if (hd < 1 || hd > kMaxHeadDim)
    fail(Status::invalid_argument, what, ": head dim hd=", hd, " is not in [1, ", kMaxHeadDim, "]");
}

// Dynamic shared memory above the default 48 KiB needs an opt-in per kernel.
template <class Kernel>
void allow_smem(Kernel kernel, size_t bytes) {
  if (bytes > 48 * 1024)
    check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes),
          "flash_attention: cudaFuncSetAttribute");
}

// Blocks for the tiles of `tile` rows of each of bh heads, as an int grid.
inline int grid_blocks(int s, int tile, int bh, const char *what) {
  const int64_t n = (int64_t)((s + tile - 1) / tile) * bh;
  if (n > INT32_MAX) fail(Status::invalid_argument, what, ": too many blocks (", n, ")");
  return (int)n;
}

}  // namespace ptdp::cuda::flash
