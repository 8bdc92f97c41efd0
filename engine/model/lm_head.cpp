// The final LayerNorm, the tied vocab-parallel LM head, and the three-step
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

// Final LayerNorm and the tied, vocab-parallel LM head: logits = lnf @ wte_shard^T.
// Padding rows are zero and masked out of the loss, so only the real columns
// are computed.
template <class T>
void GPT<T>::head_forward(ChunkActs &A, const int32_t *targets) {
  const int N = A.s * A.b, h = cfg_.hidden_size;
  ops_->layernorm_forward(A.lnf.data(), A.lnf_mean.data(), A.lnf_rstd.data(), A.final_x.data(),
                          param_data("ln_f.weight"), param_data("ln_f.bias"), N, h,
                          (T)cfg_.layernorm_epsilon);
  ops_->gemm(false, true, N, local_real_vocab_, h, 1, A.lnf.data(), h, param_data("wte.weight"), h,
             0, A.logits.data(), local_vocab_);
  if (targets) vocab_parallel_loss(A);
}

// LM head (vocab-parallel) and final LayerNorm; f's backward all-reduces dlnf.
template <class T>
void GPT<T>::head_backward(ChunkActs &A, Act dresid, T dloss) {
  const int N = A.s * A.b, h = cfg_.hidden_size;
  const size_t Nh = (size_t)N * h;
  const ParamInfo &wte = param("wte.weight"), &lw = param("ln_f.weight"), &lb = param("ln_f.bias");
  Act dlogits = A.logits.data();
  ops_->vocab_ce_backward(dlogits, A.logits.data(), A.ce.data(), A.ce.data() + N, A.targets.data(),
                          N, local_vocab_, local_real_vocab_, vocab_start_, dloss);
  ops_->gemm(true, false, local_real_vocab_, h, N, 1, dlogits, local_vocab_, A.lnf.data(), h, 1,
             grads_.data() + wte.offset, h);
  ops_->gemm(false, false, N, h, local_real_vocab_, 1, dlogits, local_vocab_,
             params_.data() + wte.offset, h, 0, tmp_h_.data(), h);
  tp_all_reduce(tmp_h_.data(), Nh);
  dev_->zero(dresid.p, Nh * dtype_size(dresid.t));
  ops_->layernorm_backward(dresid, grads_.data() + lw.offset, grads_.data() + lb.offset,
                           tmp_h_.data(), A.final_x.data(), params_.data() + lw.offset,
                           A.lnf_mean.data(), A.lnf_rstd.data(), N, h);
}

#define PTDP_INSTANTIATE(T)                                         \
  template void GPT<T>::vocab_parallel_loss(ChunkActs &);           \
  template void GPT<T>::head_forward(ChunkActs &, const int32_t *); \
  template void GPT<T>::head_backward(ChunkActs &, Act, T);
PTDP_INSTANTIATE(float)
PTDP_INSTANTIATE(double)
#undef PTDP_INSTANTIATE

}  // namespace ptdp
