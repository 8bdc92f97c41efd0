// Causal self-attention of one layer on this rank's heads: unfused (strided
// batched GEMMs around scale+mask+softmax and dropout, the probabilities kept
// for backward) or fused (--use-flash-attn: one op per direction, each row's
// log-sum-exp kept).
#include <cmath>
#include "engine/model/gpt_internal.h"

namespace ptdp {

using namespace gpt_detail;

template <class T>
void GPT<T>::attention_forward(int l, LayerActs &a, int s, int b, const StepContext &ctx) {
  const int A = heads_, hd = cfg_.head_dim();
  if (flash_) {
    DropoutSpec d{{seed_, dropout_stream(l, kAttentionProbs), ctx.iteration},
                  ctx.training ? cfg_.attention_dropout : 0.f,
                  ctx.sample_offset};
    ops_->flash_attention_forward(a.ctxv.data(), a.lse.data(), a.qkv.data(), s, b, A, groups_, hd,
                                  T(1) / std::sqrt((T)hd), tp_.rank * A, d);
    return;
  }
  // Selective recomputation keeps no probabilities: they go to scratch.
  const bool keep = !rc_.selective;
  CAct pd = attention_probs(l, a, keep ? a.probs.data() : core_probs_.data(),
                            keep ? a.probs_drop.data() : core_probs_drop_.data(), s, b, ctx);
  attention_context(pd, a.qkv.data(), s, s, b, a.ctxv.data());
}

// Grouped-query attention: heads_ = groups_ * r, qkv's rows [groups_, r + 2,
// hd]. Query slot j of every (bi, group) is one strided batch: batch k = bi *
// groups_ + g is head g*r + j, whose probabilities and context sit at uniform
// strides; the group's K and V are read by all r slots, never copied. Without
// grouping (r = 1) these are single batched GEMMs over [a, 3, hd].
template <class T>
void GPT<T>::attention_scores(CAct Q, CAct kv, Act P, int s, int sk, int b) {
  const int hd = cfg_.head_dim(), r = heads_ / groups_, ld = b * qkv_width_, row = (r + 2) * hd;
  const int64_t ps = (int64_t)s * sk;  // one head's scores
  for (int j = 0; j < r; j++)
    ops_->gemm_strided_batched(false, true, s, sk, hd, 1, Q + (int64_t)j * hd, ld, row,
                               kv + (int64_t)r * hd, ld, row, 0, P + j * ps, sk, r * ps, b * groups_);
}

template <class T>
void GPT<T>::attention_context(CAct P, CAct kv, int s, int sk, int b, Act ctx) {
  const int hd = cfg_.head_dim(), r = heads_ / groups_, ld = b * qkv_width_, row = (r + 2) * hd;
  const int64_t ps = (int64_t)s * sk;
  for (int j = 0; j < r; j++)
    ops_->gemm_strided_batched(false, false, s, hd, sk, 1, P + j * ps, sk, r * ps,
                               kv + (int64_t)(r + 1) * hd, ld, row, 0, ctx + (int64_t)j * hd,
                               b * width_, (int64_t)r * hd, b * groups_);
}

template <class T>
CAct GPT<T>::attention_probs(int l, const LayerActs &a, Act probs, Act probs_drop, int s, int b,
                             const StepContext &ctx) {
  const int A = heads_, hd = cfg_.head_dim();
  // (Skipping the causal upper-right blocks was measured: smaller GEMMs ate the gain.)
  attention_scores(a.qkv.data(), a.qkv.data(), probs, s, s, b);
  ops_->scale_mask_softmax_forward(probs, probs, b * A, s, s, T(1) / std::sqrt((T)hd), true,
                                   nullptr);
  if (!ctx.training || cfg_.attention_dropout <= 0) return probs;
  DropoutSpec d{{seed_, dropout_stream(l, kAttentionProbs), ctx.iteration},
                cfg_.attention_dropout,
                ctx.sample_offset};
  ops_->dropout_attention(probs_drop, probs, b, A, s, s, tp_.rank * A, d);
  return probs_drop;
}

template <class T>
void GPT<T>::attention_backward(int l, const LayerActs &a, Act dqkv, int s, int b,
                                const StepContext &ctx) {
  // In: dctx_ = dL/dctx [N, w]. Out: dqkv [N, 3w].
  const int w = width_, A = heads_, hd = cfg_.head_dim();
  if (flash_) {
    DropoutSpec d{{seed_, dropout_stream(l, kAttentionProbs), ctx.iteration},
                  ctx.training ? cfg_.attention_dropout : 0.f,
                  ctx.sample_offset};
    ops_->flash_attention_backward(dqkv, dctx_.data(), a.ctxv.data(), a.qkv.data(),
                                   a.lse.data(), s, b, A, groups_, hd, T(1) / std::sqrt((T)hd),
                                   tp_.rank * A, d);
    return;
  }
  const int r = A / groups_, batches = b * groups_, ld_qkv = b * qkv_width_, ld_ctx = b * w;
  const int row = (r + 2) * hd;
  const int64_t ss = (int64_t)s * s;
  // Selective recomputation: the probabilities again, from the kept QKV.
  CAct probs = a.probs.data(), pd = a.probs_drop.data();
  if (rc_.selective) {
    pd = attention_probs(l, a, core_probs_.data(), core_probs_drop_.data(), s, b, ctx);
    probs = core_probs_.data();
  }
  CAct qkv = a.qkv.data(), dctx = dctx_.data();
  CAct K = qkv + (int64_t)r * hd, V = qkv + (int64_t)(r + 1) * hd;
  Act dp = dprobs_.data();
  Act dK = dqkv + (int64_t)r * hd, dV = dqkv + (int64_t)(r + 1) * hd;
  const float p = ctx.training ? cfg_.attention_dropout : 0.f;
  // dV = sum over the group's slots j of dropout(P_j)^T @ dctx_j, with the
  // dropped probabilities of the forward
  if (!(p > 0)) pd = probs;
  for (int j = 0; j < r; j++)
    ops_->gemm_strided_batched(true, false, s, hd, s, 1, pd + j * ss, s, r * ss,
                               dctx + (int64_t)j * hd, ld_ctx, (int64_t)r * hd, j ? 1 : 0, dV, ld_qkv,
                               row, batches);
  // dP = dropout'(dctx @ V^T), the mask read back from the dropped probabilities
  for (int j = 0; j < r; j++)
    ops_->gemm_strided_batched(false, true, s, s, hd, 1, dctx + (int64_t)j * hd, ld_ctx,
                               (int64_t)r * hd, V, ld_qkv, row, 0, dp + j * ss, s, r * ss, batches);
  const size_t nprobs = (size_t)b * A * ss;
  if (p > 0) ops_->dropout_backward_from_output(dp, dp, pd, nprobs, attention_dropout_rate(p));
  const T scale = T(1) / std::sqrt((T)hd);
  ops_->scale_mask_softmax_backward(dp, probs, dp, b * A, s, s, scale);  // dp = dL/d(QK^T)
  // dQ_j = dS_j @ K, dK = sum over j of dS_j^T @ Q_j
  for (int j = 0; j < r; j++) {
    ops_->gemm_strided_batched(false, false, s, hd, s, 1, dp + j * ss, s, r * ss, K, ld_qkv, row, 0,
                               dqkv + (int64_t)j * hd, ld_qkv, row, batches);
    ops_->gemm_strided_batched(true, false, s, hd, s, 1, dp + j * ss, s, r * ss,
                               qkv + (int64_t)j * hd, ld_qkv, row, j ? 1 : 0, dK, ld_qkv, row,
                               batches);
  }
}

// Incremental decoding: this forward's queries (rows pos0.. of the cache)
// against the keys and values of positions 0 .. pos0 + s - 1, as
// attention_forward's unfused path but with s_k = pos0 + s (no dropout: not
// training). Causal within a prompt (pos0 = 0); a later step's single query
// sees every cached position.
template <class T>
void GPT<T>::attention_decode(int li, LayerActs &a, int s, int b, int pos0) {
  const int A = heads_, hd = cfg_.head_dim(), sk = pos0 + s;
  const size_t n = (size_t)b * A * s * sk;  // the probabilities [b*a, s, sk]
  CAct cache = kv_cache_[(size_t)li].data();
  if (decode_probs_.size() < n) decode_probs_.resize(*dev_, n, act_);
  Act P = decode_probs_.data();
  attention_scores(cache + (int64_t)pos0 * b * qkv_width_, cache, P, s, sk, b);
  ops_->scale_mask_softmax_forward(P, P, b * A, s, sk, T(1) / std::sqrt((T)hd), pos0 == 0, nullptr);
  attention_context(P, cache, s, sk, b, a.ctxv.data());
}

#define PTDP_INSTANTIATE(T)                                                                 \
  template void GPT<T>::attention_forward(int, LayerActs &, int, int, const StepContext &); \
  template void GPT<T>::attention_decode(int, LayerActs &, int, int, int);                  \
  template void GPT<T>::attention_scores(CAct, CAct, Act, int, int, int);                   \
  template void GPT<T>::attention_context(CAct, CAct, int, int, int, Act);                  \
  template void GPT<T>::attention_backward(int, const LayerActs &, Act, int, int,            \
                                           const StepContext &);                            \
  template CAct GPT<T>::attention_probs(int, const LayerActs &, Act, Act, int, int,          \
                                        const StepContext &);
PTDP_INSTANTIATE(float)
PTDP_INSTANTIATE(double)
#undef PTDP_INSTANTIATE

}  // namespace ptdp
