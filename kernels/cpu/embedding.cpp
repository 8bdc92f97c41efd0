#include "kernels/cpu/ops.h"

namespace ptdp::cpu {

template <class T>
void embedding_forward(T *x, const int32_t *tokens, const T *wte, const T *wpe, int s, int b,
                       int h) {
#pragma omp parallel for schedule(static)
  for (int r = 0; r < s * b; r++) {
    const T *te = wte + (size_t)tokens[r] * h;
    const T *pe = wpe + (size_t)(r / b) * h;
    T *xr = x + (size_t)r * h;
    for (int j = 0; j < h; j++) xr[j] = te[j] + pe[j];
  }
}

template <class T>
void embedding_backward(T *dwte, T *dwpe, const T *dx, const int32_t *tokens, int s, int b,
                        int h) {
  // Parallel over the hidden dim: rows that share a token never race, and the
  // summation order (row order) does not depend on the thread count.
#pragma omp parallel for schedule(static)
  for (int j = 0; j < h; j++) {
    for (int r = 0; r < s * b; r++) {
      T g = dx[(size_t)r * h + j];
      dwte[(size_t)tokens[r] * h + j] += g;
      dwpe[(size_t)(r / b) * h + j] += g;
    }
  }
}

template void embedding_forward<float>(float *, const int32_t *, const float *, const float *, int,
                                       int, int);
template void embedding_forward<double>(double *, const int32_t *, const double *, const double *,
                                        int, int, int);
template void embedding_backward<float>(float *, float *, const float *, const int32_t *, int, int,
                                        int);
template void embedding_backward<double>(double *, double *, const double *, const int32_t *, int,
                                         int, int);

}  // namespace ptdp::cpu
