// GPT forward and backward written by hand (no autograd), pre-norm, [s, b, h]
// layout: GPT-2's block (LayerNorm, learned positions, GeLU MLP, tied
// input/output embedding) or the LLaMA family's pieces (GptConfig's options:
// RMSNorm, rotary positions, grouped-query attention, SwiGLU, untied head).
// T = float for training, double for the finite-difference tests.
//
// The model runs on one Device through its op table (engine/device/ops.h):
// parameters, gradients and activations live in the device's memory, and every
// pointer the interface below takes or returns is a device pointer (on the CPU
// device, host memory). Tokens and targets are host arrays; the model copies them.
//
// A GPT object is one rank's share of the model: its tensor-parallel shard of
// the layers of its pipeline model chunks (ARCHITECTURE §4). Chunk c of
// pipeline rank r is virtual stage c*p + r (or in a V, engine/parallel/
// placement.h) and holds num_layers / (p*v) consecutive layers; the embedding
// sits on virtual stage 0, the LM head on the last. Activations are kept per
// (micro-batch, chunk) until that backward (or its deferred weight gradients),
// so any pipeline schedule can interleave them.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/comm/communicator.h"
#include "engine/core/dtype.h"
#include "engine/device/act_array.h"
#include "engine/device/device.h"
#include "engine/device/ops.h"
#include "engine/parallel/placement.h"
#include "engine/parallel/tensor_parallel.h"
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
  // The last stage's copy of the tied embedding (p > 1): the first stage's copy
  // is the one counted in the gradient norm.
  bool tied_copy = false;
  // Rows are the padded vocabulary (wte, an untied lm_head): rows from
  // vocab_size on are padding, zero and absent from checkpoints.
  bool vocab_rows = false;
  // Where the next tensor starts in the flat buffers: each tensor is padded to
  // a multiple of 16 elements (64-byte aligned).
  size_t padded_end() const { return offset + (numel + 15) / 16 * 16; }
};

// This rank's place in the pipeline: rank of size (p), with `chunks` (v) model
// chunks, placed in a loop or (zbv) in a V.
struct PipelineStage {
  int rank = 0, size = 1, chunks = 1;
  bool v_shape = false;
  int virtual_stage(int chunk) const { return ptdp::virtual_stage(v_shape, size, rank, chunk); }
  bool has_embedding(int chunk) const { return virtual_stage(chunk) == 0; }
  bool has_head(int chunk) const { return virtual_stage(chunk) == size * chunks - 1; }
};

// Megatron's --recompute-granularity full: only the input of each recomputed
// unit is kept; backward runs the unit's forward again. uniform: the chunk's
// layers in units of num_layers; block: the first num_layers layers of each
// chunk one by one, the rest keep everything.
// --recompute-granularity selective (Korthikanti et al.): every layer keeps
// its activations except the attention core's [b, a/t, s, s] probabilities
// (and their dropped copy), which backward computes again from the kept QKV;
// with flash attention, which never stores them, it changes nothing.
enum class RecomputeMethod { uniform, block };
struct Recompute {
  bool enabled = false;  // full
  RecomputeMethod method = RecomputeMethod::uniform;
  int num_layers = 1;
  bool selective = false;  // exclusive with enabled
};

// Mixed precision (ARCHITECTURE §3): parameters and activations held in
// `dtype`, gradients accumulated in fp32 (Megatron's
// --accumulate-allreduce-grads-in-fp32) or in `dtype`. Activations and their
// gradients are 16-bit arrays on every backend (2 bytes an element); the
// parameters (and 16-bit gradients) are fp32 arrays of values rounded to
// nearest even to the 16-bit type, beside the optimizer's fp32 master copy.
// Every op reads 16-bit inputs and computes in fp32, on the CPU as on the GPU.
struct Precision {
  DType dtype = DType::f32;
  bool grads_in_fp32 = true;
};

// The parameter table of one rank's share (tensor rank of t, pipeline stage
// pp): names, local and global shapes, split axes and offsets in the flat
// buffer. gpt_param_table(cfg, 1, {}) lists the whole model.
std::vector<ParamInfo> gpt_param_table(const GptConfig &cfg, int t, const PipelineStage &pp);

struct StepContext {
  bool training = true;          // dropout on, activations kept for backward
  uint32_t iteration = 0;        // keys the dropout masks
  uint32_t sample_offset = 0;    // global index of the micro-batch's first sample
  // Incremental decoding (not training): the tokens sit at positions
  // first_position.., their keys and values join the chunk's cache and
  // attention reads every cached position. first_position 0 starts the cache
  // afresh (a prompt of s tokens); a later forward continues at the cache's
  // end with one token a sequence.
  bool kv_cache = false;
  int first_position = 0;
};

template <class T>
class GPT {
 public:
  // `device` must outlive the model; null: a CPU device of the model's own.
  GPT(const GptConfig &cfg, uint64_t seed, TensorParallel tp = {}, PipelineStage pp = {},
      Recompute rc = {}, Precision prec = {}, Device *device = nullptr);
  ~GPT();
  const GptConfig &config() const { return cfg_; }
  const TensorParallel &tensor_parallel() const { return tp_; }
  const PipelineStage &pipeline_stage() const { return pp_; }
  const Precision &precision() const { return prec_; }
  Device &device() const { return *dev_; }
  // A 16-bit model's initial parameters as drawn, in fp32 before their
  // rounding, laid out like params(): the optimizer's master weights start
  // from them, as PyTorch autocast's and Megatron's do. Empty for an fp32
  // model, once taken (the first caller owns the memory), and once anything
  // took params() writable (then the rounded parameters are the truth).
  DeviceArray<float> take_fp32_init() { return std::move(fp32_init_); }
  // Megatron's --use-flash-attn: attention fused into one op per direction that
  // keeps each row's log-sum-exp instead of the [b, a/t, s, s] probabilities.
  // Not between a training forward and its backward.
  void set_flash_attention(bool on);
  bool flash_attention() const { return flash_; }
  // Megatron's --sequence-parallel (t > 1; ARCHITECTURE §4): the norms,
  // dropout and residual work on this rank's s/t positions, all-gathered
  // before each column-parallel GEMM and reduce-scattered after each
  // row-parallel one; boundary tensors between stages carry the s/t rows.
  // A micro-batch whose s is not a multiple of t runs without it.
  // Replicated gradients (norms, row-parallel biases) are then partial sums,
  // added over the tensor ranks once the step's last backward reported them
  // final: the trainer's runs only (backward() refuses it).
  void set_sequence_parallel(bool on);
  bool seq_parallel(int s) const { return sp_ && tp_.size > 1 && s % tp_.size == 0; }
  // Elements of a boundary tensor between stages for micro-batches of b x s.
  size_t boundary_elements(int s, int b) const {
    return (size_t)s * b * cfg_.hidden_size / (seq_parallel(s) ? tp_.size : 1);
  }
  Ops<T> &ops() const { return *ops_; }
  // Times every op of the model and of its optimizer (which calls ops()) on the
  // device's clock (Ops::set_profiling) until turned off; take_op_profile gives the
  // sums since the last take, slowest first (empty when off). Any time.
  void set_op_profiling(bool on);
  std::vector<OpTime> take_op_profile();
  // Global index of local element i of parameter p (the init RNG's counter).
  int64_t global_index(const ParamInfo &p, size_t i) const;

  // The parameters. Taking them writable counts as a write: the ops' copy of
  // the weights (a 16-bit run's 2-byte copy on CUDA, Ops::set_weights) is made
  // again before the next forward, so no writer (the optimizer, a checkpoint
  // load, an import) can leave it stale, and a forward with unchanged weights
  // reuses it (once per optimizer step, not per micro-batch). So a writer takes
  // the pointer again after any forward rather than keeping it. It also drops
  // the fp32 initial parameters (take_fp32_init): they are no longer the model's.
  T *params() {
    weights_changed_ = true;
    ops_->weights_written();
    fp32_init_ = DeviceArray<float>();
    return params_.data();
  }
  const T *params() const { return params_.data(); }
  T *grads() { return grads_.data(); }
  const T *grads() const { return grads_.data(); }
  size_t num_params() const { return params_.size(); }
  // Explicit copies of the device's parameters and gradients to the host.
  std::vector<T> params_to_host() const { return params_.to_host(); }
  std::vector<T> grads_to_host() const { return grads_.to_host(); }
  const std::vector<ParamInfo> &param_table() const { return table_; }
  const ParamInfo &param(const std::string &name) const;  // throws if not on this rank
  const ParamInfo *find_param(const std::string &name) const;  // null if not on this rank
  // Parameters of the whole (unsharded, unpipelined) model, padding rows excluded.
  int64_t num_real_params() const;

  // ---- pipeline interface: one model chunk of one micro-batch ----
  int num_chunks() const { return pp_.chunks; }
  int layers_per_chunk() const { return layers_per_chunk_; }
  int first_layer(int chunk) const;  // global index of the chunk's first layer
  bool has_embedding(int chunk) const { return pp_.has_embedding(chunk); }
  bool has_head(int chunk) const { return pp_.has_head(chunk); }
  // Forward of chunk `chunk` for micro-batch `mb` (any id unique among those in
  // flight). The embedding chunk reads tokens [s, b], the others `input`
  // [s, b, h]. The head chunk returns the mean cross-entropy (0 without
  // targets); the others write [s, b, h] to `output` and return 0. In training,
  // the chunk's activations are stashed until backward_chunk of the same pair.
  // input, output (and backward's tensors) hold activation_type() elements.
  double forward_chunk(int chunk, int mb, const int32_t *tokens, const int32_t *targets,
                       CAct input, Act output, int s, int b, const StepContext &ctx);
  // Backward of a stashed forward; accumulates into grads(). The head chunk
  // starts from the loss, each token weighted by dloss (1 / tokens in the
  // global batch); the others from `doutput`. Writes d(input) to `dinput`
  // except on the embedding chunk. `grads_final`: this is the step's last
  // backward of the chunk, so each of its gradient ranges is reported to the
  // grad-ready hook as soon as it is final (an overlapped gradient reduction).
  // `defer_weight_grads` (a zero-bubble schedule's B): the layers' weight
  // GEMMs (QKV, projection, MLP) are left for backward_weight_chunk, which
  // keeps what they read (the GEMMs' inputs and output gradients) stashed
  // until then; biases, norms, the head and the embedding are done here.
  void backward_chunk(int chunk, int mb, CAct doutput, Act dinput, T dloss,
                      bool grads_final = false, bool defer_weight_grads = false);
  // The weight gradients a deferred backward_chunk of (chunk, mb) left (W):
  // the same GEMMs on the same inputs, so the sums equal an undivided
  // backward's when W's run in micro-batch order. Releases the stash.
  void backward_weight_chunk(int chunk, int mb, bool grads_final = false);
  // The element type of activations and of the tensors between pipeline
  // stages: T, or a 16-bit run's type.
  DType activation_type() const { return act_; }
  // Called with [offset, offset + n) of grads() when that range is final for
  // the step: each layer as its backward ends, then ln_f, wte and wpe (whole
  // tensors with their padding, so that the ranges cover the flat buffer).
  using GradReadyHook = std::function<void(size_t offset, size_t n)>;
  void set_grad_ready_hook(GradReadyHook hook) { grad_ready_ = std::move(hook); }
  // Bytes of activations stashed for backward now, and the peak since reset.
  int64_t stashed_bytes() const { return stashed_bytes_; }
  int64_t peak_stashed_bytes() const { return peak_stashed_bytes_; }
  void reset_peak_stashed_bytes() { peak_stashed_bytes_ = stashed_bytes_; }

  // ---- whole model (p = 1) ----
  // tokens, targets: [s, b] in row order si*b + bi; targets may be null (no loss).
  // Returns the mean cross-entropy over the s*b tokens (0 without targets).
  double forward(const int32_t *tokens, const int32_t *targets, int s, int b,
                 const StepContext &ctx);
  // Backward of the last training forward; accumulates into grads().
  void backward(T dloss);
  // Rows [first_row, first_row + rows) of the logits of the last head forward,
  // copied to the host in T: [rows, local_vocab()], this rank's vocabulary
  // shard; only its first local_real_vocab() columns (real tokens) are computed.
  std::vector<T> logits_to_host(int first_row, int rows) const;
  int vocab_start() const { return vocab_start_; }
  int local_vocab() const { return local_vocab_; }
  int local_real_vocab() const { return local_real_vocab_; }

 private:
  struct Layer;
  struct LayerActs;
  struct ChunkActs;
  // Layer li's (local index) tensors inside `base` (params() or grads()).
  Layer layer(T *base, int li);
  void init_parameters(uint64_t seed);
  bool keeps_all(int j) const;       // layer j of a chunk keeps all its activations
  int unit_start(int j) const;       // first layer of the recomputed unit holding j
  void size_layer(LayerActs &a, int s, int b, bool full);
  ChunkActs &acquire(int chunk, int mb, int s, int b);
  void release(int chunk, int mb);
  void keep_weight_inputs(ChunkActs &A);  // after a deferred backward
  void layer_forward(int li, CAct x, Act out, LayerActs &a, int s, int b, const StepContext &ctx);
  // defer: leave the weight GEMMs to layer_weight_grads, their output
  // gradients kept in a's W part.
  void layer_backward(int li, CAct x, LayerActs &a, Act dresid, int s, int b,
                      const StepContext &ctx, bool defer);
  void layer_weight_grads(int li, const LayerActs &a, int s, int b);
  // One block's weight-gradient GEMMs from its output gradients:
  // dy_mlp [N, h] and dfc [N, f] (SwiGLU [N, 2f]); dy_attn [N, h], dqkv [N, q].
  void mlp_weight_grads(int li, const LayerActs &a, CAct dy_mlp, CAct dfc, int N);
  void attention_weight_grads(int li, const LayerActs &a, CAct dy_attn, CAct dqkv, int N);
  void size_weight_grads(LayerActs &a, int s, int b);  // a's W part
  void layer_grads_written(int li, bool final);      // the layer's whole range
  // Rope on q and k in place, for positions first_position ...
  void rotate_qk(Act qkv, int s, int b, bool inverse, int first_position = 0);
  void attention_forward(int l, LayerActs &a, int s, int b, const StepContext &ctx);
  // Incremental decoding: the queries of this forward's s rows (at positions
  // pos0..) against every cached key and value of local layer li, into a.ctxv.
  void attention_decode(int li, LayerActs &a, int s, int b, int pos0);
  // The unfused core's two products, for training and decoding alike: queries
  // Q (s rows of QKV's layout) against the keys of kv (sk rows: QKV itself or
  // a decoding cache), P [b*a/t, s, sk] = Q K^T unscaled; then ctx = P V.
  void attention_scores(CAct Q, CAct kv, Act P, int s, int sk, int b);
  void attention_context(CAct P, CAct kv, int s, int sk, int b, Act ctx);
  // Checks a kv_cache forward of chunk `chunk` and sizes its caches (pos0 = 0).
  void start_kv_forward(int chunk, int s, int b, int pos0);
  // In: dctx_. Out: dqkv [N, q].
  void attention_backward(int l, const LayerActs &a, Act dqkv, int s, int b,
                          const StepContext &ctx);
  // The unfused core's probabilities from a's QKV into probs (and their
  // dropout into probs_drop); returns the ones ·V reads.
  CAct attention_probs(int l, const LayerActs &a, Act probs, Act probs_drop, int s, int b,
                       const StepContext &ctx);
  void embedding_forward_into(Act out, const int32_t *tokens, int s, int b,
                              const StepContext &ctx);
  void embedding_backward_into(ChunkActs &A, CAct dresid);  // accumulates dwte, dwpe
  void head_forward(ChunkActs &A, const int32_t *targets);
  void head_backward(ChunkActs &A, Act dresid, T dloss);

  // engine/parallel/tensor_parallel.h's all-reduce with this model's staging
  // buffer (reduce_buf_).
  void tp_all_reduce(Act buf, size_t n);
  // The sequence-parallel pieces (plain tensor parallelism without it): the
  // norm of this rank's rows x into a GEMM's input of all N rows; a
  // row-parallel GEMM's partial sums [N, h] reduced to this rank's rows
  // (returned: partial itself, all-reduced, or sp_part_); the rows a
  // micro-batch's norms and dropout see, and where its slice starts.
  void norm_to_gemm_input(Act full, T *mean, T *rstd, CAct x, const T *w, const T *b, int s,
                          int bsz);
  Act reduce_row_parallel(Act partial, int s, int bsz);
  int local_rows(int s, int bsz) const { return s * bsz / (seq_parallel(s) ? tp_.size : 1); }
  uint32_t first_position(int s) const {
    return seq_parallel(s) ? (uint32_t)(tp_.rank * (s / tp_.size)) : 0u;
  }
  void to_storage(T *x, size_t n);  // rounds to prec_.dtype (16-bit only)
  // A tensor handed to forward_chunk/backward_chunk must hold activation_type().
  void check_act(const char *what, CAct x) const;
  // A backward wrote [offset, offset + n) of grads(): rounds it to the storage
  // type when gradients accumulate in 16 bits, and reports it when final.
  void grads_written(size_t offset, size_t n, bool final);
  void param_grads_written(const char *first, const char *last, bool final);
  T *param_data(const char *name) { return params_.data() + param(name).offset; }
  T *grad_data(const char *name) { return grads_.data() + param(name).offset; }
  void vocab_parallel_loss(ChunkActs &A);
  // The final norm and the head's weight (wte when tied, lm_head otherwise).
  void norm_forward(Act out, T *mean, T *rstd, CAct x, const T *w, const T *b, int N);
  void norm_backward(Act dx, T *dw, T *db, CAct dout, CAct x, const T *w, const T *mean,
                     const T *rstd, int N);
  const char *head_weight_name() const { return cfg_.tied() ? "wte.weight" : "lm_head.weight"; }

  GptConfig cfg_;
  uint64_t seed_;
  TensorParallel tp_;
  PipelineStage pp_;
  Recompute rc_;
  Precision prec_;
  bool flash_ = false;
  bool sp_ = false;  // set_sequence_parallel
  std::unique_ptr<Device> own_dev_;  // when no device was given
  Device *dev_;
  std::unique_ptr<Ops<T>> ops_;
  DType act_ = DType::f32;  // ops_->act_type()
  int layers_per_chunk_ = 0;
  // Local sizes: heads, attention width, MLP width, vocabulary shard; query
  // groups and QKV's columns ([groups_, heads_ / groups_ + 2, hd]).
  int heads_ = 0, width_ = 0, ffn_ = 0, groups_ = 0, qkv_width_ = 0;
  int vocab_start_ = 0, local_vocab_ = 0, local_real_vocab_ = 0;
  std::vector<ParamInfo> table_;
  // Per local layer: the table index of each of its roles (Layer's members, in
  // order), -1 for a tensor this model's options leave out.
  std::vector<std::vector<int>> layer_slots_;
  DeviceArray<float> rope_cos_, rope_sin_;         // [max_positions, hd/2] with rope
  DeviceArray<T> params_, grads_;
  DeviceArray<float> fp32_init_;  // see take_fp32_init
  bool weights_changed_ = true;   // since the last set_weights (see params())
  GradReadyHook grad_ready_;

  // Stashed activations per (chunk, micro-batch), and finished ones kept for reuse.
  std::map<std::pair<int, int>, std::unique_ptr<ChunkActs>> live_;
  std::vector<std::vector<std::unique_ptr<ChunkActs>>> pool_;  // per chunk
  const ChunkActs *last_head_ = nullptr;
  int64_t stashed_bytes_ = 0, peak_stashed_bytes_ = 0;
  // Scratch shared by all layers (never stashed).
  std::vector<std::unique_ptr<LayerActs>> recompute_;  // a recomputed unit's layers
  // Recomputed layers whose weight gradients were deferred move into their
  // chunk's stash, and come back here when released.
  std::vector<std::unique_ptr<LayerActs>> spare_layers_;
  ActArray x_ping_, x_pong_;                 // [N, h] inputs inside a recomputed unit
  ActArray dprobs_;                          // [b, a/t, s, s]
  ActArray core_probs_, core_probs_drop_;    // [b, a/t, s, s] selective recomputation's
  ActArray tmp_h_, tmp_h2_, dresid_;         // [N, h]
  ActArray dctx_;                            // [N, w]
  ActArray dqkv_, dfc_;                      // [N, 3w], [N, f/t] (SwiGLU [N, 2f/t])
  ActArray dact_;                            // [N, f/t] SwiGLU's d(silu(gate) up)
  ActArray sp_local_, sp_part_, sp_dy_;      // [N/t, h] sequence parallelism's rows
  // Incremental decoding's cache, per local layer: QKV rows of every position
  // so far ([max_positions, b, 3w]; attention reads K and V, the Q columns come
  // along so a forward's QKV GEMM writes its rows in place). Per chunk: the
  // positions it holds and its batch.
  std::vector<ActArray> kv_cache_;
  std::vector<int> kv_positions_, kv_batch_;
  ActArray decode_probs_;                    // [b, a/t, s, positions] of a decoding step
  DeviceArray<T> reduce_buf_;                // [N, h] tp_all_reduce of a 16-bit run
  std::vector<T> ce_host_;                   // [3, N] the loss's statistics, on the host
};

extern template class GPT<float>;
extern template class GPT<double>;

}  // namespace ptdp
