// Reductions (global norm, column sums), scaling and casts. Every reduction
// uses a fixed split of the input and sums the pieces in a fixed order, so
// its result is the same on every run (no float atomics).
#include "engine/core/status.h"
#include "kernels/kernels.h"
#include "kernels/cuda/storage.cuh"

namespace ptdp::cuda {

namespace {

constexpr size_t kNormChunk = size_t(1) << 16;  // elements per partial sum of squares
// Column sums: at most this many partial sums per column. Many, so the
// chunk kernel has enough loads in flight (64 chunks of 64 rows left an H200
// at 270 GB/s on [4096, 2048] bf16); colsum_finish adds them 8 threads a column.
constexpr int kColChunks = 256;
constexpr int kThreads = 256;

// Block c: partial[c] = sum of x[i]^2 over chunk c, in double; the block's
// threads stride through the chunk W elements at a time (16-byte loads when
// W = kVec<T>) and combine in a fixed tree.
template <class T, int W>
__global__ void sum_squares_chunks(double *partial, const T *x, size_t n) {
  __shared__ double s[kThreads];
  const size_t begin = blockIdx.x * kNormChunk, end = min(begin + kNormChunk, n);
  const size_t vend = begin + (end - begin) / W * W;
  double acc = 0;
  for (size_t i = begin + threadIdx.x * W; i < vend; i += kThreads * W) {
    const Vec<T, W> q = *reinterpret_cast<const Vec<T, W> *>(x + i);
#pragma unroll
    for (int e = 0; e < W; e++) {
      const double v = to_f32(q.v[e]);
      acc += v * v;
    }
  }
  for (size_t i = vend + threadIdx.x; i < end; i += kThreads) {
    const double v = to_f32(x[i]);
    acc += v * v;
  }
  s[threadIdx.x] = acc;
  __syncthreads();
  for (int w = kThreads / 2; w > 0; w >>= 1) {
    if (threadIdx.x < w) s[threadIdx.x] += s[threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x == 0) partial[blockIdx.x] = s[0];
}

// One block sums the partials: thread t takes partials t, t + 256, ... in
// order, then a fixed tree; the same bits on every run. (One thread alone,
// waiting on each load in turn, took longer than the squares themselves.)
__global__ void sum_in_order(double *out, const double *partial, size_t count) {
  __shared__ double s[kThreads];
  double acc = 0;
  for (size_t c = threadIdx.x; c < count; c += kThreads) acc += partial[c];
  s[threadIdx.x] = acc;
  __syncthreads();
  for (int w = kThreads / 2; w > 0; w >>= 1) {
    if (threadIdx.x < w) s[threadIdx.x] += s[threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x == 0) *out = s[0];
}

// partial[chunk, j] = sum of x[i, j] over the chunk's rows, in row order; a
// thread takes W adjacent columns (16-byte loads when W = kVec<T>), so a warp
// reads whole rows of 32 W columns. The order of the sum does not depend on W.
template <class T, int W>
__global__ void colsum_chunks(float *partial, const T *x, int N, int cols, int rows) {
  const int j = (blockIdx.x * blockDim.x + threadIdx.x) * W, chunk = blockIdx.y;
  if (j >= cols) return;
  const int end = min(N, (chunk + 1) * rows);
  float acc[W] = {};
#pragma unroll 4  // independent loads in flight; each column's sum stays in row order
  for (int i = chunk * rows; i < end; i++) {
    const Vec<T, W> q = *reinterpret_cast<const Vec<T, W> *>(x + (size_t)i * cols + j);
#pragma unroll
    for (int e = 0; e < W; e++) acc[e] += to_f32(q.v[e]);
  }
#pragma unroll
  for (int e = 0; e < W; e++) partial[(size_t)chunk * cols + j + e] = acc[e];
}

// out[j] += the sum of partial[c, j] over c: block (32, 8), thread (x, y)
// adds chunks y, y + 8, ... of column 32 blockIdx.x + x, then y = 0 adds the
// eight sums in order (a fixed order: the same bits every run).
__global__ void colsum_finish(float *out, const float *partial, int chunks, int cols) {
  __shared__ float s[8][33];
  const int j = blockIdx.x * 32 + threadIdx.x, y = threadIdx.y;
  float acc = 0.f;
  if (j < cols)
#pragma unroll 4
    for (int c = y; c < chunks; c += 8) acc += partial[(size_t)c * cols + j];
  s[y][threadIdx.x] = acc;
  __syncthreads();
  if (y == 0 && j < cols) {
    float t = 0.f;
    for (int k = 0; k < 8; k++) t += s[k][threadIdx.x];
    out[j] += t;
  }
}

template <class T>
__global__ void scale_kernel(T *x, size_t n, float alpha) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    x[i] = from_f32<T>(to_f32(x[i]) * alpha);
}

__global__ void add_kernel(float *out, const float *x, size_t n) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    out[i] += x[i];
}

template <class S, class D>
__global__ void cast_kernel(D *dst, const S *src, size_t n) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    dst[i] = from_f32<D>(to_f32(src[i]));
}

// x = float(T(x)): a 16-bit value held in a float (the emulated storage of
// a 16-bit run on fp32 arrays, as dtype.h's round_to on the CPU).
template <class T>
__global__ void round_kernel(float *x, size_t n) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    x[i] = round_as<T>(x[i]);
}

template <class S>
void cast_from(void *dst, DType dst_type, const S *src, size_t n, cudaStream_t stream) {
  const int g = grid_for(n, kThreads);
  switch (dst_type) {
    case DType::f32: cast_kernel<<<g, kThreads, 0, stream>>>((float *)dst, src, n); break;
    case DType::bf16: cast_kernel<<<g, kThreads, 0, stream>>>((__nv_bfloat16 *)dst, src, n); break;
    case DType::f16: cast_kernel<<<g, kThreads, 0, stream>>>((__half *)dst, src, n); break;
    default: fail(Status::invalid_argument, "cast to ", dtype_name(dst_type), " (allowed: f32, bf16, f16)");
  }
}

}  // namespace

size_t sum_squares_scratch(size_t n) { return (n + kNormChunk - 1) / kNormChunk; }

template <class T>
void sum_squares(double *out, const T *x, size_t n, double *scratch, cudaStream_t stream) {
  const size_t chunks = sum_squares_scratch(n);
  // Chunks start at multiples of 65536 elements, so an aligned x keeps every
  // chunk's 16-byte loads aligned.
  if (chunks > 0 && aligned16(x))
    sum_squares_chunks<T, kVec<T>><<<(unsigned)chunks, kThreads, 0, stream>>>(scratch, x, n);
  else if (chunks > 0)
    sum_squares_chunks<T, 1><<<(unsigned)chunks, kThreads, 0, stream>>>(scratch, x, n);
  sum_in_order<<<1, kThreads, 0, stream>>>(out, scratch, chunks);
  check_launch("sum_squares");
}

template <class T>
void scale_inplace(T *x, size_t n, float alpha, cudaStream_t stream) {
  if (n == 0) return;
  scale_kernel<<<grid_for(n, kThreads), kThreads, 0, stream>>>(x, n, alpha);
  check_launch("scale_inplace");
}

void add_inplace(float *out, const float *x, size_t n, cudaStream_t stream) {
  if (n == 0) return;
  add_kernel<<<grid_for(n, kThreads), kThreads, 0, stream>>>(out, x, n);
  check_launch("add_inplace");
}

// Rows split into at most kColChunks chunks of at least 16 rows: enough blocks
// to fill the GPU, few partials to add. Depends on N only, so do the sums.
int colsum_chunk_rows(int N) { return std::max(16, (N + kColChunks - 1) / kColChunks); }

void colsum_add_partials(float *out, const float *partial, int chunks, int cols,
                         cudaStream_t stream) {
  colsum_finish<<<(cols + 31) / 32, dim3(32, 8), 0, stream>>>(out, partial, chunks, cols);
  check_launch("colsum_add_partials");
}

template <class T>
void colsum_accumulate(float *out, const T *x, int N, int cols, cudaStream_t stream) {
  if (N <= 0 || cols <= 0) return;
  const int rows = colsum_chunk_rows(N);
  const int chunks = (N + rows - 1) / rows, threads = 128;
  const StreamScratch scratch((size_t)chunks * cols * sizeof(float), stream,
                             "colsum_accumulate scratch");
  float *partial = scratch.as<float>();
  constexpr int V = kVec<T>;
  if (cols % V == 0 && aligned16(x)) {
    const int per_block = threads * V;
    colsum_chunks<T, V><<<dim3((cols + per_block - 1) / per_block, chunks), threads, 0, stream>>>(
        partial, x, N, cols, rows);
  } else {
    colsum_chunks<T, 1><<<dim3((cols + threads - 1) / threads, chunks), threads, 0, stream>>>(
        partial, x, N, cols, rows);
  }
  check_launch("colsum_accumulate");
  colsum_add_partials(out, partial, chunks, cols, stream);
}

void cast(void *dst, DType dst_type, const void *src, DType src_type, size_t n,
          cudaStream_t stream) {
  if (n == 0) return;
  switch (src_type) {
    case DType::f32: cast_from(dst, dst_type, (const float *)src, n, stream); break;
    case DType::bf16: cast_from(dst, dst_type, (const __nv_bfloat16 *)src, n, stream); break;
    case DType::f16: cast_from(dst, dst_type, (const __half *)src, n, stream); break;
    default: fail(Status::invalid_argument, "cast from ", dtype_name(src_type), " (allowed: f32, bf16, f16)");
  }
  check_launch("cast");
}

void round_to(float *x, size_t n, DType dt, cudaStream_t stream) {
  if (n == 0 || dt == DType::f32) return;
  const int g = grid_for(n, kThreads);
  switch (dt) {
    case DType::bf16: round_kernel<__nv_bfloat16><<<g, kThreads, 0, stream>>>(x, n); break;
    case DType::f16: round_kernel<__half><<<g, kThreads, 0, stream>>>(x, n); break;
    default: fail(Status::invalid_argument, "round to ", dtype_name(dt), " (allowed: f32, bf16, f16)");
  }
  check_launch("round_to");
}

#define PTDP_INSTANTIATE(T)                                                        \
  template void sum_squares<T>(double *, const T *, size_t, double *, cudaStream_t); \
  template void scale_inplace<T>(T *, size_t, float, cudaStream_t);                \
  template void colsum_accumulate<T>(float *, const T *, int, int, cudaStream_t);
PTDP_CUDA_STORAGE_TYPES(PTDP_INSTANTIATE)
#undef PTDP_INSTANTIATE

}  // namespace ptdp::cuda
