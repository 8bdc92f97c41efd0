// The CUDA GEMMs: cuBLASLt behind cuda::Gemm, the CUDA twin of cpu::gemm and
// cpu::gemm_strided_batched (kernels/kernels.h), with the epilogues cuBLASLt
// fuses into them.
#pragma once
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <tuple>

#include "kernels/kernels.h"

namespace ptdp::cuda {

// ---- GEMM (cuBLASLt) ------------------------------------------------------------
// Row-major C[M,N] = alpha * op(A)[M,K] @ op(B)[K,N] + beta * C with op = transpose
// if t*, as cpu::gemm; `batch` GEMMs with operand i at X + i*strideX elements.
// A and B share one dtype (f32, bf16 or f16) and C has that dtype or f32 (a
// 16-bit GEMM writing fp32, for weight gradients and fp32-held activations);
// products are summed in fp32 (never TF32), so an fp32 GEMM is the CPU's up to
// summation order. One Gemm per stream: it owns a cuBLASLt handle, a workspace
// and the plans of the shapes seen.
class Gemm {
 public:
  explicit Gemm(size_t workspace_bytes = size_t(32) << 20);
  ~Gemm();
  Gemm(const Gemm &) = delete;
  Gemm &operator=(const Gemm &) = delete;

  // A and B in `ab`, C in `c`.
  void run(DType ab, DType c, bool ta, bool tb, int M, int N, int K, float alpha, const void *A,
           int lda, int64_t strideA, const void *B, int ldb, int64_t strideB, float beta, void *C,
           int ldc, int64_t strideC, int batch, cudaStream_t stream);
  // A, B and C all in `dt`.
  void run(DType dt, bool ta, bool tb, int M, int N, int K, float alpha, const void *A, int lda,
           int64_t strideA, const void *B, int ldb, int64_t strideB, float beta, void *C, int ldc,
           int64_t strideC, int batch, cudaStream_t stream) {
    run(dt, dt, ta, tb, M, N, K, alpha, A, lda, strideA, B, ldb, strideB, beta, C, ldc, strideC,
        batch, stream);
  }
  void run(DType dt, bool ta, bool tb, int M, int N, int K, float alpha, const void *A, int lda,
           const void *B, int ldb, float beta, void *C, int ldc, cudaStream_t stream) {
    run(dt, dt, ta, tb, M, N, K, alpha, A, lda, 0, B, ldb, 0, beta, C, ldc, 0, 1, stream);
  }

  // C = A op(B) with an epilogue fused by cuBLASLt, A, B and C in `dt`, C
  // dense ([M, N], ld N): bias [N] in `dt`; aux [M, N] (ld N) the GeLU's input,
  // written by bias_gelu, read by dgelu. False (nothing done) when cuBLASLt
  // has no algorithm for it (then the caller composes the ops).
  enum class Epilogue { bias, bias_gelu, dgelu, bgrad };
  bool run_fused(Epilogue e, DType dt, bool tb, int M, int N, int K, const void *A, int lda,
                 const void *B, int ldb, void *C, const void *bias, const void *aux,
                 cudaStream_t stream);
  // A weight gradient with its bias gradient (bgrad): C [M, N] (fp32) += A^T B,
  // A [K, M] and B [K, N] in `ab`; dbias [M] = the column sums of A (written,
  // not added). False (nothing done) when cuBLASLt has no algorithm for it.
  bool run_bias_grad(DType ab, int M, int N, int K, const void *A, int lda, const void *B, int ldb,
                     float *C, int ldc, float *dbias, cudaStream_t stream);

 private:
  struct Plan;
  // dtypes of A/B and C, ta, tb, M, N, K, lda, ldb, ldc, strides, batch, pointer alignments,
  // then the epilogue (-1: none) and the alignments of its bias and aux.
  using Key = std::tuple<int, int, bool, bool, int, int, int, int, int, int, int64_t, int64_t,
                         int64_t, int, int, int, int, int, int, int>;
  Plan &plan(const Key &key);
  void set_epilogue(Plan &p, Epilogue e, int N, int al_bias, int al_aux);
  bool fused(Epilogue e, DType ab, DType c, bool ta, bool tb, int M, int N, int K, const void *A,
             int lda, const void *B, int ldb, float beta, void *C, int ldc, const void *bias,
             const void *aux, cudaStream_t stream);

  cublasLtHandle_t handle_ = nullptr;
  void *workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
  std::map<Key, Plan *> plans_;
};

}  // namespace ptdp::cuda
