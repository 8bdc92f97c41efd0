#include "kernels/kernels.h"

namespace ptdp::cpu {

template <class T>
void embedding_forward(T *x, const int32_t *tokens, const T *wte, int vocab_start, int vocab_rows,
                       const T *wpe, int s, int b, int h) {
#pragma omp parallel for schedule(static)
  for (int r = 0; r < s * b; r++) {
    int64_t row = (int64_t)tokens[r] - vocab_start;
    bool local = row >= 0 && row < vocab_rows;
    const T *te = wte + (size_t)(local ? row : 0) * h;
    const T *pe = wpe ? wpe + (size_t)(r / b) * h : nullptr;
    T *xr = x + (size_t)r * h;
    for (int j = 0; j < h; j++) xr[j] = (local ? te[j] : T(0)) + (pe ? pe[j] : T(0));
  }
}

template <class T>
void add_position_embedding(T *x, const T *wpe, int s, int b, int h) {
#pragma omp parallel for schedule(static)
  for (int r = 0; r < s * b; r++) {
    const T *pe = wpe + (size_t)(r / b) * h;
    T *xr = x + (size_t)r * h;
    for (int j = 0; j < h; j++) xr[j] += pe[j];
  }
}

template <class T>
void embedding_backward(T *dwte, T *dwpe, const T *dx, const int32_t *tokens, int s, int b, int h,
                        int vocab_start, int vocab_rows) {
  // Parallel over the hidden dim: rows that share a token never race, and the
  // summation order (row order) does not depend on the thread count.
#pragma omp parallel for schedule(static)
  for (int j = 0; j < h; j++) {
    for (int r = 0; r < s * b; r++) {
      T g = dx[(size_t)r * h + j];
      int64_t row = (int64_t)tokens[r] - vocab_start;
      if (row >= 0 && row < vocab_rows) dwte[(size_t)row * h + j] += g;
      if (dwpe) dwpe[(size_t)(r / b) * h + j] += g;
    }
  }
}

#define PTDP_INSTANTIATE(T)                                                                   \
  template void embedding_forward<T>(T *, const int32_t *, const T *, int, int, const T *, int, \
                                     int, int);                                               \
  template void add_position_embedding<T>(T *, const T *, int, int, int);                     \
  template void embedding_backward<T>(T *, T *, const T *, const int32_t *, int, int, int, int, \
                                      int);
PTDP_INSTANTIATE(float)
PTDP_INSTANTIATE(double)

}  // namespace ptdp::cpu
