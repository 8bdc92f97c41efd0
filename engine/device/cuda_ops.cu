// The CUDA op table: kernels/cuda queued on the device's stream, GEMMs through
// one cuBLASLt handle per rank. fp32 storage (a 16-bit run rounds its float
// arrays with round_to_storage, as the CPU does), fp32 arithmetic, no TF32.
// In a 16-bit run the GEMMs read 16-bit copies of their operands (as
// torch.autocast casts a matmul's inputs): tensor cores, fp32 sums and results.
// The weights' copy is made once per set_weights (each forward), not per GEMM.
#include <cuda_runtime.h>

#include <cstdint>
#include <memory>

#include "engine/core/status.h"
#include "engine/device/ops.h"
#include "kernels/cuda/ops_cuda.h"

namespace ptdp {

namespace {

class CudaOps final : public Ops<float> {
 public:
  explicit CudaOps(Device &dev)
      : Ops<float>(dev), stream_(static_cast<cudaStream_t>(dev.stream())) {}

  void gemm(bool ta, bool tb, int M, int N, int K, float alpha, const float *A, int lda,
            const float *B, int ldb, float beta, float *C, int ldc) override {
    gemm_strided_batched(ta, tb, M, N, K, alpha, A, lda, 0, B, ldb, 0, beta, C, ldc, 0, 1);
  }
  void gemm_strided_batched(bool ta, bool tb, int M, int N, int K, float alpha, const float *A,
                            int lda, int64_t strideA, const float *B, int ldb, int64_t strideB,
                            float beta, float *C, int ldc, int64_t strideC, int batch) override {
    if (M <= 0 || N <= 0 || batch <= 0) return;
    const DType st = storage_type();
    if (st == DType::f32 || K <= 0) {  // (K <= 0: Gemm's own error)
      gemm_.run(DType::f32, ta, tb, M, N, K, alpha, A, lda, strideA, B, ldb, strideB, beta, C, ldc,
                strideC, batch, stream_);
      return;
    }
    // Stored shapes: A is [M, K] ([K, M] if ta), B is [K, N] ([N, K] if tb).
    const void *A16 = narrow(0, A, ta ? K : M, ta ? M : K, lda, strideA, batch);
    const void *B16 = narrow(1, B, tb ? N : K, tb ? K : N, ldb, strideB, batch);
    gemm_.run(st, DType::f32, ta, tb, M, N, K, alpha, A16, lda, strideA, B16, ldb, strideB, beta, C,
              ldc, strideC, batch, stream_);
  }
  void layernorm_forward(float *out, float *mean, float *rstd, const float *x, const float *w,
                         const float *b, int N, int h, float eps) override {
    cuda::layernorm_forward<float>(out, mean, rstd, x, w, b, N, h, eps, stream_);
  }
  void layernorm_backward(float *dx, float *dw, float *db, const float *dout, const float *x,
                          const float *w, const float *mean, const float *rstd, int N,
                          int h) override {
    cuda::layernorm_backward<float>(dx, dw, db, dout, x, w, mean, rstd, N, h, stream_);
  }
  void bias_gelu_forward(float *z, float *out, const float *y, const float *bias, int N,
                         int f) override {
    cuda::bias_gelu_forward<float>(z, out, y, bias, N, f, stream_);
  }
  void bias_gelu_backward(float *dz, float *dbias, const float *dout, const float *z, int N,
                          int f) override {
    cuda::bias_gelu_backward<float>(dz, dbias, dout, z, N, f, stream_);
  }
  void bias_dropout_add_forward(float *out, const float *residual, const float *y,
                                const float *bias, int s, int b, int h,
                                const DropoutSpec &d) override {
    cuda::bias_dropout_add_forward<float>(out, residual, y, bias, s, b, h, d, stream_);
  }
  void bias_dropout_add_backward(float *dy, float *dbias, const float *dout, int s, int b, int h,
                                 const DropoutSpec &d) override {
    cuda::bias_dropout_add_backward<float>(dy, dbias, dout, s, b, h, d, stream_);
  }
  void dropout_attention(float *out, const float *in, int b, int a, int s_q, int s_k,
                         int head_offset, const DropoutSpec &d) override {
    cuda::dropout_attention<float>(out, in, b, a, s_q, s_k, head_offset, d, stream_);
  }
  void dropout_backward_from_output(float *dx, const float *dy, const float *y, size_t n,
                                    float p) override {
    cuda::dropout_backward_from_output<float>(dx, dy, y, n, p, stream_);
  }
  void scale_mask_softmax_forward(float *P, const float *S, int batch, int s_q, int s_k,
                                  float scale, bool causal, const uint8_t *mask) override {
    cuda::scale_mask_softmax_forward<float>(P, S, batch, s_q, s_k, scale, causal, mask, stream_);
  }
  void scale_mask_softmax_backward(float *dS, const float *P, const float *dP, int batch, int s_q,
                                   int s_k, float scale) override {
    cuda::scale_mask_softmax_backward<float>(dS, P, dP, batch, s_q, s_k, scale, stream_);
  }
  // A 16-bit run's attention runs on tensor cores (its operands are 16-bit
  // values); fp32 keeps the CUDA-core kernels, as no TF32 is used anywhere.
  void flash_attention_forward(float *ctx, float *lse, const float *qkv, int s, int b, int heads,
                               int hd, float scale, int head_offset,
                               const DropoutSpec &d) override {
    if (storage_type() != DType::f32)
      cuda::flash_attention_forward_mma(ctx, lse, qkv, s, b, heads, hd, scale, head_offset, d,
                                        storage_type(), stream_);
    else
      cuda::flash_attention_forward<float>(ctx, lse, qkv, s, b, heads, hd, scale, head_offset, d,
                                           stream_);
  }
  void flash_attention_backward(float *dqkv, const float *dctx, const float *ctx, const float *qkv,
                                const float *lse, int s, int b, int heads, int hd, float scale,
                                int head_offset, const DropoutSpec &d) override {
    if (storage_type() != DType::f32)
      cuda::flash_attention_backward_mma(dqkv, dctx, ctx, qkv, lse, s, b, heads, hd, scale,
                                         head_offset, d, storage_type(), stream_);
    else
      cuda::flash_attention_backward<float>(dqkv, dctx, ctx, qkv, lse, s, b, heads, hd, scale,
                                            head_offset, d, stream_);
  }
  void embedding_forward(float *x, const int32_t *tokens, const float *wte, int vocab_start,
                         int vocab_rows, const float *wpe, int s, int b, int h) override {
    cuda::embedding_forward<float>(x, tokens, wte, vocab_start, vocab_rows, wpe, s, b, h, stream_);
  }
  void add_position_embedding(float *x, const float *wpe, int s, int b, int h) override {
    cuda::add_position_embedding<float>(x, wpe, s, b, h, stream_);
  }
  void embedding_backward(float *dwte, float *dwpe, const float *dx, const int32_t *tokens, int s,
                          int b, int h, int vocab_start, int vocab_rows) override {
    cuda::embedding_backward<float>(dwte, dwpe, dx, tokens, s, b, h, vocab_start, vocab_rows,
                                    stream_);
  }
  void vocab_ce_local_max(float *row_max, const float *logits, int N, int ld, int cols) override {
    cuda::vocab_ce_local_max<float>(row_max, logits, N, ld, cols, stream_);
  }
  void vocab_ce_local_sums(float *sum_exp, float *target_logit, const float *logits,
                           const float *row_max, const int32_t *targets, int N, int ld, int cols,
                           int vocab_start) override {
    cuda::vocab_ce_local_sums<float>(sum_exp, target_logit, logits, row_max, targets, N, ld, cols,
                                     vocab_start, stream_);
  }
  void vocab_ce_backward(float *dlogits, const float *logits, const float *row_max,
                         const float *sum_exp, const int32_t *targets, int N, int ld, int cols,
                         int vocab_start, float dloss) override {
    cuda::vocab_ce_backward<float>(dlogits, logits, row_max, sum_exp, targets, N, ld, cols,
                                   vocab_start, dloss, stream_);
  }
  void adamw_update(float *param, const float *grad, float *exp_avg, float *exp_avg_sq, size_t n,
                    const AdamWStep &a) override {
    cuda::adamw_update(param, grad, exp_avg, exp_avg_sq, n, a.lr, a.beta1, a.beta2, a.eps,
                       a.weight_decay, a.step, stream_);
  }
  void colsum_accumulate(float *out, const float *x, int N, int cols) override {
    cuda::colsum_accumulate<float>(out, x, N, cols, stream_);
  }
  void scale_inplace(float *x, size_t n, float alpha) override {
    cuda::scale_inplace<float>(x, n, alpha, stream_);
  }
  double sum_squares(const float *x, size_t n) override {
    DeviceArray<double> scratch(device(), cuda::sum_squares_scratch(n) + 1);  // + the result
    double *out = scratch.data() + scratch.size() - 1;
    cuda::sum_squares<float>(out, x, n, scratch.data(), stream_);
    double v = 0;
    device().copy_to_host(&v, out, sizeof v);
    return v;
  }
  void round_to_storage(float *x, size_t n, DType dtype) override {
    cuda::round_to(x, n, dtype, stream_);
  }
  void set_weights(const float *base, size_t n) override {
    weights_ = base;
    weights_n_ = n;
    weights16_fresh_ = false;  // made again at the first GEMM that reads a weight
  }

 private:
  // A 16-bit copy (in scratch `slot`) of the span of memory an operand covers:
  // `batch` matrices of rows x cols with leading dimension ld, `stride` apart.
  // Exact: a 16-bit run's values are already rounded to the type. The scratch
  // only grows, and reuse is safe because the stream runs in order.
  const void *narrow(int slot, const float *x, int rows, int cols, int ld, int64_t stride,
                     int batch) {
    const size_t n = (size_t)(rows - 1) * ld + cols + (size_t)(batch - 1) * stride;
    const uintptr_t at = (uintptr_t)x, w = (uintptr_t)weights_;
    if (weights_ && at >= w && at + n * sizeof(float) <= w + weights_n_ * sizeof(float)) {
      // A weight: one 16-bit copy of all of them per set_weights.
      if (!weights16_fresh_) {
        if (weights16_.size() < weights_n_) weights16_.resize(device(), weights_n_);
        cuda::cast(weights16_.data(), storage_type(), weights_, DType::f32, weights_n_, stream_);
        weights16_fresh_ = true;
      }
      return weights16_.data() + (x - weights_);
    }
    DeviceArray<uint16_t> &buf = narrow_[slot];
    if (buf.size() < n) buf.resize(device(), n);
    cuda::cast(buf.data(), storage_type(), x, DType::f32, n, stream_);
    return buf.data();
  }

  cudaStream_t stream_;
  cuda::Gemm gemm_;
  DeviceArray<uint16_t> narrow_[2];  // the A and B operands of a 16-bit GEMM
  const float *weights_ = nullptr;   // set_weights: the model's weights, and their 16-bit copy
  size_t weights_n_ = 0;
  DeviceArray<uint16_t> weights16_;
  bool weights16_fresh_ = false;
};

}  // namespace

std::unique_ptr<Ops<float>> make_cuda_ops(Device &dev) { return std::make_unique<CudaOps>(dev); }

}  // namespace ptdp
