// CUDA implementations of the op interface (kernels/cpu/ops.h): fp32 for the
// element-wise ops for now, fp32/bf16/fp16 for GEMMs. Same shapes and semantics
// as the CPU kernels; every call is asynchronous on `stream`. Pointers are
// device pointers.
#pragma once
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <tuple>

#include "engine/core/dtype.h"

namespace ptdp::cuda {

// ---- GEMM (cuBLASLt) ------------------------------------------------------------
// Row-major C[M,N] = alpha * op(A)[M,K] @ op(B)[K,N] + beta * C with op = transpose
// if t*, as cpu::gemm; `batch` GEMMs with operand i at X + i*strideX elements.
// A, B and C share one dtype (f32, bf16 or f16); products are summed in fp32
// (never TF32), so an fp32 GEMM is the CPU's up to summation order. One Gemm per
// stream: it owns a cuBLASLt handle, a workspace and the plans of the shapes seen.
class Gemm {
 public:
  explicit Gemm(size_t workspace_bytes = size_t(32) << 20);
  ~Gemm();
  Gemm(const Gemm &) = delete;
  Gemm &operator=(const Gemm &) = delete;

  void run(DType dt, bool ta, bool tb, int M, int N, int K, float alpha, const void *A, int lda,
           int64_t strideA, const void *B, int ldb, int64_t strideB, float beta, void *C, int ldc,
           int64_t strideC, int batch, cudaStream_t stream);
  void run(DType dt, bool ta, bool tb, int M, int N, int K, float alpha, const void *A, int lda,
           const void *B, int ldb, float beta, void *C, int ldc, cudaStream_t stream) {
    run(dt, ta, tb, M, N, K, alpha, A, lda, 0, B, ldb, 0, beta, C, ldc, 0, 1, stream);
  }

 private:
  struct Plan;
  // dtype, ta, tb, M, N, K, lda, ldb, ldc, strides, batch, pointer alignments.
  using Key = std::tuple<int, bool, bool, int, int, int, int, int, int, int64_t, int64_t, int64_t,
                         int, int, int, int>;
  Plan &plan(const Key &key);

  cublasLtHandle_t handle_ = nullptr;
  void *workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
  std::map<Key, Plan *> plans_;
};

// out, x: [N, h]; mean, rstd: [N]. One block per row.
void layernorm_forward(float *out, float *mean, float *rstd, const float *x, const float *w,
                       const float *b, int N, int h, float eps, cudaStream_t stream);

// z = y + bias, out = gelu_tanh(z); y, z, out: [N, f] (z may alias y).
void bias_gelu_forward(float *z, float *out, const float *y, const float *bias, int N, int f,
                       cudaStream_t stream);

// P = softmax(scale * S) over the last dim of `batch` [s_q, s_k] matrices, with
// j > i masked when causal; fully masked rows give zeros. P may alias S.
void scale_mask_softmax_forward(float *P, const float *S, int batch, int s_q, int s_k,
                                float scale, bool causal, cudaStream_t stream);

// Vocab-parallel embedding: x[si*b+bi] = (token in [vocab_start, vocab_start +
// vocab_rows) ? wte[token - vocab_start] : 0) + (wpe ? wpe[si] : 0); x: [s*b, h].
void embedding_forward(float *x, const int32_t *tokens, const float *wte, int vocab_start,
                       int vocab_rows, const float *wpe, int s, int b, int h, cudaStream_t stream);

// losses[i] = logsumexp(logits[i, :V]) - logits[i, targets[i]]; logits: [N, Vp].
void cross_entropy_forward(float *losses, const float *logits, const int32_t *targets, int N,
                           int Vp, int V, cudaStream_t stream);

// AdamW with decoupled weight decay over one flat tensor (the CPU kernel's
// arithmetic; step is 1-based for the bias corrections).
void adamw_update(float *param, const float *grad, float *exp_avg, float *exp_avg_sq, size_t n,
                  double lr, double beta1, double beta2, double eps, double weight_decay,
                  int64_t step, cudaStream_t stream);

}  // namespace ptdp::cuda
