// Vocab-parallel embedding (cpu::embedding_*): forward gathers the local
// tokens' rows of wte plus wpe; backward scatter-adds into dwte with fp32
// atomics (rows of repeated tokens sum in a varying order) and sums dwpe in
// the CPU's order.
#include <algorithm>
#include <cstdint>

#include "engine/core/status.h"
#include "kernels/cuda/ops_cuda.h"
#include "kernels/cuda/storage.cuh"

namespace ptdp::cuda {

namespace {

constexpr int kThreads = 256;

// V consecutive elements moved as one access (16 bytes for V = 16 / sizeof(T)).
template <class T, int V>
struct alignas(sizeof(T) * V) Pack {
  T v[V];
};

// One block per token row r = si*b + bi; threads stride over h, V elements each
// (h % V == 0). x[r] = (local ? wte[token - vocab_start] : 0) + (wpe ? wpe[si] : 0).
template <class T, int V>
__global__ void embedding_rows(T *x, const int32_t *tokens, const T *wte, int vocab_start,
                               int vocab_rows, const T *wpe, int b, int h) {
  using P = Pack<T, V>;
  const int r = blockIdx.x;
  const int64_t row = (int64_t)tokens[r] - vocab_start;
  const bool local = row >= 0 && row < vocab_rows;
  const T *te = wte + (size_t)(local ? row : 0) * h;
  const T *pe = wpe ? wpe + (size_t)(r / b) * h : nullptr;
  T *xr = x + (size_t)r * h;
  for (int j = threadIdx.x * V; j < h; j += blockDim.x * V) {
    float v[V] = {};
    if (local) {
      const P t = *reinterpret_cast<const P *>(te + j);
#pragma unroll
      for (int k = 0; k < V; k++) v[k] = to_f32(t.v[k]);
    }
    if (pe) {
      const P t = *reinterpret_cast<const P *>(pe + j);
#pragma unroll
      for (int k = 0; k < V; k++) v[k] += to_f32(t.v[k]);
    }
    P o;
#pragma unroll
    for (int k = 0; k < V; k++) o.v[k] = from_f32<T>(v[k]);
    *reinterpret_cast<P *>(xr + j) = o;
  }
}

// One thread per (position si, V columns j..j+V-1), h % V == 0: it walks the b
// rows si*b + bi in order, so dwpe gets the CPU's sum (dwpe += dx row by row)
// and dx is read once for both gradients. dwte rows of local tokens: atomics.
template <class T, int V>
__global__ void embedding_backward_cols(float *dwte, float *dwpe, const T *dx,
                                        const int32_t *tokens, int s, int b, int h,
                                        int vocab_start, int vocab_rows) {
  using P = Pack<T, V>;
  const int hv = h / V;
  for (size_t t = blockIdx.x * (size_t)blockDim.x + threadIdx.x; t < (size_t)s * hv;
       t += (size_t)gridDim.x * blockDim.x) {
    const int si = (int)(t / hv), j = (int)(t % hv) * V;
    float acc[V] = {};
    if (dwpe) {
#pragma unroll
      for (int k = 0; k < V; k++) acc[k] = dwpe[(size_t)si * h + j + k];
    }
    for (int bi = 0; bi < b; bi++) {
      const int r = si * b + bi;
      const P g = *reinterpret_cast<const P *>(dx + (size_t)r * h + j);
      const int64_t row = (int64_t)tokens[r] - vocab_start;
      float *dw = row >= 0 && row < vocab_rows ? dwte + (size_t)row * h + j : nullptr;
#pragma unroll
      for (int k = 0; k < V; k++) {
        const float gk = to_f32(g.v[k]);
        if (dw) atomicAdd(dw + k, gk);
        acc[k] += gk;
      }
    }
    if (dwpe) {
#pragma unroll
      for (int k = 0; k < V; k++) dwpe[(size_t)si * h + j + k] = acc[k];
    }
  }
}

// x[r] += wpe[r / b] over rows r = si*b + bi (after the vocab-parallel sum).
template <class T>
__global__ void add_positions(T *x, const T *wpe, size_t rows, int b, int h) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < rows * h;
       i += (size_t)gridDim.x * blockDim.x) {
    const size_t r = i / h, j = i % h;
    x[i] = from_f32<T>(to_f32(x[i]) + to_f32(wpe[(r / b) * h + j]));
  }
}

}  // namespace

template <class T>
void add_position_embedding(T *x, const T *wpe, int s, int b, int h, cudaStream_t stream) {
  const size_t rows = (size_t)s * b;
  if (rows == 0 || h == 0) return;
  add_positions<<<grid_for(rows * h, kThreads), kThreads, 0, stream>>>(x, wpe, rows, b, h);
  check_launch("add_position_embedding");
}

template <class T>
void embedding_forward(T *x, const int32_t *tokens, const T *wte, int vocab_start, int vocab_rows,
                       const T *wpe, int s, int b, int h, cudaStream_t stream) {
  const int rows = s * b;
  if (rows == 0 || h == 0) return;
  constexpr int V = 16 / sizeof(T);
  if (h % V == 0 && aligned16(x) && aligned16(wte) && aligned16(wpe)) {
    const int threads = std::min(kThreads, (h / V + 31) / 32 * 32);
    embedding_rows<T, V><<<rows, threads, 0, stream>>>(x, tokens, wte, vocab_start, vocab_rows,
                                                       wpe, b, h);
  } else {
    const int threads = std::min(kThreads, (h + 31) / 32 * 32);
    embedding_rows<T, 1><<<rows, threads, 0, stream>>>(x, tokens, wte, vocab_start, vocab_rows,
                                                       wpe, b, h);
  }
  check_launch("embedding_forward");
}

template <class T>
void embedding_backward(float *dwte, float *dwpe, const T *dx, const int32_t *tokens, int s, int b,
                        int h, int vocab_start, int vocab_rows, cudaStream_t stream) {
  if (s == 0 || b == 0 || h == 0) return;
  constexpr int V = 16 / sizeof(T);
  if (h % V == 0 && aligned16(dx)) {
    embedding_backward_cols<T, V><<<grid_for((size_t)s * (h / V), kThreads), kThreads, 0, stream>>>(
        dwte, dwpe, dx, tokens, s, b, h, vocab_start, vocab_rows);
  } else {
    embedding_backward_cols<T, 1><<<grid_for((size_t)s * h, kThreads), kThreads, 0, stream>>>(
        dwte, dwpe, dx, tokens, s, b, h, vocab_start, vocab_rows);
  }
  check_launch("embedding_backward");
}

#define PTDP_INSTANTIATE(T)                                                                     \
  template void embedding_forward<T>(T *, const int32_t *, const T *, int, int, const T *, int, \
                                     int, int, cudaStream_t);                                   \
  template void embedding_backward<T>(float *, float *, const T *, const int32_t *, int, int,  \
                                      int, int, int, cudaStream_t);                             \
  template void add_position_embedding<T>(T *, const T *, int, int, int, cudaStream_t);
PTDP_CUDA_STORAGE_TYPES(PTDP_INSTANTIATE)
#undef PTDP_INSTANTIATE

}  // namespace ptdp::cuda
