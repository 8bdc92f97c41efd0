// The CPU op table: kernels/cpu over host memory, every call done at once.
#include <cstring>
#include <type_traits>
#include <vector>

#include "engine/core/status.h"
#include "engine/device/ops.h"
#include "kernels/kernels.h"

namespace ptdp {

namespace {

// Elements a GEMM operand spans: `batch` matrices of rows x cols with leading
// dimension ld, `stride` apart.
size_t span(int rows, int cols, int ld, int64_t stride, int batch) {
  return (size_t)(rows - 1) * ld + cols + (size_t)(batch - 1) * stride;
}

// T views of a 16-bit run's activations for the T kernels (kernels/cpu):
// inputs are widened (exactly); outputs are narrowed back when the call is
// done, each value rounded once to nearest even: what the GPU's 16-bit kernels
// store. An output the op adds into, or writes only part of, is widened first
// (inout). Arguments already in T pass through. The buffers are the table's
// scratch, reused call after call.
template <class T>
class Widened {
 public:
  explicit Widened(std::vector<std::vector<T>> &scratch) : scratch_(scratch) {}
  ~Widened() {
    for (const Out &o : outs_)
      if constexpr (std::is_same_v<T, float>)
        to_16bit(o.to.t, o.from, static_cast<uint16_t *>(o.to.p), o.n);
  }
  Widened(const Widened &) = delete;
  Widened &operator=(const Widened &) = delete;

  const T *in(CAct a, size_t n) {
    if (!a.p || a.t == dtype_of<T>()) return static_cast<const T *>(a.p);
    return widen(a, n);
  }
  // Written whole by the op.
  T *out(Act a, size_t n) { return output(a, n, false); }
  // Added into, or written in part.
  T *inout(Act a, size_t n) { return output(a, n, true); }

 private:
  struct Out {
    Act to;
    const T *from;
    size_t n;
  };
  T *output(Act a, size_t n, bool read) {
    if (!a.p || a.t == dtype_of<T>()) return static_cast<T *>(a.p);
    T *x = read ? widen(a, n) : buffer(a, n);
    outs_.push_back({a, x, n});
    return x;
  }
  T *widen(CAct a, size_t n) {
    T *x = buffer(a, n);
    if constexpr (std::is_same_v<T, float>)
      from_16bit(a.t, static_cast<const uint16_t *>(a.p), x, n);
    return x;
  }
  // A scratch buffer of n elements for 16-bit data a.
  T *buffer(CAct a, size_t n) {
    if constexpr (std::is_same_v<T, float>) {
      if (a.t == DType::bf16 || a.t == DType::f16) {
        if (used_ == scratch_.size()) scratch_.emplace_back();
        std::vector<T> &buf = scratch_[used_++];
        if (buf.size() < n) buf.resize(n);
        return buf.data();
      }
    }
    fail(Status::internal, "a ", dtype_name(dtype_of<T>()), " op table got ", dtype_name(a.t),
         " data (allowed: ", dtype_name(dtype_of<T>()), ", and bf16 or f16 for f32)");
  }
  std::vector<std::vector<T>> &scratch_;
  size_t used_ = 0;
  std::vector<Out> outs_;
};

template <class T>
class CpuOps final : public Ops<T> {
 public:
  explicit CpuOps(Device &dev) : Ops<T>(dev) {}

  void gemm_impl(bool ta, bool tb, int M, int N, int K, T alpha, CAct A, int lda,
                            int64_t strideA, CAct B, int ldb, int64_t strideB, T beta, Act C,
                            int ldc, int64_t strideC, int batch) override {
    Widened<T> w(scratch_);
    // Stored shapes: A is [M, K] ([K, M] if ta), B is [K, N] ([N, K] if tb).
    const T *a = w.in(A, span(ta ? K : M, ta ? M : K, lda, strideA, batch));
    const T *b = w.in(B, span(tb ? N : K, tb ? K : N, ldb, strideB, batch));
    // C is read when beta != 0, and its span holds elements the GEMM does not
    // write unless it is dense.
    const bool dense = ldc == N && (batch == 1 || strideC == (int64_t)M * N);
    const size_t nc = span(M, N, ldc, strideC, batch);
    T *c = beta == T(0) && dense ? w.out(C, nc) : w.inout(C, nc);
    cpu::gemm_strided_batched<T>(ta, tb, M, N, K, alpha, a, lda, strideA, b, ldb, strideB, beta, c,
                                 ldc, strideC, batch);
  }
  void layernorm_forward_impl(Act out, T *mean, T *rstd, CAct x, const T *w, const T *b, int N, int h,
                         T eps) override {
    Widened<T> v(scratch_);
    const size_t n = (size_t)N * h;
    cpu::layernorm_forward<T>(v.out(out, n), mean, rstd, v.in(x, n), w, b, N, h, eps);
  }
  void layernorm_backward_impl(Act dx, T *dw, T *db, CAct dout, CAct x, const T *w, const T *mean,
                          const T *rstd, int N, int h) override {
    Widened<T> v(scratch_);
    const size_t n = (size_t)N * h;
    cpu::layernorm_backward<T>(v.inout(dx, n), dw, db, v.in(dout, n), v.in(x, n), w, mean, rstd, N,
                               h);
  }
  void bias_gelu_forward_impl(Act z, Act out, CAct y, const T *bias, int N, int f) override {
    Widened<T> v(scratch_);
    const size_t n = (size_t)N * f;
    cpu::bias_gelu_forward<T>(v.out(z, n), v.out(out, n), v.in(y, n), bias, N, f);
  }
  void bias_gelu_backward_impl(Act dz, T *dbias, CAct dout, CAct z, int N, int f) override {
    Widened<T> v(scratch_);
    const size_t n = (size_t)N * f;
    cpu::bias_gelu_backward<T>(v.out(dz, n), dbias, v.in(dout, n), v.in(z, n), N, f);
  }
  void rmsnorm_forward_impl(Act out, T *rstd, CAct x, const T *w, int N, int h, T eps) override {
    Widened<T> v(scratch_);
    const size_t n = (size_t)N * h;
    cpu::rmsnorm_forward<T>(v.out(out, n), rstd, v.in(x, n), w, N, h, eps);
  }
  void rmsnorm_backward_impl(Act dx, T *dw, CAct dout, CAct x, const T *w, const T *rstd, int N,
                             int h) override {
    Widened<T> v(scratch_);
    const size_t n = (size_t)N * h;
    cpu::rmsnorm_backward<T>(v.inout(dx, n), dw, v.in(dout, n), v.in(x, n), w, rstd, N, h);
  }
  void swiglu_forward_impl(Act z, Act out, CAct y, const T *bias, int N, int f) override {
    Widened<T> v(scratch_);
    const size_t n = (size_t)N * f;
    cpu::swiglu_forward<T>(v.out(z, 2 * n), v.out(out, n), v.in(y, 2 * n), bias, N, f);
  }
  void swiglu_backward_impl(Act dz, T *dbias, CAct dout, CAct z, int N, int f) override {
    Widened<T> v(scratch_);
    const size_t n = (size_t)N * f;
    cpu::swiglu_backward<T>(v.out(dz, 2 * n), dbias, v.in(dout, n), v.in(z, 2 * n), N, f);
  }
  void rope_rotate_impl(Act x, const float *cos_t, const float *sin_t, int s, int b, int ld,
                        int vecs, int stride, int hd, bool inverse) override {
    if (s == 0 || b == 0 || vecs == 0) return;
    Widened<T> v(scratch_);
    const size_t n = (size_t)(s * b - 1) * ld + (size_t)(vecs - 1) * stride + hd;
    cpu::rope_rotate<T>(v.inout(x, n), cos_t, sin_t, s, b, ld, vecs, stride, hd, inverse);
  }
  void bias_dropout_add_forward_impl(Act out, CAct residual, CAct y, const T *bias, int s, int b, int h,
                                const DropoutSpec &d) override {
    Widened<T> v(scratch_);
    const size_t n = (size_t)s * b * h;
    cpu::bias_dropout_add_forward<T>(v.out(out, n), v.in(residual, n), v.in(y, n), bias, s, b, h,
                                     d);
  }
  void bias_dropout_add_backward_impl(Act dy, T *dbias, CAct dout, int s, int b, int h,
                                 const DropoutSpec &d) override {
    Widened<T> v(scratch_);
    const size_t n = (size_t)s * b * h;
    cpu::bias_dropout_add_backward<T>(v.out(dy, n), dbias, v.in(dout, n), s, b, h, d);
  }
  void dropout_attention_impl(Act out, CAct in, int b, int a, int s_q, int s_k, int head_offset,
                         const DropoutSpec &d) override {
    Widened<T> v(scratch_);
    const size_t n = (size_t)b * a * s_q * s_k;
    cpu::dropout_attention<T>(v.out(out, n), v.in(in, n), b, a, s_q, s_k, head_offset, d);
  }
  void dropout_backward_from_output_impl(Act dx, CAct dy, CAct y, size_t n, float p) override {
    Widened<T> v(scratch_);
    cpu::dropout_backward_from_output<T>(v.out(dx, n), v.in(dy, n), v.in(y, n), n, p);
  }
  void scale_mask_softmax_forward_impl(Act P, CAct S, int batch, int s_q, int s_k, T scale, bool causal,
                                  const uint8_t *mask) override {
    Widened<T> v(scratch_);
    const size_t n = (size_t)batch * s_q * s_k;
    cpu::scale_mask_softmax_forward<T>(v.out(P, n), v.in(S, n), batch, s_q, s_k, scale, causal,
                                       mask);
  }
  void scale_mask_softmax_backward_impl(Act dS, CAct P, CAct dP, int batch, int s_q, int s_k,
                                   T scale) override {
    Widened<T> v(scratch_);
    const size_t n = (size_t)batch * s_q * s_k;
    cpu::scale_mask_softmax_backward<T>(v.out(dS, n), v.in(P, n), v.in(dP, n), batch, s_q, s_k,
                                        scale);
  }
  void flash_attention_forward_impl(Act ctx, T *lse, CAct qkv, int s, int b, int heads, int groups,
                                    int hd, T scale, int head_offset, const DropoutSpec &d) override {
    Widened<T> v(scratch_);
    const size_t n = (size_t)s * b * heads * hd, nqkv = (size_t)s * b * (heads + 2 * groups) * hd;
    cpu::flash_attention_forward<T>(v.out(ctx, n), lse, v.in(qkv, nqkv), s, b, heads, groups, hd,
                                    scale, head_offset, d);
  }
  void flash_attention_backward_impl(Act dqkv, CAct dctx, CAct ctx, CAct qkv, const T *lse, int s,
                                     int b, int heads, int groups, int hd, T scale, int head_offset,
                                     const DropoutSpec &d) override {
    Widened<T> v(scratch_);
    const size_t n = (size_t)s * b * heads * hd, nqkv = (size_t)s * b * (heads + 2 * groups) * hd;
    cpu::flash_attention_backward<T>(v.out(dqkv, nqkv), v.in(dctx, n), v.in(ctx, n),
                                     v.in(qkv, nqkv), lse, s, b, heads, groups, hd, scale,
                                     head_offset, d);
  }
  void embedding_forward_impl(Act x, const int32_t *tokens, const T *wte, int vocab_start, int vocab_rows,
                         const T *wpe, int s, int b, int h) override {
    Widened<T> v(scratch_);
    cpu::embedding_forward<T>(v.out(x, (size_t)s * b * h), tokens, wte, vocab_start, vocab_rows,
                              wpe, s, b, h);
  }
  void add_position_embedding_impl(Act x, const T *wpe, int s, int b, int h) override {
    Widened<T> v(scratch_);
    cpu::add_position_embedding<T>(v.inout(x, (size_t)s * b * h), wpe, s, b, h);
  }
  void embedding_backward_impl(T *dwte, T *dwpe, CAct dx, const int32_t *tokens, int s, int b, int h,
                          int vocab_start, int vocab_rows) override {
    Widened<T> v(scratch_);
    cpu::embedding_backward<T>(dwte, dwpe, v.in(dx, (size_t)s * b * h), tokens, s, b, h,
                               vocab_start, vocab_rows);
  }
  void vocab_ce_local_max_impl(T *row_max, CAct logits, int N, int ld, int cols) override {
    Widened<T> v(scratch_);
    cpu::vocab_ce_local_max<T>(row_max, v.in(logits, (size_t)N * ld), N, ld, cols);
  }
  void vocab_ce_local_sums_impl(T *sum_exp, T *target_logit, CAct logits, const T *row_max,
                           const int32_t *targets, int N, int ld, int cols,
                           int vocab_start) override {
    Widened<T> v(scratch_);
    cpu::vocab_ce_local_sums<T>(sum_exp, target_logit, v.in(logits, (size_t)N * ld), row_max,
                                targets, N, ld, cols, vocab_start);
  }
  void vocab_ce_backward_impl(Act dlogits, CAct logits, const T *row_max, const T *sum_exp,
                         const int32_t *targets, int N, int ld, int cols, int vocab_start,
                         T dloss) override {
    Widened<T> v(scratch_);
    const size_t n = (size_t)N * ld;
    cpu::vocab_ce_backward<T>(v.out(dlogits, n), v.in(logits, n), row_max, sum_exp, targets, N, ld,
                              cols, vocab_start, dloss);
  }
  void adamw_update_impl(T *param, const T *grad, T *exp_avg, T *exp_avg_sq, size_t n,
                    const AdamWStep &a) override {
    const cpu::AdamWParams p{a.lr,   a.beta1,      a.beta2,        a.eps,       a.weight_decay,
                             a.step, a.grad_scale, a.model_copy, a.model_type};
    cpu::adamw_update<T>(param, grad, exp_avg, exp_avg_sq, n, p);
  }
  void colsum_accumulate_impl(T *out, CAct x, int N, int cols) override {
    Widened<T> v(scratch_);
    cpu::colsum_accumulate<T>(out, v.in(x, (size_t)N * cols), N, cols);
  }
  void scale_inplace_impl(T *x, size_t n, T alpha) override { cpu::scale_inplace<T>(x, n, alpha); }
  double sum_squares_impl(const T *x, size_t n) override { return cpu::sum_squares<T>(x, n); }
  void convert_impl(Act dst, CAct src, size_t n) override {
    if (!n) return;
    if (dst.t == src.t) {
      std::memcpy(dst.p, src.p, n * dtype_size(src.t));
      return;
    }
    const bool narrow = src.t == DType::f32 && (dst.t == DType::bf16 || dst.t == DType::f16);
    const bool widen = dst.t == DType::f32 && (src.t == DType::bf16 || src.t == DType::f16);
    if (narrow)
      to_16bit(dst.t, static_cast<const float *>(src.p), static_cast<uint16_t *>(dst.p), n);
    else if (widen)
      from_16bit(src.t, static_cast<const uint16_t *>(src.p), static_cast<float *>(dst.p), n);
    else
      fail(Status::invalid_argument, "convert from ", dtype_name(src.t), " to ",
           dtype_name(dst.t), ": the cpu converts between f32 and bf16 or f16 only");
  }
  void round_to_storage_impl(T *x, size_t n, DType dtype) override {
    if constexpr (std::is_same_v<T, float>) round_to(dtype, x, n);
  }

 private:
  std::vector<std::vector<T>> scratch_;  // Widened's buffers
};

}  // namespace

template <class T>
std::unique_ptr<Ops<T>> make_cpu_ops(Device &dev) {
  return std::make_unique<CpuOps<T>>(dev);
}
template std::unique_ptr<Ops<float>> make_cpu_ops<float>(Device &);
template std::unique_ptr<Ops<double>> make_cpu_ops<double>(Device &);

}  // namespace ptdp
