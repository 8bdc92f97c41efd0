// The CPU kernels behind the op table (engine/device/ops.h). Every op is a
// plain function over row-major arrays, templated on the element type (float
// for training, double for the finite-difference tests). Shapes in comments;
// N = s*b rows in the [s, b, h] activation layout. Ops named *_accumulate or documented as
// "accumulates" add into their outputs (gradients summed over micro-batches).
#pragma once
#include <cstddef>
#include <cstdint>

#include "engine/core/dtype.h"
#include "engine/core/philox.h"

namespace ptdp::cpu {

// ---- GEMM (OpenBLAS) ---------------------------------------------------------
// C[M,N] = alpha * op(A)[M,K] @ op(B)[K,N] + beta * C, row-major, op = transpose if t*.
template <class T>
void gemm(bool ta, bool tb, int M, int N, int K, T alpha, const T *A, int lda, const T *B,
          int ldb, T beta, T *C, int ldc);
// `batch` independent GEMMs; operand i starts at X + i*strideX.
template <class T>
void gemm_strided_batched(bool ta, bool tb, int M, int N, int K, T alpha, const T *A, int lda,
                          int64_t strideA, const T *B, int ldb, int64_t strideB, T beta, T *C,
                          int ldc, int64_t strideC, int batch);

// ---- LayerNorm over the last dim --------------------------------------------
// out, x: [N, h]; mean, rstd: [N] (saved for backward).
template <class T>
void layernorm_forward(T *out, T *mean, T *rstd, const T *x, const T *w, const T *b, int N, int h,
                       T eps);
// Accumulates: dx += dL/dx, dw += dL/dw, db += dL/db.
template <class T>
void layernorm_backward(T *dx, T *dw, T *db, const T *dout, const T *x, const T *w,
                        const T *mean, const T *rstd, int N, int h);

// ---- bias + GeLU (tanh approximation, as Megatron's fused kernel) -----------
// z = y + bias, out = gelu(z). y, z, out: [N, f]; z may alias y.
template <class T>
void bias_gelu_forward(T *z, T *out, const T *y, const T *bias, int N, int f);
// dz = dout * gelu'(z) (dz may alias dout); dbias += colsum(dz).
template <class T>
void bias_gelu_backward(T *dz, T *dbias, const T *dout, const T *z, int N, int f);

// ---- RMSNorm over the last dim (LLaMA): no mean, no bias -------------------
// out, x: [N, h]; rstd: [N] (saved for backward).
template <class T>
void rmsnorm_forward(T *out, T *rstd, const T *x, const T *w, int N, int h, T eps);
// Accumulates: dx += dL/dx, dw += dL/dw.
template <class T>
void rmsnorm_backward(T *dx, T *dw, const T *dout, const T *x, const T *w, const T *rstd, int N,
                      int h);

// ---- SwiGLU (LLaMA's gated MLP) -----------------------------------------------
// z = y + bias (bias [2f] or null), out = silu(z[:, :f]) * z[:, f:]. y, z: [N, 2f]
// (gate columns, then up columns); out: [N, f]; z may alias y.
template <class T>
void swiglu_forward(T *z, T *out, const T *y, const T *bias, int N, int f);
// dz [N, 2f] from dout [N, f] and z; dbias += colsum(dz) when not null.
template <class T>
void swiglu_backward(T *dz, T *dbias, const T *dout, const T *z, int N, int f);

// ---- rotary position embeddings (rotate-half form) ----------------------------
// cos_t, sin_t: [s, hd/2], the angles p * base^(-2j/hd) as transformers computes
// them in fp32 (the tables every backend and layout uses).
void rope_table(float *cos_t, float *sin_t, int s, int hd, double base);
// In place over rows r = si*b + bi of x (s*b rows, row stride ld): the `vecs`
// vectors of hd values at columns k*stride, k < vecs, of row r are at
// position si; (v[j], v[j + hd/2]) -> (v[j] c - v[j + hd/2] s, v[j] s +
// v[j + hd/2] c). inverse: by minus the angle (the backward: R^T).
template <class T>
void rope_rotate(T *x, const float *cos_t, const float *sin_t, int s, int b, int ld, int vecs,
                 int stride, int hd, bool inverse);

// ---- dropout keyed by global indices (ARCHITECTURE §3) ----------------------
using ptdp::DropoutSpec;  // engine/core/philox.h: shared with the CUDA kernels
using ptdp::dropout_keep;
// keep[i] = dropout_keep(d, sample, first + i) for i < n, with the Philox rounds
// vectorised over consecutive groups of four elements.
void dropout_keep_mask(const DropoutSpec &d, uint32_t sample, uint64_t first, int n,
                       uint8_t *keep);
// The same for attention-probability dropout: attention_keep, 8-bit draws.
void attention_keep_mask(const DropoutSpec &d, uint32_t sample, uint64_t first, int n,
                         uint8_t *keep);
// out = residual + dropout(y + bias) over [s, b, h]; residual and bias may be null.
// Element (si, bi, j) uses sample = sample_offset + bi, element = si*h + j.
template <class T>
void bias_dropout_add_forward(T *out, const T *residual, const T *y, const T *bias, int s, int b,
                              int h, const DropoutSpec &d);
// Backward of the above: dy = dropout(dout) (dy may alias dout); dbias += colsum(dy)
// when dbias is not null. (dresidual = dout is the caller's business.)
template <class T>
void bias_dropout_add_backward(T *dy, T *dbias, const T *dout, int s, int b, int h,
                               const DropoutSpec &d);
// out = dropout(in) over attention probabilities [b, a, s_q, s_k]; linear, so the
// same call is its own backward. Heads are numbered globally from head_offset.
// The mask is attention_keep's (8-bit draws, the rate attention_dropout_rate(p)).
template <class T>
void dropout_attention(T *out, const T *in, int b, int a, int s_q, int s_k, int head_offset,
                       const DropoutSpec &d);

// Backward of dropout from its own output: dx = y != 0 ? dy / (1 - p) : 0 over n
// elements, p the rate drawn (attention: attention_dropout_rate of the config's);
// dx may alias dy. Where the input was 0 the mask is not recovered,
// which is exact for attention probabilities: the softmax backward multiplies
// those entries by the probability, 0.
template <class T>
void dropout_backward_from_output(T *dx, const T *dy, const T *y, size_t n, float p);

// ---- scale + mask + softmax over the last dim ------------------------------
// P = softmax(scale * S + mask) for `batch` matrices [s_q, s_k]. causal masks
// j > i; mask (optional, [s_q, s_k], nonzero = masked) applies to every batch.
// P may alias S. Fully masked rows give zeros.
template <class T>
void scale_mask_softmax_forward(T *P, const T *S, int batch, int s_q, int s_k, T scale,
                                bool causal, const uint8_t *mask);
// dS = scale * P * (dP - rowsum(P * dP)); dS may alias dP.
template <class T>
void scale_mask_softmax_backward(T *dS, const T *P, const T *dP, int batch, int s_q, int s_k,
                                 T scale);

// ---- fused causal attention (flash-style: no [s, s] matrix) ---------------------
// qkv [s, b, groups, heads/groups + 2, hd] (kernels/qkv_layout.h: each key/value
// group's queries, then its key and value; groups == heads is [s, b, heads, 3,
// hd]); ctx [s, b, heads*hd]. ctx = dropout(softmax(scale Q K^T, causal)) V with
// dropout_attention's mask (heads numbered from head_offset); lse [b*heads, s]
// the rows' log-sum-exp of scale Q K^T, kept for backward.
template <class T>
void flash_attention_forward(T *ctx, T *lse, const T *qkv, int s, int b, int heads, int groups,
                             int hd, T scale, int head_offset, const DropoutSpec &d);
// dqkv (qkv's layout, overwritten) from dctx and the forward's ctx and lse; a
// group's dK, dV sum its heads in head order.
template <class T>
void flash_attention_backward(T *dqkv, const T *dctx, const T *ctx, const T *qkv, const T *lse,
                              int s, int b, int heads, int groups, int hd, T scale, int head_offset,
                              const DropoutSpec &d);

// ---- embedding (vocab-parallel) ------------------------------------------------
// This rank holds rows [vocab_start, vocab_start + vocab_rows) of the embedding.
// x[si*b+bi] = (token local ? wte[token - vocab_start] : 0) + (wpe ? wpe[si] : 0);
// tokens in [s, b] order.
template <class T>
void embedding_forward(T *x, const int32_t *tokens, const T *wte, int vocab_start, int vocab_rows,
                       const T *wpe, int s, int b, int h);
// All tokens local (t = 1).
template <class T>
void embedding_forward(T *x, const int32_t *tokens, const T *wte, const T *wpe, int s, int b,
                       int h) {
  embedding_forward(x, tokens, wte, 0, 1 << 30, wpe, s, b, h);
}
// x[si*b+bi] += wpe[si]
template <class T>
void add_position_embedding(T *x, const T *wpe, int s, int b, int h);
// Accumulates dwte (scatter-add of local tokens) and dwpe (when not null).
template <class T>
void embedding_backward(T *dwte, T *dwpe, const T *dx, const int32_t *tokens, int s, int b, int h,
                        int vocab_start = 0, int vocab_rows = 1 << 30);

// ---- cross-entropy over a vocab-parallel, padded vocabulary -----------------------
// logits: [N, ld] holding this rank's vocabulary columns; the first `cols` are real
// tokens vocab_start .. vocab_start+cols-1, the rest is padding and never read.
// The loss of row i is log(sum_j exp(l_ij - M_i)) + M_i - l_i,target with M_i the
// max over every rank's columns: three reductions over the tensor group.
// Step 1: row max over the local columns (-inf when cols = 0).
template <class T>
void vocab_ce_local_max(T *row_max, const T *logits, int N, int ld, int cols);
// Step 2, with the global max: local sum of exp(l - M) and the target's logit
// (0 when the target is another rank's).
template <class T>
void vocab_ce_local_sums(T *sum_exp, T *target_logit, const T *logits, const T *row_max,
                         const int32_t *targets, int N, int ld, int cols, int vocab_start);
// Backward with the global max and sum: dlogits = dloss * (softmax - onehot) on the
// local columns, 0 on padding; may alias logits.
template <class T>
void vocab_ce_backward(T *dlogits, const T *logits, const T *row_max, const T *sum_exp,
                       const int32_t *targets, int N, int ld, int cols, int vocab_start, T dloss);
// One rank (t = 1): logits [N, Vp], columns >= V padding.
// losses[i] = logsumexp(logits[i, :V]) - logits[i, targets[i]].
template <class T>
void cross_entropy_forward(T *losses, const T *logits, const int32_t *targets, int N, int Vp,
                           int V);
// dlogits = dloss * (softmax(logits) - onehot(target)), 0 on padding; may alias logits.
template <class T>
void cross_entropy_backward(T *dlogits, const T *logits, const int32_t *targets, int N, int Vp,
                            int V, T dloss);

// ---- AdamW (decoupled weight decay), one tensor --------------------------------
struct AdamWParams {
  double lr, beta1, beta2, eps, weight_decay;
  int64_t step;  // 1-based, for bias correction
  double grad_scale = 1.0;       // gradients are used times this (rounded to T first)
  float *model_copy = nullptr;   // if set (float T): the updated weights rounded to model_type
  DType model_type = DType::f32;
};
template <class T>
void adamw_update(T *param, const T *grad, T *exp_avg, T *exp_avg_sq, size_t n,
                  const AdamWParams &a);

// ---- reductions ------------------------------------------------------------------
// Sum of squares in double, in fixed-size chunks summed in order: the result does
// not depend on the number of threads.
template <class T>
double sum_squares(const T *x, size_t n);
template <class T>
void scale_inplace(T *x, size_t n, T alpha);
// out[j] += sum_i x[i, j] for x: [N, cols].
template <class T>
void colsum_accumulate(T *out, const T *x, int N, int cols);

}  // namespace ptdp::cpu
