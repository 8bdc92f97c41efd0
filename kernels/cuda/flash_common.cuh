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
// sample sample_offset + bi). One Philox call per element.
__device__ __forceinline__ float keep_scale(const Drop &d, int bi, int head, int s, int i, int j) {
  if (!d.on) return 1.f;
  const uint64_t e = (uint64_t)(d.head_offset + head) * s * s + (uint64_t)i * s + j;
  return dropout_bits(d.key, d.sample_offset + (uint32_t)bi, e) >= d.threshold ? d.scale : 0.f;
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
