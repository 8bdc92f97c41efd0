#include <vector>

#include "kernels/kernels.h"

namespace ptdp::cpu {

template <class T>
double sum_squares(const T *x, size_t n) {
  const size_t chunk = 1 << 16;
  const size_t nchunks = (n + chunk - 1) / chunk;
  std::vector<double> partial(nchunks, 0.0);
#pragma omp parallel for schedule(static)
  for (size_t c = 0; c < nchunks; c++) {
    size_t end = (c + 1) * chunk < n ? (c + 1) * chunk : n;
    double s = 0;
    for (size_t i = c * chunk; i < end; i++) s += (double)x[i] * (double)x[i];
    partial[c] = s;
  }
  double total = 0;
  for (double p : partial) total += p;
  return total;
}

template <class T>
void scale_inplace(T *x, size_t n, T alpha) {
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < n; i++) x[i] *= alpha;
}

template <class T>
void colsum_accumulate(T *out, const T *x, int N, int cols) {
  // Block of columns per thread; rows summed in order for determinism.
  const int block = 64;
  const int nblocks = (cols + block - 1) / block;
#pragma omp parallel for schedule(static)
  for (int cb = 0; cb < nblocks; cb++) {
    int j0 = cb * block, j1 = j0 + block < cols ? j0 + block : cols;
    T acc[64] = {};
    for (int i = 0; i < N; i++) {
      const T *xi = x + (size_t)i * cols;
      for (int j = j0; j < j1; j++) acc[j - j0] += xi[j];
    }
    for (int j = j0; j < j1; j++) out[j] += acc[j - j0];
  }
}

template double sum_squares<float>(const float *, size_t);
template double sum_squares<double>(const double *, size_t);
template void scale_inplace<float>(float *, size_t, float);
template void scale_inplace<double>(double *, size_t, double);
template void colsum_accumulate<float>(float *, const float *, int, int);
template void colsum_accumulate<double>(double *, const double *, int, int);

}  // namespace ptdp::cpu
