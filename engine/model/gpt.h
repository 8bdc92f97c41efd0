// GPT forward and backward written by hand (no autograd), pre-LayerNorm,
// learned positions, GeLU MLP, tied input/output embedding, [s, b, h] layout.
// T = float for training, double for the finite-difference tests.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "engine/comm/communicator.h"
#include "engine/core/allocator.h"
#include "engine/model/gpt_config.h"

namespace ptdp {

// One parameter tensor (this rank's shard) inside the flat parameter buffer.
struct ParamInfo {
  std::string name;                  // GPT-2 / Hugging Face style: "h.3.attn.c_attn.weight"
  std::vector<int64_t> shape;        // local shard: [out, in] for weights
  std::vector<int64_t> global_shape; // unsharded; wte has the padded vocabulary rows
  int split_axis = -1;               // tensor-parallel split: -1 replicated, 0 rows, 1 columns
  size_t offset = 0;                 // into params() / grads()
  size_t numel = 0;
  bool weight_decay = true;          // false for biases and LayerNorm parameters
};

// This rank's place in its tensor-parallel group; comm is null when size = 1.
struct TensorParallel {
  int rank = 0, size = 1;
  Communicator *comm = nullptr;
};

struct StepContext {
  bool training = true;          // dropout on, activations kept for backward
  uint32_t iteration = 0;        // keys the dropout masks
  uint32_t sample_offset = 0;    // global index of the micro-batch's first sample
};

template <class T>
class GPT {
 public:
  GPT(const GptConfig &cfg, uint64_t seed, TensorParallel tp = {});
  const GptConfig &config() const { return cfg_; }
  const TensorParallel &tensor_parallel() const { return tp_; }
  // Global index of local element i of parameter p (the init RNG's counter).
  int64_t global_index(const ParamInfo &p, size_t i) const;

  T *params() { return params_.data(); }
  const T *params() const { return params_.data(); }
  T *grads() { return grads_.data(); }
  const T *grads() const { return grads_.data(); }
  size_t num_params() const { return params_.size(); }
  const std::vector<ParamInfo> &param_table() const { return table_; }
  const ParamInfo &param(const std::string &name) const;
  // Parameters of the whole (unsharded) model, padding rows excluded.
  int64_t num_real_params() const;

  // tokens, targets: [s, b] in row order si*b + bi; targets may be null (no loss).
  // Returns the mean cross-entropy over the s*b tokens (0 without targets).
  double forward(const int32_t *tokens, const int32_t *targets, int s, int b,
                 const StepContext &ctx);
  // Backward of the last training forward; accumulates into grads(). dloss is the
  // weight of each token's loss in the objective (1 / tokens in the global batch).
  void backward(T dloss);
  // Logits of the last forward: [s*b, local_vocab()], this rank's vocabulary
  // shard; only its first local_real_vocab() columns (real tokens) are computed.
  const T *logits() const { return logits_.data(); }
  int vocab_start() const { return vocab_start_; }
  int local_vocab() const { return local_vocab_; }
  int local_real_vocab() const { return local_real_vocab_; }

 private:
  struct Layer;
  struct Acts;
  // Layer l's tensors inside `base` (params() or grads()).
  Layer layer(T *base, int l);
  void init_parameters(uint64_t seed);
  void ensure_activations(int s, int b);
  void attention_forward(int l, int s, int b, const StepContext &ctx);
  void attention_backward(int l, int s, int b);

  void tp_all_reduce(T *buf, size_t n);
  void vocab_parallel_loss(const int32_t *targets, int N);

  GptConfig cfg_;
  uint64_t seed_;
  TensorParallel tp_;
  // Local sizes: heads, attention width, MLP width, vocabulary shard.
  int heads_ = 0, width_ = 0, ffn_ = 0;
  int vocab_start_ = 0, local_vocab_ = 0, local_real_vocab_ = 0;
  std::vector<ParamInfo> table_;
  Buffer<T> params_, grads_;

  // Activations of the last forward, kept for backward.
  int s_ = 0, b_ = 0;
  StepContext ctx_;
  std::vector<int32_t> tokens_, targets_;
  Buffer<T> resid_;                          // [L+1, N, h] residual stream at each layer input
  // Shapes below with h, a, f, 3h meaning this rank's share (w = h/t, a/t, f/t).
  Buffer<T> ln1_, ln1_mean_, ln1_rstd_;      // [L, N, h], [L, N]
  Buffer<T> qkv_;                            // [L, N, 3w]  ordered [s, b, a/t, 3, hd]
  Buffer<T> probs_;                          // [L, b, a/t, s, s] softmax output (pre-dropout)
  Buffer<T> ctxv_;                           // [L, N, w]  attention context
  Buffer<T> mid_;                            // [L, N, h]  residual after attention
  Buffer<T> ln2_, ln2_mean_, ln2_rstd_;      // [L, N, h], [L, N]
  Buffer<T> fc1_z_, fc1_g_;                  // [L, N, f/t]  pre-GeLU (with bias), post-GeLU
  Buffer<T> lnf_, lnf_mean_, lnf_rstd_;      // [N, h], [N]
  Buffer<T> logits_;                         // [N, Vp/t]
  Buffer<T> losses_;                         // [N]
  Buffer<T> ce_max_, ce_sums_;               // [N], [2, N] vocab-parallel loss reductions
  // Scratch shared by all layers.
  Buffer<T> probs_drop_;                     // [L, b, a/t, s, s] after dropout (training with it)
  Buffer<T> dprobs_;                         // [b, a/t, s, s]
  Buffer<T> tmp_h_, tmp_h2_, dresid_;        // [N, h]
  Buffer<T> dctx_;                           // [N, w]
  Buffer<T> dqkv_, dfc_;                     // [N, 3w], [N, f/t]
  bool have_backward_state_ = false;
};

extern template class GPT<float>;
extern template class GPT<double>;

}  // namespace ptdp
