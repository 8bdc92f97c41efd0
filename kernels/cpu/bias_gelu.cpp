#include <cmath>

#include "kernels/kernels.h"
#include "kernels/cpu/vec_math.h"

namespace ptdp::cpu {

namespace {
constexpr double kSqrt2OverPi = 0.7978845608028654;
constexpr double kCoeff = 0.044715;
}  // namespace

template <class T>
void bias_gelu_forward(T *z, T *out, const T *y, const T *bias, int N, int f) {
#pragma omp parallel for schedule(static)
  for (int i = 0; i < N; i++) {
#pragma omp simd
    for (int j = 0; j < f; j++) {
      size_t k = (size_t)i * f + j;
      T v = bias ? y[k] + bias[j] : y[k];  // no bias: disable_bias_linear
      z[k] = v;
      T u = T(kSqrt2OverPi) * (v + T(kCoeff) * v * v * v);
      out[k] = T(0.5) * v * (T(1) + vtanh(u));
    }
  }
}

template <class T>
void bias_gelu_backward(T *dz, T *dbias, const T *dout, const T *z, int N, int f) {
#pragma omp parallel for schedule(static)
  for (int i = 0; i < N; i++) {
#pragma omp simd
    for (int j = 0; j < f; j++) {
      size_t k = (size_t)i * f + j;
      T v = z[k];
      T u = T(kSqrt2OverPi) * (v + T(kCoeff) * v * v * v);
      T th = vtanh(u);
      T du = T(kSqrt2OverPi) * (T(1) + T(3 * kCoeff) * v * v);
      T grad = T(0.5) * (T(1) + th) + T(0.5) * v * (T(1) - th * th) * du;
      dz[k] = dout[k] * grad;
    }
  }
  if (dbias) colsum_accumulate(dbias, dz, N, f);
}

template void bias_gelu_forward<float>(float *, float *, const float *, const float *, int, int);
template void bias_gelu_forward<double>(double *, double *, const double *, const double *, int,
                                        int);
template void bias_gelu_backward<float>(float *, float *, const float *, const float *, int, int);
template void bias_gelu_backward<double>(double *, double *, const double *, const double *, int,
                                         int);

}  // namespace ptdp::cpu
