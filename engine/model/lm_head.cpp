// The final norm, the vocab-parallel LM head (tied or untied), and the three-step
// vocab-parallel cross-entropy (ARCHITECTURE §4).
#include <cmath>
#include "engine/model/gpt_internal.h"

namespace ptdp {

using namespace gpt_detail;

// Cross-entropy over the vocabulary shards without gathering logits: the row
// max (all-reduce max), then the sum of exponentials and the target logit
// (one all-reduce sum of both) — ARCHITECTURE §4.
template <class T>
void GPT<T>::vocab_parallel_loss(ChunkActs &A) {
  const int N = A.s * A.b, cols = local_real_vocab_, ld = local_vocab_;
  T *mx = A.ce.data(), *sums = mx + N;  // sums: [2, N] sum of exp, target logit
  ops_->vocab_ce_local_max(mx, A.logits.data(), N, ld, cols);
  tp_all_reduce_max(tp_, mx, (size_t)N);
  ops_->vocab_ce_local_sums(sums, sums + N, A.logits.data(), mx, A.targets.data(), N, ld, cols,
                            vocab_start_);
  tp_all_reduce_sum(tp_, sums, 2 * (size_t)N);  // statistics in T
  // The per-token losses are summed on the host: 3N values cross over.
  ce_host_.resize(3 * (size_t)N);
  dev_->copy_to_host(ce_host_.data(), mx, ce_host_.size() * sizeof(T));
  const T *hmx = ce_host_.data(), *hsum = hmx + N, *htl = hsum + N;
  for (int i = 0; i < N; i++) A.losses[i] = std::log(hsum[i]) + hmx[i] - htl[i];
}

// The model's norm (LayerNorm, or RMSNorm with neither mean nor bias).
template <class T>
void GPT<T>::norm_forward(Act out, T *mean, T *rstd, CAct x, const T *w, const T *b, int N) {
  const int h = cfg_.hidden_size;
  const T eps = (T)cfg_.layernorm_epsilon;
  if (cfg_.rms_norm())
    ops_->rmsnorm_forward(out, rstd, x, w, N, h, eps);
  else
    ops_->layernorm_forward(out, mean, rstd, x, w, b, N, h, eps);
}

template <class T>
void GPT<T>::norm_backward(Act dx, T *dw, T *db, CAct dout, CAct x, const T *w, const T *mean,
                           const T *rstd, int N) {
  const int h = cfg_.hidden_size;
  if (cfg_.rms_norm())
    ops_->rmsnorm_backward(dx, dw, dout, x, w, rstd, N, h);
  else
    ops_->layernorm_backward(dx, dw, db, dout, x, w, mean, rstd, N, h);
}

// The final norm and the vocab-parallel LM head: logits = lnf @ W^T with W
// the tied embedding's shard (or the untied lm_head's). Padding rows are zero
// and masked out of the loss, so only the real columns are computed.
template <class T>
void GPT<T>::head_forward(ChunkActs &A, const int32_t *targets) {
  const int N = A.s * A.b, h = cfg_.hidden_size;
  norm_to_gemm_input(A.lnf.data(), A.lnf_mean.data(), A.lnf_rstd.data(), A.final_x.data(),
                     param_data("ln_f.weight"),
                     cfg_.rms_norm() ? nullptr : param_data("ln_f.bias"), A.s, A.b);
  ops_->gemm(false, true, N, local_real_vocab_, h, 1, A.lnf.data(), h,
             param_data(head_weight_name()), h, 0, A.logits.data(), local_vocab_);
  if (targets) vocab_parallel_loss(A);
}

// LM head (vocab-parallel) and final norm; f's backward all-reduces dlnf
// (reduce-scatters it to this rank's rows with sequence parallelism).
template <class T>
void GPT<T>::head_backward(ChunkActs &A, Act dresid, T dloss) {
  const int N = A.s * A.b, h = cfg_.hidden_size, rows = local_rows(A.s, A.b);
  const ParamInfo &W = param(head_weight_name()), &lw = param("ln_f.weight");
  T *dlb = cfg_.rms_norm() ? nullptr : grad_data("ln_f.bias");
  Act dlogits = A.logits.data();
  ops_->vocab_ce_backward(dlogits, A.logits.data(), A.ce.data(), A.ce.data() + N, A.targets.data(),
                          N, local_vocab_, local_real_vocab_, vocab_start_, dloss);
  ops_->gemm(true, false, local_real_vocab_, h, N, 1, dlogits, local_vocab_, A.lnf.data(), h, 1,
             grads_.data() + W.offset, h);
  ops_->gemm(false, false, N, h, local_real_vocab_, 1, dlogits, local_vocab_,
             params_.data() + W.offset, h, 0, tmp_h_.data(), h);
  CAct dlnf = reduce_row_parallel(tmp_h_.data(), A.s, A.b);
  dev_->zero(dresid.p, (size_t)rows * h * dtype_size(dresid.t));
  norm_backward(dresid, grads_.data() + lw.offset, dlb, dlnf, A.final_x.data(),
                params_.data() + lw.offset, A.lnf_mean.data(), A.lnf_rstd.data(), rows);
}

#define PTDP_INSTANTIATE(T)                                                                   \
  template void GPT<T>::norm_forward(Act, T *, T *, CAct, const T *, const T *, int);          \
  template void GPT<T>::norm_backward(Act, T *, T *, CAct, CAct, const T *, const T *,         \
                                      const T *, int);                                         \
  template void GPT<T>::vocab_parallel_loss(ChunkActs &);           \
  template void GPT<T>::head_forward(ChunkActs &, const int32_t *); \
  template void GPT<T>::head_backward(ChunkActs &, Act, T);
PTDP_INSTANTIATE(float)
PTDP_INSTANTIATE(double)
#undef PTDP_INSTANTIATE

}  // namespace ptdp
