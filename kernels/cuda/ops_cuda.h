// CUDA implementations of the op interface (kernels/cpu/ops.h), fp32 for now.
// Same shapes and semantics as the CPU kernels; every call is asynchronous on
// `stream`. Pointers are device pointers.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace ptdp::cuda {

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
