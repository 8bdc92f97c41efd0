// SwiGLU for the storage types (kernels/cpu/swiglu.cpp): fp32 arithmetic, each
// stored T rounded once, expf for the CPU's exp. Element-wise over the [N, f]
// outputs, W of them a thread (16 bytes when f and the pointers allow it); the
// gate and up values of a thread's outputs are read by that thread only, so z
// may alias y.
#include <cstdint>

#include "engine/core/status.h"
#include "kernels/kernels.h"
#include "kernels/cuda/storage.cuh"

namespace ptdp::cuda {

namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ float sigmoid(float v) { return 1.f / (1.f + expf(-v)); }

// n packs of W outputs, fW = f / W packs per row; y, z: [N, 2f], out: [N, f].
template <class T, int W>
__global__ void swiglu_fwd(T *z, T *out, const T *y, const T *bias, size_t n, int fW) {
  using Pack = Vec<T, W>;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x) {
    const size_t row = i / fW, c = i % fW, gate = row * 2 * fW + c, up = gate + fW;
    const Pack gq = reinterpret_cast<const Pack *>(y)[gate], uq = reinterpret_cast<const Pack *>(y)[up];
    Pack zg, zu, o;
#pragma unroll
    for (int e = 0; e < W; e++) {
      float g = to_f32(gq.v[e]), u = to_f32(uq.v[e]);
      if (bias) {
        g += to_f32(reinterpret_cast<const Pack *>(bias)[c].v[e]);
        u += to_f32(reinterpret_cast<const Pack *>(bias)[fW + c].v[e]);
      }
      zg.v[e] = from_f32<T>(g);
      zu.v[e] = from_f32<T>(u);
      o.v[e] = from_f32<T>(g * sigmoid(g) * u);
    }
    reinterpret_cast<Pack *>(z)[gate] = zg;
    reinterpret_cast<Pack *>(z)[up] = zu;
    reinterpret_cast<Pack *>(out)[i] = o;
  }
}

// dz [N, 2f] from dout [N, f] and z, n packs of W outputs.
template <class T, int W>
__global__ void swiglu_bwd(T *dz, const T *dout, const T *z, size_t n, int fW) {
  using Pack = Vec<T, W>;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x) {
    const size_t row = i / fW, c = i % fW, gate = row * 2 * fW + c, up = gate + fW;
    const Pack dq = reinterpret_cast<const Pack *>(dout)[i];
    const Pack gq = reinterpret_cast<const Pack *>(z)[gate], uq = reinterpret_cast<const Pack *>(z)[up];
    Pack dg, du;
#pragma unroll
    for (int e = 0; e < W; e++) {
      const float d = to_f32(dq.v[e]), g = to_f32(gq.v[e]), u = to_f32(uq.v[e]), s = sigmoid(g);
      dg.v[e] = from_f32<T>(d * u * s * (1.f + g * (1.f - s)));
      du.v[e] = from_f32<T>(d * g * s);
    }
    reinterpret_cast<Pack *>(dz)[gate] = dg;
    reinterpret_cast<Pack *>(dz)[up] = du;
  }
}

}  // namespace

template <class T>
void swiglu_forward(T *z, T *out, const T *y, const T *bias, int N, int f, cudaStream_t stream) {
  const size_t n = (size_t)N * f;
  if (n == 0) return;
  constexpr int V = kVec<T>;
  if (f % V == 0 && aligned16(z) && aligned16(out) && aligned16(y) && (!bias || aligned16(bias)))
    swiglu_fwd<T, V><<<grid_for(n / V, kThreads), kThreads, 0, stream>>>(z, out, y, bias, n / V, f / V);
  else
    swiglu_fwd<T, 1><<<grid_for(n, kThreads), kThreads, 0, stream>>>(z, out, y, bias, n, f);
  check_launch("swiglu_forward");
}

template <class T>
void swiglu_backward(T *dz, float *dbias, const T *dout, const T *z, int N, int f,
                     cudaStream_t stream) {
  const size_t n = (size_t)N * f;
  if (n == 0) return;
  constexpr int V = kVec<T>;
  if (f % V == 0 && aligned16(dz) && aligned16(dout) && aligned16(z))
    swiglu_bwd<T, V><<<grid_for(n / V, kThreads), kThreads, 0, stream>>>(dz, dout, z, n / V, f / V);
  else
    swiglu_bwd<T, 1><<<grid_for(n, kThreads), kThreads, 0, stream>>>(dz, dout, z, n, f);
  check_launch("swiglu_backward");
  // The sum of the stored (rounded) dz, as a CPU run in T would sum it.
  if (dbias) colsum_accumulate<T>(dbias, dz, N, 2 * f, stream);
}

#define PTDP_INSTANTIATE(T)                                                                   \
  template void swiglu_forward<T>(T *, T *, const T *, const T *, int, int, cudaStream_t);    \
  template void swiglu_backward<T>(T *, float *, const T *, const T *, int, int, cudaStream_t);
PTDP_CUDA_STORAGE_TYPES(PTDP_INSTANTIATE)
#undef PTDP_INSTANTIATE

}  // namespace ptdp::cuda
