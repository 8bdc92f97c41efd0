// The op table (ARCHITECTURE §2): what the model and the optimizer call, one
// checked entry per op, implemented once per backend. kernels/cpu and kernels/cuda implement the ops; an Ops object
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
// even. Shapes and semantics are those of kernels/kernels.h; N = s*b rows in
// the [s, b, h] activation layout, and ops documented as accumulating add into
// their outputs.
#pragma once
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <type_traits>
#include <vector>

#include "engine/core/dtype.h"
#include "engine/core/philox.h"
#include "engine/core/status.h"
#include "engine/device/device.h"
#include "kernels/qkv_layout.h"  // check_attention_groups
#include "engine/device/op_profile.h"

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

// The element-wise ops a backend may fuse into a linear layer's GEMM (Ops::linear_*).
enum class LinearEpilogue { bias, bias_gelu, dgelu, bias_grad };

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

// Sizes as an op's checks name them.
struct OpSize {
  const char *name;
  int64_t value;
};
// Fails with Status::invalid_argument naming the first negative size.
void check_sizes(const char *op, std::initializer_list<OpSize> sizes);

// Each op is a public, non-virtual entry that checks what every backend
// requires (here, once), times the call when profiling is on, and runs the
// backend's implementation (the protected *_impl of the same name). Adding an
// op: docs/ARCHITECTURE.md, "How to add an op".
template <class T>
class Ops {
 public:
  virtual ~Ops() = default;
  Device &device() const { return *dev_; }

  // ---- GEMMs: row-major C[M,N] = alpha * op(A) @ op(B) + beta * C ----
  // A, B: activations or weights (T); C: an activation or a gradient (T).
  // M, N or batch 0: nothing to do. K = 0 (a rank holding no vocabulary
  // columns): C = beta C, for beta 0 or 1.
  void gemm(bool ta, bool tb, int M, int N, int K, T alpha, CAct A, int lda, CAct B, int ldb,
            T beta, Act C, int ldc) {
    gemm_strided_batched(ta, tb, M, N, K, alpha, A, lda, 0, B, ldb, 0, beta, C, ldc, 0, 1);
  }
  void gemm_strided_batched(bool ta, bool tb, int M, int N, int K, T alpha, CAct A, int lda,
                            int64_t strideA, CAct B, int ldb, int64_t strideB, T beta, Act C,
                            int ldc, int64_t strideC, int batch) {
    check_sizes("gemm", {{"M", M}, {"N", N}, {"K", K}, {"batch", batch}});
    if (M == 0 || N == 0 || batch == 0) return;
    if (K == 0) return empty_product(beta, C, M, N, ldc, strideC, batch);
    auto run = [&] {
      gemm_impl(ta, tb, M, N, K, alpha, A, lda, strideA, B, ldb, strideB, beta, C, ldc, strideC,
                batch);
    };
    if (profiler_)
      profiler_->timed(gemm_op_name(ta, tb, M, N, K, batch), 2.0 * M * N * K * batch, run);
    else
      run();
  }

  // ---- LayerNorm: out, x [N, h]; mean, rstd [N]; backward accumulates ----
  void layernorm_forward(Act out, T *mean, T *rstd, CAct x, const T *w, const T *b, int N, int h,
                         T eps) {
    check_sizes("layernorm_forward", {{"N", N}, {"h", h}});
    timed("layernorm_forward", 0, [&] { layernorm_forward_impl(out, mean, rstd, x, w, b, N, h, eps); });
  }
  void layernorm_backward(Act dx, T *dw, T *db, CAct dout, CAct x, const T *w, const T *mean,
                          const T *rstd, int N, int h) {
    check_sizes("layernorm_backward", {{"N", N}, {"h", h}});
    timed("layernorm_backward", 0,
          [&] { layernorm_backward_impl(dx, dw, db, dout, x, w, mean, rstd, N, h); });
  }

  // ---- bias + GeLU: z = y + bias, out = gelu(z); bias, dbias may be null; dbias accumulates ----
  void bias_gelu_forward(Act z, Act out, CAct y, const T *bias, int N, int f) {
    check_sizes("bias_gelu_forward", {{"N", N}, {"f", f}});
    timed("bias_gelu_forward", 0, [&] { bias_gelu_forward_impl(z, out, y, bias, N, f); });
  }
  void bias_gelu_backward(Act dz, T *dbias, CAct dout, CAct z, int N, int f) {
    check_sizes("bias_gelu_backward", {{"N", N}, {"f", f}});
    timed("bias_gelu_backward", 0, [&] { bias_gelu_backward_impl(dz, dbias, dout, z, N, f); });
  }

  // ---- linear layers with their element-wise epilogues: each is the GEMM,
  // then the op named, unless the backend fuses the two (fuses(): CUDA in a
  // 16-bit run, cuBLASLt's epilogues), which rounds once from the GEMM's fp32
  // sums instead of twice. W is a weight (T); bias [N] may be null. ----
  // y [M, N] = A [M, K] W^T + bias, W [N, K] (the QKV layer).
  void linear_bias(int M, int N, int K, CAct A, const T *W, const T *bias, Act y) {
    if (!bias || !fused_linear(LinearEpilogue::bias, true, M, N, K, A, W, bias, nullptr, nullptr, y)) {
      gemm(false, true, M, N, K, 1, A, K, W, K, 0, y, N);
      if (bias) bias_dropout_add_forward(y, nullptr, y, bias, M, 1, N, DropoutSpec{});
    }
  }
  // z [M, N] = A [M, K] W^T + bias, out = gelu(z) (fc1 and its GeLU).
  void linear_bias_gelu(int M, int N, int K, CAct A, const T *W, const T *bias, Act z, Act out) {
    if (bias && fused_linear(LinearEpilogue::bias_gelu, true, M, N, K, A, W, bias, nullptr, z, out))
      return;
    gemm(false, true, M, N, K, 1, A, K, W, K, 0, z, N);
    bias_gelu_forward(z, out, z, bias, M, N);
  }
  // dz [M, N] = (dy [M, K] W) * gelu'(z), W [K, N]; dbias += the column sums of
  // dz (fc2's input gradient through fc1's GeLU).
  void linear_dgelu(int M, int N, int K, CAct dy, const T *W, CAct z, Act dz, T *dbias) {
    if (fused_linear(LinearEpilogue::dgelu, false, M, N, K, dy, W, nullptr, z, nullptr, dz)) {
      if (dbias) colsum_accumulate(dbias, dz, M, N);
      return;
    }
    gemm(false, false, M, N, K, 1, dy, K, W, N, 0, dz, N);
    bias_gelu_backward(dz, dbias, dz, z, M, N);
  }

  // dW [N, K] += dy [M, N]^T x [M, K] (a weight gradient), dbias [N] += the
  // column sums of dy (may be null): a linear layer's parameter gradients.
  void linear_weight_grad(int M, int N, int K, CAct dy, CAct x, T *dW, T *dbias) {
    check_sizes("linear", {{"M", M}, {"N", N}, {"K", K}});
    if (dbias && M > 0 && N > 0 && K > 0 && fused_epilogues_ && fuses(LinearEpilogue::bias_grad)) {
      timed_fused(LinearEpilogue::bias_grad, true, false, N, K, M,
                  [&] { fused_weight_grad_impl(M, N, K, dy, x, dW, dbias); });
      return;
    }
    gemm(true, false, N, K, M, 1, dy, N, x, K, 1, dW, K);
    if (dbias) colsum_accumulate(dbias, dy, M, N);
  }

  // ---- RMSNorm (LLaMA): out, x [N, h]; rstd [N]; backward accumulates ----
  void rmsnorm_forward(Act out, T *rstd, CAct x, const T *w, int N, int h, T eps) {
    check_sizes("rmsnorm_forward", {{"N", N}, {"h", h}});
    timed("rmsnorm_forward", 0, [&] { rmsnorm_forward_impl(out, rstd, x, w, N, h, eps); });
  }
  void rmsnorm_backward(Act dx, T *dw, CAct dout, CAct x, const T *w, const T *rstd, int N, int h) {
    check_sizes("rmsnorm_backward", {{"N", N}, {"h", h}});
    timed("rmsnorm_backward", 0, [&] { rmsnorm_backward_impl(dx, dw, dout, x, w, rstd, N, h); });
  }

  // ---- SwiGLU: z = y + bias ([N, 2f]: gate, then up), out = silu(gate) * up
  // [N, f]; bias may be null; dbias accumulates ----
  void swiglu_forward(Act z, Act out, CAct y, const T *bias, int N, int f) {
    check_sizes("swiglu_forward", {{"N", N}, {"f", f}});
    timed("swiglu_forward", 0, [&] { swiglu_forward_impl(z, out, y, bias, N, f); });
  }
  void swiglu_backward(Act dz, T *dbias, CAct dout, CAct z, int N, int f) {
    check_sizes("swiglu_backward", {{"N", N}, {"f", f}});
    timed("swiglu_backward", 0, [&] { swiglu_backward_impl(dz, dbias, dout, z, N, f); });
  }

  // ---- rotary embeddings in place (kernels/kernels.h's rope_rotate):
  // rows si*b + bi of x (row stride ld), `vecs` vectors of hd at columns
  // k*stride turned by position si's angles; cos_t, sin_t: the device's copy
  // of rope_table's [s, hd/2]; inverse for the backward ----
  void rope_rotate(Act x, const float *cos_t, const float *sin_t, int s, int b, int ld, int vecs,
                   int stride, int hd, bool inverse) {
    check_sizes("rope_rotate",
                {{"s", s}, {"b", b}, {"ld", ld}, {"vecs", vecs}, {"stride", stride}, {"hd", hd}});
    if (hd % 2 != 0) fail(Status::invalid_argument, "rope_rotate: hd = ", hd, " (allowed: even)");
    if (vecs > 1 && stride < hd)
      fail(Status::invalid_argument, "rope_rotate: vectors of ", hd, " values ", stride,
           " apart overlap (allowed: stride >= hd)");
    if (vecs > 0 && (int64_t)(vecs - 1) * stride + hd > ld)
      fail(Status::invalid_argument, "rope_rotate: ", vecs, " vectors of ", hd, " values ",
           stride, " apart overrun a row of ld = ", ld);
    timed("rope_rotate", 0,
          [&] { rope_rotate_impl(x, cos_t, sin_t, s, b, ld, vecs, stride, hd, inverse); });
  }

  // ---- dropout keyed by global indices (the same bits on every backend) ----
  void bias_dropout_add_forward(Act out, CAct residual, CAct y, const T *bias, int s, int b, int h,
                                const DropoutSpec &d) {
    check_sizes("bias_dropout_add_forward", {{"s", s}, {"b", b}, {"h", h}});
    timed("bias_dropout_add_forward", 0,
          [&] { bias_dropout_add_forward_impl(out, residual, y, bias, s, b, h, d); });
  }
  void bias_dropout_add_backward(Act dy, T *dbias, CAct dout, int s, int b, int h,
                                 const DropoutSpec &d) {
    check_sizes("bias_dropout_add_backward", {{"s", s}, {"b", b}, {"h", h}});
    timed("bias_dropout_add_backward", 0,
          [&] { bias_dropout_add_backward_impl(dy, dbias, dout, s, b, h, d); });
  }
  void dropout_attention(Act out, CAct in, int b, int a, int s_q, int s_k, int head_offset,
                         const DropoutSpec &d) {
    check_sizes("dropout_attention",
                {{"b", b}, {"a", a}, {"s_q", s_q}, {"s_k", s_k}, {"head_offset", head_offset}});
    timed("dropout_attention", 0,
          [&] { dropout_attention_impl(out, in, b, a, s_q, s_k, head_offset, d); });
  }
  // p: the rate drawn (attention: attention_dropout_rate of the configured p).
  void dropout_backward_from_output(Act dx, CAct dy, CAct y, size_t n, float p) {
    if (!(p >= 0.f && p < 1.f))
      fail(Status::invalid_argument, "dropout_backward_from_output: p = ", p,
           " (allowed: 0 <= p < 1)");
    timed("dropout_backward_from_output", 0,
          [&] { dropout_backward_from_output_impl(dx, dy, y, n, p); });
  }

  // ---- scale + causal mask + softmax over [batch, s_q, s_k] ----
  void scale_mask_softmax_forward(Act P, CAct S, int batch, int s_q, int s_k, T scale, bool causal,
                                  const uint8_t *mask) {
    check_sizes("scale_mask_softmax_forward", {{"batch", batch}, {"s_q", s_q}, {"s_k", s_k}});
    timed("scale_mask_softmax_forward", 0,
          [&] { scale_mask_softmax_forward_impl(P, S, batch, s_q, s_k, scale, causal, mask); });
  }
  void scale_mask_softmax_backward(Act dS, CAct P, CAct dP, int batch, int s_q, int s_k, T scale) {
    check_sizes("scale_mask_softmax_backward", {{"batch", batch}, {"s_q", s_q}, {"s_k", s_k}});
    timed("scale_mask_softmax_backward", 0,
          [&] { scale_mask_softmax_backward_impl(dS, P, dP, batch, s_q, s_k, scale); });
  }

  // ---- fused causal attention (no [s, s] matrix): kernels/kernels.h's layout ----
  // groups: key/value heads (grouped-query attention; groups == heads without
  // grouping), qkv [s, b, groups, heads / groups + 2, hd] (kernels/qkv_layout.h).
  void flash_attention_forward(Act ctx, T *lse, CAct qkv, int s, int b, int heads, int groups,
                               int hd, T scale, int head_offset, const DropoutSpec &d) {
    check_attention_groups("flash_attention_forward", heads, groups);
    check_sizes("flash_attention_forward",
                {{"s", s}, {"b", b}, {"heads", heads}, {"hd", hd}, {"head_offset", head_offset}});
    timed("flash_attention_forward", attention_flops(s, b, heads, hd), [&] {
      flash_attention_forward_impl(ctx, lse, qkv, s, b, heads, groups, hd, scale, head_offset, d);
    });
  }
  void flash_attention_backward(Act dqkv, CAct dctx, CAct ctx, CAct qkv, const T *lse, int s, int b,
                                int heads, int groups, int hd, T scale, int head_offset,
                                const DropoutSpec &d) {
    check_attention_groups("flash_attention_backward", heads, groups);
    check_sizes("flash_attention_backward",
                {{"s", s}, {"b", b}, {"heads", heads}, {"hd", hd}, {"head_offset", head_offset}});
    // Five products to the forward's two: 2.5x.
    timed("flash_attention_backward", 2.5 * attention_flops(s, b, heads, hd), [&] {
      flash_attention_backward_impl(dqkv, dctx, ctx, qkv, lse, s, b, heads, groups, hd, scale,
                                    head_offset, d);
    });
  }

  // ---- vocab-parallel embedding over rows [vocab_start, vocab_start + vocab_rows) ----
  void embedding_forward(Act x, const int32_t *tokens, const T *wte, int vocab_start, int vocab_rows,
                         const T *wpe, int s, int b, int h) {
    check_sizes("embedding_forward", {{"vocab_start", vocab_start}, {"vocab_rows", vocab_rows},
                                      {"s", s}, {"b", b}, {"h", h}});
    timed("embedding_forward", 0, [&] {
      embedding_forward_impl(x, tokens, wte, vocab_start, vocab_rows, wpe, s, b, h);
    });
  }
  void add_position_embedding(Act x, const T *wpe, int s, int b, int h) {
    check_sizes("add_position_embedding", {{"s", s}, {"b", b}, {"h", h}});
    timed("add_position_embedding", 0, [&] { add_position_embedding_impl(x, wpe, s, b, h); });
  }
  void embedding_backward(T *dwte, T *dwpe, CAct dx, const int32_t *tokens, int s, int b, int h,
                          int vocab_start, int vocab_rows) {
    check_sizes("embedding_backward", {{"s", s}, {"b", b}, {"h", h}, {"vocab_start", vocab_start},
                                       {"vocab_rows", vocab_rows}});
    timed("embedding_backward", 0, [&] {
      embedding_backward_impl(dwte, dwpe, dx, tokens, s, b, h, vocab_start, vocab_rows);
    });
  }

  // ---- the three-step vocab-parallel cross-entropy (statistics in T) ----
  // logits [N, ld], of which columns [0, cols) are this rank's.
  void vocab_ce_local_max(T *row_max, CAct logits, int N, int ld, int cols) {
    check_logits("vocab_ce_local_max", N, ld, cols, 0);
    timed("vocab_ce_local_max", 0, [&] { vocab_ce_local_max_impl(row_max, logits, N, ld, cols); });
  }
  void vocab_ce_local_sums(T *sum_exp, T *target_logit, CAct logits, const T *row_max,
                           const int32_t *targets, int N, int ld, int cols, int vocab_start) {
    check_logits("vocab_ce_local_sums", N, ld, cols, vocab_start);
    timed("vocab_ce_local_sums", 0, [&] {
      vocab_ce_local_sums_impl(sum_exp, target_logit, logits, row_max, targets, N, ld, cols,
                               vocab_start);
    });
  }
  void vocab_ce_backward(Act dlogits, CAct logits, const T *row_max, const T *sum_exp,
                         const int32_t *targets, int N, int ld, int cols, int vocab_start, T dloss) {
    check_logits("vocab_ce_backward", N, ld, cols, vocab_start);
    timed("vocab_ce_backward", 0, [&] {
      vocab_ce_backward_impl(dlogits, logits, row_max, sum_exp, targets, N, ld, cols, vocab_start,
                             dloss);
    });
  }

  // ---- optimizer: AdamW over n elements of fp32 weights and moments ----
  void adamw_update(T *param, const T *grad, T *exp_avg, T *exp_avg_sq, size_t n,
                    const AdamWStep &a) {
    timed("adamw_update", 0, [&] { adamw_update_impl(param, grad, exp_avg, exp_avg_sq, n, a); });
  }

  // ---- reductions, conversions, rounding ----
  void colsum_accumulate(T *out, CAct x, int N, int cols) {
    check_sizes("colsum_accumulate", {{"N", N}, {"cols", cols}});
    timed("colsum_accumulate", 0, [&] { colsum_accumulate_impl(out, x, N, cols); });
  }
  void scale_inplace(T *x, size_t n, T alpha) {
    timed("scale_inplace", 0, [&] { scale_inplace_impl(x, n, alpha); });
  }
  // Sum of squares in double (fixed chunk order: the same on every run); returns
  // when the value is on the host.
  double sum_squares(const T *x, size_t n) {
    double v = 0;
    timed("sum_squares", 0, [&] { v = sum_squares_impl(x, n); });
    return v;
  }
  // dst = src converted to dst's type (rounded to nearest even when narrower);
  // n elements, either of them T or the activation type.
  void convert(Act dst, CAct src, size_t n) {
    timed("convert", 0, [&] { convert_impl(dst, src, n); });
  }
  // Rounds every value to `dtype` (to nearest even) and back: a 16-bit run's
  // parameters (and 16-bit gradients) are T arrays of 16-bit values. Nothing
  // to do for f32 (and for T = double).
  void round_to_storage(T *x, size_t n, DType dtype) {
    timed("round_to_storage", 0, [&] { round_to_storage_impl(x, n, dtype); });
  }

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

  // Op profiling (op_profile.h): on, every op is timed on the device's clock;
  // take_profile gives the sums since the last take (empty when off).
  void set_profiling(bool on) {
    if (on && !profiler_) profiler_ = std::make_unique<OpProfiler>(*dev_);
    if (!on) profiler_.reset();
  }
  bool profiling() const { return profiler_ != nullptr; }
  // Off: the linear_* ops compose their GEMM and element-wise op even where
  // the backend fuses them (benchmarks compare the two).
  void set_fused_epilogues(bool on) { fused_epilogues_ = on; }
  std::vector<OpTime> take_profile() { return profiler_ ? profiler_->take() : std::vector<OpTime>{}; }

 protected:
  explicit Ops(Device &dev) : dev_(&dev) {}

  // The backend's implementations: called by the entries above, after their
  // checks (sizes >= 0; a GEMM with M, N, batch and K >= 1).
  virtual void gemm_impl(bool ta, bool tb, int M, int N, int K, T alpha, CAct A, int lda,
                         int64_t strideA, CAct B, int ldb, int64_t strideB, T beta, Act C, int ldc,
                         int64_t strideC, int batch) = 0;
  virtual void layernorm_forward_impl(Act out, T *mean, T *rstd, CAct x, const T *w, const T *b,
                                      int N, int h, T eps) = 0;
  virtual void layernorm_backward_impl(Act dx, T *dw, T *db, CAct dout, CAct x, const T *w,
                                       const T *mean, const T *rstd, int N, int h) = 0;
  // The fused GEMM + epilogue (C = A op(W) with tb, C [M, N] dense) where fuses(e):
  // bias: C += bias; bias_gelu: aux_out = C + bias, C = gelu(aux_out); dgelu:
  // C *= gelu'(aux_in).
  virtual bool fuses(LinearEpilogue) const { return false; }
  virtual void fused_linear_impl(LinearEpilogue e, bool tb, int M, int N, int K, CAct A,
                                 const T *W, const T *bias, CAct aux_in, Act aux_out, Act C) {
    (void)e, (void)tb, (void)M, (void)N, (void)K, (void)A, (void)W, (void)bias, (void)aux_in,
        (void)aux_out, (void)C;
    fail(Status::internal, "fused_linear_impl called on a backend that fuses nothing");
  }
  // linear_weight_grad's fused form where fuses(bias_grad).
  virtual void fused_weight_grad_impl(int M, int N, int K, CAct dy, CAct x, T *dW, T *dbias) {
    (void)M, (void)N, (void)K, (void)dy, (void)x, (void)dW, (void)dbias;
    fail(Status::internal, "fused_weight_grad_impl called on a backend that fuses nothing");
  }
  virtual void bias_gelu_forward_impl(Act z, Act out, CAct y, const T *bias, int N, int f) = 0;
  virtual void bias_gelu_backward_impl(Act dz, T *dbias, CAct dout, CAct z, int N, int f) = 0;
  virtual void rmsnorm_forward_impl(Act out, T *rstd, CAct x, const T *w, int N, int h, T eps) = 0;
  virtual void rmsnorm_backward_impl(Act dx, T *dw, CAct dout, CAct x, const T *w, const T *rstd,
                                     int N, int h) = 0;
  virtual void swiglu_forward_impl(Act z, Act out, CAct y, const T *bias, int N, int f) = 0;
  virtual void swiglu_backward_impl(Act dz, T *dbias, CAct dout, CAct z, int N, int f) = 0;
  virtual void rope_rotate_impl(Act x, const float *cos_t, const float *sin_t, int s, int b, int ld,
                                int vecs, int stride, int hd, bool inverse) = 0;
  virtual void bias_dropout_add_forward_impl(Act out, CAct residual, CAct y, const T *bias, int s,
                                             int b, int h, const DropoutSpec &d) = 0;
  virtual void bias_dropout_add_backward_impl(Act dy, T *dbias, CAct dout, int s, int b, int h,
                                              const DropoutSpec &d) = 0;
  virtual void dropout_attention_impl(Act out, CAct in, int b, int a, int s_q, int s_k,
                                      int head_offset, const DropoutSpec &d) = 0;
  virtual void dropout_backward_from_output_impl(Act dx, CAct dy, CAct y, size_t n, float p) = 0;
  virtual void scale_mask_softmax_forward_impl(Act P, CAct S, int batch, int s_q, int s_k, T scale,
                                               bool causal, const uint8_t *mask) = 0;
  virtual void scale_mask_softmax_backward_impl(Act dS, CAct P, CAct dP, int batch, int s_q,
                                                int s_k, T scale) = 0;
  virtual void flash_attention_forward_impl(Act ctx, T *lse, CAct qkv, int s, int b, int heads,
                                            int groups, int hd, T scale, int head_offset,
                                            const DropoutSpec &d) = 0;
  virtual void flash_attention_backward_impl(Act dqkv, CAct dctx, CAct ctx, CAct qkv, const T *lse,
                                             int s, int b, int heads, int groups, int hd, T scale,
                                             int head_offset, const DropoutSpec &d) = 0;
  virtual void embedding_forward_impl(Act x, const int32_t *tokens, const T *wte, int vocab_start,
                                      int vocab_rows, const T *wpe, int s, int b, int h) = 0;
  virtual void add_position_embedding_impl(Act x, const T *wpe, int s, int b, int h) = 0;
  virtual void embedding_backward_impl(T *dwte, T *dwpe, CAct dx, const int32_t *tokens, int s,
                                       int b, int h, int vocab_start, int vocab_rows) = 0;
  virtual void vocab_ce_local_max_impl(T *row_max, CAct logits, int N, int ld, int cols) = 0;
  virtual void vocab_ce_local_sums_impl(T *sum_exp, T *target_logit, CAct logits, const T *row_max,
                                        const int32_t *targets, int N, int ld, int cols,
                                        int vocab_start) = 0;
  virtual void vocab_ce_backward_impl(Act dlogits, CAct logits, const T *row_max, const T *sum_exp,
                                      const int32_t *targets, int N, int ld, int cols,
                                      int vocab_start, T dloss) = 0;
  virtual void adamw_update_impl(T *param, const T *grad, T *exp_avg, T *exp_avg_sq, size_t n,
                                 const AdamWStep &a) = 0;
  virtual void colsum_accumulate_impl(T *out, CAct x, int N, int cols) = 0;
  virtual void scale_inplace_impl(T *x, size_t n, T alpha) = 0;
  virtual double sum_squares_impl(const T *x, size_t n) = 0;
  virtual void convert_impl(Act dst, CAct src, size_t n) = 0;
  virtual void round_to_storage_impl(T *x, size_t n, DType dtype) = 0;

 private:
  template <class F>
  void timed(const char *op, double flops, F &&f) {
    if (profiler_)
      profiler_->timed(op, flops, f);
    else
      f();
  }
  // A linear_* op's fused form when the backend has it (false: compose).
  bool fused_linear(LinearEpilogue e, bool tb, int M, int N, int K, CAct A, const T *W,
                    const T *bias, CAct aux_in, Act aux_out, Act C) {
    check_sizes("linear", {{"M", M}, {"N", N}, {"K", K}});
    if (M == 0 || N == 0 || K == 0 || !fused_epilogues_ || !fuses(e)) return false;
    timed_fused(e, false, tb, M, N, K,
                [&] { fused_linear_impl(e, tb, M, N, K, A, W, bias, aux_in, aux_out, C); });
    return true;
  }
  // A fused GEMM's call, timed as "gemm+<epilogue> MxNxK ..." when profiling.
  template <class F>
  void timed_fused(LinearEpilogue e, bool ta, bool tb, int M, int N, int K, F &&run) {
    if (!profiler_) return run();
    const char *name = e == LinearEpilogue::bias        ? "gemm+bias"
                       : e == LinearEpilogue::bias_gelu ? "gemm+bias_gelu"
                       : e == LinearEpilogue::dgelu     ? "gemm+dgelu"
                                                        : "gemm+bias_grad";
    profiler_->timed(name + gemm_op_name(ta, tb, M, N, K, 1).substr(4), 2.0 * M * N * K, run);
  }
  // C = beta C for a GEMM with K = 0, the same on every backend: zeros (by
  // rows unless C is dense) for beta 0, nothing for beta 1.
  void empty_product(T beta, Act C, int M, int N, int ldc, int64_t strideC, int batch) {
    if (beta == T(1)) return;
    if (beta != T(0))
      fail(Status::invalid_argument, "gemm: K = 0 with beta = ", beta,
           " (allowed with K = 0: beta 0 or 1)");
    const size_t es = dtype_size(C.t);
    if (ldc == N && (batch == 1 || strideC == (int64_t)M * N)) {
      dev_->zero(C.p, (size_t)M * N * batch * es);
      return;
    }
    for (int k = 0; k < batch; k++)
      for (int i = 0; i < M; i++) dev_->zero((C + (k * strideC + (int64_t)i * ldc)).p, N * es);
  }
  // logits [N, ld] with cols <= ld columns of this rank, from vocab_start.
  static void check_logits(const char *op, int N, int ld, int cols, int vocab_start) {
    check_sizes(op, {{"N", N}, {"ld", ld}, {"cols", cols}, {"vocab_start", vocab_start}});
    if (cols > ld) fail(Status::invalid_argument, op, ": cols = ", cols, " > ld = ", ld);
  }

  Device *dev_;
  DType storage_ = DType::f32;
  bool fused_epilogues_ = true;
  std::unique_ptr<OpProfiler> profiler_;
};

// The op table of `dev`'s backend (engine/device/ops.cpp picks it). The
// CUDA backend has float only (double is the CPU's finite-difference
// reference): asking for another is an error.
template <class T>
std::unique_ptr<Ops<T>> make_ops(Device &dev);
// The backends' tables (cpu_ops.cpp, cuda_ops.cu).
template <class T>
std::unique_ptr<Ops<T>> make_cpu_ops(Device &dev);
std::unique_ptr<Ops<float>> make_cuda_ops(Device &dev);

}  // namespace ptdp
