// Cross-entropy over a vocab-parallel, padded vocabulary: the three steps of
// cpu::vocab_ce_* (local max; local sum of exp(l - M) and the target logit with
// the global max M; backward with the global M and sum), one block per row.
// The statistics are fp32 whatever the logits' storage type.
#include <cfloat>

#include "engine/core/status.h"
#include "kernels/kernels.h"
#include "kernels/cuda/storage.cuh"

namespace ptdp::cuda {

namespace {

constexpr int kThreads = 512;

// Reduction over the block through warp shuffles, then one warp over the warps.
template <bool kMax>
__device__ float block_reduce(float v) {
  __shared__ float warp_vals[32];
  for (int o = 16; o > 0; o >>= 1) {
    const float w = __shfl_xor_sync(0xffffffffu, v, o);
    v = kMax ? fmaxf(v, w) : v + w;
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) warp_vals[warp] = v;
  __syncthreads();
  v = lane < blockDim.x / 32 ? warp_vals[lane] : (kMax ? -INFINITY : 0.f);
  for (int o = 16; o > 0; o >>= 1) {
    const float w = __shfl_xor_sync(0xffffffffu, v, o);
    v = kMax ? fmaxf(v, w) : v + w;
  }
  __syncthreads();  // warp_vals is reused by the next call
  return v;
}

// Row i's columns [0, cols) visited W at a time (16-byte loads when W =
// kVec<T>: rows then start 16-byte aligned), the last cols % W one by one.
template <int W, class T, class F>
__device__ __forceinline__ void for_columns(const T *l, int cols, F f) {
  const int vcols = cols / W * W;
  for (int j = threadIdx.x * W; j < vcols; j += blockDim.x * W) {
    const Vec<T, W> q = *reinterpret_cast<const Vec<T, W> *>(l + j);
#pragma unroll
    for (int e = 0; e < W; e++) f(to_f32(q.v[e]));
  }
  for (int j = vcols + threadIdx.x; j < cols; j += blockDim.x) f(to_f32(l[j]));
}

template <int W, class T>
__global__ void local_max_rows(float *row_max, const T *logits, int ld, int cols) {
  float m = -INFINITY;
  for_columns<W>(logits + (size_t)blockIdx.x * ld, cols, [&](float v) { m = fmaxf(m, v); });
  m = block_reduce<true>(m);
  if (threadIdx.x == 0) row_max[blockIdx.x] = m;
}

template <int W, class T>
__global__ void local_sums_rows(float *sum_exp, float *target_logit, const T *logits,
                                const float *row_max, const int32_t *targets, int ld, int cols,
                                int vocab_start) {
  const int i = blockIdx.x;
  const T *l = logits + (size_t)i * ld;
  const float mx = row_max[i];
  float s = 0.f;
  for_columns<W>(l, cols, [&](float v) { s += expf(v - mx); });
  s = block_reduce<false>(s);
  if (threadIdx.x == 0) {
    sum_exp[i] = s;
    const int64_t t = (int64_t)targets[i] - vocab_start;
    target_logit[i] = t >= 0 && t < cols ? to_f32(l[t]) : 0.f;
  }
}

// Each element is read and written by the same thread, so dlogits may alias
// logits. W elements per access over [0, ld) (ld % W == 0 when W > 1).
template <int W, class T>
__global__ void backward_rows(T *dlogits, const T *logits, const float *row_max,
                              const float *sum_exp, const int32_t *targets, int ld, int cols,
                              int vocab_start, float dloss) {
  const int i = blockIdx.x;
  const T *l = logits + (size_t)i * ld;
  T *d = dlogits + (size_t)i * ld;
  const float mx = row_max[i], scale = dloss / sum_exp[i];
  const int64_t t = (int64_t)targets[i] - vocab_start;
  for (int j0 = threadIdx.x * W; j0 < ld; j0 += blockDim.x * W) {
    const Vec<T, W> q = *reinterpret_cast<const Vec<T, W> *>(l + j0);
    Vec<T, W> out;
#pragma unroll
    for (int e = 0; e < W; e++) {
      const int j = j0 + e;
      float g = 0.f;
      if (j < cols) g = scale * expf(to_f32(q.v[e]) - mx) - (j == t ? dloss : 0.f);
      out.v[e] = from_f32<T>(g);
    }
    *reinterpret_cast<Vec<T, W> *>(d + j0) = out;
  }
}

// 16-byte accesses when every row starts 16-byte aligned.
template <class T>
bool rows_aligned(const T *p, int ld) {
  return aligned16(p) && ((size_t)ld * sizeof(T)) % 16 == 0;
}

__global__ void finish_losses(float *losses, const float *row_max, const float *sum_exp, int N) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < N) losses[i] = logf(sum_exp[i]) + row_max[i] - losses[i];
}

}  // namespace

template <class T>
void vocab_ce_local_max(float *row_max, const T *logits, int N, int ld, int cols,
                        cudaStream_t stream) {
  if (N <= 0) return;
  if (rows_aligned(logits, ld))
    local_max_rows<kVec<T>><<<N, kThreads, 0, stream>>>(row_max, logits, ld, cols);
  else
    local_max_rows<1><<<N, kThreads, 0, stream>>>(row_max, logits, ld, cols);
  check_launch("vocab_ce_local_max");
}

template <class T>
void vocab_ce_local_sums(float *sum_exp, float *target_logit, const T *logits,
                         const float *row_max, const int32_t *targets, int N, int ld, int cols,
                         int vocab_start, cudaStream_t stream) {
  if (N <= 0) return;
  if (rows_aligned(logits, ld))
    local_sums_rows<kVec<T>><<<N, kThreads, 0, stream>>>(sum_exp, target_logit, logits, row_max,
                                                         targets, ld, cols, vocab_start);
  else
    local_sums_rows<1><<<N, kThreads, 0, stream>>>(sum_exp, target_logit, logits, row_max, targets,
                                                   ld, cols, vocab_start);
  check_launch("vocab_ce_local_sums");
}

template <class T>
void vocab_ce_backward(T *dlogits, const T *logits, const float *row_max, const float *sum_exp,
                       const int32_t *targets, int N, int ld, int cols, int vocab_start,
                       float dloss, cudaStream_t stream) {
  if (N <= 0) return;
  if (rows_aligned(logits, ld) && aligned16(dlogits))
    backward_rows<kVec<T>><<<N, kThreads, 0, stream>>>(dlogits, logits, row_max, sum_exp, targets,
                                                       ld, cols, vocab_start, dloss);
  else
    backward_rows<1><<<N, kThreads, 0, stream>>>(dlogits, logits, row_max, sum_exp, targets, ld,
                                                 cols, vocab_start, dloss);
  check_launch("vocab_ce_backward");
}

// One rank: the three steps with no all-reduce between them. The target logit
// goes to `losses` and is turned into the loss in place.
void cross_entropy_forward(float *losses, const float *logits, const int32_t *targets, int N,
                           int Vp, int V, cudaStream_t stream) {
  if (N <= 0) return;
  const StreamScratch scratch(2 * (size_t)N * sizeof(float), stream, "cross_entropy_forward scratch");
  float *stats = scratch.as<float>();
  vocab_ce_local_max(stats, logits, N, Vp, V, stream);
  vocab_ce_local_sums(stats + N, losses, logits, stats, targets, N, Vp, V, 0, stream);
  finish_losses<<<(N + 255) / 256, 256, 0, stream>>>(losses, stats, stats + N, N);
  check_launch("cross_entropy_forward");
}

#define PTDP_INSTANTIATE(T)                                                                     \
  template void vocab_ce_local_max<T>(float *, const T *, int, int, int, cudaStream_t);         \
  template void vocab_ce_local_sums<T>(float *, float *, const T *, const float *,              \
                                       const int32_t *, int, int, int, int, cudaStream_t);      \
  template void vocab_ce_backward<T>(T *, const T *, const float *, const float *,              \
                                     const int32_t *, int, int, int, int, float, cudaStream_t);
PTDP_CUDA_STORAGE_TYPES(PTDP_INSTANTIATE)
#undef PTDP_INSTANTIATE

}  // namespace ptdp::cuda
