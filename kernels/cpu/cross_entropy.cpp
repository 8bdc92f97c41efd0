#include <cmath>
#include <limits>
#include <vector>

#include "kernels/kernels.h"
#include "kernels/cpu/vec_math.h"

namespace ptdp::cpu {

template <class T>
void vocab_ce_local_max(T *row_max, const T *logits, int N, int ld, int cols) {
#pragma omp parallel for schedule(static)
  for (int i = 0; i < N; i++) {
    const T *l = logits + (size_t)i * ld;
    T mx = -std::numeric_limits<T>::infinity();
    for (int j = 0; j < cols; j++) mx = std::max(mx, l[j]);
    row_max[i] = mx;
  }
}

template <class T>
void vocab_ce_local_sums(T *sum_exp, T *target_logit, const T *logits, const T *row_max,
                         const int32_t *targets, int N, int ld, int cols, int vocab_start) {
#pragma omp parallel for schedule(static)
  for (int i = 0; i < N; i++) {
    const T *l = logits + (size_t)i * ld;
    const T mx = row_max[i];
    T sum = 0;
#pragma omp simd reduction(+ : sum)
    for (int j = 0; j < cols; j++) sum += vexp(l[j] - mx);
    sum_exp[i] = sum;
    int64_t t = (int64_t)targets[i] - vocab_start;
    target_logit[i] = t >= 0 && t < cols ? l[t] : T(0);
  }
}

template <class T>
void vocab_ce_backward(T *dlogits, const T *logits, const T *row_max, const T *sum_exp,
                       const int32_t *targets, int N, int ld, int cols, int vocab_start, T dloss) {
#pragma omp parallel for schedule(static)
  for (int i = 0; i < N; i++) {
    const T *l = logits + (size_t)i * ld;
    T *d = dlogits + (size_t)i * ld;
    const T mx = row_max[i], scale = dloss / sum_exp[i];
#pragma omp simd
    for (int j = 0; j < cols; j++) d[j] = scale * vexp(l[j] - mx);
    for (int j = cols; j < ld; j++) d[j] = 0;
    int64_t t = (int64_t)targets[i] - vocab_start;
    if (t >= 0 && t < cols) d[t] -= dloss;
  }
}

template <class T>
void cross_entropy_forward(T *losses, const T *logits, const int32_t *targets, int N, int Vp,
                           int V) {
  std::vector<T> mx((size_t)N), sum((size_t)N);
  vocab_ce_local_max(mx.data(), logits, N, Vp, V);
  vocab_ce_local_sums(sum.data(), losses, logits, mx.data(), targets, N, Vp, V, 0);
  for (int i = 0; i < N; i++) losses[i] = std::log(sum[i]) + mx[i] - losses[i];
}

template <class T>
void cross_entropy_backward(T *dlogits, const T *logits, const int32_t *targets, int N, int Vp,
                            int V, T dloss) {
  std::vector<T> mx((size_t)N), sum((size_t)N), tl((size_t)N);
  vocab_ce_local_max(mx.data(), logits, N, Vp, V);
  vocab_ce_local_sums(sum.data(), tl.data(), logits, mx.data(), targets, N, Vp, V, 0);
  vocab_ce_backward(dlogits, logits, mx.data(), sum.data(), targets, N, Vp, V, 0, dloss);
}

#define PTDP_INSTANTIATE(T)                                                                   \
  template void vocab_ce_local_max<T>(T *, const T *, int, int, int);                         \
  template void vocab_ce_local_sums<T>(T *, T *, const T *, const T *, const int32_t *, int, int, \
                                       int, int);                                             \
  template void vocab_ce_backward<T>(T *, const T *, const T *, const T *, const int32_t *, int, \
                                     int, int, int, T);                                       \
  template void cross_entropy_forward<T>(T *, const T *, const int32_t *, int, int, int);      \
  template void cross_entropy_backward<T>(T *, const T *, const int32_t *, int, int, int, T);
PTDP_INSTANTIATE(float)
PTDP_INSTANTIATE(double)

}  // namespace ptdp::cpu
