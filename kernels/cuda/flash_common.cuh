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

// Z_ij: the keep scale of probability (i, j) of (bi, head), 0 when dropped, as
// dropout_attention numbers it (element (head_offset + head)*s*s + i*s + j of
// sample sample_offset + bi; attention_keep's byte). One Philox call per
// element: the fallback when s % 16 != 0, and the CUDA-core kernels.
__device__ __forceinline__ float keep_scale(const Drop &d, int bi, int head, int s, int i, int j) {
  if (!d.on) return 1.f;
  const uint64_t e = (uint64_t)(d.head_offset + head) * s * s + (uint64_t)i * s + j;
  const uint32_t byte = draw_byte(attention_draws(d.key, d.sample_offset + (uint32_t)bi, e >> 4), (int)(e & 15));
  return byte >= d.threshold ? d.scale : 0.f;
}
__device__ __forceinline__ float keep_of(const Drop &d, uint32_t mask, int bit) {
  return (mask >> bit) & 1u ? d.scale : 0.f;
}

// The keep bits of keys j .. j + 15 of query i (bit n: key j + n), one Philox
// call: the 16 draws of one chunk when s % 16 == 0 and j % 16 == 0. Per byte
// >= threshold (__vcmpgeu4), the four bytes' top bits gathered by a multiply.
__device__ __forceinline__ uint32_t chunk_keep_bits(const Drop &d, int bi, int head, int s, int i, int j) {
  const uint64_t e = (uint64_t)(d.head_offset + head) * s * s + (uint64_t)i * s + j;
  const Philox4x32 r = attention_draws(d.key, d.sample_offset + (uint32_t)bi, e >> 4);
  const uint32_t thr = d.threshold * 0x01010101u;
  uint32_t bits = 0;
#pragma unroll
  for (int w = 0; w < 4; w++)
    bits |= (((__vcmpgeu4(r.v[w], thr) & 0x80808080u) * 0x00204081u) >> 28) << (4 * w);
  return bits;
}

// The keep bits of a lane's elements of kN 8-key blocks of C tiles whose rows
// are queries: bit 4 nt + e for block nt's c[e] (query row[e / 2], key j0 +
// 8 nt + 2t + (e & 1); t = lane % 4). Rows row[0] = r0 + g, row[1] = r0 + g +
// 8 (g = lane / 4). When s % 16 == 0 (and j0 % 16 == 0) the quad of a row pair
// draws its 2 kN / 2 chunks (a row's 16 keys a call) and passes them round in
// kN / 2 shuffles; chunks past last_key (the causal diagonal) are not drawn.
// Called by all 32 lanes (it shuffles).
template <int kN>
__device__ __forceinline__ uint32_t keep_rows_mask(const Drop &d, int bi, int head, int s, int r0, int j0,
                                                   int last_key, int lane) {
  static_assert(kN == 4 || kN == 8, "a tile of 32 or 64 keys");
  constexpr int C = kN / 2;  // 16-key chunks
  const int g = lane / 4, t = lane % 4;
  uint32_t mask = 0;
  if (s % 16 != 0) {
#pragma unroll
    for (int nt = 0; nt < kN; nt++)
#pragma unroll
      for (int e = 0; e < 4; e++)
        if (keep_scale(d, bi, head, s, r0 + g + 8 * (e / 2), j0 + 8 * nt + 2 * t + (e & 1)) != 0.f)
          mask |= 1u << (4 * nt + e);
    return mask;
  }
  // own: C = 4: chunk t of rows g (bits 0..15) and g + 8 (16..31); C = 2:
  // chunk t & 1 of row g + 8 (t >> 1), in bits 0..15.
  uint32_t own = 0;
  if constexpr (C == 4) {
    if (j0 + 16 * t <= last_key)
      own = chunk_keep_bits(d, bi, head, s, r0 + g, j0 + 16 * t) |
            chunk_keep_bits(d, bi, head, s, r0 + g + 8, j0 + 16 * t) << 16;
  } else {
    if (j0 + 16 * (t & 1) <= last_key)
      own = chunk_keep_bits(d, bi, head, s, r0 + g + 8 * (t >> 1), j0 + 16 * (t & 1));
  }
#pragma unroll
  for (int k = 0; k < C; k++) {
    uint32_t m;  // chunk k: row g in bits 0..15, row g + 8 in 16..31
    if constexpr (C == 4)
      m = __shfl_sync(0xffffffffu, own, (lane & ~3) | k);
    else
      m = __shfl_sync(0xffffffffu, own, (lane & ~3) | k) |
          __shfl_sync(0xffffffffu, own, (lane & ~3) | 2 | k) << 16;
    // Blocks 2k (keys 2t.. of the chunk) and 2k + 1 (keys 8 + 2t..).
#pragma unroll
    for (int h = 0; h < 2; h++) {
      const uint32_t w = m >> (8 * h + 2 * t);
      const int nt = 2 * k + h;
      mask |= (w & 1u) << (4 * nt) | ((w >> 1) & 1u) << (4 * nt + 1) | ((w >> 16) & 1u) << (4 * nt + 2) |
              ((w >> 17) & 1u) << (4 * nt + 3);
    }
  }
  return mask;
}

// The same for the transposed C tiles of the backward (rows are keys): bit 4
// nt + e for block nt's c[e] (key k0 + g + 8 (e / 2), query q0 + 8 nt + 2t +
// (e & 1)), four blocks (32 queries). When s % 16 == 0 (and k0 % 16 == 0) lane
// L draws query q0 + L's chunk of the 16 keys (queries before k0 see none:
// not drawn) and five shuffles hand the bits round. Called by all 32 lanes.
__device__ __forceinline__ uint32_t keep_cols_mask(const Drop &d, int bi, int head, int s, int k0, int q0,
                                                   int lane) {
  const int g = lane / 4, t = lane % 4;
  uint32_t mask = 0;
  if (s % 16 != 0) {
#pragma unroll
    for (int nt = 0; nt < 4; nt++)
#pragma unroll
      for (int e = 0; e < 4; e++)
        if (keep_scale(d, bi, head, s, q0 + 8 * nt + 2 * t + (e & 1), k0 + g + 8 * (e / 2)) != 0.f)
          mask |= 1u << (4 * nt + e);
    return mask;
  }
  const int i = q0 + lane;
  const uint32_t own = i >= k0 && i < s ? chunk_keep_bits(d, bi, head, s, i, k0) : 0u;
  const uint32_t pair = own | __shfl_xor_sync(0xffffffffu, own, 1) << 16;  // even lanes: queries L, L + 1
#pragma unroll
  for (int nt = 0; nt < 4; nt++) {
    const uint32_t w = __shfl_sync(0xffffffffu, pair, 8 * nt + 2 * t) >> g;
    mask |= (w & 1u) << (4 * nt) | ((w >> 16) & 1u) << (4 * nt + 1) | ((w >> 8) & 1u) << (4 * nt + 2) |
            ((w >> 24) & 1u) << (4 * nt + 3);
  }
  return mask;
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
