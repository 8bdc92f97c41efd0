#include "engine/device/profiled_ops.h"

#include <algorithm>
#include <cstdio>

namespace ptdp {

namespace {

std::string gemm_key(bool ta, bool tb, int M, int N, int K, int batch) {
  char k[80];
  std::snprintf(k, sizeof k, "gemm %dx%dx%d %c%c%s", M, N, K, ta ? 'T' : 'N', tb ? 'T' : 'N',
                batch > 1 ? (" x" + std::to_string(batch)).c_str() : "");
  return k;
}

// Causal attention's two products over the visible half: 2 b a s^2 hd.
double attention_flops(int s, int b, int heads, int hd) {
  return 2.0 * b * heads * (double)s * s * hd;
}

}  // namespace

template <class T>
ProfiledOps<T>::ProfiledOps(std::unique_ptr<Ops<T>> inner)
    : Ops<T>(inner->device()), inner_(std::move(inner)) {
  this->set_storage_type(inner_->storage_type());
}

template <class T>
template <class F>
void ProfiledOps<T>::timed(const std::string &op, double flops, F &&f) {
  if (pending_.size() == timers_.size()) timers_.push_back(this->device().make_timer());
  DeviceTimer &t = *timers_[pending_.size()];
  OpTime &row = rows_[op];
  row.op = op;
  row.calls++;
  row.flops += flops;
  t.start();
  f();
  t.stop();
  pending_.push_back(&row);
}

template <class T>
std::vector<OpTime> ProfiledOps<T>::take() {
  for (size_t i = 0; i < pending_.size(); i++) pending_[i]->ms += timers_[i]->elapsed_ms();
  pending_.clear();
  std::vector<OpTime> out;
  for (auto &kv : rows_) out.push_back(kv.second);
  rows_.clear();
  std::sort(out.begin(), out.end(), [](const OpTime &a, const OpTime &b) { return a.ms > b.ms; });
  return out;
}

template <class T>
void ProfiledOps<T>::gemm(bool ta, bool tb, int M, int N, int K, T alpha, CAct A, int lda, CAct B, int ldb, T beta, Act C, int ldc) {
  timed(gemm_key(ta, tb, M, N, K, 1), 2.0 * M * N * K,
        [&] { inner_->gemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc); });
}
template <class T>
void ProfiledOps<T>::gemm_strided_batched(bool ta, bool tb, int M, int N, int K, T alpha, CAct A, int lda, int64_t strideA, CAct B, int ldb, int64_t strideB, T beta, Act C, int ldc, int64_t strideC, int batch) {
  timed(gemm_key(ta, tb, M, N, K, batch), 2.0 * M * N * K * batch, [&] {
    inner_->gemm_strided_batched(ta, tb, M, N, K, alpha, A, lda, strideA, B, ldb, strideB, beta, C,
                                 ldc, strideC, batch);
  });
}
template <class T>
void ProfiledOps<T>::layernorm_forward(Act out, T *mean, T *rstd, CAct x, const T *w, const T *b, int N, int h, T eps) {
  timed("layernorm_forward", 0, [&] { inner_->layernorm_forward(out, mean, rstd, x, w, b, N, h, eps); });
}
template <class T>
void ProfiledOps<T>::layernorm_backward(Act dx, T *dw, T *db, CAct dout, CAct x, const T *w, const T *mean, const T *rstd, int N, int h) {
  timed("layernorm_backward", 0,
        [&] { inner_->layernorm_backward(dx, dw, db, dout, x, w, mean, rstd, N, h); });
}
template <class T>
void ProfiledOps<T>::bias_gelu_forward(Act z, Act out, CAct y, const T *bias, int N, int f) {
  timed("bias_gelu_forward", 0, [&] { inner_->bias_gelu_forward(z, out, y, bias, N, f); });
}
template <class T>
void ProfiledOps<T>::bias_gelu_backward(Act dz, T *dbias, CAct dout, CAct z, int N, int f) {
  timed("bias_gelu_backward", 0, [&] { inner_->bias_gelu_backward(dz, dbias, dout, z, N, f); });
}
template <class T>
void ProfiledOps<T>::bias_dropout_add_forward(Act out, CAct residual, CAct y, const T *bias, int s, int b, int h, const DropoutSpec &d) {
  timed("bias_dropout_add_forward", 0,
        [&] { inner_->bias_dropout_add_forward(out, residual, y, bias, s, b, h, d); });
}
template <class T>
void ProfiledOps<T>::bias_dropout_add_backward(Act dy, T *dbias, CAct dout, int s, int b, int h, const DropoutSpec &d) {
  timed("bias_dropout_add_backward", 0,
        [&] { inner_->bias_dropout_add_backward(dy, dbias, dout, s, b, h, d); });
}
template <class T>
void ProfiledOps<T>::dropout_attention(Act out, CAct in, int b, int a, int s_q, int s_k, int head_offset, const DropoutSpec &d) {
  timed("dropout_attention", 0,
        [&] { inner_->dropout_attention(out, in, b, a, s_q, s_k, head_offset, d); });
}
template <class T>
void ProfiledOps<T>::dropout_backward_from_output(Act dx, CAct dy, CAct y, size_t n, float p) {
  timed("dropout_backward_from_output", 0,
        [&] { inner_->dropout_backward_from_output(dx, dy, y, n, p); });
}
template <class T>
void ProfiledOps<T>::scale_mask_softmax_forward(Act P, CAct S, int batch, int s_q, int s_k, T scale, bool causal, const uint8_t *mask) {
  timed("scale_mask_softmax_forward", 0,
        [&] { inner_->scale_mask_softmax_forward(P, S, batch, s_q, s_k, scale, causal, mask); });
}
template <class T>
void ProfiledOps<T>::scale_mask_softmax_backward(Act dS, CAct P, CAct dP, int batch, int s_q, int s_k, T scale) {
  timed("scale_mask_softmax_backward", 0,
        [&] { inner_->scale_mask_softmax_backward(dS, P, dP, batch, s_q, s_k, scale); });
}
template <class T>
void ProfiledOps<T>::flash_attention_forward(Act ctx, T *lse, CAct qkv, int s, int b, int heads, int hd, T scale, int head_offset, const DropoutSpec &d) {
  timed("flash_attention_forward", attention_flops(s, b, heads, hd), [&] {
    inner_->flash_attention_forward(ctx, lse, qkv, s, b, heads, hd, scale, head_offset, d);
  });
}
template <class T>
void ProfiledOps<T>::flash_attention_backward(Act dqkv, CAct dctx, CAct ctx, CAct qkv, const T *lse, int s, int b, int heads, int hd, T scale, int head_offset, const DropoutSpec &d) {
  // Five products to the forward's two: 2.5x.
  timed("flash_attention_backward", 2.5 * attention_flops(s, b, heads, hd), [&] {
    inner_->flash_attention_backward(dqkv, dctx, ctx, qkv, lse, s, b, heads, hd, scale,
                                     head_offset, d);
  });
}
template <class T>
void ProfiledOps<T>::embedding_forward(Act x, const int32_t *tokens, const T *wte, int vocab_start, int vocab_rows, const T *wpe, int s, int b, int h) {
  timed("embedding_forward", 0, [&] {
    inner_->embedding_forward(x, tokens, wte, vocab_start, vocab_rows, wpe, s, b, h);
  });
}
template <class T>
void ProfiledOps<T>::add_position_embedding(Act x, const T *wpe, int s, int b, int h) {
  timed("add_position_embedding", 0, [&] { inner_->add_position_embedding(x, wpe, s, b, h); });
}
template <class T>
void ProfiledOps<T>::embedding_backward(T *dwte, T *dwpe, CAct dx, const int32_t *tokens, int s, int b, int h, int vocab_start, int vocab_rows) {
  timed("embedding_backward", 0, [&] {
    inner_->embedding_backward(dwte, dwpe, dx, tokens, s, b, h, vocab_start, vocab_rows);
  });
}
template <class T>
void ProfiledOps<T>::vocab_ce_local_max(T *row_max, CAct logits, int N, int ld, int cols) {
  timed("vocab_ce_local_max", 0, [&] { inner_->vocab_ce_local_max(row_max, logits, N, ld, cols); });
}
template <class T>
void ProfiledOps<T>::vocab_ce_local_sums(T *sum_exp, T *target_logit, CAct logits, const T *row_max, const int32_t *targets, int N, int ld, int cols, int vocab_start) {
  timed("vocab_ce_local_sums", 0, [&] {
    inner_->vocab_ce_local_sums(sum_exp, target_logit, logits, row_max, targets, N, ld, cols,
                                vocab_start);
  });
}
template <class T>
void ProfiledOps<T>::vocab_ce_backward(Act dlogits, CAct logits, const T *row_max, const T *sum_exp, const int32_t *targets, int N, int ld, int cols, int vocab_start, T dloss) {
  timed("vocab_ce_backward", 0, [&] {
    inner_->vocab_ce_backward(dlogits, logits, row_max, sum_exp, targets, N, ld, cols, vocab_start,
                              dloss);
  });
}
template <class T>
void ProfiledOps<T>::adamw_update(T *param, const T *grad, T *exp_avg, T *exp_avg_sq, size_t n, const AdamWStep &a) {
  timed("adamw_update", 0, [&] { inner_->adamw_update(param, grad, exp_avg, exp_avg_sq, n, a); });
}
template <class T>
void ProfiledOps<T>::colsum_accumulate(T *out, CAct x, int N, int cols) {
  timed("colsum_accumulate", 0, [&] { inner_->colsum_accumulate(out, x, N, cols); });
}
template <class T>
void ProfiledOps<T>::scale_inplace(T *x, size_t n, T alpha) {
  timed("scale_inplace", 0, [&] { inner_->scale_inplace(x, n, alpha); });
}
template <class T>
double ProfiledOps<T>::sum_squares(const T *x, size_t n) {
  double v = 0;
  timed("sum_squares", 0, [&] { v = inner_->sum_squares(x, n); });
  return v;
}
template <class T>
void ProfiledOps<T>::convert(Act dst, CAct src, size_t n) {
  timed("convert", 0, [&] { inner_->convert(dst, src, n); });
}
template <class T>
void ProfiledOps<T>::round_to_storage(T *x, size_t n, DType dtype) {
  timed("round_to_storage", 0, [&] { inner_->round_to_storage(x, n, dtype); });
}

std::string format_op_profile(const std::vector<OpTime> &rows) {
  double total = 0;
  for (const OpTime &r : rows) total += r.ms;
  std::string out;
  char line[200];
  std::snprintf(line, sizeof line, "%-40s %7s %10s %6s %9s\n", "op", "calls", "ms", "share",
                "TFLOP/s");
  out += line;
  for (const OpTime &r : rows) {
    char rate[16] = "";
    if (r.flops > 0 && r.ms > 0) std::snprintf(rate, sizeof rate, "%.3g", r.flops / r.ms / 1e9);
    std::snprintf(line, sizeof line, "%-40s %7lld %10.3f %5.1f%% %9s\n", r.op.c_str(),
                  (long long)r.calls, r.ms, total > 0 ? 100 * r.ms / total : 0.0, rate);
    out += line;
  }
  // All GEMMs together: the share the tensor cores (or BLAS) take.
  OpTime gemms{"gemm (all shapes)"};
  for (const OpTime &r : rows)
    if (r.op.rfind("gemm ", 0) == 0) gemms.calls += r.calls, gemms.ms += r.ms, gemms.flops += r.flops;
  if (gemms.calls) {
    std::snprintf(line, sizeof line, "%-40s %7lld %10.3f %5.1f%% %9.3g\n", gemms.op.c_str(),
                  (long long)gemms.calls, gemms.ms, total > 0 ? 100 * gemms.ms / total : 0.0,
                  gemms.ms > 0 ? gemms.flops / gemms.ms / 1e9 : 0.0);
    out += line;
  }
  std::snprintf(line, sizeof line, "%-40s %7s %10.3f\n", "total (device time in ops)", "", total);
  out += line;
  return out;
}

template class ProfiledOps<float>;
template class ProfiledOps<double>;

}  // namespace ptdp
