#include <algorithm>
#include <cstdint>

#include "kernels/cuda/ops_cuda.h"

namespace ptdp::cuda {

namespace {

__device__ __forceinline__ float gelu_tanh(float v) {
  const float u = 0.7978845608028654f * (v + 0.044715f * v * v * v);
  return 0.5f * v * (1.f + tanhf(u));
}

// Four elements per thread with 16-byte accesses when f is a multiple of 4.
__global__ void bias_gelu_vec4(float4 *z, float4 *out, const float4 *y, const float4 *bias,
                               size_t n4, int f4) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n4;
       i += (size_t)gridDim.x * blockDim.x) {
    float4 v = y[i], bb = bias[i % f4];
    v.x += bb.x;
    v.y += bb.y;
    v.z += bb.z;
    v.w += bb.w;
    z[i] = v;
    out[i] = make_float4(gelu_tanh(v.x), gelu_tanh(v.y), gelu_tanh(v.z), gelu_tanh(v.w));
  }
}

__global__ void bias_gelu_scalar(float *z, float *out, const float *y, const float *bias, size_t n,
                                 int f) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x) {
    float v = y[i] + bias[i % f];
    z[i] = v;
    out[i] = gelu_tanh(v);
  }
}

}  // namespace

void bias_gelu_forward(float *z, float *out, const float *y, const float *bias, int N, int f,
                       cudaStream_t stream) {
  const size_t n = (size_t)N * f;
  if (n == 0) return;
  const int threads = 256;
  auto aligned = [](const void *p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  if (f % 4 == 0 && aligned(z) && aligned(out) && aligned(y) && aligned(bias)) {
    size_t n4 = n / 4;
    int blocks = (int)std::min<size_t>((n4 + threads - 1) / threads, 65535);
    bias_gelu_vec4<<<blocks, threads, 0, stream>>>(reinterpret_cast<float4 *>(z),
                                                   reinterpret_cast<float4 *>(out),
                                                   reinterpret_cast<const float4 *>(y),
                                                   reinterpret_cast<const float4 *>(bias), n4,
                                                   f / 4);
  } else {
    int blocks = (int)std::min<size_t>((n + threads - 1) / threads, 65535);
    bias_gelu_scalar<<<blocks, threads, 0, stream>>>(z, out, y, bias, n, f);
  }
}

}  // namespace ptdp::cuda
