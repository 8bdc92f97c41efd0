// Dropout keyed by global indices (cpu::dropout_*): bias + dropout + residual
// add over [s, b, h], attention-probability dropout over [b, a, s_q, s_k], and
// the backward from dropout's output. The mask is the CPU's bit for bit: the
// same Philox call (dropout_quad) gives the four draws of elements 4q..4q+3 of
// a sample, and each thread handles whole quads, so it calls it once per quad
// (attention: the sixteen 8-bit draws of 16c..16c+15, attention_draws, once
// per thread's pack).
#include <algorithm>
#include <cstdint>

#include "engine/core/status.h"
#include "kernels/cuda/dropout_mask.cuh"
#include "kernels/kernels.h"
#include "kernels/cuda/storage.cuh"

namespace ptdp::cuda {

namespace {

constexpr int kThreads = 256;

// v[0..3] = dropout of elements 4q..4q+3 of `sample`: one Philox call. Skipped
// when all four are 0, which the mask cannot change (a causal upper triangle).
// __fmul_rn: never contracted into an FMA, so fp32 rounds as the CPU does.
__device__ __forceinline__ void drop_quad(float *v, const Drop &d, uint32_t sample, uint64_t q) {
  if (!d.on || (v[0] == 0.f && v[1] == 0.f && v[2] == 0.f && v[3] == 0.f)) return;
  const Philox4x32 r = dropout_quad(d.key, sample, q);
#pragma unroll
  for (int l = 0; l < 4; l++) v[l] = r.v[l] >= d.threshold ? __fmul_rn(v[l], d.scale) : 0.f;
}

// Sample bi's elements are e_base + l for l in [0, s*h); l = si*h + j lives at
// row si*b + bi of x: [s*b, h]. out = residual + dropout(y + bias[j]).
// Fast path: V = 16 / sizeof(T) elements per thread, 16-byte accesses. Needs
// h % V == 0 and e_base % 4 == 0, so a thread's V elements are V/4 whole quads.
template <class T>
__global__ void bias_dropout_add_vec(T *out, const T *residual, const T *y, const T *bias, int b,
                                     int64_t h, uint64_t e_base, size_t n, Drop d) {
  constexpr int V = 16 / sizeof(T);
  using P = Vec<T, V>;
  for (size_t i = (blockIdx.x * (size_t)blockDim.x + threadIdx.x) * V; i < n;
       i += (size_t)gridDim.x * blockDim.x * V) {
    const size_t r = i / h;
    const int64_t j = (int64_t)(i % h);
    const uint32_t sample = d.sample_offset + (uint32_t)(r % b);
    const uint64_t e = e_base + (r / b) * h + j;
    const P yv = *reinterpret_cast<const P *>(y + i);
    float v[V];
#pragma unroll
    for (int k = 0; k < V; k++) v[k] = to_f32(yv.v[k]);
    if (bias) {
      const P bv = *reinterpret_cast<const P *>(bias + j);
#pragma unroll
      for (int k = 0; k < V; k++) v[k] += to_f32(bv.v[k]);
    }
#pragma unroll
    for (int k = 0; k < V; k += 4) drop_quad(v + k, d, sample, (e + k) >> 2);
    if (residual) {
      const P rv = *reinterpret_cast<const P *>(residual + i);
#pragma unroll
      for (int k = 0; k < V; k++) v[k] = to_f32(rv.v[k]) + v[k];
    }
    P o;
#pragma unroll
    for (int k = 0; k < V; k++) o.v[k] = from_f32<T>(v[k]);
    *reinterpret_cast<P *>(out + i) = o;
  }
}

// Any h, e_base or alignment: one thread per quad of a sample's numbering; its
// four elements may lie in different rows (h % 4 != 0), lanes outside
// [e_base, e_base + m) are skipped.
template <class T>
__global__ void bias_dropout_add_quads(T *out, const T *residual, const T *y, const T *bias, int b,
                                       int64_t h, uint64_t e_base, uint64_t m, Drop d) {
  const uint64_t q0 = e_base >> 2, nq = ((e_base + m + 3) >> 2) - q0;
  for (uint64_t t = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; t < nq * b;
       t += (uint64_t)gridDim.x * blockDim.x) {
    const int bi = (int)(t / nq);
    const uint64_t q = q0 + t % nq;
    size_t idx[4];
    bool in[4];
    float v[4];
#pragma unroll
    for (int l = 0; l < 4; l++) {
      const uint64_t e = 4 * q + l;
      in[l] = e >= e_base && e < e_base + m;
      idx[l] = 0;
      v[l] = 0.f;
      if (in[l]) {
        const uint64_t si = (e - e_base) / h, j = (e - e_base) % h;
        idx[l] = (si * b + bi) * h + j;
        v[l] = to_f32(y[idx[l]]) + (bias ? to_f32(bias[j]) : 0.f);
      }
    }
    drop_quad(v, d, d.sample_offset + (uint32_t)bi, q);
#pragma unroll
    for (int l = 0; l < 4; l++)
      if (in[l]) out[idx[l]] = from_f32<T>((residual ? to_f32(residual[idx[l]]) : 0.f) + v[l]);
  }
}

// Both ops: bias_dropout_add is (s, h, e_base = the slice's first position * h,
// 0 without sequence parallelism); attention is one "row" per
// sample, h = a*s_q*s_k, numbered from e_base = head_offset*s_q*s_k.
template <class T>
void launch_dropout(T *out, const T *residual, const T *y, const T *bias, int64_t s, int b,
                    int64_t h, uint64_t e_base, const Drop &d, cudaStream_t stream,
                    const char *what) {
  const size_t n = (size_t)s * b * h;
  if (n == 0) return;
  constexpr int V = 16 / sizeof(T);
  auto ok = [](const void *p) { return p == nullptr || aligned16(p); };
  if (h % V == 0 && e_base % 4 == 0 && ok(out) && ok(residual) && ok(y) && ok(bias)) {
    bias_dropout_add_vec<T><<<grid_for(n / V, kThreads), kThreads, 0, stream>>>(
        out, residual, y, bias, b, h, e_base, n, d);
  } else {
    const uint64_t m = (uint64_t)s * h, nq = ((e_base + m + 3) >> 2) - (e_base >> 2);
    bias_dropout_add_quads<T><<<grid_for(nq * b, kThreads), kThreads, 0, stream>>>(
        out, residual, y, bias, b, h, e_base, m, d);
  }
  check_launch(what);
}

// bias_dropout_add's backward with its bias gradient in one pass: dy =
// dropout(dout) over [N = s*b, h] (as bias_dropout_add_vec with no bias and
// no residual), and partial[chunk, j] = the sum of the stored dy[i, j] over
// the chunk's rows in row order (colsum_accumulate's chunks, so the same
// bits). A thread takes V = 16 / sizeof(T) columns (whole quads: h % V == 0,
// e_base % 4 == 0), blockIdx.y the chunk. dy may alias dout.
template <class T>
__global__ void dropout_backward_colsum(T *dy, float *partial, const T *dout, int N, int b, int h,
                                        uint64_t e_base, int rows, Drop d) {
  constexpr int V = 16 / sizeof(T);
  using P = Vec<T, V>;
  const int j = (blockIdx.x * blockDim.x + threadIdx.x) * V, chunk = blockIdx.y;
  if (j >= h) return;
  const int end = min(N, (chunk + 1) * rows);
  float acc[V] = {};
#pragma unroll 4  // independent loads in flight; each column's sum stays in row order
  for (int r = chunk * rows; r < end; r++) {
    const size_t i = (size_t)r * h + j;
    const P g = *reinterpret_cast<const P *>(dout + i);
    float v[V];
#pragma unroll
    for (int k = 0; k < V; k++) v[k] = to_f32(g.v[k]);
    const uint32_t sample = d.sample_offset + (uint32_t)(r % b);
    const uint64_t e = e_base + (uint64_t)(r / b) * h + j;
#pragma unroll
    for (int k = 0; k < V; k += 4) drop_quad(v + k, d, sample, (e + k) >> 2);
    P o;
#pragma unroll
    for (int k = 0; k < V; k++) {
      o.v[k] = from_f32<T>(v[k]);
      acc[k] += to_f32(o.v[k]);
    }
    *reinterpret_cast<P *>(dy + i) = o;
  }
#pragma unroll
  for (int k = 0; k < V; k++) partial[(size_t)chunk * h + j + k] = acc[k];
}

// dx = y != 0 ? dy * scale : 0, V elements per thread (n a multiple of V).
template <class T, int V>
__global__ void dropout_backward_kernel(T *dx, const T *dy, const T *y, size_t n, float scale) {
  using P = Vec<T, V>;
  for (size_t i = (blockIdx.x * (size_t)blockDim.x + threadIdx.x) * V; i < n;
       i += (size_t)gridDim.x * blockDim.x * V) {
    const P yv = *reinterpret_cast<const P *>(y + i), g = *reinterpret_cast<const P *>(dy + i);
    P o;
#pragma unroll
    for (int k = 0; k < V; k++)
      o.v[k] = from_f32<T>(to_f32(yv.v[k]) != 0.f ? __fmul_rn(to_f32(g.v[k]), scale) : 0.f);
    *reinterpret_cast<P *>(dx + i) = o;
  }
}

// Attention-probability dropout (attention_keep: 8-bit draws, 16 elements a
// Philox call): sample bi's elements are e_base + l for l in [0, m), at in +
// bi*m + l. A thread per W consecutive elements of one chunk (16c .. 16c +
// 15): with W = kVec<T> (16-byte accesses, as bias_dropout_add_vec) when the
// launcher has checked that packs never straddle a chunk and are aligned, else
// W = 1. The chunk's call is made by each of its 16 / W threads, skipped when
// the thread's values are all 0 (a causal upper triangle).
// W values rounded to T, stored as one access: 16 bytes built from the
// values' bits (a Vec<T, W> copy compiled to W 2-byte stores here).
__device__ __forceinline__ uint32_t bits_of(float x) { return __float_as_uint(x); }
__device__ __forceinline__ uint32_t bits_of(__nv_bfloat16 x) { return __bfloat16_as_ushort(x); }
__device__ __forceinline__ uint32_t bits_of(__half x) { return __half_as_ushort(x); }
template <class T, int W>
__device__ __forceinline__ void store_rounded(T *dst, const float (&v)[W]) {
  if constexpr (W * sizeof(T) == 16) {
    constexpr int kPer = 4 / sizeof(T);  // values per 32-bit word
    uint32_t u[4];
#pragma unroll
    for (int k = 0; k < 4; k++) {
      u[k] = bits_of(from_f32<T>(v[kPer * k]));
      if constexpr (kPer == 2) u[k] |= bits_of(from_f32<T>(v[kPer * k + 1])) << 16;
    }
    // In PTX: a uint4 assignment compiled to four 4-byte stores here.
    asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"l"(dst), "r"(u[0]), "r"(u[1]),
                 "r"(u[2]), "r"(u[3])
                 : "memory");
  } else {
#pragma unroll
    for (int w = 0; w < W; w++) dst[w] = from_f32<T>(v[w]);
  }
}

template <class T, int W>
__global__ void attention_dropout_packs(T *out, const T *in, int b, uint64_t m, uint64_t e_base,
                                        Drop d) {
  using P = Vec<T, W>;
  const uint64_t packs = m / W;
  for (uint64_t u = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; u < packs * b;
       u += (uint64_t)gridDim.x * blockDim.x) {
    const int bi = (int)(u / packs);
    const uint64_t l = (u % packs) * W, e = e_base + l;
    const size_t at = (size_t)bi * m + l;
    const P x = *reinterpret_cast<const P *>(in + at);
    float v[W];
    bool any = false;
#pragma unroll
    for (int w = 0; w < W; w++) any |= (v[w] = to_f32(x.v[w])) != 0.f;
    if (any) {
      const Philox4x32 r = attention_draws(d.key, d.sample_offset + (uint32_t)bi, e >> 4);
      if constexpr (W == 1) {
        v[0] = draw_byte(r, (int)(e & 15)) >= d.threshold ? __fmul_rn(v[0], d.scale) : 0.f;
      } else {
        // The pack's W / 4 words of draws, picked once (no per-byte run-time
        // index: that compiled to branches and unvectorized stores), then
        // 0xff in each byte >= threshold.
        static_assert(W % 4 == 0 && 16 % W == 0, "packs of whole words within a chunk");
        const int first = (int)(e & 15) / 4;
#pragma unroll
        for (int k = 0; k < W / 4; k++) {
          const int q = first + k;
          const uint32_t word = q == 0 ? r.v[0] : q == 1 ? r.v[1] : q == 2 ? r.v[2] : r.v[3];
          const uint32_t keep = __vcmpgeu4(word, d.threshold * 0x01010101u);
#pragma unroll
          for (int b = 0; b < 4; b++)
            v[4 * k + b] = (keep >> (8 * b)) & 1u ? __fmul_rn(v[4 * k + b], d.scale) : 0.f;
        }
      }
    }
    store_rounded<T, W>(out + at, v);
  }
}

}  // namespace

template <class T>
void bias_dropout_add_forward(T *out, const T *residual, const T *y, const T *bias, int s, int b,
                              int h, const DropoutSpec &d, cudaStream_t stream) {
  launch_dropout<T>(out, residual, y, bias, s, b, h, (uint64_t)d.position_offset * h, make_drop(d), stream,
                    "bias_dropout_add_forward");
}

template <class T>
void bias_dropout_add_backward(T *dy, float *dbias, const T *dout, int s, int b, int h,
                               const DropoutSpec &d, cudaStream_t stream) {
  const int N = s * b;
  const uint64_t e_base = (uint64_t)d.position_offset * h;
  constexpr int V = 16 / sizeof(T);
  if (dbias && N > 0 && h > 0 && h % V == 0 && e_base % 4 == 0 && aligned16(dy) &&
      aligned16(dout)) {  // one pass for both
    const int rows = colsum_chunk_rows(N), chunks = (N + rows - 1) / rows, threads = 128;
    const StreamScratch scratch((size_t)chunks * h * sizeof(float), stream,
                                "bias_dropout_add_backward scratch");
    dropout_backward_colsum<T><<<dim3((h + threads * V - 1) / (threads * V), chunks), threads, 0,
                                 stream>>>(dy, scratch.as<float>(), dout, N, b, h, e_base, rows,
                                           make_drop(d));
    check_launch("bias_dropout_add_backward");
    colsum_add_partials(dbias, scratch.as<float>(), chunks, h, stream);
    return;
  }
  launch_dropout<T>(dy, nullptr, dout, nullptr, s, b, h, (uint64_t)d.position_offset * h, make_drop(d), stream,
                    "bias_dropout_add_backward");
  if (dbias) colsum_accumulate<T>(dbias, dy, s * b, h, stream);
}

template <class T>
void dropout_attention(T *out, const T *in, int b, int a, int s_q, int s_k, int head_offset,
                       const DropoutSpec &d, cudaStream_t stream) {
  if (!(d.p > 0) && out == in) return;    // identity in place
  const uint64_t n = (uint64_t)s_q * s_k, m = (uint64_t)a * n, e_base = (uint64_t)head_offset * n;
  if (m == 0 || b <= 0) return;
  const Drop dr = make_attention_drop(d);
  if (!dr.on) {
    check(cudaMemcpyAsync(out, in, sizeof(T) * m * (size_t)b, cudaMemcpyDeviceToDevice, stream),
          "dropout_attention");
    return;
  }
  constexpr int V = kVec<T>;  // divides 16: a pack starting at e % V == 0 stays in its chunk
  if (e_base % V == 0 && m % V == 0 && aligned16(out) && aligned16(in))
    attention_dropout_packs<T, V><<<grid_for(m / V * b, kThreads), kThreads, 0, stream>>>(
        out, in, b, m, e_base, dr);
  else
    attention_dropout_packs<T, 1><<<grid_for(m * b, kThreads), kThreads, 0, stream>>>(
        out, in, b, m, e_base, dr);
  check_launch("dropout_attention");
}

template <class T>
void dropout_backward_from_output(T *dx, const T *dy, const T *y, size_t n, float p,
                                  cudaStream_t stream) {
  const float scale = 1.f / (1.f - p);  // as the CPU: T(1) / T(1 - p) in float
  constexpr int V = 16 / sizeof(T);
  // 16-byte accesses over the first n / V * V elements, the tail one by one.
  const size_t nv = aligned16(dx) && aligned16(dy) && aligned16(y) ? n / V * V : 0;
  if (nv > 0)
    dropout_backward_kernel<T, V>
        <<<grid_for(nv / V, kThreads), kThreads, 0, stream>>>(dx, dy, y, nv, scale);
  if (n > nv)
    dropout_backward_kernel<T, 1><<<grid_for(n - nv, kThreads), kThreads, 0, stream>>>(
        dx + nv, dy + nv, y + nv, n - nv, scale);
  check_launch("dropout_backward_from_output");
}

#define PTDP_INSTANTIATE(T)                                                                     \
  template void bias_dropout_add_forward<T>(T *, const T *, const T *, const T *, int, int, int, \
                                            const DropoutSpec &, cudaStream_t);                 \
  template void bias_dropout_add_backward<T>(T *, float *, const T *, int, int, int,           \
                                             const DropoutSpec &, cudaStream_t);                \
  template void dropout_attention<T>(T *, const T *, int, int, int, int, int,                  \
                                     const DropoutSpec &, cudaStream_t);                        \
  template void dropout_backward_from_output<T>(T *, const T *, const T *, size_t, float,      \
                                                cudaStream_t);
PTDP_CUDA_STORAGE_TYPES(PTDP_INSTANTIATE)
#undef PTDP_INSTANTIATE

}  // namespace ptdp::cuda
