// Rotary position embeddings for the storage types (kernels/cpu/rope.cpp), in
// place, fp32 arithmetic on the shared fp32 tables, each value rounded once.
// A thread per pair (v[j], v[j + hd/2]): the j of a warp are adjacent, so both
// halves are read and written in runs.
#include <cstdint>

#include "engine/core/status.h"
#include "kernels/kernels.h"
#include "kernels/cuda/storage.cuh"

namespace ptdp::cuda {

namespace {

constexpr int kThreads = 256;

template <class T>
__global__ void rope_kernel(T *x, const float *cos_t, const float *sin_t, int b, int ld, int vecs,
                            int stride, int half, float sign, size_t pairs) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < pairs;
       i += (size_t)gridDim.x * blockDim.x) {
    const int j = (int)(i % half);
    const size_t rk = i / half;  // row * vecs + k
    const int k = (int)(rk % vecs);
    const size_t r = rk / vecs;
    const size_t p = r / b;  // position
    T *v = x + r * ld + (size_t)k * stride;
    const float c = cos_t[p * half + j], s = sign * sin_t[p * half + j];
    const float a = to_f32(v[j]), e = to_f32(v[j + half]);
    v[j] = from_f32<T>(a * c - e * s);
    v[j + half] = from_f32<T>(a * s + e * c);
  }
}

}  // namespace

template <class T>
void rope_rotate(T *x, const float *cos_t, const float *sin_t, int s, int b, int ld, int vecs,
                 int stride, int hd, bool inverse, cudaStream_t stream) {
  const int half = hd / 2;
  const size_t pairs = (size_t)s * b * vecs * half;
  if (pairs == 0) return;
  rope_kernel<T><<<grid_for(pairs, kThreads), kThreads, 0, stream>>>(
      x, cos_t, sin_t, b, ld, vecs, stride, half, inverse ? -1.f : 1.f, pairs);
  check_launch("rope_rotate");
}

#define PTDP_INSTANTIATE(T)                                                                  \
  template void rope_rotate<T>(T *, const float *, const float *, int, int, int, int, int, int, \
                               bool, cudaStream_t);
PTDP_CUDA_STORAGE_TYPES(PTDP_INSTANTIATE)
#undef PTDP_INSTANTIATE

}  // namespace ptdp::cuda
