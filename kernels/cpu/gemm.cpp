#ifndef PTDP_NO_BLAS
#include <cblas.h>
#endif
#ifdef _OPENMP
#include <omp.h>
#else
static int omp_get_max_threads() { return 1; }
#endif

#include "kernels/kernels.h"

namespace ptdp::cpu {

namespace {
#ifdef PTDP_NO_BLAS
// The GPU-only build has no BLAS: plain loops with a double accumulator, the
// CPU twin of the small models the GPU tests compare against. As BLAS, C is
// not read when beta = 0.
template <class T>
void blas_gemm(bool ta, bool tb, int M, int N, int K, T alpha, const T *A, int lda, const T *B,
               int ldb, T beta, T *C, int ldc) {
  for (int i = 0; i < M; i++)
    for (int j = 0; j < N; j++) {
      double acc = 0;
      for (int k = 0; k < K; k++)
        acc += (double)(ta ? A[(size_t)k * lda + i] : A[(size_t)i * lda + k]) *
               (double)(tb ? B[(size_t)j * ldb + k] : B[(size_t)k * ldb + j]);
      T &c = C[(size_t)i * ldc + j];
      c = beta == T(0) ? T(alpha * acc) : T(alpha * acc + beta * c);
    }
}
#else
inline void blas_gemm(bool ta, bool tb, int M, int N, int K, float alpha, const float *A, int lda,
                      const float *B, int ldb, float beta, float *C, int ldc) {
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, N,
              K, alpha, A, lda, B, ldb, beta, C, ldc);
}
inline void blas_gemm(bool ta, bool tb, int M, int N, int K, double alpha, const double *A,
                      int lda, const double *B, int ldb, double beta, double *C, int ldc) {
  cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, N,
              K, alpha, A, lda, B, ldb, beta, C, ldc);
}
#endif
}  // namespace

template <class T>
void gemm(bool ta, bool tb, int M, int N, int K, T alpha, const T *A, int lda, const T *B,
          int ldb, T beta, T *C, int ldc) {
  if (M == 0 || N == 0) return;
  blas_gemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

template <class T>
void gemm_strided_batched(bool ta, bool tb, int M, int N, int K, T alpha, const T *A, int lda,
                          int64_t strideA, const T *B, int ldb, int64_t strideB, T beta, T *C,
                          int ldc, int64_t strideC, int batch) {
  // Many small GEMMs: one per thread (OpenBLAS-OpenMP runs single-threaded inside
  // a parallel region). Few large ones: let BLAS thread each.
  if (batch >= omp_get_max_threads()) {
#pragma omp parallel for schedule(static)
    for (int i = 0; i < batch; i++)
      blas_gemm(ta, tb, M, N, K, alpha, A + i * strideA, lda, B + i * strideB, ldb, beta,
                C + i * strideC, ldc);
  } else {
    for (int i = 0; i < batch; i++)
      blas_gemm(ta, tb, M, N, K, alpha, A + i * strideA, lda, B + i * strideB, ldb, beta,
                C + i * strideC, ldc);
  }
}

#define PTDP_INSTANTIATE(T)                                                               \
  template void gemm<T>(bool, bool, int, int, int, T, const T *, int, const T *, int, T, T *, \
                        int);                                                            \
  template void gemm_strided_batched<T>(bool, bool, int, int, int, T, const T *, int, int64_t, \
                                        const T *, int, int64_t, T, T *, int, int64_t, int);
PTDP_INSTANTIATE(float)
PTDP_INSTANTIATE(double)

}  // namespace ptdp::cpu
