// RMSNorm (Zhang & Sennrich 2019): out = x * rstd * w with rstd = 1 / sqrt(mean(x^2)
// + eps) over the last dim, no mean, no bias. The backward is LayerNorm's with
// the mean taken as 0 and no mean(dxhat) term.
#include <cmath>

#include "kernels/kernels.h"

namespace ptdp::cpu {

template <class T>
void rmsnorm_forward(T *out, T *rstd, const T *x, const T *w, int N, int h, T eps) {
#pragma omp parallel for schedule(static)
  for (int i = 0; i < N; i++) {
    const T *xi = x + (size_t)i * h;
    T *oi = out + (size_t)i * h;
    T ss = 0;
    for (int j = 0; j < h; j++) ss += xi[j] * xi[j];
    const T r = T(1) / std::sqrt(ss / h + eps);
    for (int j = 0; j < h; j++) oi[j] = xi[j] * r * w[j];
    rstd[i] = r;
  }
}

template <class T>
void rmsnorm_backward(T *dx, T *dw, const T *dout, const T *x, const T *w, const T *rstd, int N,
                      int h) {
  // dx += (dxhat - xhat * mean(dxhat * xhat)) * rstd with xhat = x * rstd, dxhat = dout * w.
#pragma omp parallel for schedule(static)
  for (int i = 0; i < N; i++) {
    const T *xi = x + (size_t)i * h, *gi = dout + (size_t)i * h;
    T *dxi = dx + (size_t)i * h;
    const T r = rstd[i];
    T sum_gx = 0;
    for (int j = 0; j < h; j++) sum_gx += gi[j] * w[j] * xi[j] * r;
    sum_gx /= h;
    for (int j = 0; j < h; j++) dxi[j] += (gi[j] * w[j] - xi[j] * r * sum_gx) * r;
  }
  // dw: columns independent, rows summed in order.
#pragma omp parallel for schedule(static)
  for (int j = 0; j < h; j++) {
    T sw = 0;
    for (int i = 0; i < N; i++) sw += dout[(size_t)i * h + j] * x[(size_t)i * h + j] * rstd[i];
    dw[j] += sw;
  }
}

#define PTDP_INSTANTIATE(T)                                                                  \
  template void rmsnorm_forward<T>(T *, T *, const T *, const T *, int, int, T);             \
  template void rmsnorm_backward<T>(T *, T *, const T *, const T *, const T *, const T *, int, \
                                    int);
PTDP_INSTANTIATE(float)
PTDP_INSTANTIATE(double)

}  // namespace ptdp::cpu
