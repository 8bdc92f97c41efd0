// CPU kernel tests: GEMM and strided batched GEMM against the definition, every transpose.
#include "tests/kernels/kernel_check.h"

namespace ptdp::cpu {
namespace {

// ---- GEMM against the definition --------------------------------------------------

// C = alpha * op(A) @ op(B) + beta * C, row-major, by the definition.
void naive_gemm(bool ta, bool tb, int M, int N, int K, double alpha, const double *A, int lda,
                const double *B, int ldb, double beta, double *C, int ldc) {
  for (int m = 0; m < M; m++)
    for (int n = 0; n < N; n++) {
      double s = 0;
      for (int k = 0; k < K; k++) {
        double a = ta ? A[k * lda + m] : A[m * lda + k];
        double b = tb ? B[n * ldb + k] : B[k * ldb + n];
        s += a * b;
      }
      C[m * ldc + n] = alpha * s + beta * C[m * ldc + n];
    }
}

// Storage of one operand case: op(A) is [M, K], op(B) is [K, N], C is [M, N],
// every leading dimension padded beyond its minimum.
struct GemmCase {
  bool ta, tb;
  int M = 3, N = 5, K = 4;
  int lda, ldb, ldc, sizeA, sizeB, sizeC;
  GemmCase(bool ta_, bool tb_) : ta(ta_), tb(tb_) {
    lda = (ta ? M : K) + 2;
    ldb = (tb ? K : N) + 3;
    ldc = N + 1;
    sizeA = (ta ? K : M) * lda;
    sizeB = (tb ? N : K) * ldb;
    sizeC = M * ldc;
  }
};

TEST(KernelGemm, MatchesNaiveAllTransposes) {
  const double alpha = 1.3, beta = -0.6;
  for (int t = 0; t < 4; t++) {
    GemmCase g(t & 1, t & 2);
    Rng rng(100 + t);
    // Padding of A and B holds random values too: reading it would show up.
    Vec A = rng.vec(g.sizeA), B = rng.vec(g.sizeB), C = rng.vec(g.sizeC);
    for (int m = 0; m < g.M; m++) C[m * g.ldc + g.N] = 777.0;  // C padding: must survive
    Vec ref = C;
    naive_gemm(g.ta, g.tb, g.M, g.N, g.K, alpha, A.data(), g.lda, B.data(), g.ldb, beta,
               ref.data(), g.ldc);
    gemm(g.ta, g.tb, g.M, g.N, g.K, alpha, A.data(), g.lda, B.data(), g.ldb, beta, C.data(),
         g.ldc);
    for (int i = 0; i < g.sizeC; i++)
      EXPECT_NEAR(C[i], ref[i], 1e-13) << "ta=" << g.ta << " tb=" << g.tb << " i=" << i;

    // beta = 0 must overwrite C, not scale it: callers pass uninitialised buffers.
    Vec Cn(g.sizeC, std::nan("")), ref0(g.sizeC, 0.0);
    naive_gemm(g.ta, g.tb, g.M, g.N, g.K, alpha, A.data(), g.lda, B.data(), g.ldb, 0.0,
               ref0.data(), g.ldc);
    gemm(g.ta, g.tb, g.M, g.N, g.K, alpha, A.data(), g.lda, B.data(), g.ldb, 0.0, Cn.data(),
         g.ldc);
    for (int m = 0; m < g.M; m++)
      for (int n = 0; n < g.N; n++)
        EXPECT_NEAR(Cn[m * g.ldc + n], ref0[m * g.ldc + n], 1e-13) << "beta=0, t=" << t;
  }
}

TEST(KernelGemm, StridedBatchedMatchesNaive) {
  ThreadGuard guard;
  const double alpha = 0.8, beta = 0.5;
  const int batch = 3;
  for (int t = 0; t < 4; t++) {
    GemmCase g(t & 1, t & 2);
    // Strides with gaps between operands, which must not be touched.
    const int64_t sA = g.sizeA + 7, sB = g.sizeB + 2, sC = g.sizeC + 5;
    Rng rng(200 + t);
    Vec A = rng.vec(sA * batch), B = rng.vec(sB * batch), C0 = rng.vec(sC * batch);
    Vec ref = C0;
    for (int i = 0; i < batch; i++)
      naive_gemm(g.ta, g.tb, g.M, g.N, g.K, alpha, A.data() + i * sA, g.lda, B.data() + i * sB,
                 g.ldb, beta, ref.data() + i * sC, g.ldc);
    // The kernel has two paths: threads over the batch (batch >= threads) and
    // one BLAS call after another (batch < threads). Exercise both.
    for (int threads : {1, 8}) {
      omp_set_num_threads(threads);
      Vec C = C0;
      gemm_strided_batched(g.ta, g.tb, g.M, g.N, g.K, alpha, A.data(), g.lda, sA, B.data(), g.ldb,
                           sB, beta, C.data(), g.ldc, sC, batch);
      for (size_t i = 0; i < C.size(); i++)
        EXPECT_NEAR(C[i], ref[i], 1e-13) << "t=" << t << " threads=" << threads << " i=" << i;
    }
  }
}

}  // namespace
}  // namespace ptdp::cpu
