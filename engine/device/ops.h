// The op table (ARCHITECTURE §2): what the model and the optimizer call, once
// per backend. kernels/cpu and kernels/cuda implement the ops; an Ops object
// binds them to one rank's Device (its memory and stream), so GPT is written
// once and runs wherever its device is. Every pointer is a device pointer.
//
// T is the type the model computes in and keeps its parameters, gradients and
// statistics in: float (training) or double (the finite-difference tests, CPU
// only). Activations and their gradients are held in the run's activation
// type (act_type()): T, or in a 16-bit run (set_storage_type) bf16 or f16 —
// 2 bytes an element on every backend. Their arguments are typed pointers
// (Act, CAct) that carry their element type. Every op computes in fp32 (T),
// reads 16-bit inputs exactly and rounds each 16-bit output once, to nearest
// even. Shapes and semantics are those of kernels/cpu/ops.h; N = s*b rows in
// the [s, b, h] activation layout, and ops documented as accumulating add into
// their outputs.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <type_traits>

#include "engine/core/dtype.h"
#include "engine/core/philox.h"
#include "engine/device/device.h"

namespace ptdp {

// One AdamW update's hyper-parameters (decoupled weight decay; step counts
// updates from 1, for the bias corrections).
struct AdamWStep {
  double lr, beta1, beta2, eps, weight_decay;
  int64_t step;
  // Folded into the same pass, so the optimizer reads and writes each array
  // once: gradients are used times grad_scale (loss-scale unscaling and
  // clipping; the gradient array is left as it was), and where model_copy is
  // set it receives the updated weights rounded to model_type (a 16-bit
  // model's parameters from its fp32 master weights; float T only).
  double grad_scale = 1.0;
  float *model_copy = nullptr;
  DType model_type = DType::f32;
};

// A device pointer and the type of the elements it points to: an activation
// (in the run's act_type()) or, as a GEMM operand, also a weight or gradient
// in T. V is void (Act) or const void (CAct); a float* or double* converts
// with its own type, and `p + n` moves n elements.
template <class V>
struct TypedPtr {
  using Float = std::conditional_t<std::is_const_v<V>, const float, float>;
  using Double = std::conditional_t<std::is_const_v<V>, const double, double>;
  V *p = nullptr;
  DType t = DType::f32;
  TypedPtr() = default;
  TypedPtr(std::nullptr_t) {}
  TypedPtr(V *ptr, DType type) : p(ptr), t(type) {}
  TypedPtr(Float *x) : p(x), t(DType::f32) {}
  TypedPtr(Double *x) : p(x), t(DType::f64) {}
  // Act to CAct.
  template <class W, class = std::enable_if_t<std::is_const_v<V> && !std::is_const_v<W>>>
  TypedPtr(TypedPtr<W> o) : p(o.p), t(o.t) {}
  TypedPtr operator+(int64_t n) const {
    using Byte = std::conditional_t<std::is_const_v<V>, const char, char>;
    return {static_cast<Byte *>(p) + n * (int64_t)dtype_size(t), t};
  }
  explicit operator bool() const { return p != nullptr; }
};
using Act = TypedPtr<void>;
using CAct = TypedPtr<const void>;

// The DType of T (float: f32, double: f64).
template <class T>
constexpr DType dtype_of() {
  return std::is_same_v<T, double> ? DType::f64 : DType::f32;
}

template <class T>
class Ops {
 public:
  virtual ~Ops() = default;
  Device &device() const { return *dev_; }

  // ---- GEMMs: row-major C[M,N] = alpha * op(A) @ op(B) + beta * C ----
  // A, B: activations or weights (T); C: an activation or a gradient (T).
  virtual void gemm(bool ta, bool tb, int M, int N, int K, T alpha, CAct A, int lda, CAct B,
                    int ldb, T beta, Act C, int ldc) = 0;
  virtual void gemm_strided_batched(bool ta, bool tb, int M, int N, int K, T alpha, CAct A,
                                    int lda, int64_t strideA, CAct B, int ldb, int64_t strideB,
                                    T beta, Act C, int ldc, int64_t strideC, int batch) = 0;

  // ---- LayerNorm: out, x [N, h]; mean, rstd [N]; backward accumulates ----
  virtual void layernorm_forward(Act out, T *mean, T *rstd, CAct x, const T *w, const T *b, int N,
                                 int h, T eps) = 0;
  virtual void layernorm_backward(Act dx, T *dw, T *db, CAct dout, CAct x, const T *w,
                                  const T *mean, const T *rstd, int N, int h) = 0;

  // ---- bias + GeLU: z = y + bias, out = gelu(z); dbias accumulates ----
  virtual void bias_gelu_forward(Act z, Act out, CAct y, const T *bias, int N, int f) = 0;
  virtual void bias_gelu_backward(Act dz, T *dbias, CAct dout, CAct z, int N, int f) = 0;

  // ---- dropout keyed by global indices (the same bits on every backend) ----
  virtual void bias_dropout_add_forward(Act out, CAct residual, CAct y, const T *bias, int s, int b,
                                        int h, const DropoutSpec &d) = 0;
  virtual void bias_dropout_add_backward(Act dy, T *dbias, CAct dout, int s, int b, int h,
                                         const DropoutSpec &d) = 0;
  virtual void dropout_attention(Act out, CAct in, int b, int a, int s_q, int s_k, int head_offset,
                                 const DropoutSpec &d) = 0;
  virtual void dropout_backward_from_output(Act dx, CAct dy, CAct y, size_t n, float p) = 0;

  // ---- scale + causal mask + softmax over [batch, s_q, s_k] ----
  virtual void scale_mask_softmax_forward(Act P, CAct S, int batch, int s_q, int s_k, T scale,
                                          bool causal, const uint8_t *mask) = 0;
  virtual void scale_mask_softmax_backward(Act dS, CAct P, CAct dP, int batch, int s_q, int s_k,
                                           T scale) = 0;

  // ---- fused causal attention (no [s, s] matrix): kernels/cpu/ops.h's layout ----
  virtual void flash_attention_forward(Act ctx, T *lse, CAct qkv, int s, int b, int heads, int hd,
                                       T scale, int head_offset, const DropoutSpec &d) = 0;
  virtual void flash_attention_backward(Act dqkv, CAct dctx, CAct ctx, CAct qkv, const T *lse,
                                        int s, int b, int heads, int hd, T scale, int head_offset,
                                        const DropoutSpec &d) = 0;

  // ---- vocab-parallel embedding over rows [vocab_start, vocab_start + vocab_rows) ----
  virtual void embedding_forward(Act x, const int32_t *tokens, const T *wte, int vocab_start,
                                 int vocab_rows, const T *wpe, int s, int b, int h) = 0;
  virtual void add_position_embedding(Act x, const T *wpe, int s, int b, int h) = 0;
  virtual void embedding_backward(T *dwte, T *dwpe, CAct dx, const int32_t *tokens, int s, int b,
                                  int h, int vocab_start, int vocab_rows) = 0;

  // ---- the three-step vocab-parallel cross-entropy (statistics in T) ----
  virtual void vocab_ce_local_max(T *row_max, CAct logits, int N, int ld, int cols) = 0;
  virtual void vocab_ce_local_sums(T *sum_exp, T *target_logit, CAct logits, const T *row_max,
                                   const int32_t *targets, int N, int ld, int cols,
                                   int vocab_start) = 0;
  virtual void vocab_ce_backward(Act dlogits, CAct logits, const T *row_max, const T *sum_exp,
                                 const int32_t *targets, int N, int ld, int cols, int vocab_start,
                                 T dloss) = 0;

  // ---- optimizer: AdamW over n elements of fp32 weights and moments ----
  virtual void adamw_update(T *param, const T *grad, T *exp_avg, T *exp_avg_sq, size_t n,
                            const AdamWStep &a) = 0;

  // ---- reductions, conversions, rounding ----
  virtual void colsum_accumulate(T *out, CAct x, int N, int cols) = 0;
  virtual void scale_inplace(T *x, size_t n, T alpha) = 0;
  // Sum of squares in double (fixed chunk order: the same on every run); returns
  // when the value is on the host.
  virtual double sum_squares(const T *x, size_t n) = 0;
  // dst = src converted to dst's type (rounded to nearest even when narrower);
  // n elements, either of them T or the activation type.
  virtual void convert(Act dst, CAct src, size_t n) = 0;
  // Rounds every value to `dtype` (to nearest even) and back: a 16-bit run's
  // parameters (and 16-bit gradients) are T arrays of 16-bit values. Nothing
  // to do for f32 (and for T = double).
  virtual void round_to_storage(T *x, size_t n, DType dtype) = 0;

  // [base, base + n) holds the model's weights, unchanged until the next call
  // (the model calls it before a forward whenever its weights were written
  // since the last call: GPT::params()): a backend may keep one 16-bit copy
  // of them for the ops of a 16-bit run that read weights next to activations
  // (CUDA does: GEMM operands, LayerNorm and bias parameters; 2 bytes per
  // parameter) instead of narrowing them at every call.
  virtual void set_weights(const T *base, size_t n) {
    (void)base;
    (void)n;
  }
  // The weights are about to be written (GPT::params() taken writable): a
  // backend forgets what adamw_update renewed of its copy since set_weights,
  // so that only an update after this call can spare the next set_weights the
  // copy (CUDA: the optimizer's pass writes the 16-bit copy too; when it has
  // rewritten every weight since the last write, the copy is current).
  virtual void weights_written() {}

  // The 16-bit type of a mixed-precision run (f32: none). Its activations are
  // held in it; its weights are T arrays of values of it, so a 16-bit copy of
  // them is exact and GEMMs run on 16-bit operands with fp32 accumulation.
  void set_storage_type(DType dtype) { storage_ = dtype; }
  DType storage_type() const { return storage_; }
  // The element type of activations: T, or the 16-bit storage type (a double
  // table, the finite-difference reference, keeps everything in double).
  DType act_type() const {
    return storage_ == DType::f32 || dtype_of<T>() == DType::f64 ? dtype_of<T>() : storage_;
  }

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
