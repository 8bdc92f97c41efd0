// The model's parameters (table, shards, initialisation) and its set-up on a
// device; the computation is in embedding, transformer_layer, attention,
// lm_head and model_chunk.cpp, the activation stash in activation_stash.cpp.
#include "engine/model/gpt.h"

#include <cmath>
#include <string>
#include <type_traits>

#include "engine/core/philox.h"
#include "engine/core/status.h"
#include "engine/core/text.h"
#include "engine/model/gpt_internal.h"
#include "kernels/kernels.h"

namespace ptdp {

using namespace gpt_detail;

std::vector<ParamInfo> gpt_param_table(const GptConfig &cfg, int t, const PipelineStage &pp) {
  const int64_t h = cfg.hidden_size, f = cfg.ffn(), V = cfg.padded_vocab(t),
                P = cfg.max_positions(), q = cfg.qkv_rows();
  const bool layernorm = !cfg.rms_norm(), bias = cfg.linear_bias();
  const int per_chunk = cfg.num_layers / (pp.size * pp.chunks);
  std::vector<ParamInfo> table;
  // global shape, split axis (-1 replicated, 0 rows, 1 columns), weight decay
  auto add = [&](std::string name, std::vector<int64_t> global, int axis, bool decay) {
    ParamInfo p;
    p.name = std::move(name);
    p.global_shape = global;
    p.shape = global;
    if (axis >= 0) p.shape[axis] /= t;
    p.split_axis = axis;
    p.numel = 1;
    for (int64_t d : p.shape) p.numel *= (size_t)d;
    p.weight_decay = decay;
    table.push_back(std::move(p));
  };
  auto norm = [&](const std::string &name) {  // LayerNorm's weight and bias, RMSNorm's weight
    add(name + ".weight", {h}, -1, false);
    if (layernorm) add(name + ".bias", {h}, -1, false);
  };
  for (int c = 0; c < pp.chunks; c++) {
    for (int j = 0; j < per_chunk; j++) {
      std::string pre = "h." + std::to_string(pp.virtual_stage(c) * per_chunk + j) + ".";
      norm(pre + "ln_1");
      // Rows ordered [G, a/G + 2, hd]: each query group's heads' queries, its
      // key, its value ([a, 3, hd] without grouping); a rank holds whole groups.
      add(pre + "attn.c_attn.weight", {q, h}, 0, true);
      if (cfg.qkv_bias()) add(pre + "attn.c_attn.bias", {q}, 0, false);
      add(pre + "attn.c_proj.weight", {h, h}, 1, true);
      if (bias) add(pre + "attn.c_proj.bias", {h}, -1, false);
      norm(pre + "ln_2");
      if (cfg.swiglu) {  // two column-parallel tensors: any layout's shards of the same matrices
        add(pre + "mlp.gate_proj.weight", {f, h}, 0, true);
        add(pre + "mlp.up_proj.weight", {f, h}, 0, true);
        // One tensor [gate; up] split along f: a rank's share is the [gate | up]
        // row of 2f/t values the SwiGLU op adds.
        if (bias) add(pre + "mlp.gate_up_proj.bias", {2, f}, 1, false);
      } else {
        add(pre + "mlp.c_fc.weight", {f, h}, 0, true);
        if (bias) add(pre + "mlp.c_fc.bias", {f}, 0, false);
      }
      add(pre + "mlp.c_proj.weight", {h, f}, 1, true);
      if (bias) add(pre + "mlp.c_proj.bias", {h}, -1, false);
    }
  }
  const bool embedding = pp.has_embedding(0), head = pp.has_head(pp.chunks - 1);
  if (head) norm("ln_f");
  if (embedding || (head && cfg.tied())) {
    add("wte.weight", {V, h}, 0, true);
    table.back().tied_copy = !embedding;
    table.back().vocab_rows = true;
  }
  if (head && !cfg.tied()) {
    add("lm_head.weight", {V, h}, 0, true);
    table.back().vocab_rows = true;
  }
  if (embedding && !cfg.rope()) add("wpe.weight", {P, h}, -1, true);
  size_t total = 0;
  for (auto &p : table) {
    p.offset = total;
    total = p.padded_end();
  }
  return table;
}

template <class T>
GPT<T>::GPT(const GptConfig &cfg, uint64_t seed, TensorParallel tp, PipelineStage pp, Recompute rc,
            Precision prec, Device *device)
    : cfg_(cfg), seed_(seed), tp_(tp), pp_(pp), rc_(rc), prec_(prec), dev_(device) {
  if (!dev_) {
    own_dev_ = make_cpu_device();
    dev_ = own_dev_.get();
  }
  ops_ = make_ops<T>(*dev_);
  if (!std::is_same_v<T, float> && prec_.dtype != DType::f32)
    fail(Status::invalid_argument, "a ", dtype_name(prec_.dtype),
         " model computes in float: GPT<double> (the finite-difference reference) is f32 only");
  if (prec_.dtype == DType::f64)
    fail(Status::invalid_argument, "the model's dtype must be f32, bf16 or f16, not f64");
  ops_->set_storage_type(prec_.dtype);
  act_ = ops_->act_type();
  const int t = tp_.size;
  cfg_.validate(t);
  if (tp_.rank < 0 || tp_.rank >= t || (t > 1 && (!tp_.comm || tp_.comm->size() != t)))
    fail(Status::invalid_argument, "tensor-parallel rank ", tp_.rank, " of ", t,
         " needs a communicator of that size");
  cfg_.validate_pipeline(pp_.size, pp_.chunks);
  if (pp_.rank < 0 || pp_.rank >= pp_.size)
    fail(Status::invalid_argument, "pipeline rank ", pp_.rank, " is outside [0, ", pp_.size, ")");
  layers_per_chunk_ = cfg_.num_layers / (pp_.size * pp_.chunks);
  if (rc_.enabled && (rc_.num_layers < 1 || rc_.num_layers > layers_per_chunk_))
    fail(Status::invalid_config, "recompute_num_layers (", rc_.num_layers,
         ") must be between 1 and the layers per model chunk (", layers_per_chunk_,
         " = num_layers / (pipeline_model_parallel_size x virtual stages))");
  const int64_t h = cfg_.hidden_size, f = cfg_.ffn(), V = cfg_.padded_vocab(t);
  heads_ = cfg_.num_attention_heads / t;
  width_ = (int)h / t;
  ffn_ = (int)f / t;
  groups_ = cfg_.query_groups() / t;
  qkv_width_ = (int)(cfg_.qkv_rows() / t);
  local_vocab_ = (int)V / t;
  vocab_start_ = tp_.rank * local_vocab_;
  local_real_vocab_ = std::max(0, std::min(local_vocab_, cfg_.vocab_size - vocab_start_));

  table_ = gpt_param_table(cfg_, t, pp_);
  // Each local layer's roles: its tensors are consecutive, named h.<global layer>.<role>.
  for (int li = 0, k = 0; li < pp_.chunks * layers_per_chunk_; li++) {
    const std::string pre = "h." + std::to_string(first_layer(li / layers_per_chunk_) +
                                                  li % layers_per_chunk_) + ".";
    std::vector<int> slots(kLayerRoles, -1);
    for (; k < (int)table_.size() && starts_with(table_[(size_t)k].name, pre); k++)
      for (int r = 0; r < kLayerRoles; r++)
        if (table_[(size_t)k].name == pre + kLayerRoleNames[r]) slots[(size_t)r] = k;
    layer_slots_.push_back(std::move(slots));
  }
  const ParamInfo &last = table_.back();
  const size_t total = last.padded_end();
  params_.resize(*dev_, total);
  grads_.resize(*dev_, total);
  pool_.resize((size_t)pp_.chunks);
  init_parameters(seed);
  if (cfg_.rope()) {  // the angles of every position the model takes, once
    const int positions = cfg_.max_positions(), half = cfg_.head_dim() / 2;
    std::vector<float> c((size_t)positions * half), sn(c.size());
    cpu::rope_table(c.data(), sn.data(), positions, cfg_.head_dim(), cfg_.rotary_base);
    rope_cos_.resize(*dev_, c.size());
    rope_sin_.resize(*dev_, sn.size());
    rope_cos_.copy_from_host(c);
    rope_sin_.copy_from_host(sn);
  }
}

template <class T>
GPT<T>::~GPT() = default;

template <class T>
int GPT<T>::first_layer(int chunk) const {
  return pp_.virtual_stage(chunk) * layers_per_chunk_;
}

template <class T>
const ParamInfo *GPT<T>::find_param(const std::string &name) const {
  for (auto &p : table_)
    if (p.name == name) return &p;
  return nullptr;
}

template <class T>
const ParamInfo &GPT<T>::param(const std::string &name) const {
  if (const ParamInfo *p = find_param(name)) return *p;
  fail(Status::invalid_argument, "no parameter named '", name, "' on this rank (pipeline stage ",
       pp_.rank, " of ", pp_.size, ")");
}

template <class T>
int64_t GPT<T>::num_real_params() const {
  return cfg_.num_params();
}

template <class T>
int64_t GPT<T>::global_index(const ParamInfo &p, size_t i) const {
  if (p.split_axis < 0) return (int64_t)i;
  if (p.split_axis == 0) return (int64_t)tp_.rank * (int64_t)p.numel + (int64_t)i;
  const int64_t cols = p.shape[1], r = (int64_t)i / cols, c = (int64_t)i % cols;
  return r * p.global_shape[1] + (int64_t)tp_.rank * cols + c;
}

// Each element is drawn from the stream (seed, name) at its global index, so a
// shard of any layout holds exactly its part of the serial model.
template <class T>
void GPT<T>::init_parameters(uint64_t seed) {
  const double std_out = cfg_.init_method_std / std::sqrt(2.0 * cfg_.num_layers);
  const int64_t real_rows = (int64_t)cfg_.vocab_size * cfg_.hidden_size;  // padding stays 0
  std::vector<T> host(params_.size(), T(0));
  for (auto &p : table_) {
    T *w = host.data() + p.offset;
    const std::string &n = p.name;
    if (ends_with(n, ".bias")) continue;  // zeros
    if (n.find("ln_") != std::string::npos) {
      for (size_t i = 0; i < p.numel; i++) w[i] = T(1);
      continue;
    }
    double sd = ends_with(n, "c_proj.weight") ? std_out : cfg_.init_method_std;
    uint64_t stream = fnv1a64(n);
    auto value = [&](int64_t g, double normal) {
      return p.vocab_rows && g >= real_rows ? T(0) : T(sd * normal);
    };
    // Local elements two by two: where they are global elements 2k and 2k + 1
    // (almost always), one Philox call and one Box-Muller give both.
#pragma omp parallel for schedule(static)
    for (size_t k = 0; k < (p.numel + 1) / 2; k++) {
      const size_t i = 2 * k;
      const int64_t g = global_index(p, i);
      if (i + 1 < p.numel && g % 2 == 0 && global_index(p, i + 1) == g + 1) {
        const NormalPair n = normal_pair_at(seed, stream, (uint64_t)g / 2);
        w[i] = value(g, n.first);
        w[i + 1] = value(g + 1, n.second);
        continue;
      }
      w[i] = value(g, normal_at(seed, stream, (uint64_t)g));
      if (i + 1 < p.numel) {
        const int64_t g1 = global_index(p, i + 1);
        w[i + 1] = value(g1, normal_at(seed, stream, (uint64_t)g1));
      }
    }
  }
  params_.copy_from_host(host);
  if constexpr (std::is_same_v<T, float>)
    if (prec_.dtype != DType::f32) {  // kept for the optimizer's master weights
      fp32_init_.resize(*dev_, host.size());
      fp32_init_.copy_from_host(host);
    }
  to_storage(params_.data(), params_.size());
}

template <class T>
typename GPT<T>::Layer GPT<T>::layer(T *base, int li) {
  T *g[kLayerRoles];
  const std::vector<int> &slots = layer_slots_[(size_t)li];
  for (int k = 0; k < kLayerRoles; k++)
    g[k] = slots[(size_t)k] < 0 ? nullptr : base + table_[(size_t)slots[(size_t)k]].offset;
  return {g[0], g[1], g[2],  g[3],  g[4],  g[5],  g[6], g[7],
          g[8], g[9], g[10], g[11], g[12], g[13], g[14]};
}

template <class T>
void GPT<T>::to_storage(T *x, size_t n) {
  if (prec_.dtype != DType::f32) ops_->round_to_storage(x, n, prec_.dtype);
}

template <class T>
void GPT<T>::check_act(const char *what, CAct x) const {
  if (x.p && x.t != act_)
    fail(Status::invalid_argument, "the chunk's ", what, " holds ", dtype_name(x.t),
         " elements; this model's activations are ", dtype_name(act_),
         " (GPT::activation_type())");
}

template <class T>
void GPT<T>::grads_written(size_t offset, size_t n, bool final) {
  // 16-bit gradient accumulation: the sum so far is stored in the 16-bit type.
  if (!prec_.grads_in_fp32) to_storage(grads_.data() + offset, n);
  // Sequence parallelism: each tensor rank summed the replicated tensors'
  // gradients (norms, row-parallel biases) over its own positions; the step's
  // sums add them up. wpe's came from every position (the embedding's
  // gradient is gathered first).
  if (final && sp_ && tp_.size > 1)
    for (const ParamInfo &p : table_)
      if (p.split_axis < 0 && p.name != "wpe.weight" && p.offset >= offset &&
          p.offset + p.numel <= offset + n) {
        tp_.comm->all_reduce(grads_.data() + p.offset, p.numel);
        if (!prec_.grads_in_fp32) to_storage(grads_.data() + p.offset, p.numel);
      }
  if (final && grad_ready_) grad_ready_(offset, n);
}

template <class T>
void GPT<T>::param_grads_written(const char *first, const char *last, bool final) {
  const ParamInfo &a = param(first), &b = param(last);
  grads_written(a.offset, b.padded_end() - a.offset, final);
}

template <class T>
void GPT<T>::tp_all_reduce(Act buf, size_t n) {
  ptdp::tp_all_reduce(tp_, *ops_, reduce_buf_, buf, n);
}

template <class T>
void GPT<T>::norm_to_gemm_input(Act full, T *mean, T *rstd, CAct x, const T *w, const T *b, int s,
                                int bsz) {
  const int N = s * bsz;
  if (!seq_parallel(s)) {
    norm_forward(full, mean, rstd, x, w, b, N);
    return;
  }
  const int rows = local_rows(s, bsz);
  norm_forward(sp_local_.data(), mean, rstd, x, w, b, rows);
  tp_all_gather(tp_, *ops_, sp_local_.data(), full, (size_t)rows * cfg_.hidden_size);
}

template <class T>
Act GPT<T>::reduce_row_parallel(Act partial, int s, int bsz) {
  const size_t h = cfg_.hidden_size;
  if (!seq_parallel(s)) {
    tp_all_reduce(partial, (size_t)s * bsz * h);
    return partial;
  }
  tp_reduce_scatter(tp_, *ops_, reduce_buf_, partial, sp_part_.data(),
                    (size_t)local_rows(s, bsz) * h);
  return sp_part_.data();
}

template <class T>
void GPT<T>::set_sequence_parallel(bool on) {
  if (!live_.empty())
    fail(Status::wrong_state, "set_sequence_parallel between a forward and its backward");
  sp_ = on;
}

template <class T>
void GPT<T>::set_flash_attention(bool on) {
  // Buffers are sized per forward, so only a stashed forward pins the choice.
  if (!live_.empty())
    fail(Status::wrong_state, "set_flash_attention between a forward and its backward");
  flash_ = on;
}

template <class T>
void GPT<T>::set_op_profiling(bool on) {
  ops_->set_profiling(on);
}

template <class T>
std::vector<OpTime> GPT<T>::take_op_profile() {
  return ops_->take_profile();
}

template <class T>
std::vector<T> GPT<T>::logits_to_host(int first_row, int rows) const {
  if (!last_head_)
    fail(Status::wrong_state, "logits_to_host needs a forward of the head chunk first");
  const int N = last_head_->s * last_head_->b;
  if (first_row < 0 || rows < 0 || first_row + rows > N)
    fail(Status::invalid_argument, "logits rows [", first_row, ", ", first_row + rows,
         ") are outside the ", N, " rows of the last forward");
  const size_t n = (size_t)rows * local_vocab_, at = (size_t)first_row * local_vocab_;
  std::vector<T> out(n);
  const CAct src = last_head_->logits.data() + (int64_t)at;
  if (src.t == dtype_of<T>()) {
    dev_->copy_to_host(out.data(), src.p, n * sizeof(T));
    return out;
  }
  std::vector<uint16_t> raw(n);
  dev_->copy_to_host(raw.data(), src.p, n * sizeof(uint16_t));
  if constexpr (std::is_same_v<T, float>) from_16bit(src.t, raw.data(), out.data(), n);
  return out;
}

// Every member defined here; the other files instantiate their own.
template class GPT<float>;
template class GPT<double>;

}  // namespace ptdp
