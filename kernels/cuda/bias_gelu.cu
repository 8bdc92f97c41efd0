// Bias + GeLU (tanh approximation) for the storage types: fp32 arithmetic,
// each stored T rounded once; kernels/cpu/bias_gelu.cpp with tanhf for the
// CPU's polynomial tanh. Element-wise, 16 bytes per access where the sizes and
// pointers allow it.
#include <cstdint>

#include "engine/core/status.h"
#include "kernels/kernels.h"
#include "kernels/cuda/storage.cuh"

namespace ptdp::cuda {

namespace {

constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kCoeff = 0.044715f;
constexpr float kCoeff3 = (float)(3 * 0.044715);  // as the CPU's T(3 * kCoeff)

__device__ __forceinline__ float gelu_tanh(float v) {
  const float u = kSqrt2OverPi * (v + kCoeff * v * v * v);
  return 0.5f * v * (1.f + tanhf(u));
}

// d gelu_tanh / dv.
__device__ __forceinline__ float gelu_tanh_grad(float v) {
  const float th = tanhf(kSqrt2OverPi * (v + kCoeff * v * v * v));
  const float du = kSqrt2OverPi * (1.f + kCoeff3 * v * v);
  return 0.5f * (1.f + th) + 0.5f * v * (1.f - th * th) * du;
}

// z = y + bias (bias may be null), out = gelu(z) over n groups of W elements, fW = f / W groups per
// row. z may alias y (each group is read before it is written, by one thread).
template <class T, int W>
__global__ void bias_gelu_fwd(T *z, T *out, const T *y, const T *bias, size_t n, int fW) {
  using Pack = Vec<T, W>;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x) {
    const Pack yq = reinterpret_cast<const Pack *>(y)[i];
    Pack bq{};
    if (bias) bq = reinterpret_cast<const Pack *>(bias)[i % fW];
    Pack zq, oq;
#pragma unroll
    for (int e = 0; e < W; e++) {
      const float v = bias ? to_f32(yq.v[e]) + to_f32(bq.v[e]) : to_f32(yq.v[e]);
      zq.v[e] = from_f32<T>(v);
      oq.v[e] = from_f32<T>(gelu_tanh(v));
    }
    reinterpret_cast<Pack *>(z)[i] = zq;
    reinterpret_cast<Pack *>(out)[i] = oq;
  }
}

// dz = dout * gelu'(z) over n groups of W elements; dz may alias dout.
template <class T, int W>
__global__ void bias_gelu_bwd(T *dz, const T *dout, const T *z, size_t n) {
  using Pack = Vec<T, W>;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x) {
    const Pack gq = reinterpret_cast<const Pack *>(dout)[i];
    const Pack zq = reinterpret_cast<const Pack *>(z)[i];
    Pack d;
#pragma unroll
    for (int e = 0; e < W; e++)
      d.v[e] = from_f32<T>(to_f32(gq.v[e]) * gelu_tanh_grad(to_f32(zq.v[e])));
    reinterpret_cast<Pack *>(dz)[i] = d;
  }
}

constexpr int kThreads = 256;

}  // namespace

template <class T>
void bias_gelu_forward(T *z, T *out, const T *y, const T *bias, int N, int f, cudaStream_t stream) {
  const size_t n = (size_t)N * f;
  if (n == 0) return;
  constexpr int V = kVec<T>;
  if (f % V == 0 && aligned16(z) && aligned16(out) && aligned16(y) && aligned16(bias))
    bias_gelu_fwd<T, V>
        <<<grid_for(n / V, kThreads), kThreads, 0, stream>>>(z, out, y, bias, n / V, f / V);
  else
    bias_gelu_fwd<T, 1><<<grid_for(n, kThreads), kThreads, 0, stream>>>(z, out, y, bias, n, f);
  check_launch("bias_gelu_forward");
}

template <class T>
void bias_gelu_backward(T *dz, float *dbias, const T *dout, const T *z, int N, int f,
                        cudaStream_t stream) {
  const size_t n = (size_t)N * f;
  if (n == 0) return;
  constexpr int V = kVec<T>;
  if (n % V == 0 && aligned16(dz) && aligned16(dout) && aligned16(z))
    bias_gelu_bwd<T, V><<<grid_for(n / V, kThreads), kThreads, 0, stream>>>(dz, dout, z, n / V);
  else
    bias_gelu_bwd<T, 1><<<grid_for(n, kThreads), kThreads, 0, stream>>>(dz, dout, z, n);
  check_launch("bias_gelu_backward");
  // The sum of the stored (rounded) dz, as a CPU run in T would sum it.
  if (dbias) colsum_accumulate<T>(dbias, dz, N, f, stream);
}

#define PTDP_INSTANTIATE(T)                                                                   \
  template void bias_gelu_forward<T>(T *, T *, const T *, const T *, int, int, cudaStream_t); \
  template void bias_gelu_backward<T>(T *, float *, const T *, const T *, int, int, cudaStream_t);
PTDP_CUDA_STORAGE_TYPES(PTDP_INSTANTIATE)
#undef PTDP_INSTANTIATE

}  // namespace ptdp::cuda
