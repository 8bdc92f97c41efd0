// An op table that times every call of another on the device's own clock (a
// DeviceTimer each: CUDA events around the op on the stream, or the CPU's
// clock) and sums the times per op: where a step's device time goes. The
// timers are read only when the profile is taken, so profiling adds no waits
// between ops; on CUDA each op costs two event records more (about a
// microsecond each of host time).
#pragma once
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/device/ops.h"

namespace ptdp {

// One op's sums: GEMMs by shape ("gemm 4096x6144x2048", batched ones with
// "xB"), the other ops by name. flops: the arithmetic counted for GEMMs and
// the fused attention (its causal half), 0 for the rest.
struct OpTime {
  std::string op;
  int64_t calls = 0;
  double ms = 0;
  double flops = 0;
};

template <class T>
class ProfiledOps final : public Ops<T> {
 public:
  // Takes `inner` (and its storage type).
  explicit ProfiledOps(std::unique_ptr<Ops<T>> inner);
  // The sums since the last take, slowest first; waits for the device.
  std::vector<OpTime> take();
  // Gives the wrapped table back (pending timings are dropped).
  std::unique_ptr<Ops<T>> release() { return std::move(inner_); }

  void gemm(bool ta, bool tb, int M, int N, int K, T alpha, CAct A, int lda, CAct B, int ldb, T beta, Act C, int ldc) override;
  void gemm_strided_batched(bool ta, bool tb, int M, int N, int K, T alpha, CAct A, int lda, int64_t strideA, CAct B, int ldb, int64_t strideB, T beta, Act C, int ldc, int64_t strideC, int batch) override;
  void layernorm_forward(Act out, T *mean, T *rstd, CAct x, const T *w, const T *b, int N, int h, T eps) override;
  void layernorm_backward(Act dx, T *dw, T *db, CAct dout, CAct x, const T *w, const T *mean, const T *rstd, int N, int h) override;
  void bias_gelu_forward(Act z, Act out, CAct y, const T *bias, int N, int f) override;
  void bias_gelu_backward(Act dz, T *dbias, CAct dout, CAct z, int N, int f) override;
  void bias_dropout_add_forward(Act out, CAct residual, CAct y, const T *bias, int s, int b, int h, const DropoutSpec &d) override;
  void bias_dropout_add_backward(Act dy, T *dbias, CAct dout, int s, int b, int h, const DropoutSpec &d) override;
  void dropout_attention(Act out, CAct in, int b, int a, int s_q, int s_k, int head_offset, const DropoutSpec &d) override;
  void dropout_backward_from_output(Act dx, CAct dy, CAct y, size_t n, float p) override;
  void scale_mask_softmax_forward(Act P, CAct S, int batch, int s_q, int s_k, T scale, bool causal, const uint8_t *mask) override;
  void scale_mask_softmax_backward(Act dS, CAct P, CAct dP, int batch, int s_q, int s_k, T scale) override;
  void flash_attention_forward(Act ctx, T *lse, CAct qkv, int s, int b, int heads, int hd, T scale, int head_offset, const DropoutSpec &d) override;
  void flash_attention_backward(Act dqkv, CAct dctx, CAct ctx, CAct qkv, const T *lse, int s, int b, int heads, int hd, T scale, int head_offset, const DropoutSpec &d) override;
  void embedding_forward(Act x, const int32_t *tokens, const T *wte, int vocab_start, int vocab_rows, const T *wpe, int s, int b, int h) override;
  void add_position_embedding(Act x, const T *wpe, int s, int b, int h) override;
  void embedding_backward(T *dwte, T *dwpe, CAct dx, const int32_t *tokens, int s, int b, int h, int vocab_start, int vocab_rows) override;
  void vocab_ce_local_max(T *row_max, CAct logits, int N, int ld, int cols) override;
  void vocab_ce_local_sums(T *sum_exp, T *target_logit, CAct logits, const T *row_max, const int32_t *targets, int N, int ld, int cols, int vocab_start) override;
  void vocab_ce_backward(Act dlogits, CAct logits, const T *row_max, const T *sum_exp, const int32_t *targets, int N, int ld, int cols, int vocab_start, T dloss) override;
  void adamw_update(T *param, const T *grad, T *exp_avg, T *exp_avg_sq, size_t n, const AdamWStep &a) override;
  void colsum_accumulate(T *out, CAct x, int N, int cols) override;
  void scale_inplace(T *x, size_t n, T alpha) override;
  double sum_squares(const T *x, size_t n) override;
  void convert(Act dst, CAct src, size_t n) override;
  void round_to_storage(T *x, size_t n, DType dtype) override;
  void set_weights(const T *base, size_t n) override { inner_->set_weights(base, n); }
  void weights_written() override { inner_->weights_written(); }

 private:
  // Runs f between the start and stop of a pooled timer, charged to `op`.
  template <class F>
  void timed(const std::string &op, double flops, F &&f);

  std::unique_ptr<Ops<T>> inner_;
  std::map<std::string, OpTime> rows_;
  std::vector<std::unique_ptr<DeviceTimer>> timers_;  // reused by every take
  std::vector<OpTime *> pending_;                     // the row of timers_[i]
};

// The profile as a table: op, calls, ms, share of the total, TFLOP/s where
// flops are counted.
std::string format_op_profile(const std::vector<OpTime> &rows);

}  // namespace ptdp
