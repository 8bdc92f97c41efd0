// The kernel table behind the ops (engine/device/ops.h): each op's CPU kernel
// (namespace cpu) and its CUDA twin (namespace cuda) declared side by side, so
// that a change to one signature stands next to the other.
// - cpu: plain functions over row-major host arrays, templated on the element
//   type (float for training, double for the finite-difference tests).
// - cuda: the same shapes and semantics over device pointers, templated on the
//   storage type T (float, __nv_bfloat16, __half; instantiated in the .cu
//   files) with fp32 arithmetic, every stored T rounded once to nearest even;
//   statistics (norm statistics, the loss's row max and sums) and weight
//   gradients are fp32. Every call is asynchronous on `stream`.
// Shapes in comments; N = s*b rows in the [s, b, h] activation layout. Ops
// named *_accumulate or documented as "accumulates" add into their outputs
// (gradients summed over micro-batches).
#pragma once
#include <cstddef>
#include <cstdint>

#include "engine/core/dtype.h"
#include "engine/core/philox.h"

// The CUDA runtime's stream type, as cuda_runtime.h declares it: this header
// is read by host code built without CUDA too.
typedef struct CUstream_st *cudaStream_t;

namespace ptdp {

// ---- GEMM ------------------------------------------------------------------------
// C[M,N] = alpha * op(A)[M,K] @ op(B)[K,N] + beta * C, row-major, op = transpose
// if t*. CUDA: the cuBLASLt class cuda::Gemm (kernels/cuda/gemm.h).
namespace cpu {
template <class T>
void gemm(bool ta, bool tb, int M, int N, int K, T alpha, const T *A, int lda, const T *B,
          int ldb, T beta, T *C, int ldc);
// `batch` independent GEMMs; operand i starts at X + i*strideX.
template <class T>
void gemm_strided_batched(bool ta, bool tb, int M, int N, int K, T alpha, const T *A, int lda,
                          int64_t strideA, const T *B, int ldb, int64_t strideB, T beta, T *C,
                          int ldc, int64_t strideC, int batch);
}  // namespace cpu
namespace cuda {
class Gemm;
}  // namespace cuda

// ---- LayerNorm over the last dim -------------------------------------------------
// out, x: [N, h]; mean, rstd: [N] (saved for backward). Backward accumulates
// dx += dL/dx, dw += dL/dw, db += dL/db (CUDA: column sums in a fixed order).
namespace cpu {
template <class T>
void layernorm_forward(T *out, T *mean, T *rstd, const T *x, const T *w, const T *b, int N, int h,
                       T eps);
template <class T>
void layernorm_backward(T *dx, T *dw, T *db, const T *dout, const T *x, const T *w,
                        const T *mean, const T *rstd, int N, int h);
}  // namespace cpu
namespace cuda {
template <class T>
void layernorm_forward(T *out, float *mean, float *rstd, const T *x, const T *w, const T *b, int N,
                       int h, float eps, cudaStream_t stream);
template <class T>
void layernorm_backward(T *dx, float *dw, float *db, const T *dout, const T *x, const T *w,
                        const float *mean, const float *rstd, int N, int h, cudaStream_t stream);
}  // namespace cuda

// ---- bias + GeLU (tanh approximation, as Megatron's fused kernel) -----------------
// z = y + bias, out = gelu(z); y, z, out: [N, f]; z may alias y. Backward:
// dz = dout * gelu'(z) (dz may alias dout); dbias += colsum(dz).
namespace cpu {
template <class T>
void bias_gelu_forward(T *z, T *out, const T *y, const T *bias, int N, int f);
template <class T>
void bias_gelu_backward(T *dz, T *dbias, const T *dout, const T *z, int N, int f);
}  // namespace cpu
namespace cuda {
template <class T>
void bias_gelu_forward(T *z, T *out, const T *y, const T *bias, int N, int f, cudaStream_t stream);
template <class T>
void bias_gelu_backward(T *dz, float *dbias, const T *dout, const T *z, int N, int f,
                        cudaStream_t stream);
}  // namespace cuda

// ---- RMSNorm over the last dim (LLaMA): no mean, no bias ---------------------------
// out, x: [N, h]; rstd: [N] (saved for backward). Backward accumulates
// dx += dL/dx, dw += dL/dw.
namespace cpu {
template <class T>
void rmsnorm_forward(T *out, T *rstd, const T *x, const T *w, int N, int h, T eps);
template <class T>
void rmsnorm_backward(T *dx, T *dw, const T *dout, const T *x, const T *w, const T *rstd, int N,
                      int h);
}  // namespace cpu
namespace cuda {
template <class T>
void rmsnorm_forward(T *out, float *rstd, const T *x, const T *w, int N, int h, float eps,
                     cudaStream_t stream);
template <class T>
void rmsnorm_backward(T *dx, float *dw, const T *dout, const T *x, const T *w, const float *rstd,
                      int N, int h, cudaStream_t stream);
}  // namespace cuda

// ---- SwiGLU (LLaMA's gated MLP) ----------------------------------------------------
// z = y + bias (bias [2f] or null), out = silu(z[:, :f]) * z[:, f:]. y, z: [N, 2f]
// (gate columns, then up columns); out: [N, f]; z may alias y. Backward: dz
// [N, 2f] from dout [N, f] and z; dbias += colsum(dz) when not null.
namespace cpu {
template <class T>
void swiglu_forward(T *z, T *out, const T *y, const T *bias, int N, int f);
template <class T>
void swiglu_backward(T *dz, T *dbias, const T *dout, const T *z, int N, int f);
}  // namespace cpu
namespace cuda {
template <class T>
void swiglu_forward(T *z, T *out, const T *y, const T *bias, int N, int f, cudaStream_t stream);
template <class T>
void swiglu_backward(T *dz, float *dbias, const T *dout, const T *z, int N, int f,
                     cudaStream_t stream);
}  // namespace cuda

// ---- rotary position embeddings (rotate-half form) ---------------------------------
// In place over rows r = si*b + bi of x (s*b rows, row stride ld): the `vecs`
// vectors of hd values at columns k*stride, k < vecs, of row r are at
// position si; (v[j], v[j + hd/2]) -> (v[j] c - v[j + hd/2] s, v[j] s +
// v[j + hd/2] c). inverse: by minus the angle (the backward: R^T). Both
// backends read the fp32 tables of cpu::rope_table.
namespace cpu {
// cos_t, sin_t: [s, hd/2], the angles p * base^(-2j/hd) as transformers computes
// them in fp32 (the tables every backend and layout uses).
void rope_table(float *cos_t, float *sin_t, int s, int hd, double base);
template <class T>
void rope_rotate(T *x, const float *cos_t, const float *sin_t, int s, int b, int ld, int vecs,
                 int stride, int hd, bool inverse);
}  // namespace cpu
namespace cuda {
template <class T>
void rope_rotate(T *x, const float *cos_t, const float *sin_t, int s, int b, int ld, int vecs,
                 int stride, int hd, bool inverse, cudaStream_t stream);
}  // namespace cuda

// ---- dropout keyed by global indices (ARCHITECTURE §3) -------------------------------
// Both backends draw the same Philox bits (engine/core/philox.h): the same mask
// for the same (seed, iteration, layer, site, sample, element).
// bias_dropout_add: out = residual + dropout(y + bias) over [s, b, h]; residual
// and bias may be null. Element (si, bi, j) uses sample = sample_offset + bi,
// element = si*h + j. Its backward: dy = dropout(dout) (dy may alias dout);
// dbias += colsum(dy) when dbias is not null (dresidual = dout is the caller's).
// dropout_attention: out = dropout(in) over attention probabilities [b, a, s_q,
// s_k], heads numbered globally from head_offset; linear, so the same call is
// its own backward. Its mask is attention_keep's (8-bit draws, the rate
// attention_dropout_rate(p)).
// dropout_backward_from_output: dx = y != 0 ? dy / (1 - p) : 0 over n elements,
// p the rate drawn; dx may alias dy. Where the input was 0 the mask is not
// recovered, which is exact for attention probabilities: the softmax backward
// multiplies those entries by the probability, 0.
namespace cpu {
using ptdp::DropoutSpec;
using ptdp::dropout_keep;
// keep[i] = dropout_keep(d, sample, first + i) for i < n, with the Philox rounds
// vectorised over consecutive groups of four elements.
void dropout_keep_mask(const DropoutSpec &d, uint32_t sample, uint64_t first, int n,
                       uint8_t *keep);
// The same for attention-probability dropout: attention_keep, 8-bit draws.
void attention_keep_mask(const DropoutSpec &d, uint32_t sample, uint64_t first, int n,
                         uint8_t *keep);
template <class T>
void bias_dropout_add_forward(T *out, const T *residual, const T *y, const T *bias, int s, int b,
                              int h, const DropoutSpec &d);
template <class T>
void bias_dropout_add_backward(T *dy, T *dbias, const T *dout, int s, int b, int h,
                               const DropoutSpec &d);
template <class T>
void dropout_attention(T *out, const T *in, int b, int a, int s_q, int s_k, int head_offset,
                       const DropoutSpec &d);
template <class T>
void dropout_backward_from_output(T *dx, const T *dy, const T *y, size_t n, float p);
}  // namespace cpu
namespace cuda {
template <class T>
void bias_dropout_add_forward(T *out, const T *residual, const T *y, const T *bias, int s, int b,
                              int h, const DropoutSpec &d, cudaStream_t stream);
template <class T>
void bias_dropout_add_backward(T *dy, float *dbias, const T *dout, int s, int b, int h,
                               const DropoutSpec &d, cudaStream_t stream);
template <class T>
void dropout_attention(T *out, const T *in, int b, int a, int s_q, int s_k, int head_offset,
                       const DropoutSpec &d, cudaStream_t stream);
template <class T>
void dropout_backward_from_output(T *dx, const T *dy, const T *y, size_t n, float p,
                                  cudaStream_t stream);
}  // namespace cuda

// ---- scale + mask + softmax over the last dim ----------------------------------------
// P = softmax(scale * S + mask) for `batch` matrices [s_q, s_k]. causal masks
// j > i; mask (optional, [s_q, s_k], nonzero = masked) applies to every batch.
// P may alias S. Fully masked rows give zeros. Backward:
// dS = scale * P * (dP - rowsum(P * dP)); dS may alias dP.
namespace cpu {
template <class T>
void scale_mask_softmax_forward(T *P, const T *S, int batch, int s_q, int s_k, T scale,
                                bool causal, const uint8_t *mask);
template <class T>
void scale_mask_softmax_backward(T *dS, const T *P, const T *dP, int batch, int s_q, int s_k,
                                 T scale);
}  // namespace cpu
namespace cuda {
template <class T>
void scale_mask_softmax_forward(T *P, const T *S, int batch, int s_q, int s_k, float scale,
                                bool causal, const uint8_t *mask, cudaStream_t stream);
template <class T>
void scale_mask_softmax_backward(T *dS, const T *P, const T *dP, int batch, int s_q, int s_k,
                                 float scale, cudaStream_t stream);
}  // namespace cuda

// ---- fused causal attention (flash-style: no [s, s] matrix) ---------------------------
// qkv [s, b, groups, heads/groups + 2, hd] (kernels/qkv_layout.h: each key/value
// group's queries, then its key and value; groups == heads is [s, b, heads, 3,
// hd]), as GPT::attention_forward reads it; ctx [s, b, heads*hd] with (bi, head)
// at column (bi*heads + head)*hd. ctx = dropout(softmax(scale Q K^T, causal)) V
// with dropout_attention's mask (heads numbered from head_offset); lse [b*heads,
// s] the rows' log-sum-exp of scale Q K^T, kept for backward (fp32 on CUDA).
// Backward: dqkv (qkv's layout, overwritten) from dctx and the forward's ctx and
// lse. A group's K and V are read by its heads, never copied; its dK, dV sum its
// heads (in head order on the CPU).
namespace cpu {
template <class T>
void flash_attention_forward(T *ctx, T *lse, const T *qkv, int s, int b, int heads, int groups,
                             int hd, T scale, int head_offset, const DropoutSpec &d);
template <class T>
void flash_attention_backward(T *dqkv, const T *dctx, const T *ctx, const T *qkv, const T *lse,
                              int s, int b, int heads, int groups, int hd, T scale, int head_offset,
                              const DropoutSpec &d);
}  // namespace cpu
namespace cuda {
template <class T>
void flash_attention_forward(T *ctx, float *lse, const T *qkv, int s, int b, int heads,
                             int groups, int hd, float scale, int head_offset,
                             const DropoutSpec &d, cudaStream_t stream);
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
}  // namespace cuda

// ---- embedding (vocab-parallel) ---------------------------------------------------
// This rank holds rows [vocab_start, vocab_start + vocab_rows) of the embedding.
// x[si*b+bi] = (token local ? wte[token - vocab_start] : 0) + (wpe ? wpe[si] : 0);
// x: [s*b, h], tokens in [s, b] order. add_position_embedding: x[si*b+bi] +=
// wpe[si] (the positions added after the vocab-parallel sum, t > 1). Backward
// accumulates dwte (each local token's row, in row order) and dwpe when not null
// (in a fixed order).
namespace cpu {
template <class T>
void embedding_forward(T *x, const int32_t *tokens, const T *wte, int vocab_start, int vocab_rows,
                       const T *wpe, int s, int b, int h);
// All tokens local (t = 1).
template <class T>
void embedding_forward(T *x, const int32_t *tokens, const T *wte, const T *wpe, int s, int b,
                       int h) {
  embedding_forward(x, tokens, wte, 0, 1 << 30, wpe, s, b, h);
}
template <class T>
void add_position_embedding(T *x, const T *wpe, int s, int b, int h);
template <class T>
void embedding_backward(T *dwte, T *dwpe, const T *dx, const int32_t *tokens, int s, int b, int h,
                        int vocab_start = 0, int vocab_rows = 1 << 30);
}  // namespace cpu
namespace cuda {
template <class T>
void embedding_forward(T *x, const int32_t *tokens, const T *wte, int vocab_start, int vocab_rows,
                       const T *wpe, int s, int b, int h, cudaStream_t stream);
template <class T>
void add_position_embedding(T *x, const T *wpe, int s, int b, int h, cudaStream_t stream);
template <class T>
void embedding_backward(float *dwte, float *dwpe, const T *dx, const int32_t *tokens, int s, int b,
                        int h, int vocab_start, int vocab_rows, cudaStream_t stream);
}  // namespace cuda

// ---- cross-entropy over a vocab-parallel, padded vocabulary ------------------------
// logits: [N, ld] holding this rank's vocabulary columns; the first `cols` are real
// tokens vocab_start .. vocab_start+cols-1, the rest is padding and never read.
// The loss of row i is log(sum_j exp(l_ij - M_i)) + M_i - l_i,target with M_i the
// max over every rank's columns: three reductions over the tensor group.
// Step 1 (local_max): row max over the local columns (-inf when cols = 0).
// Step 2 (local_sums), with the global max: local sum of exp(l - M) and the
// target's logit (0 when the target is another rank's).
// Backward with the global max and sum: dlogits = dloss * (softmax - onehot) on
// the local columns, 0 on padding; may alias logits.
// cross_entropy_*: one rank (t = 1), logits [N, Vp], columns >= V padding;
// losses[i] = logsumexp(logits[i, :V]) - logits[i, targets[i]].
namespace cpu {
template <class T>
void vocab_ce_local_max(T *row_max, const T *logits, int N, int ld, int cols);
template <class T>
void vocab_ce_local_sums(T *sum_exp, T *target_logit, const T *logits, const T *row_max,
                         const int32_t *targets, int N, int ld, int cols, int vocab_start);
template <class T>
void vocab_ce_backward(T *dlogits, const T *logits, const T *row_max, const T *sum_exp,
                       const int32_t *targets, int N, int ld, int cols, int vocab_start, T dloss);
template <class T>
void cross_entropy_forward(T *losses, const T *logits, const int32_t *targets, int N, int Vp,
                           int V);
// dlogits = dloss * (softmax(logits) - onehot(target)), 0 on padding; may alias logits.
template <class T>
void cross_entropy_backward(T *dlogits, const T *logits, const int32_t *targets, int N, int Vp,
                            int V, T dloss);
}  // namespace cpu
namespace cuda {
template <class T>
void vocab_ce_local_max(float *row_max, const T *logits, int N, int ld, int cols,
                        cudaStream_t stream);
template <class T>
void vocab_ce_local_sums(float *sum_exp, float *target_logit, const T *logits,
                         const float *row_max, const int32_t *targets, int N, int ld, int cols,
                         int vocab_start, cudaStream_t stream);
template <class T>
void vocab_ce_backward(T *dlogits, const T *logits, const float *row_max, const float *sum_exp,
                       const int32_t *targets, int N, int ld, int cols, int vocab_start,
                       float dloss, cudaStream_t stream);
void cross_entropy_forward(float *losses, const float *logits, const int32_t *targets, int N,
                           int Vp, int V, cudaStream_t stream);
}  // namespace cuda

// ---- AdamW (decoupled weight decay) over one flat tensor --------------------------------
// step is 1-based, for the bias corrections; gradients are used times
// grad_scale. model_type bf16 / f16 also writes the updated weights rounded to
// it into model_copy (f32: no copy) in the same pass; on CUDA, where
// storage_copy is set, the same values as model_type itself into storage_copy
// (n 16-bit elements: the ops' 16-bit copy of the weights).
namespace cpu {
struct AdamWParams {
  double lr, beta1, beta2, eps, weight_decay;
  int64_t step;
  double grad_scale = 1.0;      // (rounded to T first)
  float *model_copy = nullptr;  // (float T only)
  DType model_type = DType::f32;
};
template <class T>
void adamw_update(T *param, const T *grad, T *exp_avg, T *exp_avg_sq, size_t n,
                  const AdamWParams &a);
}  // namespace cpu
namespace cuda {
void adamw_update(float *param, const float *grad, float *exp_avg, float *exp_avg_sq, size_t n,
                  double lr, double beta1, double beta2, double eps, double weight_decay,
                  int64_t step, double grad_scale, float *model_copy, DType model_type,
                  cudaStream_t stream, void *storage_copy = nullptr);
}  // namespace cuda

// ---- reductions and casts ----------------------------------------------------------------
// sum_squares: the sum of x[i]^2 in double, in fixed-size chunks summed in a
// fixed order, so the result depends neither on the threads nor on the run.
// colsum_accumulate: out[j] += sum_i x[i, j] for x: [N, cols] (CUDA: rows
// summed in a fixed order).
namespace cpu {
template <class T>
double sum_squares(const T *x, size_t n);
template <class T>
void scale_inplace(T *x, size_t n, T alpha);
template <class T>
void colsum_accumulate(T *out, const T *x, int N, int cols);
}  // namespace cpu
namespace cuda {
// *out = the sum; scratch: sum_squares_scratch(n) doubles.
size_t sum_squares_scratch(size_t n);
template <class T>
void sum_squares(double *out, const T *x, size_t n, double *scratch, cudaStream_t stream);
template <class T>
void scale_inplace(T *x, size_t n, float alpha, cudaStream_t stream);
// out += x, n floats.
void add_inplace(float *out, const float *x, size_t n, cudaStream_t stream);
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
}  // namespace cuda

}  // namespace ptdp
