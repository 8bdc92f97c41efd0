#include <cmath>

#include "kernels/kernels.h"

namespace ptdp::cpu {

template <class T>
void layernorm_forward(T *out, T *mean, T *rstd, const T *x, const T *w, const T *b, int N, int h,
                       T eps) {
#pragma omp parallel for schedule(static)
  for (int i = 0; i < N; i++) {
    const T *xi = x + (size_t)i * h;
    T *oi = out + (size_t)i * h;
    T m = 0;
    for (int j = 0; j < h; j++) m += xi[j];
    m /= h;
    T var = 0;
    for (int j = 0; j < h; j++) var += (xi[j] - m) * (xi[j] - m);
    var /= h;
    T r = T(1) / std::sqrt(var + eps);
    for (int j = 0; j < h; j++) oi[j] = (xi[j] - m) * r * w[j] + b[j];
    mean[i] = m;
    rstd[i] = r;
  }
}

template <class T>
void layernorm_backward(T *dx, T *dw, T *db, const T *dout, const T *x, const T *w,
                        const T *mean, const T *rstd, int N, int h) {
  // dx: rows independent.
#pragma omp parallel for schedule(static)
  for (int i = 0; i < N; i++) {
    const T *xi = x + (size_t)i * h, *gi = dout + (size_t)i * h;
    T *dxi = dx + (size_t)i * h;
    T m = mean[i], r = rstd[i];
    T sum_g = 0, sum_gx = 0;  // sums of dxhat and dxhat*xhat
    for (int j = 0; j < h; j++) {
      T dxhat = gi[j] * w[j];
      sum_g += dxhat;
      sum_gx += dxhat * (xi[j] - m) * r;
    }
    sum_g /= h;
    sum_gx /= h;
    for (int j = 0; j < h; j++) {
      T xhat = (xi[j] - m) * r;
      dxi[j] += (gi[j] * w[j] - sum_g - xhat * sum_gx) * r;
    }
  }
  // dw, db: columns independent, rows summed in order (thread-count independent).
#pragma omp parallel for schedule(static)
  for (int j = 0; j < h; j++) {
    T sw = 0, sb = 0;
    for (int i = 0; i < N; i++) {
      T g = dout[(size_t)i * h + j];
      sw += g * (x[(size_t)i * h + j] - mean[i]) * rstd[i];
      sb += g;
    }
    dw[j] += sw;
    db[j] += sb;
  }
}

template void layernorm_forward<float>(float *, float *, float *, const float *, const float *,
                                       const float *, int, int, float);
template void layernorm_forward<double>(double *, double *, double *, const double *,
                                        const double *, const double *, int, int, double);
template void layernorm_backward<float>(float *, float *, float *, const float *, const float *,
                                        const float *, const float *, const float *, int, int);
template void layernorm_backward<double>(double *, double *, double *, const double *,
                                         const double *, const double *, const double *,
                                         const double *, int, int);

}  // namespace ptdp::cpu
