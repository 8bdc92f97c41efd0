#include <cmath>

#include "kernels/cpu/ops.h"
#include "kernels/cpu/vec_math.h"

namespace ptdp::cpu {

template <class T>
void cross_entropy_forward(T *losses, const T *logits, const int32_t *targets, int N, int Vp,
                           int V) {
#pragma omp parallel for schedule(static)
  for (int i = 0; i < N; i++) {
    const T *l = logits + (size_t)i * Vp;
    T mx = l[0];
    for (int j = 1; j < V; j++) mx = std::max(mx, l[j]);
    T sum = 0;
#pragma omp simd reduction(+ : sum)
    for (int j = 0; j < V; j++) sum += vexp(l[j] - mx);
    losses[i] = std::log(sum) + mx - l[targets[i]];
  }
}

template <class T>
void cross_entropy_backward(T *dlogits, const T *logits, const int32_t *targets, int N, int Vp,
                            int V, T dloss) {
#pragma omp parallel for schedule(static)
  for (int i = 0; i < N; i++) {
    const T *l = logits + (size_t)i * Vp;
    T *d = dlogits + (size_t)i * Vp;
    T mx = l[0];
    for (int j = 1; j < V; j++) mx = std::max(mx, l[j]);
    T sum = 0;
#pragma omp simd reduction(+ : sum)
    for (int j = 0; j < V; j++) sum += vexp(l[j] - mx);
    T inv = T(1) / sum;
#pragma omp simd
    for (int j = 0; j < V; j++) d[j] = dloss * vexp(l[j] - mx) * inv;
    for (int j = V; j < Vp; j++) d[j] = 0;
    d[targets[i]] -= dloss;
  }
}

template void cross_entropy_forward<float>(float *, const float *, const int32_t *, int, int, int);
template void cross_entropy_forward<double>(double *, const double *, const int32_t *, int, int,
                                            int);
template void cross_entropy_backward<float>(float *, const float *, const int32_t *, int, int, int,
                                            float);
template void cross_entropy_backward<double>(double *, const double *, const int32_t *, int, int,
                                             int, double);

}  // namespace ptdp::cpu
