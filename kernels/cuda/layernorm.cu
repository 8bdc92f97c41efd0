#include "kernels/cuda/ops_cuda.h"

namespace ptdp::cuda {

namespace {

constexpr int kThreads = 256;

__device__ float block_sum(float v, float *shared) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  v = threadIdx.x < blockDim.x / 32 ? shared[threadIdx.x] : 0.f;
  if (warp == 0)
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  if (threadIdx.x == 0) shared[0] = v;
  __syncthreads();
  v = shared[0];
  __syncthreads();  // shared is reused by the next reduction
  return v;
}

// Two passes over the row (mean, then variance of the deviations), as the CPU kernel.
__global__ void layernorm_kernel(float *out, float *mean, float *rstd, const float *x,
                                 const float *w, const float *b, int h, float eps) {
  __shared__ float shared[32];
  const float *xr = x + (size_t)blockIdx.x * h;
  float *yr = out + (size_t)blockIdx.x * h;
  float s = 0.f;
  for (int j = threadIdx.x; j < h; j += blockDim.x) s += xr[j];
  const float m = block_sum(s, shared) / h;
  float v = 0.f;
  for (int j = threadIdx.x; j < h; j += blockDim.x) v += (xr[j] - m) * (xr[j] - m);
  const float r = rsqrtf(block_sum(v, shared) / h + eps);
  for (int j = threadIdx.x; j < h; j += blockDim.x) yr[j] = (xr[j] - m) * r * w[j] + b[j];
  if (threadIdx.x == 0) {
    mean[blockIdx.x] = m;
    rstd[blockIdx.x] = r;
  }
}

}  // namespace

void layernorm_forward(float *out, float *mean, float *rstd, const float *x, const float *w,
                       const float *b, int N, int h, float eps, cudaStream_t stream) {
  if (N <= 0) return;
  layernorm_kernel<<<N, kThreads, 0, stream>>>(out, mean, rstd, x, w, b, h, eps);
}

}  // namespace ptdp::cuda
