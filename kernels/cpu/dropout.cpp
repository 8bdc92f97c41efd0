#include "kernels/cpu/ops.h"

namespace ptdp::cpu {

template <class T>
void bias_dropout_add_forward(T *out, const T *residual, const T *y, const T *bias, int s, int b,
                              int h, const DropoutSpec &d) {
  const T keep_scale = d.p > 0 ? T(1) / T(1 - d.p) : T(1);
#pragma omp parallel for schedule(static)
  for (int r = 0; r < s * b; r++) {
    int si = r / b, bi = r % b;
    uint32_t sample = d.sample_offset + (uint32_t)bi;
    DropoutStream mask(d, sample);
    for (int j = 0; j < h; j++) {
      size_t k = (size_t)r * h + j;
      T v = y[k] + (bias ? bias[j] : T(0));
      if (d.p > 0) v = mask.keep((uint64_t)si * h + j) ? v * keep_scale : T(0);
      out[k] = (residual ? residual[k] : T(0)) + v;
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
  const T keep_scale = d.p > 0 ? T(1) / T(1 - d.p) : T(1);
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
    // Zeros (the causal mask's upper triangle) stay zero: skip their draws.
    DropoutStream mask(d, sample);
    for (size_t k = 0; k < n; k++)
      dst[k] = src[k] != T(0) && mask.keep(base + k) ? src[k] * keep_scale : T(0);
  }
}

#define PTDP_INSTANTIATE(T)                                                                  \
  template void bias_dropout_add_forward<T>(T *, const T *, const T *, const T *, int, int, int, \
                                            const DropoutSpec &);                            \
  template void bias_dropout_add_backward<T>(T *, T *, const T *, int, int, int,            \
                                             const DropoutSpec &);                           \
  template void dropout_attention<T>(T *, const T *, int, int, int, int, int, const DropoutSpec &);
PTDP_INSTANTIATE(float)
PTDP_INSTANTIATE(double)

}  // namespace ptdp::cpu
