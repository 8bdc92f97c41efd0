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
  const int w = width_, A = heads_, hd = cfg_.head_dim();
  if (flash_) {
    DropoutSpec d{{seed_, dropout_stream(l, kAttentionProbs), ctx.iteration},
                  ctx.training ? cfg_.attention_dropout : 0.f,
                  ctx.sample_offset};
    ops_->flash_attention_forward(a.ctxv.data(), a.lse.data(), a.qkv.data(), s, b, A, hd,
                                  T(1) / std::sqrt((T)hd), tp_.rank * A, d);
    return;
  }
  const int ld_qkv = b * 3 * w, ld_ctx = b * w;
  const int64_t ss = (int64_t)s * s;
  CAct qkv = a.qkv.data();
  Act probs = a.probs.data();
  // Batch i = bi*a + head: its Q, K, V rows start at qkv + i*3hd with row stride b*3w.
  // (Skipping the causal upper-right blocks was measured: smaller GEMMs ate the gain.)
  ops_->gemm_strided_batched(false, true, s, s, hd, 1, qkv, ld_qkv, 3 * hd, qkv + hd, ld_qkv,
                             3 * hd, 0, probs, s, ss, b * A);
  ops_->scale_mask_softmax_forward(probs, probs, b * A, s, s, T(1) / std::sqrt((T)hd), true,
                                   nullptr);
  CAct pd = probs;
  if (ctx.training && cfg_.attention_dropout > 0) {
    DropoutSpec d{{seed_, dropout_stream(l, kAttentionProbs), ctx.iteration},
                  cfg_.attention_dropout,
                  ctx.sample_offset};
    ops_->dropout_attention(a.probs_drop.data(), probs, b, A, s, s, tp_.rank * A, d);
    pd = a.probs_drop.data();
  }
  ops_->gemm_strided_batched(false, false, s, hd, s, 1, pd, s, ss, qkv + 2 * hd, ld_qkv, 3 * hd, 0,
                             a.ctxv.data(), ld_ctx, hd, b * A);
}

template <class T>
void GPT<T>::attention_backward(int l, const LayerActs &a, int s, int b, const StepContext &ctx) {
  // In: dctx_ = dL/dctx [N, w]. Out: dqkv_ [N, 3w].
  const int w = width_, A = heads_, hd = cfg_.head_dim();
  if (flash_) {
    DropoutSpec d{{seed_, dropout_stream(l, kAttentionProbs), ctx.iteration},
                  ctx.training ? cfg_.attention_dropout : 0.f,
                  ctx.sample_offset};
    ops_->flash_attention_backward(dqkv_.data(), dctx_.data(), a.ctxv.data(), a.qkv.data(),
                                   a.lse.data(), s, b, A, hd, T(1) / std::sqrt((T)hd), tp_.rank * A,
                                   d);
    return;
  }
  const int ld_qkv = b * 3 * w, ld_ctx = b * w;
  const int64_t ss = (int64_t)s * s;
  CAct qkv = a.qkv.data(), probs = a.probs.data(), dctx = dctx_.data();
  Act dqkv = dqkv_.data(), dp = dprobs_.data();
  const float p = ctx.training ? cfg_.attention_dropout : 0.f;
  // dV = dropout(P)^T @ dctx, with the dropped probabilities of the forward
  CAct pd = p > 0 ? a.probs_drop.data() : probs;
  ops_->gemm_strided_batched(true, false, s, hd, s, 1, pd, s, ss, dctx, ld_ctx, hd, 0,
                             dqkv + 2 * hd, ld_qkv, 3 * hd, b * A);
  // dP = dropout'(dctx @ V^T), the mask read back from the dropped probabilities
  ops_->gemm_strided_batched(false, true, s, s, hd, 1, dctx, ld_ctx, hd, qkv + 2 * hd, ld_qkv,
                             3 * hd, 0, dp, s, ss, b * A);
  const size_t nprobs = (size_t)b * A * ss;
  if (p > 0) ops_->dropout_backward_from_output(dp, dp, pd, nprobs, attention_dropout_rate(p));
  const T scale = T(1) / std::sqrt((T)hd);
  ops_->scale_mask_softmax_backward(dp, probs, dp, b * A, s, s, scale);  // dp = dL/d(QK^T)
  // dQ = dS @ K, dK = dS^T @ Q
  ops_->gemm_strided_batched(false, false, s, hd, s, 1, dp, s, ss, qkv + hd, ld_qkv, 3 * hd, 0,
                             dqkv, ld_qkv, 3 * hd, b * A);
  ops_->gemm_strided_batched(true, false, s, hd, s, 1, dp, s, ss, qkv, ld_qkv, 3 * hd, 0, dqkv + hd,
                             ld_qkv, 3 * hd, b * A);
}

#define PTDP_INSTANTIATE(T)                                                                 \
  template void GPT<T>::attention_forward(int, LayerActs &, int, int, const StepContext &); \
  template void GPT<T>::attention_backward(int, const LayerActs &, int, int, const StepContext &);
PTDP_INSTANTIATE(float)
PTDP_INSTANTIATE(double)
#undef PTDP_INSTANTIATE

}  // namespace ptdp
