// GPT forward and backward written by hand (no autograd), pre-LayerNorm,
// learned positions, GeLU MLP, tied input/output embedding, [s, b, h] layout.
// T = float for training, double for the finite-difference tests.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "engine/core/allocator.h"
#include "engine/model/gpt_config.h"

namespace ptdp {

// One parameter tensor inside the flat parameter buffer.
struct ParamInfo {
  std::string name;              // GPT-2 / Hugging Face style: "h.3.attn.c_attn.weight"
  std::vector<int64_t> shape;    // [out, in] for weights; padded vocab for wte
  size_t offset = 0;             // into params() / grads()
  size_t numel = 0;
  bool weight_decay = true;      // false for biases and LayerNorm parameters
};

struct StepContext {
  bool training = true;          // dropout on, activations kept for backward
  uint32_t iteration = 0;        // keys the dropout masks
  uint32_t sample_offset = 0;    // global index of the micro-batch's first sample
};

template <class T>
class GPT {
 public:
  GPT(const GptConfig &cfg, uint64_t seed);
  const GptConfig &config() const { return cfg_; }

  T *params() { return params_.data(); }
  T *grads() { return grads_.data(); }
  size_t num_params() const { return params_.size(); }
  const std::vector<ParamInfo> &param_table() const { return table_; }
  const ParamInfo &param(const std::string &name) const;
  // Counts the real vocabulary rows of wte only (padding excluded).
  int64_t num_real_params() const;

  // tokens, targets: [s, b] in row order si*b + bi; targets may be null (no loss).
  // Returns the mean cross-entropy over the s*b tokens (0 without targets).
  double forward(const int32_t *tokens, const int32_t *targets, int s, int b,
                 const StepContext &ctx);
  // Backward of the last training forward; accumulates into grads(). dloss is the
  // weight of each token's loss in the objective (1 / tokens in the global batch).
  void backward(T dloss);
  // Logits of the last forward: [s*b, padded_vocab]; only the first vocab_size
  // columns of each row are computed.
  const T *logits() const { return logits_.data(); }

 private:
  struct Layer;
  struct Acts;
  Layer layer(int l);
  void init_parameters(uint64_t seed);
  void ensure_activations(int s, int b);
  void attention_forward(int l, int s, int b, const StepContext &ctx);
  void attention_backward(int l, int s, int b);

  GptConfig cfg_;
  uint64_t seed_;
  std::vector<ParamInfo> table_;
  Buffer<T> params_, grads_;

  // Activations of the last forward, kept for backward.
  int s_ = 0, b_ = 0;
  StepContext ctx_;
  std::vector<int32_t> tokens_, targets_;
  Buffer<T> resid_;                          // [L+1, N, h] residual stream at each layer input
  Buffer<T> ln1_, ln1_mean_, ln1_rstd_;      // [L, N, h], [L, N]
  Buffer<T> qkv_;                            // [L, N, 3h]  ordered [s, b, a, 3, hd]
  Buffer<T> probs_;                          // [L, b, a, s, s] softmax output (pre-dropout)
  Buffer<T> ctxv_;                           // [L, N, h]  attention context
  Buffer<T> mid_;                            // [L, N, h]  residual after attention
  Buffer<T> ln2_, ln2_mean_, ln2_rstd_;      // [L, N, h], [L, N]
  Buffer<T> fc1_z_, fc1_g_;                  // [L, N, f]  pre-GeLU (with bias), post-GeLU
  Buffer<T> lnf_, lnf_mean_, lnf_rstd_;      // [N, h], [N]
  Buffer<T> logits_;                         // [N, Vp]
  Buffer<T> losses_;                         // [N]
  // Scratch shared by all layers.
  Buffer<T> probs_drop_;                     // [b, a, s, s]
  Buffer<T> tmp_h_, tmp_h2_, dresid_;        // [N, h]
  Buffer<T> dqkv_, dfc_;                     // [N, 3h], [N, f]
  bool have_backward_state_ = false;
};

extern template class GPT<float>;
extern template class GPT<double>;

}  // namespace ptdp
