// The vocab-parallel input embedding (token rows of this rank's vocabulary
// shard, summed over the tensor group, plus positions) and its dropout.
#include "engine/model/gpt_internal.h"

namespace ptdp {

using namespace gpt_detail;

template <class T>
void GPT<T>::embedding_forward_into(Act out, const int32_t *tokens, int s, int b,
                                    const StepContext &ctx) {
  const int h = cfg_.hidden_size;
  // Rotary positions turn q and k in the layers instead: no wpe.
  const T *wte = param_data("wte.weight"), *wpe = cfg_.rope() ? nullptr : param_data("wpe.weight");
  if (wpe) wpe += (size_t)ctx.first_position * h;  // incremental decoding's positions
  // Vocab-parallel embedding: each rank looks up its rows, the sum completes it
  // (positions are added once, after the sum).
  const bool one = tp_.size == 1;
  ops_->embedding_forward(tmp_h_.data(), tokens, wte, vocab_start_, local_vocab_,
                          one ? wpe : nullptr, s, b, h);
  if (!one) {
    tp_all_reduce(tmp_h_.data(), (size_t)s * b * h);
    if (wpe) ops_->add_position_embedding(tmp_h_.data(), wpe, s, b, h);
  }
  // With sequence parallelism, this rank's positions only.
  const int rows = local_rows(s, b);
  DropoutSpec hid{{seed_, dropout_stream(-1, kEmbedding), ctx.iteration},
                  ctx.training ? cfg_.hidden_dropout : 0.f,
                  ctx.sample_offset, first_position(s)};
  ops_->bias_dropout_add_forward(out, nullptr, tmp_h_.data() + (int64_t)first_position(s) * b * h,
                                 nullptr, rows / b, b, h, hid);
}

// Backward of the embedding's dropout, then each rank scatters the rows of its
// vocabulary shard into dwte (and every position into dwpe).
template <class T>
void GPT<T>::embedding_backward_into(ChunkActs &A, CAct dresid) {
  const int s = A.s, b = A.b, h = cfg_.hidden_size, rows = local_rows(s, b);
  const StepContext &ctx = A.ctx;
  DropoutSpec hid{{seed_, dropout_stream(-1, kEmbedding), ctx.iteration},
                  ctx.training ? cfg_.hidden_dropout : 0.f,
                  ctx.sample_offset, first_position(s)};
  if (seq_parallel(s)) {  // this rank's positions, then all of them
    ops_->bias_dropout_add_backward(sp_dy_.data(), nullptr, dresid, rows / b, b, h, hid);
    tp_all_gather(tp_, *ops_, sp_dy_.data(), tmp_h_.data(), (size_t)rows * h);
  } else {
    ops_->bias_dropout_add_backward(tmp_h_.data(), nullptr, dresid, s, b, h, hid);
  }
  ops_->embedding_backward(grad_data("wte.weight"), cfg_.rope() ? nullptr : grad_data("wpe.weight"),
                           tmp_h_.data(),
                           A.tokens.data(), s, b, h, vocab_start_, local_vocab_);
}

#define PTDP_INSTANTIATE(T)                                                    \
  template void GPT<T>::embedding_forward_into(Act, const int32_t *, int, int, \
                                               const StepContext &);          \
  template void GPT<T>::embedding_backward_into(ChunkActs &, CAct);
PTDP_INSTANTIATE(float)
PTDP_INSTANTIATE(double)
#undef PTDP_INSTANTIATE

}  // namespace ptdp
