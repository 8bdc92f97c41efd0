// SwiGLU (Shazeer 2020), the gated MLP of LLaMA: the first linear layer gives
// [gate | up] per row ([N, 2f], each rank's own f columns of both), and
// out = silu(gate) * up with silu(v) = v * sigmoid(v). An optional bias is
// added first (z = y + bias, kept for the backward), as bias_gelu does.
#include <cmath>

#include "kernels/kernels.h"

namespace ptdp::cpu {

namespace {

template <class T>
T sigmoid(T v) {
  return T(1) / (T(1) + std::exp(-v));
}

}  // namespace

template <class T>
void swiglu_forward(T *z, T *out, const T *y, const T *bias, int N, int f) {
#pragma omp parallel for schedule(static)
  for (int i = 0; i < N; i++) {
    const T *yi = y + (size_t)i * 2 * f;
    T *zi = z + (size_t)i * 2 * f, *oi = out + (size_t)i * f;
    for (int j = 0; j < 2 * f; j++) zi[j] = yi[j] + (bias ? bias[j] : T(0));
    for (int j = 0; j < f; j++) oi[j] = zi[j] * sigmoid(zi[j]) * zi[f + j];
  }
}

template <class T>
void swiglu_backward(T *dz, T *dbias, const T *dout, const T *z, int N, int f) {
  // d gate = dout * up * silu'(gate), silu'(v) = s (1 + v (1 - s)) with s = sigmoid(v);
  // d up = dout * silu(gate).
#pragma omp parallel for schedule(static)
  for (int i = 0; i < N; i++) {
    const T *zi = z + (size_t)i * 2 * f, *gi = dout + (size_t)i * f;
    T *di = dz + (size_t)i * 2 * f;
    for (int j = 0; j < f; j++) {
      const T g = zi[j], u = zi[f + j], s = sigmoid(g);
      di[j] = gi[j] * u * s * (T(1) + g * (T(1) - s));
      di[f + j] = gi[j] * g * s;
    }
  }
  if (dbias) colsum_accumulate(dbias, dz, N, 2 * f);
}

#define PTDP_INSTANTIATE(T)                                                         \
  template void swiglu_forward<T>(T *, T *, const T *, const T *, int, int);        \
  template void swiglu_backward<T>(T *, T *, const T *, const T *, int, int);
PTDP_INSTANTIATE(float)
PTDP_INSTANTIATE(double)

}  // namespace ptdp::cpu
