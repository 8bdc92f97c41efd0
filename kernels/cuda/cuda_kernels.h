// The CUDA kernels behind the op table (engine/device/ops.h; their CPU twins
// in kernels/cpu/cpu_kernels.h), fp32 and the 16-bit types (bf16, fp16) with
// fp32 arithmetic. Same shapes and semantics
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
#include "engine/core/philox.h"

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

// ---- element-wise ops ---------------------------------------------------------
// Templated on the storage type T (float, __nv_bfloat16, __half; instantiated in
// the .cu files): fp32 arithmetic, every stored T rounded once to nearest even.
// Statistics (LayerNorm mean/rstd, the loss's row max and sums) are fp32, and
// so are weight gradients, which accumulate ("+=") across micro-batches.

// LayerNorm over the last dim. out, x: [N, h]; mean, rstd: [N].
template <class T>
void layernorm_forward(T *out, float *mean, float *rstd, const T *x, const T *w, const T *b, int N,
                       int h, float eps, cudaStream_t stream);
// Accumulates dx += dL/dx, dw += dL/dw, db += dL/db (column sums in a fixed order).
template <class T>
void layernorm_backward(T *dx, float *dw, float *db, const T *dout, const T *x, const T *w,
                        const float *mean, const float *rstd, int N, int h, cudaStream_t stream);

// z = y + bias, out = gelu_tanh(z); y, z, out: [N, f] (z may alias y).
template <class T>
void bias_gelu_forward(T *z, T *out, const T *y, const T *bias, int N, int f, cudaStream_t stream);
// dz = dout * gelu'(z) (dz may alias dout); dbias += colsum(dz).
template <class T>
void bias_gelu_backward(T *dz, float *dbias, const T *dout, const T *z, int N, int f,
                        cudaStream_t stream);

// RMSNorm, SwiGLU and rotary embeddings (the CPU's rmsnorm, swiglu, rope):
// rstd [N] and dw, dbias in fp32; the rope tables are the CPU's fp32 tables.
template <class T>
void rmsnorm_forward(T *out, float *rstd, const T *x, const T *w, int N, int h, float eps,
                     cudaStream_t stream);
template <class T>
void rmsnorm_backward(T *dx, float *dw, const T *dout, const T *x, const T *w, const float *rstd,
                      int N, int h, cudaStream_t stream);
template <class T>
void swiglu_forward(T *z, T *out, const T *y, const T *bias, int N, int f, cudaStream_t stream);
template <class T>
void swiglu_backward(T *dz, float *dbias, const T *dout, const T *z, int N, int f,
                     cudaStream_t stream);
template <class T>
void rope_rotate(T *x, const float *cos_t, const float *sin_t, int s, int b, int ld, int vecs,
                 int stride, int hd, bool inverse, cudaStream_t stream);

// Dropout draws the CPU's Philox bits (engine/core/philox.h): the same mask for
// the same (seed, iteration, layer, site, sample, element).
// out = residual + dropout(y + bias) over [s, b, h]; residual and bias may be null.
template <class T>
void bias_dropout_add_forward(T *out, const T *residual, const T *y, const T *bias, int s, int b,
                              int h, const DropoutSpec &d, cudaStream_t stream);
// dy = dropout(dout) (dy may alias dout); dbias += colsum(dy) when not null.
template <class T>
void bias_dropout_add_backward(T *dy, float *dbias, const T *dout, int s, int b, int h,
                               const DropoutSpec &d, cudaStream_t stream);
// out = dropout(in) over attention probabilities [b, a, s_q, s_k], heads numbered
// globally from head_offset; its own backward.
template <class T>
void dropout_attention(T *out, const T *in, int b, int a, int s_q, int s_k, int head_offset,
                       const DropoutSpec &d, cudaStream_t stream);
// dx = y != 0 ? dy / (1 - p) : 0 over n elements (dx may alias dy).
template <class T>
void dropout_backward_from_output(T *dx, const T *dy, const T *y, size_t n, float p,
                                  cudaStream_t stream);

// P = softmax(scale * S + mask) over the last dim of `batch` [s_q, s_k] matrices;
// causal masks j > i, mask (optional, [s_q, s_k], nonzero = masked) applies to
// every matrix. Fully masked rows give zeros. P may alias S.
template <class T>
void scale_mask_softmax_forward(T *P, const T *S, int batch, int s_q, int s_k, float scale,
                                bool causal, const uint8_t *mask, cudaStream_t stream);
// dS = scale * P * (dP - rowsum(P * dP)); dS may alias dP.
template <class T>
void scale_mask_softmax_backward(T *dS, const T *P, const T *dP, int batch, int s_q, int s_k,
                                 float scale, cudaStream_t stream);

// Fused ("flash") causal self-attention on the model's layout, never holding an
// [s, s] matrix in memory: qkv is [s, b, groups, heads / groups + 2, hd], each
// key/value group's queries, then its key and value (kernels/qkv_layout.h;
// groups == heads: [s, b, heads, 3, hd]), as GPT::attention_forward reads it;
// ctx is [s, b, heads * hd] with (bi, head) at column (bi*heads + head)*hd. A
// group's K and V are read by its heads, never copied; its dK, dV sum them. ctx = dropout(softmax(scale * Q K^T, causal)) V with
// the same dropout mask as dropout_attention (heads numbered from head_offset).
// lse: [b * heads, s] fp32, each row's log-sum-exp of scale * Q K^T, for backward.
template <class T>
void flash_attention_forward(T *ctx, float *lse, const T *qkv, int s, int b, int heads,
                             int groups, int hd, float scale, int head_offset,
                             const DropoutSpec &d, cudaStream_t stream);
// dqkv (layout of qkv, overwritten) from dctx, with the forward's ctx and lse.
template <class T>
void flash_attention_backward(T *dqkv, const T *dctx, const T *ctx, const T *qkv,
                              const float *lse, int s, int b, int heads, int groups, int hd,
                              float scale, int head_offset, const DropoutSpec &d,
                              cudaStream_t stream);
// The same on tensor cores (flash_attention_mma.cu; sm_80 and later) for a
// 16-bit run, whose arrays (G) hold the operand type `mma` (bf16 or f16), or
// are floats holding its values; 16-bit arrays of another type are an
// invalid_argument error naming both types.
// P Z and dS are rounded to `mma` as operands, sums are fp32, and ctx, dqkv
// come out rounded to it once. hd <= 128.
// Backward with dq_gemm (16-bit arrays, hd % 8 == 0): dQ is dq_gemm's GEMM
// over dS kept in stream-ordered scratch of at most dq_scratch_bytes (heads in
// groups; a head whose s x s dS does not fit uses the dQ kernel), instead of a
// second kernel that computes S, dP and the dropout draws again. The same math,
// summed in another order: deterministic, not the dQ kernel's bits.
template <class G>
void flash_attention_forward_mma(G *ctx, float *lse, const G *qkv, int s, int b, int heads,
                                 int groups, int hd, float scale, int head_offset,
                                 const DropoutSpec &d, DType mma, cudaStream_t stream);
template <class G>
void flash_attention_backward_mma(G *dqkv, const G *dctx, const G *ctx, const G *qkv,
                                  const float *lse, int s, int b, int heads, int groups, int hd,
                                  float scale, int head_offset, const DropoutSpec &d, DType mma,
                                  cudaStream_t stream, Gemm *dq_gemm = nullptr,
                                  size_t dq_scratch_bytes = size_t(1) << 30);

// Vocab-parallel embedding: x[si*b+bi] = (token in [vocab_start, vocab_start +
// vocab_rows) ? wte[token - vocab_start] : 0) + (wpe ? wpe[si] : 0); x: [s*b, h].
template <class T>
void embedding_forward(T *x, const int32_t *tokens, const T *wte, int vocab_start, int vocab_rows,
                       const T *wpe, int s, int b, int h, cudaStream_t stream);
// x[si*b+bi] += wpe[si]: the positions added after the vocab-parallel sum (t > 1).
template <class T>
void add_position_embedding(T *x, const T *wpe, int s, int b, int h, cudaStream_t stream);
// Accumulates dwte (rows of local tokens, each token's rows added in row
// order, as the CPU does) and dwpe when not null (in a fixed order).
template <class T>
void embedding_backward(float *dwte, float *dwpe, const T *dx, const int32_t *tokens, int s, int b,
                        int h, int vocab_start, int vocab_rows, cudaStream_t stream);

// ---- cross-entropy over a vocab-parallel, padded vocabulary (cpu::vocab_ce_*) ----
// logits: [N, ld], the first `cols` columns are tokens vocab_start.., the rest padding.
template <class T>
void vocab_ce_local_max(float *row_max, const T *logits, int N, int ld, int cols,
                        cudaStream_t stream);
template <class T>
void vocab_ce_local_sums(float *sum_exp, float *target_logit, const T *logits,
                         const float *row_max, const int32_t *targets, int N, int ld, int cols,
                         int vocab_start, cudaStream_t stream);
// dlogits = dloss * (softmax - onehot) on the local columns, 0 on padding; may alias logits.
template <class T>
void vocab_ce_backward(T *dlogits, const T *logits, const float *row_max, const float *sum_exp,
                       const int32_t *targets, int N, int ld, int cols, int vocab_start,
                       float dloss, cudaStream_t stream);
// One rank: losses[i] = logsumexp(logits[i, :V]) - logits[i, targets[i]]; logits [N, Vp].
void cross_entropy_forward(float *losses, const float *logits, const int32_t *targets, int N,
                           int Vp, int V, cudaStream_t stream);

// ---- reductions, casts, optimizer ------------------------------------------------
// *out = sum of x[i]^2 in double: fixed-size chunks summed in a fixed order, so
// the result is the same on every run. scratch: sum_squares_scratch(n) doubles.
size_t sum_squares_scratch(size_t n);
template <class T>
void sum_squares(double *out, const T *x, size_t n, double *scratch, cudaStream_t stream);
template <class T>
void scale_inplace(T *x, size_t n, float alpha, cudaStream_t stream);
// out += x, n floats.
void add_inplace(float *out, const float *x, size_t n, cudaStream_t stream);
// out[j] += sum_i x[i, j] for x: [N, cols], rows summed in a fixed order.
template <class T>
void colsum_accumulate(float *out, const T *x, int N, int cols, cudaStream_t stream);
// Its split, for kernels that sum the columns of what they compute: the rows
// of each chunk of N (the last may hold fewer), and out[j] += the sum of the
// chunks' partial[c, j], c = 0 .. chunks - 1, in a fixed order.
int colsum_chunk_rows(int N);
void colsum_add_partials(float *out, const float *partial, int chunks, int cols,
                         cudaStream_t stream);
// x = float(dtype(x)), rounded to nearest even: a 16-bit tensor held in float
// (dtype.h's round_to on the CPU); nothing to do for f32.
void round_to(float *x, size_t n, DType dtype, cudaStream_t stream);
// dst = src converted (f32, bf16, f16; rounded to nearest even); n elements.
void cast(void *dst, DType dst_type, const void *src, DType src_type, size_t n,
          cudaStream_t stream);

// AdamW with decoupled weight decay over one flat fp32 tensor (the CPU kernel's
// arithmetic; step is 1-based for the bias corrections), gradients used times
// grad_scale; model_type bf16 / f16 also writes the updated weights rounded to
// it into model_copy (f32: no copy) in the same pass, and, where storage_copy
// is set, the same values as model_type itself into storage_copy (n 16-bit
// elements: the ops' 16-bit copy of the weights).
void adamw_update(float *param, const float *grad, float *exp_avg, float *exp_avg_sq, size_t n,
                  double lr, double beta1, double beta2, double eps, double weight_decay,
                  int64_t step, double grad_scale, float *model_copy, DType model_type,
                  cudaStream_t stream, void *storage_copy = nullptr);

}  // namespace ptdp::cuda
