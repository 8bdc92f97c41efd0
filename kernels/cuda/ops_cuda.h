// CUDA implementations of the op interface (kernels/cpu/ops.h), fp32 for now.
// Same shapes and semantics as the CPU kernels; every call is asynchronous on
// `stream`. Pointers are device pointers.
#pragma once
#include <cuda_runtime.h>

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

}  // namespace ptdp::cuda
