// Vocab-parallel embedding (cpu::embedding_*): forward gathers the local
// tokens' rows of wte plus wpe; backward sums dwpe and dwte in the CPU's order
// (row order r), so both are the CPU twin's bits and a run is reproducible:
// dwte's rows are grouped by token with a stable radix sort, then each
// token's rows are added in order by one thread per column chunk.
#include <cub/device/device_radix_sort.cuh>

#include <algorithm>
#include <cstdint>

#include "engine/core/status.h"
#include "kernels/kernels.h"
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
// rows si*b + bi in order, so dwpe gets the CPU's sum (dwpe += dx row by row).
template <class T, int V>
__global__ void embedding_backward_positions(float *dwpe, const T *dx, int s, int b, int h) {
  using P = Pack<T, V>;
  const int hv = h / V;
  for (size_t t = blockIdx.x * (size_t)blockDim.x + threadIdx.x; t < (size_t)s * hv;
       t += (size_t)gridDim.x * blockDim.x) {
    const int si = (int)(t / hv), j = (int)(t % hv) * V;
    float acc[V];
#pragma unroll
    for (int k = 0; k < V; k++) acc[k] = dwpe[(size_t)si * h + j + k];
    for (int bi = 0; bi < b; bi++) {
      const P g = *reinterpret_cast<const P *>(dx + ((size_t)si * b + bi) * h + j);
#pragma unroll
      for (int k = 0; k < V; k++) acc[k] += to_f32(g.v[k]);
    }
#pragma unroll
    for (int k = 0; k < V; k++) dwpe[(size_t)si * h + j + k] = acc[k];
  }
}

// The sort's input: row r's local vocabulary row (others' tokens: vocab_rows,
// sorted last and skipped) and r itself.
__global__ void embedding_sort_keys(uint32_t *keys, int32_t *rows, const int32_t *tokens, int n,
                                    int vocab_start, int vocab_rows) {
  for (int r = blockIdx.x * blockDim.x + threadIdx.x; r < n; r += gridDim.x * blockDim.x) {
    const int64_t row = (int64_t)tokens[r] - vocab_start;
    keys[r] = row >= 0 && row < vocab_rows ? (uint32_t)row : (uint32_t)vocab_rows;
    rows[r] = r;
  }
}

// One thread per (sorted position i, V columns): the first position of each
// token adds that token's rows of dx to its dwte row, in row order (the sort
// is stable), as the CPU does.
template <class T, int V>
__global__ void embedding_backward_tokens(float *dwte, const T *dx, const uint32_t *keys,
                                          const int32_t *rows, int n, int h, int vocab_rows) {
  using P = Pack<T, V>;
  const int hv = h / V;
  for (size_t t = blockIdx.x * (size_t)blockDim.x + threadIdx.x; t < (size_t)n * hv;
       t += (size_t)gridDim.x * blockDim.x) {
    const int i = (int)(t / hv), j = (int)(t % hv) * V;
    const uint32_t key = keys[i];
    if (key >= (uint32_t)vocab_rows || (i > 0 && keys[i - 1] == key)) continue;
    float *dw = dwte + (size_t)key * h + j;
    float acc[V];
#pragma unroll
    for (int k = 0; k < V; k++) acc[k] = dw[k];
    for (int q = i; q < n && keys[q] == key; q++) {
      const P g = *reinterpret_cast<const P *>(dx + (size_t)rows[q] * h + j);
#pragma unroll
      for (int k = 0; k < V; k++) acc[k] += to_f32(g.v[k]);
    }
#pragma unroll
    for (int k = 0; k < V; k++) dw[k] = acc[k];
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

namespace {

template <class T, int V>
void embedding_backward_v(float *dwte, float *dwpe, const T *dx, const int32_t *tokens, int s,
                          int b, int h, int vocab_start, int vocab_rows, cudaStream_t stream) {
  if (dwpe) {
    embedding_backward_positions<T, V>
        <<<grid_for((size_t)s * (h / V), kThreads), kThreads, 0, stream>>>(dwpe, dx, s, b, h);
    check_launch("embedding_backward (positions)");
  }
  if (!dwte || vocab_rows <= 0) return;
  // Scratch from the stream's pool: keys and rows, sorted copies, the sort's own.
  const int n = s * b;
  int bits = 1;
  while (bits < 32 && ((uint64_t)1 << bits) <= (uint64_t)vocab_rows) bits++;
  size_t sort_bytes = 0;
  check(cub::DeviceRadixSort::SortPairs(nullptr, sort_bytes, (const uint32_t *)nullptr,
                                        (uint32_t *)nullptr, (const int32_t *)nullptr,
                                        (int32_t *)nullptr, n, 0, bits, stream),
        "cub::DeviceRadixSort::SortPairs (size)");
  const size_t ints = (size_t)n * sizeof(int32_t);
  const StreamScratch scratch(4 * ints + sort_bytes, stream, "embedding_backward scratch");
  char *work = scratch.as<char>();
  uint32_t *keys = (uint32_t *)work, *sorted_keys = (uint32_t *)(work + ints);
  int32_t *rows = (int32_t *)(work + 2 * ints), *sorted_rows = (int32_t *)(work + 3 * ints);
  embedding_sort_keys<<<grid_for((size_t)n, kThreads), kThreads, 0, stream>>>(
      keys, rows, tokens, n, vocab_start, vocab_rows);
  check_launch("embedding_backward (keys)");
  check(cub::DeviceRadixSort::SortPairs(work + 4 * ints, sort_bytes, keys, sorted_keys, rows,
                                        sorted_rows, n, 0, bits, stream),
        "cub::DeviceRadixSort::SortPairs");
  embedding_backward_tokens<T, V><<<grid_for((size_t)n * (h / V), kThreads), kThreads, 0, stream>>>(
      dwte, dx, sorted_keys, sorted_rows, n, h, vocab_rows);
  check_launch("embedding_backward (tokens)");
}

}  // namespace

template <class T>
void embedding_backward(float *dwte, float *dwpe, const T *dx, const int32_t *tokens, int s, int b,
                        int h, int vocab_start, int vocab_rows, cudaStream_t stream) {
  if (s == 0 || b == 0 || h == 0) return;
  constexpr int V = 16 / sizeof(T);
  if (h % V == 0 && aligned16(dx))
    embedding_backward_v<T, V>(dwte, dwpe, dx, tokens, s, b, h, vocab_start, vocab_rows, stream);
  else
    embedding_backward_v<T, 1>(dwte, dwpe, dx, tokens, s, b, h, vocab_start, vocab_rows, stream);
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
