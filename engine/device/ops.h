// The op table (ARCHITECTURE §2): what the model and the optimizer call, once
// per backend. kernels/cpu and kernels/cuda implement the ops; an Ops object
// binds them to one rank's Device (its memory and stream), so GPT is written
// once and runs wherever its device is. Every pointer is a device pointer.
//
// T is the element type the model computes in: float (training; a 16-bit run
// keeps float arrays rounded to the 16-bit type, round_to_storage) or double
// (the finite-difference tests, CPU only). Shapes and semantics are those of
// kernels/cpu/ops.h; N = s*b rows in the [s, b, h] activation layout, and ops
// documented as accumulating add into their outputs.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>

#include "engine/core/dtype.h"
#include "engine/core/philox.h"
#include "engine/device/device.h"

namespace ptdp {

// One AdamW update's hyper-parameters (decoupled weight decay; step counts
// updates from 1, for the bias corrections).
struct AdamWStep {
  double lr, beta1, beta2, eps, weight_decay;
  int64_t step;
};

template <class T>
class Ops {
 public:
  virtual ~Ops() = default;
  Device &device() const { return *dev_; }

  // ---- GEMMs: row-major C[M,N] = alpha * op(A) @ op(B) + beta * C ----
  virtual void gemm(bool ta, bool tb, int M, int N, int K, T alpha, const T *A, int lda, const T *B,
                    int ldb, T beta, T *C, int ldc) = 0;
  virtual void gemm_strided_batched(bool ta, bool tb, int M, int N, int K, T alpha, const T *A,
                                    int lda, int64_t strideA, const T *B, int ldb, int64_t strideB,
                                    T beta, T *C, int ldc, int64_t strideC, int batch) = 0;

  // ---- LayerNorm: out, x [N, h]; mean, rstd [N]; backward accumulates ----
  virtual void layernorm_forward(T *out, T *mean, T *rstd, const T *x, const T *w, const T *b,
                                 int N, int h, T eps) = 0;
  virtual void layernorm_backward(T *dx, T *dw, T *db, const T *dout, const T *x, const T *w,
                                  const T *mean, const T *rstd, int N, int h) = 0;

  // ---- bias + GeLU: z = y + bias, out = gelu(z); dbias accumulates ----
  virtual void bias_gelu_forward(T *z, T *out, const T *y, const T *bias, int N, int f) = 0;
  virtual void bias_gelu_backward(T *dz, T *dbias, const T *dout, const T *z, int N, int f) = 0;

  // ---- dropout keyed by global indices (the same bits on every backend) ----
  virtual void bias_dropout_add_forward(T *out, const T *residual, const T *y, const T *bias, int s,
                                        int b, int h, const DropoutSpec &d) = 0;
  virtual void bias_dropout_add_backward(T *dy, T *dbias, const T *dout, int s, int b, int h,
                                         const DropoutSpec &d) = 0;
  virtual void dropout_attention(T *out, const T *in, int b, int a, int s_q, int s_k,
                                 int head_offset, const DropoutSpec &d) = 0;
  virtual void dropout_backward_from_output(T *dx, const T *dy, const T *y, size_t n, float p) = 0;

  // ---- scale + causal mask + softmax over [batch, s_q, s_k] ----
  virtual void scale_mask_softmax_forward(T *P, const T *S, int batch, int s_q, int s_k, T scale,
                                          bool causal, const uint8_t *mask) = 0;
  virtual void scale_mask_softmax_backward(T *dS, const T *P, const T *dP, int batch, int s_q,
                                           int s_k, T scale) = 0;

  // ---- fused causal attention (no [s, s] matrix): kernels/cpu/ops.h's layout ----
  virtual void flash_attention_forward(T *ctx, T *lse, const T *qkv, int s, int b, int heads,
                                       int hd, T scale, int head_offset,
                                       const DropoutSpec &d) = 0;
  virtual void flash_attention_backward(T *dqkv, const T *dctx, const T *ctx, const T *qkv,
                                        const T *lse, int s, int b, int heads, int hd, T scale,
                                        int head_offset, const DropoutSpec &d) = 0;

  // ---- vocab-parallel embedding over rows [vocab_start, vocab_start + vocab_rows) ----
  virtual void embedding_forward(T *x, const int32_t *tokens, const T *wte, int vocab_start,
                                 int vocab_rows, const T *wpe, int s, int b, int h) = 0;
  virtual void add_position_embedding(T *x, const T *wpe, int s, int b, int h) = 0;
  virtual void embedding_backward(T *dwte, T *dwpe, const T *dx, const int32_t *tokens, int s,
                                  int b, int h, int vocab_start, int vocab_rows) = 0;

  // ---- the three-step vocab-parallel cross-entropy ----
  virtual void vocab_ce_local_max(T *row_max, const T *logits, int N, int ld, int cols) = 0;
  virtual void vocab_ce_local_sums(T *sum_exp, T *target_logit, const T *logits, const T *row_max,
                                   const int32_t *targets, int N, int ld, int cols,
                                   int vocab_start) = 0;
  virtual void vocab_ce_backward(T *dlogits, const T *logits, const T *row_max, const T *sum_exp,
                                 const int32_t *targets, int N, int ld, int cols, int vocab_start,
                                 T dloss) = 0;

  // ---- optimizer: AdamW over n elements of fp32 weights and moments ----
  virtual void adamw_update(T *param, const T *grad, T *exp_avg, T *exp_avg_sq, size_t n,
                            const AdamWStep &a) = 0;

  // ---- reductions, rounding ----
  virtual void colsum_accumulate(T *out, const T *x, int N, int cols) = 0;
  virtual void scale_inplace(T *x, size_t n, T alpha) = 0;
  // Sum of squares in double (fixed chunk order: the same on every run); returns
  // when the value is on the host.
  virtual double sum_squares(const T *x, size_t n) = 0;
  // Rounds every value to `dtype` (to nearest even) and back: a 16-bit tensor
  // held in float. Nothing to do for f32 (and for T = double).
  virtual void round_to_storage(T *x, size_t n, DType dtype) = 0;

  // [base, base + n) holds the model's weights, unchanged until the next call
  // (the model calls it at every forward): a backend may keep one 16-bit copy
  // of them for the GEMMs of a 16-bit run instead of narrowing each weight
  // operand at every call (CUDA does; 2 bytes per parameter).
  virtual void set_weights(const T *base, size_t n) {
    (void)base;
    (void)n;
  }

  // The type the model's tensors are rounded to (f32: none). With a 16-bit
  // type every GEMM operand holds values of that type, so a backend may run
  // the GEMM on 16-bit copies with fp32 accumulation and an fp32 result: the
  // same exact products, on tensor cores (CUDA does; the CPU's GEMM reads the
  // floats as they are).
  void set_storage_type(DType dtype) { storage_ = dtype; }
  DType storage_type() const { return storage_; }

 protected:
  explicit Ops(Device &dev) : dev_(&dev) {}

 private:
  Device *dev_;
  DType storage_ = DType::f32;
};

// The op table of `dev`'s backend. The CUDA backend has float only (double is
// the CPU's finite-difference reference): asking for another is an error.
template <class T>
std::unique_ptr<Ops<T>> make_ops(Device &dev);

}  // namespace ptdp
