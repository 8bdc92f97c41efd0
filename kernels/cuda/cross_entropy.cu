#include <cfloat>
#include <cstdint>

#include "kernels/cuda/ops_cuda.h"

namespace ptdp::cuda {

namespace {

// Block-wide reduction through shared memory (blockDim.x a power of two <= 1024).
template <bool kMax>
__device__ float block_reduce(float v, float *shared) {
  const int t = threadIdx.x;
  shared[t] = v;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (t < s) shared[t] = kMax ? fmaxf(shared[t], shared[t + s]) : shared[t] + shared[t + s];
    __syncthreads();
  }
  const float r = shared[0];
  __syncthreads();
  return r;
}

// One block per row: max, then sum of exp(l - max), over the V real columns.
__global__ void cross_entropy_rows(float *losses, const float *logits, const int32_t *targets,
                                   int Vp, int V) {
  extern __shared__ float shared[];
  const float *row = logits + (size_t)blockIdx.x * Vp;
  float m = -FLT_MAX;
  for (int j = threadIdx.x; j < V; j += blockDim.x) m = fmaxf(m, row[j]);
  m = block_reduce<true>(m, shared);
  float sum = 0.f;
  for (int j = threadIdx.x; j < V; j += blockDim.x) sum += expf(row[j] - m);
  sum = block_reduce<false>(sum, shared);
  if (threadIdx.x == 0) losses[blockIdx.x] = logf(sum) + m - row[targets[blockIdx.x]];
}

}  // namespace

void cross_entropy_forward(float *losses, const float *logits, const int32_t *targets, int N,
                           int Vp, int V, cudaStream_t stream) {
  if (N == 0) return;
  const int threads = 256;
  cross_entropy_rows<<<N, threads, threads * sizeof(float), stream>>>(losses, logits, targets, Vp, V);
}

}  // namespace ptdp::cuda
