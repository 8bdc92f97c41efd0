#include <cfloat>

#include "kernels/cuda/ops_cuda.h"

namespace ptdp::cuda {

namespace {

// One warp per row: max, sum of exponentials, normalise (three passes over a
// row that stays in L1/L2).
__global__ void softmax_rows(float *P, const float *S, int rows, int s_q, int s_k, float scale,
                             bool causal) {
  const int warps_per_block = blockDim.x / 32;
  const int row = blockIdx.x * warps_per_block + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (row >= rows) return;
  const int i = row % s_q;
  const float *src = S + (size_t)row * s_k;
  float *dst = P + (size_t)row * s_k;
  const int jend = causal ? min(i + 1, s_k) : s_k;
  float mx = -FLT_MAX;
  for (int j = lane; j < jend; j += 32) mx = fmaxf(mx, src[j] * scale);
  for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
  float sum = 0.f;
  for (int j = lane; j < jend; j += 32) sum += expf(src[j] * scale - mx);
  for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
  const float inv = jend > 0 ? 1.f / sum : 0.f;
  for (int j = lane; j < s_k; j += 32) dst[j] = j < jend ? expf(src[j] * scale - mx) * inv : 0.f;
}

}  // namespace

void scale_mask_softmax_forward(float *P, const float *S, int batch, int s_q, int s_k,
                                float scale, bool causal, cudaStream_t stream) {
  const int rows = batch * s_q;
  if (rows <= 0 || s_k <= 0) return;
  const int threads = 256, per_block = threads / 32;
  softmax_rows<<<(rows + per_block - 1) / per_block, threads, 0, stream>>>(P, S, rows, s_q, s_k,
                                                                          scale, causal);
}

}  // namespace ptdp::cuda
