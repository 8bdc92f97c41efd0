// What a pipeline schedule calls: the forward and backward of one model chunk
// for one micro-batch (embedding, layers with their stash or recomputation,
// head), and the whole model at p = 1.
#include <algorithm>
#include "engine/core/status.h"
#include "engine/model/gpt_internal.h"

namespace ptdp {

using namespace gpt_detail;

template <class T>
double GPT<T>::forward_chunk(int chunk, int mb, const int32_t *tokens, const int32_t *targets,
                             CAct input, Act output, int s, int b, const StepContext &ctx) {
  if (chunk < 0 || chunk >= pp_.chunks)
    fail(Status::invalid_argument, "model chunk ", chunk, " is outside [0, ", pp_.chunks, ")");
  if (s <= 0 || b <= 0) fail(Status::invalid_argument, "forward needs s > 0 and b > 0");
  if (s > cfg_.max_positions())
    fail(Status::invalid_argument, "sequence of ", s,
         " tokens is longer than max_position_embeddings (", cfg_.max_positions(), ")");
  const bool embedding = has_embedding(chunk), head = has_head(chunk);
  const int N = s * b, V = cfg_.vocab_size;
  if (embedding && !tokens) fail(Status::invalid_argument, "the embedding chunk needs tokens");
  if (!embedding && !input) fail(Status::invalid_argument, "chunk ", chunk, " needs an input");
  if (!head && !output) fail(Status::invalid_argument, "chunk ", chunk, " needs an output");
  for (int i = 0; embedding && i < N; i++)
    if (tokens[i] < 0 || tokens[i] >= V)
      fail(Status::invalid_argument, "token ", tokens[i], " at position ", i,
           " is outside the vocabulary [0, ", V, ")");
  for (int i = 0; head && targets && i < N; i++)
    if (targets[i] < 0 || targets[i] >= V)
      fail(Status::invalid_argument, "target ", targets[i], " at position ", i,
           " is outside the vocabulary [0, ", V, ")");
  if (ctx.training && head && !targets)
    fail(Status::invalid_argument, "a training forward of the head chunk needs targets");
  check_act("input", input);
  check_act("output", output);
  if (ctx.kv_cache && ctx.training)
    fail(Status::invalid_argument, "kv_cache is incremental decoding's: not in a training forward");
  if (ctx.kv_cache) {
    start_kv_forward(chunk, s, b, ctx.first_position);
  } else if (ctx.first_position != 0) {
    fail(Status::invalid_argument, "first_position ", ctx.first_position,
         " without kv_cache (positions other than 0.. are incremental decoding's)");
  } else if (!kv_cache_.empty()) {  // decoding is over: its memory goes back to training
    kv_cache_.clear();
    kv_positions_.clear();
    kv_batch_.clear();
    decode_probs_ = ActArray();
  }

  if (weights_changed_) {  // written since the last forward (see params())
    ops_->set_weights(params_.data(), params_.size());
    weights_changed_ = false;
  }
  ChunkActs &A = acquire(chunk, mb, s, b);
  A.ctx = ctx;
  const bool stash = ctx.training;
  // The embedding (and its backward) reads the tokens, the loss the targets.
  if (embedding) dev_->copy_from_host(A.tokens.data(), tokens, (size_t)N * sizeof(int32_t));
  if (head && targets) dev_->copy_from_host(A.targets.data(), targets, (size_t)N * sizeof(int32_t));
  const size_t Nh = boundary_elements(s, b);  // this rank's rows

  Act x = A.layers[0].x.data();
  if (embedding)
    embedding_forward_into(x, A.tokens.data(), s, b, ctx);
  else
    dev_->copy(x.p, input.p, Nh * dtype_size(act_));
  for (int j = 0; j < layers_per_chunk_; j++) {
    const int li = chunk * layers_per_chunk_ + j;
    const bool full = keeps_all(j);
    // Layers of a recomputed unit run on scratch; only the unit's input is kept.
    LayerActs *a = &A.layers[(size_t)j];
    if (!full) {
      if (recompute_.empty()) recompute_.push_back(std::make_unique<LayerActs>());
      a = recompute_[0].get();
      size_layer(*a, s, b, true);
    }
    Act out;
    if (j + 1 == layers_per_chunk_)
      out = head ? A.final_x.data() : output;
    else if (A.layers[(size_t)j + 1].x.size())
      out = A.layers[(size_t)j + 1].x.data();
    else
      out = x.p == x_ping_.data().p ? x_pong_.data() : x_ping_.data();
    layer_forward(li, x, out, *a, s, b, ctx);
    x = out;
  }
  double loss = 0;
  if (head) {
    head_forward(A, targets);
    if (targets) {
      for (int i = 0; i < N; i++) loss += (double)A.losses[i];
      loss /= N;
    }
    last_head_ = &A;
  }
  if (ctx.kv_cache) kv_positions_[(size_t)chunk] = ctx.first_position + s;
  if (stash) {
    stashed_bytes_ += A.bytes();
    peak_stashed_bytes_ = std::max(peak_stashed_bytes_, stashed_bytes_);
  } else {
    release(chunk, mb);  // nothing to keep; the pooled buffers still hold the logits
  }
  return loss;
}

template <class T>
void GPT<T>::start_kv_forward(int chunk, int s, int b, int pos0) {
  if (kv_positions_.size() != (size_t)pp_.chunks) {
    kv_positions_.assign((size_t)pp_.chunks, 0);
    kv_batch_.assign((size_t)pp_.chunks, 0);
  }
  const size_t c = (size_t)chunk;
  if (pos0 < 0 || (int64_t)pos0 + s > cfg_.max_positions())
    fail(Status::invalid_argument, "incremental decoding at positions ", pos0, " .. ", pos0 + s - 1,
         ": beyond max_position_embeddings (", cfg_.max_positions(), ")");
  if (pos0 > 0 && (s != 1 || b != kv_batch_[c] || pos0 != kv_positions_[c]))
    fail(Status::wrong_state, "incremental decoding of chunk ", chunk, " at position ", pos0,
         " with s = ", s, ", b = ", b, ": its cache holds positions 0 .. ", kv_positions_[c] - 1,
         " of ", kv_batch_[c], " sequences (a step continues at the cache's end, s = 1, the same "
         "b; position 0 starts afresh)");
  if (pos0 == 0) {  // a prompt: the chunk's caches sized for every position
    if (kv_cache_.size() < (size_t)pp_.chunks * layers_per_chunk_)
      kv_cache_.resize((size_t)pp_.chunks * layers_per_chunk_);
    for (int j = 0; j < layers_per_chunk_; j++)
      kv_cache_[c * layers_per_chunk_ + j].resize(
          *dev_, (size_t)cfg_.max_positions() * b * qkv_width_, act_);
    kv_batch_[c] = b;
  }
}

template <class T>
double GPT<T>::forward(const int32_t *tokens, const int32_t *targets, int s, int b,
                       const StepContext &ctx) {
  if (pp_.size > 1)
    fail(Status::wrong_state, "forward() runs the whole model; with pipeline_model_parallel_size ",
         pp_.size, " use forward_chunk()");
  release(0, kSerialSlot);  // a previous forward without backward
  StepContext c = ctx;
  if (!targets) c.training = false;  // nothing to differentiate
  return forward_chunk(0, kSerialSlot, tokens, targets, nullptr, nullptr, s, b, c);
}

// The step's gradients of local layer li are all in: round them to the
// storage type (16-bit gradients) and, when final, report them.
template <class T>
void GPT<T>::layer_grads_written(int li, bool final) {
  // The layer's tensors are consecutive in the table: its first and last.
  const std::vector<int> &slots = layer_slots_[(size_t)li];
  const int hi = *std::max_element(slots.begin(), slots.end());
  const ParamInfo &first = table_[(size_t)slots[0]];  // ln_1.weight, always there
  const ParamInfo &last = table_[(size_t)hi];
  grads_written(first.offset, last.padded_end() - first.offset, final);
}

template <class T>
void GPT<T>::backward_chunk(int chunk, int mb, CAct doutput, Act dinput, T dloss,
                            bool grads_final, bool defer_weight_grads) {
  auto it = live_.find(std::make_pair(chunk, mb));
  if (it == live_.end() || !it->second->ctx.training || it->second->weights_pending)
    fail(Status::wrong_state, "backward of micro-batch ", mb, " chunk ", chunk,
         " needs a preceding training forward of it");
  ChunkActs &A = *it->second;
  // The replicated gradients are summed over the tensor ranks when final: a
  // micro-batch that ran without sequence parallelism holds them whole.
  if (sp_ && tp_.size > 1 && !seq_parallel(A.s))
    fail(Status::invalid_argument, "with sequence parallelism a training micro-batch needs s (",
         A.s, ") a multiple of tensor_model_parallel_size (", tp_.size, ")");
  const bool embedding = has_embedding(chunk), head = has_head(chunk);
  if (!head && !doutput) fail(Status::invalid_argument, "chunk ", chunk, " backward needs doutput");
  if (!embedding && !dinput)
    fail(Status::invalid_argument, "chunk ", chunk, " backward needs dinput");
  check_act("doutput", doutput);
  check_act("dinput", dinput);
  const int s = A.s, b = A.b;
  const size_t Nh = boundary_elements(s, b);  // this rank's rows
  const StepContext &ctx = A.ctx;
  const bool defer = defer_weight_grads;
  const int64_t stash_before = A.bytes();
  Act dresid = dresid_.data();
  if (head) {
    head_backward(A, dresid, dloss);
    param_grads_written("ln_f.weight", cfg_.rms_norm() ? "ln_f.weight" : "ln_f.bias", grads_final);
    if (!cfg_.tied()) param_grads_written("lm_head.weight", "lm_head.weight", grads_final);
  } else {
    dev_->copy(dresid.p, doutput.p, Nh * dtype_size(act_));
  }
  // A deferred layer's gradients are rounded now (its biases and norms) and
  // reported after its W; rounding twice changes nothing.
  if (defer) A.w_layers.assign((size_t)layers_per_chunk_, nullptr);
  auto layer_done = [&](int j, LayerActs &a) {
    if (defer) A.w_layers[(size_t)j] = &a;
    layer_grads_written(chunk * layers_per_chunk_ + j, grads_final && !defer);
  };

  const int base = chunk * layers_per_chunk_;
  for (int j = layers_per_chunk_ - 1; j >= 0;) {
    if (keeps_all(j)) {
      LayerActs &a = A.layers[(size_t)j];
      layer_backward(base + j, a.x.data(), a, dresid, s, b, ctx, defer);
      layer_done(j, a);
      j--;
      continue;
    }
    // Recompute the unit [u, j] from its kept input, then back through it.
    const int u = unit_start(j), n = j - u + 1;
    while ((int)recompute_.size() < n + 1) recompute_.push_back(std::make_unique<LayerActs>());
    // recompute_[k] holds layer u+k; recompute_[n] only the unit's output (not needed).
    for (int k = 0; k <= n; k++) size_layer(*recompute_[(size_t)k], s, b, k < n);
    CAct x = A.layers[(size_t)u].x.data();
    for (int k = 0; k < n; k++) {
      Act out = recompute_[(size_t)k + 1]->x.data();
      layer_forward(base + u + k, x, out, *recompute_[(size_t)k], s, b, ctx);
      x = out;
    }
    for (int k = n - 1; k >= 0; k--) {
      CAct xin = k == 0 ? A.layers[(size_t)u].x.data() : recompute_[(size_t)k]->x.data();
      layer_backward(base + u + k, xin, *recompute_[(size_t)k], dresid, s, b, ctx, defer);
      layer_done(u + k, *recompute_[(size_t)k]);
    }
    // W reads the recomputed activations: they move to the stash.
    for (int k = 0; defer && k < n; k++) {
      A.recomputed.push_back(std::move(recompute_[(size_t)k]));
      if (!spare_layers_.empty()) {
        recompute_[(size_t)k] = std::move(spare_layers_.back());
        spare_layers_.pop_back();
      } else {
        recompute_[(size_t)k] = std::make_unique<LayerActs>();
      }
    }
    j = u - 1;
  }

  if (embedding) {
    embedding_backward_into(A, dresid);
  } else {
    dev_->copy(dinput.p, dresid.p, Nh * dtype_size(act_));
  }
  // The tied embedding is written by the head and the embedding; ln_f, the
  // untied head and the layers were reported as they finished.
  if (embedding || (head && cfg_.tied())) param_grads_written("wte.weight", "wte.weight", grads_final);
  if (embedding && !cfg_.rope()) param_grads_written("wpe.weight", "wpe.weight", grads_final);
  if (last_head_ == &A) last_head_ = nullptr;  // its logits now hold gradients
  if (!defer) {
    release(chunk, mb);
    return;
  }
  keep_weight_inputs(A);
  A.weights_pending = true;
  stashed_bytes_ += A.bytes() - stash_before;
  peak_stashed_bytes_ = std::max(peak_stashed_bytes_, stashed_bytes_);
}

template <class T>
void GPT<T>::backward_weight_chunk(int chunk, int mb, bool grads_final) {
  auto it = live_.find(std::make_pair(chunk, mb));
  if (it == live_.end() || !it->second->weights_pending)
    fail(Status::wrong_state, "weight gradients of micro-batch ", mb, " chunk ", chunk,
         " need a preceding backward of it that deferred them");
  ChunkActs &A = *it->second;
  for (int j = layers_per_chunk_ - 1; j >= 0; j--) {
    layer_weight_grads(chunk * layers_per_chunk_ + j, *A.w_layers[(size_t)j], A.s, A.b);
    layer_grads_written(chunk * layers_per_chunk_ + j, grads_final);
  }
  release(chunk, mb);
}

template <class T>
void GPT<T>::backward(T dloss) {
  if (pp_.size > 1)
    fail(Status::wrong_state, "backward() runs the whole model; with pipeline_model_parallel_size ",
         pp_.size, " use backward_chunk()");
  if (!live_.count(std::make_pair(0, kSerialSlot)))
    fail(Status::wrong_state, "backward() needs a preceding training forward() with targets");
  if (sp_ && tp_.size > 1)
    fail(Status::wrong_state, "backward() with sequence parallelism: its replicated gradients are "
         "summed over the tensor ranks once per step, which the trainer's runs do");
  backward_chunk(0, kSerialSlot, nullptr, nullptr, dloss);
}

#define PTDP_INSTANTIATE(T)                                                                    \
  template double GPT<T>::forward_chunk(int, int, const int32_t *, const int32_t *, CAct, Act, \
                                        int, int, const StepContext &);                        \
  template double GPT<T>::forward(const int32_t *, const int32_t *, int, int,                  \
                                  const StepContext &);                                        \
  template void GPT<T>::backward_chunk(int, int, CAct, Act, T, bool, bool);                    \
  template void GPT<T>::backward_weight_chunk(int, int, bool);                                 \
  template void GPT<T>::layer_grads_written(int, bool);                                        \
  template void GPT<T>::start_kv_forward(int, int, int, int);                                  \
  template void GPT<T>::backward(T);
PTDP_INSTANTIATE(float)
PTDP_INSTANTIATE(double)
#undef PTDP_INSTANTIATE

}  // namespace ptdp
