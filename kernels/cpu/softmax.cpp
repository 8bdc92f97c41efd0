#include <cmath>
#include <limits>

#include "kernels/kernels.h"
#include "kernels/cpu/vec_math.h"

namespace ptdp::cpu {

template <class T>
void scale_mask_softmax_forward(T *P, const T *S, int batch, int s_q, int s_k, T scale,
                                bool causal, const uint8_t *mask) {
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < (int64_t)batch * s_q; r++) {
    int i = (int)(r % s_q);
    const T *src = S + r * s_k;
    T *dst = P + r * s_k;
    const uint8_t *mrow = mask ? mask + (size_t)i * s_k : nullptr;
    // Visible columns: j <= i when causal, and not masked.
    int jend = causal ? (i + 1 < s_k ? i + 1 : s_k) : s_k;
    T mx = -std::numeric_limits<T>::infinity();
    for (int j = 0; j < jend; j++)
      if (!mrow || !mrow[j]) mx = std::max(mx, src[j] * scale);
    if (mx == -std::numeric_limits<T>::infinity()) {  // fully masked row
      for (int j = 0; j < s_k; j++) dst[j] = 0;
      continue;
    }
    T sum = 0;
#pragma omp simd reduction(+ : sum)
    for (int j = 0; j < jend; j++) {
      T e = (!mrow || !mrow[j]) ? vexp(src[j] * scale - mx) : T(0);
      dst[j] = e;
      sum += e;
    }
    T inv = T(1) / sum;
    for (int j = 0; j < jend; j++) dst[j] *= inv;
    for (int j = jend; j < s_k; j++) dst[j] = 0;
  }
}

template <class T>
void scale_mask_softmax_backward(T *dS, const T *P, const T *dP, int batch, int s_q, int s_k,
                                 T scale) {
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < (int64_t)batch * s_q; r++) {
    const T *p = P + r * s_k, *dp = dP + r * s_k;
    T *ds = dS + r * s_k;
    T dot = 0;
    for (int j = 0; j < s_k; j++) dot += p[j] * dp[j];
    for (int j = 0; j < s_k; j++) ds[j] = scale * p[j] * (dp[j] - dot);
  }
}

template void scale_mask_softmax_forward<float>(float *, const float *, int, int, int, float, bool,
                                                const uint8_t *);
template void scale_mask_softmax_forward<double>(double *, const double *, int, int, int, double,
                                                 bool, const uint8_t *);
template void scale_mask_softmax_backward<float>(float *, const float *, const float *, int, int,
                                                 int, float);
template void scale_mask_softmax_backward<double>(double *, const double *, const double *, int,
                                                  int, int, double);

}  // namespace ptdp::cpu
