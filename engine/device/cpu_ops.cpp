// The CPU op table: kernels/cpu over host memory, every call done at once.
#include <type_traits>

#include "engine/core/status.h"
#include "engine/device/ops.h"
#include "kernels/cpu/ops.h"

namespace ptdp {

namespace {

template <class T>
class CpuOps final : public Ops<T> {
 public:
  explicit CpuOps(Device &dev) : Ops<T>(dev) {}

  void gemm(bool ta, bool tb, int M, int N, int K, T alpha, const T *A, int lda, const T *B,
            int ldb, T beta, T *C, int ldc) override {
    cpu::gemm<T>(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  }
  void gemm_strided_batched(bool ta, bool tb, int M, int N, int K, T alpha, const T *A, int lda,
                            int64_t strideA, const T *B, int ldb, int64_t strideB, T beta, T *C,
                            int ldc, int64_t strideC, int batch) override {
    cpu::gemm_strided_batched<T>(ta, tb, M, N, K, alpha, A, lda, strideA, B, ldb, strideB, beta, C,
                                 ldc, strideC, batch);
  }
  void layernorm_forward(T *out, T *mean, T *rstd, const T *x, const T *w, const T *b, int N, int h,
                         T eps) override {
    cpu::layernorm_forward<T>(out, mean, rstd, x, w, b, N, h, eps);
  }
  void layernorm_backward(T *dx, T *dw, T *db, const T *dout, const T *x, const T *w, const T *mean,
                          const T *rstd, int N, int h) override {
    cpu::layernorm_backward<T>(dx, dw, db, dout, x, w, mean, rstd, N, h);
  }
  void bias_gelu_forward(T *z, T *out, const T *y, const T *bias, int N, int f) override {
    cpu::bias_gelu_forward<T>(z, out, y, bias, N, f);
  }
  void bias_gelu_backward(T *dz, T *dbias, const T *dout, const T *z, int N, int f) override {
    cpu::bias_gelu_backward<T>(dz, dbias, dout, z, N, f);
  }
  void bias_dropout_add_forward(T *out, const T *residual, const T *y, const T *bias, int s, int b,
                                int h, const DropoutSpec &d) override {
    cpu::bias_dropout_add_forward<T>(out, residual, y, bias, s, b, h, d);
  }
  void bias_dropout_add_backward(T *dy, T *dbias, const T *dout, int s, int b, int h,
                                 const DropoutSpec &d) override {
    cpu::bias_dropout_add_backward<T>(dy, dbias, dout, s, b, h, d);
  }
  void dropout_attention(T *out, const T *in, int b, int a, int s_q, int s_k, int head_offset,
                         const DropoutSpec &d) override {
    cpu::dropout_attention<T>(out, in, b, a, s_q, s_k, head_offset, d);
  }
  void dropout_backward_from_output(T *dx, const T *dy, const T *y, size_t n, float p) override {
    cpu::dropout_backward_from_output<T>(dx, dy, y, n, p);
  }
  void scale_mask_softmax_forward(T *P, const T *S, int batch, int s_q, int s_k, T scale,
                                  bool causal, const uint8_t *mask) override {
    cpu::scale_mask_softmax_forward<T>(P, S, batch, s_q, s_k, scale, causal, mask);
  }
  void scale_mask_softmax_backward(T *dS, const T *P, const T *dP, int batch, int s_q, int s_k,
                                   T scale) override {
    cpu::scale_mask_softmax_backward<T>(dS, P, dP, batch, s_q, s_k, scale);
  }
  void flash_attention_forward(T *ctx, T *lse, const T *qkv, int s, int b, int heads, int hd,
                               T scale, int head_offset, const DropoutSpec &d) override {
    cpu::flash_attention_forward<T>(ctx, lse, qkv, s, b, heads, hd, scale, head_offset, d);
  }
  void flash_attention_backward(T *dqkv, const T *dctx, const T *ctx, const T *qkv, const T *lse,
                                int s, int b, int heads, int hd, T scale, int head_offset,
                                const DropoutSpec &d) override {
    cpu::flash_attention_backward<T>(dqkv, dctx, ctx, qkv, lse, s, b, heads, hd, scale,
                                     head_offset, d);
  }
  void embedding_forward(T *x, const int32_t *tokens, const T *wte, int vocab_start, int vocab_rows,
                         const T *wpe, int s, int b, int h) override {
    cpu::embedding_forward<T>(x, tokens, wte, vocab_start, vocab_rows, wpe, s, b, h);
  }
  void add_position_embedding(T *x, const T *wpe, int s, int b, int h) override {
    cpu::add_position_embedding<T>(x, wpe, s, b, h);
  }
  void embedding_backward(T *dwte, T *dwpe, const T *dx, const int32_t *tokens, int s, int b, int h,
                          int vocab_start, int vocab_rows) override {
    cpu::embedding_backward<T>(dwte, dwpe, dx, tokens, s, b, h, vocab_start, vocab_rows);
  }
  void vocab_ce_local_max(T *row_max, const T *logits, int N, int ld, int cols) override {
    cpu::vocab_ce_local_max<T>(row_max, logits, N, ld, cols);
  }
  void vocab_ce_local_sums(T *sum_exp, T *target_logit, const T *logits, const T *row_max,
                           const int32_t *targets, int N, int ld, int cols,
                           int vocab_start) override {
    cpu::vocab_ce_local_sums<T>(sum_exp, target_logit, logits, row_max, targets, N, ld, cols,
                                vocab_start);
  }
  void vocab_ce_backward(T *dlogits, const T *logits, const T *row_max, const T *sum_exp,
                         const int32_t *targets, int N, int ld, int cols, int vocab_start,
                         T dloss) override {
    cpu::vocab_ce_backward<T>(dlogits, logits, row_max, sum_exp, targets, N, ld, cols, vocab_start,
                              dloss);
  }
  void adamw_update(T *param, const T *grad, T *exp_avg, T *exp_avg_sq, size_t n,
                    const AdamWStep &a) override {
    const cpu::AdamWParams p{a.lr, a.beta1, a.beta2, a.eps, a.weight_decay, a.step};
    cpu::adamw_update<T>(param, grad, exp_avg, exp_avg_sq, n, p);
  }
  void colsum_accumulate(T *out, const T *x, int N, int cols) override {
    cpu::colsum_accumulate<T>(out, x, N, cols);
  }
  void scale_inplace(T *x, size_t n, T alpha) override { cpu::scale_inplace<T>(x, n, alpha); }
  double sum_squares(const T *x, size_t n) override { return cpu::sum_squares<T>(x, n); }
  void round_to_storage(T *x, size_t n, DType dtype) override {
    if constexpr (std::is_same_v<T, float>) round_to(dtype, x, n);
  }
};

}  // namespace

#ifndef PTDP_WITH_CUDA
std::unique_ptr<Ops<float>> make_cuda_ops(Device &) {
  fail(Status::invalid_config, "a CUDA device in a ptdp built without CUDA");
}
#else
std::unique_ptr<Ops<float>> make_cuda_ops(Device &dev);  // engine/device/cuda_ops.cu
#endif

template <>
std::unique_ptr<Ops<float>> make_ops<float>(Device &dev) {
  if (dev.kind() == DeviceKind::cuda) return make_cuda_ops(dev);
  return std::make_unique<CpuOps<float>>(dev);
}

template <>
std::unique_ptr<Ops<double>> make_ops<double>(Device &dev) {
  if (dev.kind() != DeviceKind::cpu)
    fail(Status::invalid_argument, "double precision ops exist on the cpu device only (",
         dev.name(), " computes in f32, bf16 or f16)");
  return std::make_unique<CpuOps<double>>(dev);
}

}  // namespace ptdp
