// The CUDA op table: kernels/cuda queued on the device's stream, GEMMs through
// one cuBLASLt handle per rank. fp32 arithmetic, no TF32. A 16-bit run keeps
// its activations in bf16 or f16 and runs every kernel on them directly: the
// GEMMs on tensor cores with fp32 sums (16-bit results for activations, fp32
// for weight gradients), attention on tensor cores. Weights are fp32 arrays of
// 16-bit values (ops.h): the ops read one 16-bit copy of them, made once per
// set_weights (after each change of the weights: once per optimizer step),
// not per call.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <type_traits>
#include <utility>
#include <vector>

#include "engine/core/status.h"
#include "engine/device/ops.h"
#include "kernels/cuda/gemm.h"

namespace ptdp {

namespace {

// Calls f(S{}) with the CUDA type of `t`: float, __nv_bfloat16 or __half.
template <class F>
void with_act_type(DType t, F f) {
  if (t == DType::bf16)
    f(__nv_bfloat16{});
  else if (t == DType::f16)
    f(__half{});
  else
    f(float{});
}

class CudaOps final : public Ops<float> {
 public:
  // The GPU is bound first (stream_ is initialised before gemm_): the GEMM
  // workspace lands on this device's GPU whichever thread builds the model.
  explicit CudaOps(Device &dev) : Ops<float>(dev), stream_(bound_stream(dev)) {}

  void gemm_impl(bool ta, bool tb, int M, int N, int K, float alpha, CAct A, int lda,
                            int64_t strideA, CAct B, int ldb, int64_t strideB, float beta, Act C,
                            int ldc, int64_t strideC, int batch) override {
    const DType st = storage_type();
    if (st == DType::f32) {
      gemm_.run(DType::f32, ta, tb, M, N, K, alpha, f32(A, "gemm A"), lda, strideA,
                f32(B, "gemm B"), ldb, strideB, beta, f32(C, "gemm C"), ldc, strideC, batch,
                stream_);
      return;
    }
    // Stored shapes: A is [M, K] ([K, M] if ta), B is [K, N] ([N, K] if tb).
    const void *A16 = operand16(0, A, ta ? K : M, ta ? M : K, lda, strideA, batch);
    const void *B16 = operand16(1, B, tb ? N : K, tb ? K : N, ldb, strideB, batch);
    if (C.t != st && C.t != DType::f32) bad_type("gemm C", C.t);
    gemm_.run(st, C.t, ta, tb, M, N, K, alpha, A16, lda, strideA, B16, ldb, strideB, beta, C.p, ldc,
              strideC, batch, stream_);
  }
  // 16-bit runs fuse the linear layers' epilogues into cuBLASLt's GEMM.
  bool fuses(LinearEpilogue) const override { return storage_type() != DType::f32; }
  void fused_linear_impl(LinearEpilogue e, bool tb, int M, int N, int K, CAct A, const float *W,
                         const float *bias, CAct aux_in, Act aux_out, Act C) override {
    with_act_type(storage_type(), [&](auto t) {
      using S = decltype(t);
      if constexpr (!std::is_same_v<S, float>) {
        const DType st = storage_type();
        const S *A16 = act<S>(A), *b16 = weight<S>(bias, N, 0);
        const int ldw = tb ? K : N;  // W: [N, K] with tb, else [K, N]
        const void *W16 = operand16(1, W, tb ? N : K, tb ? K : N, ldw, 0, 1);
        S *c = act<S>(C), *z = act<S>(aux_out);
        const S *z_in = act<S>(aux_in);
        const auto lt = e == LinearEpilogue::bias        ? cuda::Gemm::Epilogue::bias
                        : e == LinearEpilogue::bias_gelu ? cuda::Gemm::Epilogue::bias_gelu
                                                         : cuda::Gemm::Epilogue::dgelu;
        const void *aux = e == LinearEpilogue::dgelu ? (const void *)z_in : z;
        if (gemm_.run_fused(lt, st, tb, M, N, K, A16, K, W16, ldw, c, b16, aux, stream_)) return;
        // No algorithm for the epilogue: the GEMM, then the op, as Ops composes them.
        S *gemm_out = e == LinearEpilogue::bias_gelu ? z : c;
        gemm_.run(st, st, false, tb, M, N, K, 1.f, A16, K, 0, W16, ldw, 0, 0.f, gemm_out, N, 0, 1,
                  stream_);
        if (e == LinearEpilogue::bias)
          cuda::bias_dropout_add_forward<S>(c, nullptr, c, b16, M, 1, N, DropoutSpec{}, stream_);
        else if (e == LinearEpilogue::bias_gelu)
          cuda::bias_gelu_forward<S>(z, c, z, b16, M, N, stream_);
        else
          cuda::bias_gelu_backward<S>(c, nullptr, c, z_in, M, N, stream_);
      }
    });
  }
  // dW += dy^T x with BGRADB writing dy's column sums to scratch, then added.
  void fused_weight_grad_impl(int M, int N, int K, CAct dy, CAct x, float *dW,
                              float *dbias) override {
    const DType st = storage_type();
    const void *A16 = operand16(0, dy, M, N, N, 0, 1), *B16 = operand16(1, x, M, K, K, 0, 1);
    if (bias_grad_.size() < (size_t)N) bias_grad_.resize(device(), N);
    if (gemm_.run_bias_grad(st, N, K, M, A16, N, B16, K, dW, K, bias_grad_.data(), stream_)) {
      cuda::add_inplace(dbias, bias_grad_.data(), N, stream_);
      return;
    }
    // No algorithm for the epilogue: the GEMM, then the column sums.
    gemm_.run(st, DType::f32, true, false, N, K, M, 1.f, A16, N, 0, B16, K, 0, 1.f, dW, K, 0, 1,
              stream_);
    with_act_type(st, [&](auto t) {
      using S = decltype(t);
      cuda::colsum_accumulate<S>(dbias, static_cast<const S *>(A16), M, N, stream_);
    });
  }
  void layernorm_forward_impl(Act out, float *mean, float *rstd, CAct x, const float *w, const float *b,
                         int N, int h, float eps) override {
    with_act_type(act_type(), [&](auto z) {
      using S = decltype(z);
      cuda::layernorm_forward<S>(act<S>(out), mean, rstd, act<S>(x), weight<S>(w, h, 0),
                                 weight<S>(b, h, 1), N, h, eps, stream_);
    });
  }
  void layernorm_backward_impl(Act dx, float *dw, float *db, CAct dout, CAct x, const float *w,
                          const float *mean, const float *rstd, int N, int h) override {
    with_act_type(act_type(), [&](auto z) {
      using S = decltype(z);
      cuda::layernorm_backward<S>(act<S>(dx), dw, db, act<S>(dout), act<S>(x), weight<S>(w, h, 0),
                                  mean, rstd, N, h, stream_);
    });
  }
  void bias_gelu_forward_impl(Act z, Act out, CAct y, const float *bias, int N, int f) override {
    with_act_type(act_type(), [&](auto t) {
      using S = decltype(t);
      cuda::bias_gelu_forward<S>(act<S>(z), act<S>(out), act<S>(y), weight<S>(bias, f, 0), N, f,
                                 stream_);
    });
  }
  void bias_gelu_backward_impl(Act dz, float *dbias, CAct dout, CAct z, int N, int f) override {
    with_act_type(act_type(), [&](auto t) {
      using S = decltype(t);
      cuda::bias_gelu_backward<S>(act<S>(dz), dbias, act<S>(dout), act<S>(z), N, f, stream_);
    });
  }
  void rmsnorm_forward_impl(Act out, float *rstd, CAct x, const float *w, int N, int h,
                           float eps) override {
    with_act_type(act_type(), [&](auto t) {
      using S = decltype(t);
      cuda::rmsnorm_forward<S>(act<S>(out), rstd, act<S>(x), weight<S>(w, h, 0), N, h, eps, stream_);
    });
  }
  void rmsnorm_backward_impl(Act dx, float *dw, CAct dout, CAct x, const float *w,
                             const float *rstd, int N, int h) override {
    with_act_type(act_type(), [&](auto t) {
      using S = decltype(t);
      cuda::rmsnorm_backward<S>(act<S>(dx), dw, act<S>(dout), act<S>(x), weight<S>(w, h, 0), rstd,
                                N, h, stream_);
    });
  }
  void swiglu_forward_impl(Act z, Act out, CAct y, const float *bias, int N, int f) override {
    with_act_type(act_type(), [&](auto t) {
      using S = decltype(t);
      cuda::swiglu_forward<S>(act<S>(z), act<S>(out), act<S>(y), weight<S>(bias, 2 * (size_t)f, 0),
                              N, f, stream_);
    });
  }
  void swiglu_backward_impl(Act dz, float *dbias, CAct dout, CAct z, int N, int f) override {
    with_act_type(act_type(), [&](auto t) {
      using S = decltype(t);
      cuda::swiglu_backward<S>(act<S>(dz), dbias, act<S>(dout), act<S>(z), N, f, stream_);
    });
  }
  void rope_rotate_impl(Act x, const float *cos_t, const float *sin_t, int s, int b, int ld,
                        int vecs, int stride, int hd, bool inverse) override {
    with_act_type(act_type(), [&](auto t) {
      using S = decltype(t);
      cuda::rope_rotate<S>(act<S>(x), cos_t, sin_t, s, b, ld, vecs, stride, hd, inverse, stream_);
    });
  }
  void bias_dropout_add_forward_impl(Act out, CAct residual, CAct y, const float *bias, int s, int b,
                                int h, const DropoutSpec &d) override {
    with_act_type(act_type(), [&](auto t) {
      using S = decltype(t);
      cuda::bias_dropout_add_forward<S>(act<S>(out), act<S>(residual), act<S>(y),
                                        weight<S>(bias, h, 0), s, b, h, d, stream_);
    });
  }
  void bias_dropout_add_backward_impl(Act dy, float *dbias, CAct dout, int s, int b, int h,
                                 const DropoutSpec &d) override {
    with_act_type(act_type(), [&](auto t) {
      using S = decltype(t);
      cuda::bias_dropout_add_backward<S>(act<S>(dy), dbias, act<S>(dout), s, b, h, d, stream_);
    });
  }
  void dropout_attention_impl(Act out, CAct in, int b, int a, int s_q, int s_k, int head_offset,
                         const DropoutSpec &d) override {
    with_act_type(act_type(), [&](auto t) {
      using S = decltype(t);
      cuda::dropout_attention<S>(act<S>(out), act<S>(in), b, a, s_q, s_k, head_offset, d, stream_);
    });
  }
  void dropout_backward_from_output_impl(Act dx, CAct dy, CAct y, size_t n, float p) override {
    with_act_type(act_type(), [&](auto t) {
      using S = decltype(t);
      cuda::dropout_backward_from_output<S>(act<S>(dx), act<S>(dy), act<S>(y), n, p, stream_);
    });
  }
  void scale_mask_softmax_forward_impl(Act P, CAct S_, int batch, int s_q, int s_k, float scale,
                                  bool causal, const uint8_t *mask) override {
    with_act_type(act_type(), [&](auto t) {
      using S = decltype(t);
      cuda::scale_mask_softmax_forward<S>(act<S>(P), act<S>(S_), batch, s_q, s_k, scale, causal,
                                          mask, stream_);
    });
  }
  void scale_mask_softmax_backward_impl(Act dS, CAct P, CAct dP, int batch, int s_q, int s_k,
                                   float scale) override {
    with_act_type(act_type(), [&](auto t) {
      using S = decltype(t);
      cuda::scale_mask_softmax_backward<S>(act<S>(dS), act<S>(P), act<S>(dP), batch, s_q, s_k,
                                           scale, stream_);
    });
  }
  // A 16-bit run's attention runs on tensor cores; fp32 keeps the CUDA-core
  // kernels, as no TF32 is used anywhere.
  void flash_attention_forward_impl(Act ctx, float *lse, CAct qkv, int s, int b, int heads,
                                    int groups, int hd, float scale, int head_offset,
                                    const DropoutSpec &d) override {
    with_act_type(act_type(), [&](auto t) {
      using S = decltype(t);
      if constexpr (std::is_same_v<S, float>)
        cuda::flash_attention_forward<float>(act<S>(ctx), lse, act<S>(qkv), s, b, heads, groups, hd,
                                             scale, head_offset, d, stream_);
      else
        cuda::flash_attention_forward_mma<S>(act<S>(ctx), lse, act<S>(qkv), s, b, heads, groups, hd,
                                             scale, head_offset, d, act_type(), stream_);
    });
  }
  void flash_attention_backward_impl(Act dqkv, CAct dctx, CAct ctx, CAct qkv, const float *lse,
                                     int s, int b, int heads, int groups, int hd, float scale,
                                     int head_offset, const DropoutSpec &d) override {
    with_act_type(act_type(), [&](auto t) {
      using S = decltype(t);
      if constexpr (std::is_same_v<S, float>)
        cuda::flash_attention_backward<float>(act<S>(dqkv), act<S>(dctx), act<S>(ctx), act<S>(qkv),
                                              lse, s, b, heads, groups, hd, scale, head_offset, d,
                                              stream_);
      else
        cuda::flash_attention_backward_mma<S>(act<S>(dqkv), act<S>(dctx), act<S>(ctx),
                                              act<S>(qkv), lse, s, b, heads, groups, hd, scale,
                                              head_offset, d, act_type(), stream_, &gemm_);
    });
  }
  void embedding_forward_impl(Act x, const int32_t *tokens, const float *wte, int vocab_start,
                         int vocab_rows, const float *wpe, int s, int b, int h) override {
    with_act_type(act_type(), [&](auto t) {
      using S = decltype(t);
      cuda::embedding_forward<S>(act<S>(x), tokens, weight<S>(wte, (size_t)vocab_rows * h, 0),
                                 vocab_start, vocab_rows, weight<S>(wpe, (size_t)s * h, 1), s, b,
                                 h, stream_);
    });
  }
  void add_position_embedding_impl(Act x, const float *wpe, int s, int b, int h) override {
    with_act_type(act_type(), [&](auto t) {
      using S = decltype(t);
      cuda::add_position_embedding<S>(act<S>(x), weight<S>(wpe, (size_t)s * h, 0), s, b, h,
                                      stream_);
    });
  }
  void embedding_backward_impl(float *dwte, float *dwpe, CAct dx, const int32_t *tokens, int s, int b,
                          int h, int vocab_start, int vocab_rows) override {
    with_act_type(act_type(), [&](auto t) {
      using S = decltype(t);
      cuda::embedding_backward<S>(dwte, dwpe, act<S>(dx), tokens, s, b, h, vocab_start, vocab_rows,
                                  stream_);
    });
  }
  void vocab_ce_local_max_impl(float *row_max, CAct logits, int N, int ld, int cols) override {
    with_act_type(act_type(), [&](auto t) {
      using S = decltype(t);
      cuda::vocab_ce_local_max<S>(row_max, act<S>(logits), N, ld, cols, stream_);
    });
  }
  void vocab_ce_local_sums_impl(float *sum_exp, float *target_logit, CAct logits, const float *row_max,
                           const int32_t *targets, int N, int ld, int cols,
                           int vocab_start) override {
    with_act_type(act_type(), [&](auto t) {
      using S = decltype(t);
      cuda::vocab_ce_local_sums<S>(sum_exp, target_logit, act<S>(logits), row_max, targets, N, ld,
                                   cols, vocab_start, stream_);
    });
  }
  void vocab_ce_backward_impl(Act dlogits, CAct logits, const float *row_max, const float *sum_exp,
                         const int32_t *targets, int N, int ld, int cols, int vocab_start,
                         float dloss) override {
    with_act_type(act_type(), [&](auto t) {
      using S = decltype(t);
      cuda::vocab_ce_backward<S>(act<S>(dlogits), act<S>(logits), row_max, sum_exp, targets, N, ld,
                                 cols, vocab_start, dloss, stream_);
    });
  }
  // Where the update's model copy is a part of the weights and their 16-bit
  // copy exists, the same pass writes that part of it too (set_weights keeps
  // the copy when the updates since weights_written covered all of it).
  void adamw_update_impl(float *param, const float *grad, float *exp_avg, float *exp_avg_sq, size_t n,
                    const AdamWStep &a) override {
    void *copy16 = nullptr;
    const float *w = weights_;
    if (a.model_copy && a.model_type == storage_type() && w && weights16_.size() >= weights_n_ &&
        a.model_copy >= w && a.model_copy + n <= w + weights_n_) {
      const size_t at = (size_t)(a.model_copy - w);
      copy16 = weights16_.data() + at;
      renewed_.push_back({at, at + n});
    }
    cuda::adamw_update(param, grad, exp_avg, exp_avg_sq, n, a.lr, a.beta1, a.beta2, a.eps,
                       a.weight_decay, a.step, a.grad_scale, a.model_copy, a.model_type, stream_,
                       copy16);
  }
  void colsum_accumulate_impl(float *out, CAct x, int N, int cols) override {
    with_act_type(act_type(), [&](auto t) {
      using S = decltype(t);
      cuda::colsum_accumulate<S>(out, act<S>(x), N, cols, stream_);
    });
  }
  void scale_inplace_impl(float *x, size_t n, float alpha) override {
    cuda::scale_inplace<float>(x, n, alpha, stream_);
  }
  double sum_squares_impl(const float *x, size_t n) override {
    DeviceArray<double> scratch(device(), cuda::sum_squares_scratch(n) + 1);  // + the result
    double *out = scratch.data() + scratch.size() - 1;
    cuda::sum_squares<float>(out, x, n, scratch.data(), stream_);
    double v = 0;
    device().copy_to_host(&v, out, sizeof v);
    return v;
  }
  void convert_impl(Act dst, CAct src, size_t n) override {
    cuda::cast(dst.p, dst.t, src.p, src.t, n, stream_);
  }
  void round_to_storage_impl(float *x, size_t n, DType dtype) override {
    cuda::round_to(x, n, dtype, stream_);
  }
  void set_weights(const float *base, size_t n) override {
    // The copy stays when the same weights were all rewritten by updates that
    // wrote it too; otherwise it is made again at the first op reading a weight.
    weights16_fresh_ = base == weights_ && n == weights_n_ && covers(renewed_, n);
    renewed_.clear();
    weights_ = base;
    weights_n_ = n;
  }
  void weights_written() override { renewed_.clear(); }

 private:
  [[noreturn]] void bad_type(const char *what, DType t) const {
    fail(Status::internal, "CudaOps: ", what, " holds ", dtype_name(t), " data in a run whose ",
         "activations are ", dtype_name(act_type()));
  }
  // An activation argument as S*: it must hold the run's activation type.
  template <class S>
  S *act(Act a) const {
    if (a.p && a.t != act_type()) bad_type("an activation argument", a.t);
    return static_cast<S *>(a.p);
  }
  template <class S>
  const S *act(CAct a) const {
    if (a.p && a.t != act_type()) bad_type("an activation argument", a.t);
    return static_cast<const S *>(a.p);
  }
  // An argument of an fp32 run's GEMM.
  template <class V>
  V *f32(TypedPtr<V> a, const char *what) const {
    if (a.p && a.t != DType::f32) bad_type(what, a.t);
    return a.p;
  }
  // A weight (an fp32 array of 16-bit values, n elements) as S: itself in an
  // fp32 run; else its place in the weights' 16-bit copy, or (not a weight) a
  // copy in scratch `slot`.
  template <class S>
  const S *weight(const float *w, size_t n, int slot) {
    if constexpr (std::is_same_v<S, float>) {
      return w;
    } else {
      if (!w) return nullptr;
      return static_cast<const S *>(narrow(slot, w, n));
    }
  }
  // A 16-bit GEMM operand: itself when it holds the storage type; an fp32
  // array of 16-bit values (a weight) through narrow.
  const void *operand16(int slot, CAct x, int rows, int cols, int ld, int64_t stride, int batch) {
    if (x.t == storage_type()) return x.p;
    if (x.t != DType::f32) bad_type("a GEMM operand", x.t);
    const size_t n = (size_t)(rows - 1) * ld + cols + (size_t)(batch - 1) * stride;
    return narrow(slot, static_cast<const float *>(x.p), n);
  }
  // A 16-bit copy of n floats at x. Exact: a 16-bit run's weights hold values
  // of the type. Inside the weights of set_weights, their one copy (made at
  // the first call after set_weights); else scratch `slot`, which only grows
  // and may be reused at once because the stream runs in order.
  const void *narrow(int slot, const float *x, size_t n) {
    const uintptr_t at = (uintptr_t)x, w = (uintptr_t)weights_;
    if (weights_ && at >= w && at + n * sizeof(float) <= w + weights_n_ * sizeof(float)) {
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

  static cudaStream_t bound_stream(Device &dev) {
    dev.bind_thread();
    return static_cast<cudaStream_t>(dev.stream());
  }

  cudaStream_t stream_;  // before gemm_ (see the constructor)
  cuda::Gemm gemm_;
  DeviceArray<uint16_t> narrow_[2];  // copies of non-weights: GEMM operands A, B; op weights
  DeviceArray<float> bias_grad_;     // fused_weight_grad_impl: a bias gradient before it is added
  const float *weights_ = nullptr;   // set_weights: the model's weights, and their 16-bit copy
  size_t weights_n_ = 0;
  DeviceArray<uint16_t> weights16_;
  bool weights16_fresh_ = false;
  // [begin, end) ranges of weights16_ that adamw_update wrote since the last
  // weights_written or set_weights.
  std::vector<std::pair<size_t, size_t>> renewed_;

  // Do the ranges cover [0, n)?
  static bool covers(std::vector<std::pair<size_t, size_t>> ranges, size_t n) {
    std::sort(ranges.begin(), ranges.end());
    size_t end = 0;
    for (auto [b, e] : ranges) {
      if (b > end) return false;
      end = std::max(end, e);
    }
    return end >= n;
  }
};

}  // namespace

std::unique_ptr<Ops<float>> make_cuda_ops(Device &dev) { return std::make_unique<CudaOps>(dev); }

}  // namespace ptdp
