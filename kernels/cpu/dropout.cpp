#include <vector>

#include "kernels/kernels.h"

namespace ptdp::cpu {

void dropout_keep_mask(const DropoutSpec &d, uint32_t sample, uint64_t first, int n,
                       uint8_t *keep) {
  const uint32_t threshold = (uint32_t)(d.p * 4294967296.0);
  const int kBlock = 64;  // quads per vectorised batch
  uint32_t bits[4][kBlock];
  uint64_t q = first >> 2, end = first + (uint64_t)n;
  while ((q << 2) < end) {
    int cnt = (int)std::min<uint64_t>(kBlock, ((end + 3) >> 2) - q);
#pragma omp simd
    for (int i = 0; i < cnt; i++) {
      Philox4x32 r = dropout_quad(d.key, sample, q + (uint64_t)i);
      bits[0][i] = r.v[0];
      bits[1][i] = r.v[1];
      bits[2][i] = r.v[2];
      bits[3][i] = r.v[3];
    }
    for (int i = 0; i < cnt; i++)
      for (int lane = 0; lane < 4; lane++) {
        uint64_t e = ((q + (uint64_t)i) << 2) + (uint64_t)lane;
        if (e >= first && e < end) keep[e - first] = bits[lane][i] >= threshold;
      }
    q += (uint64_t)cnt;
  }
}

void attention_keep_mask(const DropoutSpec &d, uint32_t sample, uint64_t first, int n,
                         uint8_t *keep) {
  const uint32_t threshold = attention_drop_threshold(d.p);
  const uint64_t end = first + (uint64_t)n;
  for (uint64_t c = first >> 4; (c << 4) < end; c++) {
    const Philox4x32 r = attention_draws(d.key, sample, c);
    for (int k = 0; k < 16; k++) {
      const uint64_t e = (c << 4) + (uint64_t)k;
      if (e >= first && e < end) keep[e - first] = draw_byte(r, k) >= threshold;
    }
  }
}

template <class T>
void bias_dropout_add_forward(T *out, const T *residual, const T *y, const T *bias, int s, int b,
                              int h, const DropoutSpec &d) {
  const T keep_scale = d.p > 0 ? T(1) / T(1 - d.p) : T(1);
#pragma omp parallel
  {
    std::vector<uint8_t> keep((size_t)h, 1);
#pragma omp for schedule(static)
    for (int r = 0; r < s * b; r++) {
      int si = r / b, bi = r % b;
      if (d.p > 0)
        dropout_keep_mask(d, d.sample_offset + (uint32_t)bi,
                          (uint64_t)(d.position_offset + (uint32_t)si) * h, h, keep.data());
      for (int j = 0; j < h; j++) {
        size_t k = (size_t)r * h + j;
        T v = y[k] + (bias ? bias[j] : T(0));
        v = keep[j] ? v * keep_scale : T(0);
        out[k] = (residual ? residual[k] : T(0)) + v;
      }
    }
  }
}

template <class T>
void bias_dropout_add_backward(T *dy, T *dbias, const T *dout, int s, int b, int h,
                               const DropoutSpec &d) {
  bias_dropout_add_forward<T>(dy, nullptr, dout, nullptr, s, b, h, d);
  if (dbias) colsum_accumulate(dbias, dy, s * b, h);
}

template <class T>
void dropout_attention(T *out, const T *in, int b, int a, int s_q, int s_k, int head_offset,
                       const DropoutSpec &d) {
  const T keep_scale = d.p > 0 ? T(1) / T(1 - attention_dropout_rate(d.p)) : T(1);
  const size_t n = (size_t)s_q * s_k;
#pragma omp parallel for schedule(static)
  for (int bh = 0; bh < b * a; bh++) {
    int bi = bh / a, head = bh % a;
    uint32_t sample = d.sample_offset + (uint32_t)bi;
    uint64_t base = (uint64_t)(head_offset + head) * n;
    const T *src = in + (size_t)bh * n;
    T *dst = out + (size_t)bh * n;
    if (d.p <= 0) {
      for (size_t k = 0; k < n; k++) dst[k] = src[k];
      continue;
    }
    // Row by row; a row's trailing zeros (the causal mask's upper triangle)
    // stay zero, so their draws are skipped.
    std::vector<uint8_t> keep((size_t)s_k);
    for (int i = 0; i < s_q; i++) {
      const T *srow = src + (size_t)i * s_k;
      T *drow = dst + (size_t)i * s_k;
      int len = s_k;
      while (len > 0 && srow[len - 1] == T(0)) len--;
      attention_keep_mask(d, sample, base + (uint64_t)i * s_k, len, keep.data());
      for (int j = 0; j < len; j++) drow[j] = keep[j] ? srow[j] * keep_scale : T(0);
      for (int j = len; j < s_k; j++) drow[j] = T(0);
    }
  }
}

template <class T>
void dropout_backward_from_output(T *dx, const T *dy, const T *y, size_t n, float p) {
  const T keep_scale = T(1) / T(1 - p);
#pragma omp parallel for simd schedule(static)
  for (size_t k = 0; k < n; k++) dx[k] = y[k] != T(0) ? dy[k] * keep_scale : T(0);
}

#define PTDP_INSTANTIATE(T)                                                                  \
  template void bias_dropout_add_forward<T>(T *, const T *, const T *, const T *, int, int, int, \
                                            const DropoutSpec &);                            \
  template void bias_dropout_add_backward<T>(T *, T *, const T *, int, int, int,            \
                                             const DropoutSpec &);                           \
  template void dropout_attention<T>(T *, const T *, int, int, int, int, int, const DropoutSpec &); \
  template void dropout_backward_from_output<T>(T *, const T *, const T *, size_t, float);
PTDP_INSTANTIATE(float)
PTDP_INSTANTIATE(double)

}  // namespace ptdp::cpu
