// Activations kept from a forward until its backward, per (model chunk,
// micro-batch), pooled for reuse; and the units of full recomputation, where
// only a unit's input is kept and backward runs its forward again.
#include "engine/core/status.h"
#include "engine/model/gpt_internal.h"

namespace ptdp {

using namespace gpt_detail;

template <class T>
bool GPT<T>::keeps_all(int j) const {
  if (!rc_.enabled) return true;
  return rc_.method == RecomputeMethod::block && j >= rc_.num_layers;
}

template <class T>
int GPT<T>::unit_start(int j) const {
  if (keeps_all(j) || rc_.method == RecomputeMethod::block) return j;  // block: units of one
  return j / rc_.num_layers * rc_.num_layers;
}

// Sizes a layer's buffers: everything (full) or its input only.
template <class T>
void GPT<T>::size_layer(LayerActs &a, int s, int b, bool full) {
  const size_t N = (size_t)s * b, h = cfg_.hidden_size, w = width_, f = ffn_, A = heads_;
  // Sequence parallelism: the input, mid and the norms' statistics are this
  // rank's rows; the GEMMs' inputs (ln1, ln2) all N.
  const size_t rows = (size_t)local_rows(s, b);
  const size_t means = cfg_.rms_norm() ? 0 : rows, fc1 = cfg_.swiglu ? 2 * f : f;  // fc1: gate|up
  const size_t probs = (size_t)b * A * s * s;
  auto sz = [&](DeviceArray<T> &buf, size_t n) { buf.resize(*dev_, full ? n : 0); };
  auto act = [&](ActArray &buf, size_t n) { buf.resize(*dev_, full ? n : 0, act_); };
  a.x.resize(*dev_, rows * h, act_);
  act(a.ln1, N * h);
  sz(a.ln1_mean, means);
  sz(a.ln1_rstd, rows);
  act(a.qkv, N * qkv_width_);
  // Selective recomputation keeps none (attention_forward writes them to
  // core_probs_).
  const bool kept = !flash_ && !rc_.selective;
  act(a.probs, kept ? probs : 0);
  // Dropped attention probabilities are kept: backward reads the mask back
  // from them instead of regenerating it (flash attention draws it again).
  act(a.probs_drop, cfg_.attention_dropout > 0 && kept ? probs : 0);
  sz(a.lse, flash_ ? (size_t)b * A * s : 0);
  act(a.ctxv, N * w);
  act(a.mid, rows * h);
  act(a.ln2, N * h);
  sz(a.ln2_mean, means);
  sz(a.ln2_rstd, rows);
  act(a.fc1_z, N * fc1);
  act(a.fc1_g, N * f);
}

template <class T>
typename GPT<T>::ChunkActs &GPT<T>::acquire(int chunk, int mb, int s, int b) {
  auto key = std::make_pair(chunk, mb);
  if (live_.count(key))
    fail(Status::wrong_state, "forward of micro-batch ", mb, " chunk ", chunk,
         " again before its backward");
  auto &pool = pool_[(size_t)chunk];
  std::unique_ptr<ChunkActs> A;
  if (!pool.empty()) {
    A = std::move(pool.back());
    pool.pop_back();
  } else {
    A = std::make_unique<ChunkActs>();
    A->layers.resize((size_t)layers_per_chunk_);
  }
  const size_t N = (size_t)s * b, h = cfg_.hidden_size, rows = (size_t)local_rows(s, b);
  for (int j = 0; j < layers_per_chunk_; j++) {
    const bool full = keeps_all(j);
    size_layer(A->layers[(size_t)j], s, b, full);
    if (!full && unit_start(j) != j) A->layers[(size_t)j].x.resize(*dev_, 0, act_);  // in a unit
  }
  const bool head = has_head(chunk);
  Device &d = *dev_;
  A->final_x.resize(d, head ? rows * h : 0, act_);
  A->lnf.resize(d, head ? N * h : 0, act_);
  A->lnf_mean.resize(d, head && !cfg_.rms_norm() ? rows : 0);
  A->lnf_rstd.resize(d, head ? rows : 0);
  A->logits.resize(d, head ? N * (size_t)local_vocab_ : 0, act_);
  A->ce.resize(d, head ? 3 * N : 0);
  A->losses.resize(head ? N : 0);
  A->tokens.resize(d, has_embedding(chunk) ? N : 0);
  A->targets.resize(d, head ? N : 0);
  A->s = s;
  A->b = b;
  // Scratch shared by every chunk.
  const size_t w = width_, f = ffn_;
  dprobs_.resize(d, flash_ ? 0 : (size_t)b * heads_ * s * s, act_);
  const bool core = rc_.selective && !flash_;
  core_probs_.resize(d, core ? (size_t)b * heads_ * s * s : 0, act_);
  core_probs_drop_.resize(d, core && cfg_.attention_dropout > 0 ? (size_t)b * heads_ * s * s : 0,
                          act_);
  for (ActArray *x : {&tmp_h_, &tmp_h2_, &dresid_, &x_ping_, &x_pong_}) x->resize(d, N * h, act_);
  for (ActArray *x : {&sp_local_, &sp_part_, &sp_dy_})
    x->resize(d, seq_parallel(s) ? rows * h : 0, act_);
  dctx_.resize(d, N * w, act_);
  dqkv_.resize(d, N * qkv_width_, act_);
  dfc_.resize(d, N * f * (cfg_.swiglu ? 2 : 1), act_);
  dact_.resize(d, cfg_.swiglu ? N * f : 0, act_);
  return *(live_[key] = std::move(A));
}

// After a deferred backward: free what its W will not read. W reads, per
// layer, ln1, the attention context, ln2 and the MLP activation (besides its
// W part); the chunk's other activations, the head's logits included, go.
template <class T>
void GPT<T>::keep_weight_inputs(ChunkActs &A) {
  Device &d = *dev_;
  for (LayerActs &a : A.layers) a.x.resize(d, 0, act_);  // a recomputed unit's input
  for (LayerActs *a : A.w_layers) {
    for (ActArray *x : {&a->x, &a->qkv, &a->probs, &a->probs_drop, &a->mid, &a->fc1_z})
      x->resize(d, 0, act_);
    for (DeviceArray<T> *x : {&a->ln1_mean, &a->ln1_rstd, &a->lse, &a->ln2_mean, &a->ln2_rstd})
      x->resize(d, 0);
  }
  for (ActArray *x : {&A.final_x, &A.lnf, &A.logits}) x->resize(d, 0, act_);
  for (DeviceArray<T> *x : {&A.lnf_mean, &A.lnf_rstd, &A.ce}) x->resize(d, 0);
  A.tokens.resize(d, 0);
  A.targets.resize(d, 0);
  A.losses.clear();
}

template <class T>
void GPT<T>::release(int chunk, int mb) {
  auto it = live_.find(std::make_pair(chunk, mb));
  if (it == live_.end()) return;
  ChunkActs &A = *it->second;
  if (A.ctx.training) stashed_bytes_ -= A.bytes();
  // The W parts go (a pooled chunk would hold them unreported); the
  // recomputed layers go back to the spares, at most one unit's worth kept.
  for (LayerActs *l : A.w_layers)
    for (ActArray *x : {&l->dy_attn, &l->dqkv, &l->dy_mlp, &l->dfc}) x->resize(*dev_, 0, act_);
  A.weights_pending = false;
  A.w_layers.clear();
  for (auto &l : A.recomputed)
    if ((int)spare_layers_.size() < layers_per_chunk_) spare_layers_.push_back(std::move(l));
  A.recomputed.clear();
  pool_[(size_t)chunk].push_back(std::move(it->second));
  live_.erase(it);
}

#define PTDP_INSTANTIATE(T)                                                 \
  template bool GPT<T>::keeps_all(int) const;                               \
  template int GPT<T>::unit_start(int) const;                               \
  template void GPT<T>::size_layer(LayerActs &, int, int, bool);            \
  template typename GPT<T>::ChunkActs &GPT<T>::acquire(int, int, int, int); \
  template void GPT<T>::release(int, int);                                   \
  template void GPT<T>::keep_weight_inputs(ChunkActs &);
PTDP_INSTANTIATE(float)
PTDP_INSTANTIATE(double)
#undef PTDP_INSTANTIATE

}  // namespace ptdp
