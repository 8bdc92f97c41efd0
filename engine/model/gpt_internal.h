// The model's private pieces shared by its files (engine/model/*.cpp): the
// parameter and activation structures of one layer and one model chunk, and
// the dropout sites. Included by the model's own sources only.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "engine/core/philox.h"
#include "engine/model/gpt.h"

namespace ptdp {
namespace gpt_detail {

// A layer's tensors by role: the order of GPT::Layer's members, and the
// parameter names' suffixes after "h.<layer>.".
constexpr int kLayerRoles = 15;
constexpr const char *kLayerRoleNames[kLayerRoles] = {
    "ln_1.weight",       "ln_1.bias",         "attn.c_attn.weight",  "attn.c_attn.bias",
    "attn.c_proj.weight", "attn.c_proj.bias", "ln_2.weight",         "ln_2.bias",
    "mlp.c_fc.weight",   "mlp.c_fc.bias",     "mlp.c_proj.weight",   "mlp.c_proj.bias",
    "mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.gate_up_proj.bias"};
constexpr int kSerialSlot = -1;  // the micro-batch id of forward()/backward()
// Dropout sites; the stream of (layer, site) keys the mask (ARCHITECTURE §3).
enum Site : uint32_t { kEmbedding = 0, kAttentionProbs = 1, kAttentionOut = 2, kMlpOut = 3 };
inline uint32_t dropout_stream(int layer, Site site) { return (uint32_t)(layer + 1) * 4u + site; }

}  // namespace gpt_detail

// A layer's tensors inside params() or grads(); null where the options leave
// one out (norm biases with RMSNorm, linear biases with disable_bias_linear;
// fc1 with SwiGLU, whose gate and up take its place).
template <class T>
struct GPT<T>::Layer {
  T *ln1_w, *ln1_b, *qkv_w, *qkv_b, *proj_w, *proj_b, *ln2_w, *ln2_b, *fc1_w, *fc1_b, *fc2_w,
      *fc2_b, *gate_w, *up_w, *gate_up_b;  // gate_up_b: [gate | up] biases, SwiGLU's [2, f]
};

// One layer's activations. x is its input; the rest is empty for a layer whose
// unit is recomputed (only the unit's first x is kept then). ActArrays hold
// the activation type (T, or a 16-bit run's bf16/f16); statistics stay in T.
// Shapes with w, a, f meaning this rank's share (h/t, a/t, f/t); N = s*b.
template <class T>
struct GPT<T>::LayerActs {
  ActArray x;                              // [N, h]
  ActArray ln1;                            // [N, h]
  DeviceArray<T> ln1_mean, ln1_rstd;       // [N] (RMSNorm: rstd only)
  ActArray qkv;                            // [N, 3w]  ordered [s, b, a, 3, hd]
  ActArray probs, probs_drop;              // [b, a, s, s] softmax output, after dropout
  DeviceArray<T> lse;                      // [b*a, s] instead of probs, with flash attention
  ActArray ctxv;                           // [N, w]  attention context
  ActArray mid;                            // [N, h]  residual after attention
  ActArray ln2;                            // [N, h]
  DeviceArray<T> ln2_mean, ln2_rstd;       // [N]
  ActArray fc1_z, fc1_g;                   // [N, f]  pre-GeLU (with bias), post-GeLU;
                                           // SwiGLU: [N, 2f] gate|up, [N, f] silu(gate) up
  // The W part: output gradients of the weight GEMMs a deferred backward
  // left (sized by it, freed when its W releases the chunk; counted as
  // stashed while the W is pending).
  ActArray dy_attn, dqkv, dy_mlp;          // [N, h], [N, 3w], [N, h]
  ActArray dfc;                            // [N, f] (SwiGLU [N, 2f]) after the activation's backward
  int64_t w_bytes() const {
    return (int64_t)(dy_attn.bytes() + dqkv.bytes() + dy_mlp.bytes() + dfc.bytes());
  }
  int64_t bytes() const {
    size_t n = 0;
    for (const ActArray *b : {&x, &ln1, &qkv, &probs, &probs_drop, &ctxv, &mid, &ln2, &fc1_z,
                              &fc1_g})
      n += b->bytes();
    for (const DeviceArray<T> *b : {&ln1_mean, &ln1_rstd, &lse, &ln2_mean, &ln2_rstd})
      n += b->bytes();
    return (int64_t)n;
  }
};

// Everything one (chunk, micro-batch) forward keeps for its backward, and
// after a deferred backward what its weight gradients read.
template <class T>
struct GPT<T>::ChunkActs {
  int s = 0, b = 0;
  StepContext ctx;
  bool weights_pending = false;            // backward done, its W not yet
  std::vector<LayerActs *> w_layers;       // per layer: where its W's inputs are
  std::vector<std::unique_ptr<LayerActs>> recomputed;  // recomputed layers kept for W
  DeviceArray<int32_t> tokens, targets;    // [N] embedding chunk, head chunk
  std::vector<LayerActs> layers;           // per layer of the chunk
  ActArray final_x;                        // [N, h] head input (last layer's output)
  ActArray lnf;                            // [N, h]
  DeviceArray<T> lnf_mean, lnf_rstd;       // [N]
  ActArray logits;                         // [N, Vp/t]
  DeviceArray<T> ce;                       // [3, N] row max, sum of exp, target logit
  std::vector<T> losses;                   // [N] on the host
  int64_t bytes() const {
    int64_t n = (int64_t)((tokens.size() + targets.size()) * sizeof(int32_t));
    for (auto &l : layers) n += l.bytes();
    for (auto &l : recomputed) n += l->bytes();
    for (LayerActs *l : w_layers)
      if (weights_pending) n += l->w_bytes();
    for (const ActArray *x : {&final_x, &lnf, &logits}) n += (int64_t)x->bytes();
    for (const DeviceArray<T> *x : {&lnf_mean, &lnf_rstd, &ce}) n += (int64_t)x->bytes();
    return n + (int64_t)(losses.size() * sizeof(T));
  }
};

}  // namespace ptdp
