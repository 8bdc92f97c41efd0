#include "engine/model/gpt.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "engine/core/philox.h"
#include "engine/core/status.h"

namespace ptdp {

namespace {
constexpr int kParamsPerLayer = 12;
constexpr int kSerialSlot = -1;  // the micro-batch id of forward()/backward()
// Dropout sites; the stream of (layer, site) keys the mask (ARCHITECTURE §3).
enum Site : uint32_t { kEmbedding = 0, kAttentionProbs = 1, kAttentionOut = 2, kMlpOut = 3 };
uint32_t dropout_stream(int layer, Site site) { return (uint32_t)(layer + 1) * 4u + site; }
bool ends_with(const std::string &n, const char *suf) {
  size_t k = std::char_traits<char>::length(suf);
  return n.size() >= k && n.compare(n.size() - k, k, suf) == 0;
}
}  // namespace

template <class T>
struct GPT<T>::Layer {
  T *ln1_w, *ln1_b, *qkv_w, *qkv_b, *proj_w, *proj_b, *ln2_w, *ln2_b, *fc1_w, *fc1_b, *fc2_w,
      *fc2_b;
};

// One layer's activations. x is its input; the rest is empty for a layer whose
// unit is recomputed (only the unit's first x is kept then).
// Shapes with w, a, f meaning this rank's share (h/t, a/t, f/t); N = s*b.
template <class T>
struct GPT<T>::LayerActs {
  DeviceArray<T> x;                        // [N, h]
  DeviceArray<T> ln1, ln1_mean, ln1_rstd;  // [N, h], [N]
  DeviceArray<T> qkv;                      // [N, 3w]  ordered [s, b, a, 3, hd]
  DeviceArray<T> probs, probs_drop;        // [b, a, s, s] softmax output, after dropout
  DeviceArray<T> lse;                      // [b*a, s] instead of probs, with flash attention
  DeviceArray<T> ctxv;                     // [N, w]  attention context
  DeviceArray<T> mid;                      // [N, h]  residual after attention
  DeviceArray<T> ln2, ln2_mean, ln2_rstd;  // [N, h], [N]
  DeviceArray<T> fc1_z, fc1_g;             // [N, f]  pre-GeLU (with bias), post-GeLU
  int64_t bytes() const {
    size_t n = 0;
    for (const DeviceArray<T> *b : {&x, &ln1, &ln1_mean, &ln1_rstd, &qkv, &probs, &probs_drop, &lse,
                                    &ctxv, &mid, &ln2, &ln2_mean, &ln2_rstd, &fc1_z, &fc1_g})
      n += b->size();
    return (int64_t)(n * sizeof(T));
  }
};

// Everything one (chunk, micro-batch) forward keeps for its backward.
template <class T>
struct GPT<T>::ChunkActs {
  int s = 0, b = 0;
  StepContext ctx;
  DeviceArray<int32_t> tokens, targets;    // [N] embedding chunk, head chunk
  std::vector<LayerActs> layers;           // per layer of the chunk
  DeviceArray<T> final_x;                  // [N, h] head input (last layer's output)
  DeviceArray<T> lnf, lnf_mean, lnf_rstd;  // [N, h], [N]
  DeviceArray<T> logits;                   // [N, Vp/t]
  DeviceArray<T> ce;                       // [3, N] row max, sum of exp, target logit
  std::vector<T> losses;                   // [N] on the host
  int64_t bytes() const {
    int64_t n = (int64_t)((tokens.size() + targets.size()) * sizeof(int32_t));
    for (auto &l : layers) n += l.bytes();
    for (const DeviceArray<T> *x : {&final_x, &lnf, &lnf_mean, &lnf_rstd, &logits, &ce})
      n += (int64_t)x->bytes();
    return n + (int64_t)(losses.size() * sizeof(T));
  }
};

std::vector<ParamInfo> gpt_param_table(const GptConfig &cfg, int t, const PipelineStage &pp) {
  const int64_t h = cfg.hidden_size, f = cfg.ffn(), V = cfg.padded_vocab(t),
                P = cfg.max_positions();
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
  for (int c = 0; c < pp.chunks; c++) {
    for (int j = 0; j < per_chunk; j++) {
      std::string pre = "h." + std::to_string((c * pp.size + pp.rank) * per_chunk + j) + ".";
      add(pre + "ln_1.weight", {h}, -1, false);
      add(pre + "ln_1.bias", {h}, -1, false);
      add(pre + "attn.c_attn.weight", {3 * h, h}, 0, true);  // rows ordered [a, 3, hd]
      add(pre + "attn.c_attn.bias", {3 * h}, 0, false);
      add(pre + "attn.c_proj.weight", {h, h}, 1, true);
      add(pre + "attn.c_proj.bias", {h}, -1, false);
      add(pre + "ln_2.weight", {h}, -1, false);
      add(pre + "ln_2.bias", {h}, -1, false);
      add(pre + "mlp.c_fc.weight", {f, h}, 0, true);
      add(pre + "mlp.c_fc.bias", {f}, 0, false);
      add(pre + "mlp.c_proj.weight", {h, f}, 1, true);
      add(pre + "mlp.c_proj.bias", {h}, -1, false);
    }
  }
  const bool embedding = pp.rank == 0, head = pp.rank == pp.size - 1;
  if (head) {
    add("ln_f.weight", {h}, -1, false);
    add("ln_f.bias", {h}, -1, false);
  }
  if (embedding || head) {
    add("wte.weight", {V, h}, 0, true);
    table.back().tied_copy = !embedding;
  }
  if (embedding) add("wpe.weight", {P, h}, -1, true);
  size_t total = 0;
  for (auto &p : table) {
    p.offset = total;
    total += (p.numel + 15) / 16 * 16;  // keep each tensor 64-byte aligned
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
  local_vocab_ = (int)V / t;
  vocab_start_ = tp_.rank * local_vocab_;
  local_real_vocab_ = std::max(0, std::min(local_vocab_, cfg_.vocab_size - vocab_start_));

  table_ = gpt_param_table(cfg_, t, pp_);
  const ParamInfo &last = table_.back();
  const size_t total = last.offset + (last.numel + 15) / 16 * 16;
  params_.resize(*dev_, total);
  grads_.resize(*dev_, total);
  pool_.resize((size_t)pp_.chunks);
  init_parameters(seed);
}

template <class T>
GPT<T>::~GPT() = default;

template <class T>
int GPT<T>::first_layer(int chunk) const {
  return (chunk * pp_.size + pp_.rank) * layers_per_chunk_;
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
  const int64_t h = cfg_.hidden_size, f = cfg_.ffn();
  const int64_t per_layer = 4 * h + 3 * h * h + 3 * h + h * h + h + f * h + f + h * f + h;
  return cfg_.num_layers * per_layer + 2 * h + (int64_t)cfg_.vocab_size * h +
         (int64_t)cfg_.max_positions() * h;
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
  const int64_t real_wte = (int64_t)cfg_.vocab_size * cfg_.hidden_size;  // padding stays 0
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
    const bool is_wte = n == "wte.weight";
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < p.numel; i++) {
      int64_t g = global_index(p, i);
      w[i] = is_wte && g >= real_wte ? T(0) : T(sd * normal_at(seed, stream, (uint64_t)g));
    }
  }
  params_.copy_from_host(host);
  to_storage(params_.data(), params_.size());
}

template <class T>
typename GPT<T>::Layer GPT<T>::layer(T *base, int li) {
  T *g[kParamsPerLayer];
  for (int k = 0; k < kParamsPerLayer; k++)
    g[k] = base + table_[(size_t)li * kParamsPerLayer + k].offset;
  return {g[0], g[1], g[2], g[3], g[4], g[5], g[6], g[7], g[8], g[9], g[10], g[11]};
}

template <class T>
void GPT<T>::to_storage(T *x, size_t n) {
  if (prec_.dtype != DType::f32) ops_->round_to_storage(x, n, prec_.dtype);
}

template <class T>
void GPT<T>::tp_all_reduce(T *buf, size_t n) {
  if (tp_.size == 1) return;
  tp_.comm->all_reduce(buf, n);
  to_storage(buf, n);
}

// ---- activation stash and recomputation units ----

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
  const size_t probs = (size_t)b * A * s * s;
  auto sz = [&](DeviceArray<T> &buf, size_t n) { buf.resize(*dev_, full ? n : 0); };
  a.x.resize(*dev_, N * h);
  sz(a.ln1, N * h);
  sz(a.ln1_mean, N);
  sz(a.ln1_rstd, N);
  sz(a.qkv, N * 3 * w);
  sz(a.probs, flash_ ? 0 : probs);
  // Dropped attention probabilities are kept: backward reads the mask back
  // from them instead of regenerating it (flash attention draws it again).
  sz(a.probs_drop, cfg_.attention_dropout > 0 && !flash_ ? probs : 0);
  sz(a.lse, flash_ ? (size_t)b * A * s : 0);
  sz(a.ctxv, N * w);
  sz(a.mid, N * h);
  sz(a.ln2, N * h);
  sz(a.ln2_mean, N);
  sz(a.ln2_rstd, N);
  sz(a.fc1_z, N * f);
  sz(a.fc1_g, N * f);
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
  const size_t N = (size_t)s * b, h = cfg_.hidden_size;
  for (int j = 0; j < layers_per_chunk_; j++) {
    const bool full = keeps_all(j);
    size_layer(A->layers[(size_t)j], s, b, full);
    if (!full && unit_start(j) != j) A->layers[(size_t)j].x.resize(*dev_, 0);  // inside a unit
  }
  const bool head = has_head(chunk);
  Device &d = *dev_;
  A->final_x.resize(d, head ? N * h : 0);
  A->lnf.resize(d, head ? N * h : 0);
  A->lnf_mean.resize(d, head ? N : 0);
  A->lnf_rstd.resize(d, head ? N : 0);
  A->logits.resize(d, head ? N * (size_t)local_vocab_ : 0);
  A->ce.resize(d, head ? 3 * N : 0);
  A->losses.resize(head ? N : 0);
  A->tokens.resize(d, has_embedding(chunk) ? N : 0);
  A->targets.resize(d, head ? N : 0);
  A->s = s;
  A->b = b;
  // Scratch shared by every chunk.
  const size_t w = width_, f = ffn_;
  dprobs_.resize(d, flash_ ? 0 : (size_t)b * heads_ * s * s);
  tmp_h_.resize(d, N * h);
  tmp_h2_.resize(d, N * h);
  dresid_.resize(d, N * h);
  x_ping_.resize(d, N * h);
  x_pong_.resize(d, N * h);
  dctx_.resize(d, N * w);
  dqkv_.resize(d, N * 3 * w);
  dfc_.resize(d, N * f);
  return *(live_[key] = std::move(A));
}

template <class T>
void GPT<T>::release(int chunk, int mb) {
  auto it = live_.find(std::make_pair(chunk, mb));
  if (it == live_.end()) return;
  if (it->second->ctx.training) stashed_bytes_ -= it->second->bytes();
  pool_[(size_t)chunk].push_back(std::move(it->second));
  live_.erase(it);
}

// ---- forward ----

template <class T>
void GPT<T>::embedding_forward_into(T *out, const int32_t *tokens, int s, int b,
                                    const StepContext &ctx) {
  const int h = cfg_.hidden_size;
  const T *wte = param_data("wte.weight"), *wpe = param_data("wpe.weight");
  // Vocab-parallel embedding: each rank looks up its rows, the sum completes it
  // (positions are added once, after the sum).
  const bool one = tp_.size == 1;
  ops_->embedding_forward(tmp_h_.data(), tokens, wte, vocab_start_, local_vocab_,
                          one ? wpe : nullptr, s, b, h);
  if (!one) {
    tp_all_reduce(tmp_h_.data(), (size_t)s * b * h);
    ops_->add_position_embedding(tmp_h_.data(), wpe, s, b, h);
  }
  const size_t Nh = (size_t)s * b * h;
  to_storage(tmp_h_.data(), Nh);
  DropoutSpec hid{{seed_, dropout_stream(-1, kEmbedding), ctx.iteration},
                  ctx.training ? cfg_.hidden_dropout : 0.f,
                  ctx.sample_offset};
  ops_->bias_dropout_add_forward(out, nullptr, tmp_h_.data(), nullptr, s, b, h, hid);
  to_storage(out, Nh);
}

// One transformer layer: out = x + attention(x), then + MLP; fills a.
template <class T>
void GPT<T>::layer_forward(int li, const T *x, T *out, LayerActs &a, int s, int b,
                           const StepContext &ctx) {
  const int N = s * b, h = cfg_.hidden_size, w = width_, f = ffn_;
  const int l = first_layer(li / layers_per_chunk_) + li % layers_per_chunk_;  // global
  const size_t Nh = (size_t)N * h;
  Layer P = layer(params_.data(), li);
  DropoutSpec hid{{seed_, dropout_stream(l, kAttentionOut), ctx.iteration},
                  ctx.training ? cfg_.hidden_dropout : 0.f,
                  ctx.sample_offset};
  // Attention block: mid = x + dropout(g(proj(attn(f(ln1(x))))) + proj_b)
  // (Every op's output is rounded to the storage type: to_storage.)
  ops_->layernorm_forward(a.ln1.data(), a.ln1_mean.data(), a.ln1_rstd.data(), x, P.ln1_w, P.ln1_b,
                          N, h, (T)cfg_.layernorm_epsilon);
  to_storage(a.ln1.data(), Nh);
  ops_->gemm(false, true, N, 3 * w, h, 1, a.ln1.data(), h, P.qkv_w, h, 0, a.qkv.data(), 3 * w);
  to_storage(a.qkv.data(), (size_t)N * 3 * w);
  ops_->bias_dropout_add_forward(a.qkv.data(), nullptr, a.qkv.data(), P.qkv_b, s, b, 3 * w,
                                 DropoutSpec{});
  to_storage(a.qkv.data(), (size_t)N * 3 * w);
  attention_forward(l, a, s, b, ctx);
  ops_->gemm(false, true, N, h, w, 1, a.ctxv.data(), w, P.proj_w, w, 0, tmp_h_.data(), h);
  to_storage(tmp_h_.data(), Nh);
  tp_all_reduce(tmp_h_.data(), Nh);  // g: row-parallel partial sums
  ops_->bias_dropout_add_forward(a.mid.data(), x, tmp_h_.data(), P.proj_b, s, b, h, hid);
  to_storage(a.mid.data(), Nh);
  // MLP block: out = mid + dropout(g(fc2(gelu(fc1(f(ln2(mid)))))) + fc2_b)
  ops_->layernorm_forward(a.ln2.data(), a.ln2_mean.data(), a.ln2_rstd.data(), a.mid.data(), P.ln2_w,
                          P.ln2_b, N, h, (T)cfg_.layernorm_epsilon);
  to_storage(a.ln2.data(), Nh);
  ops_->gemm(false, true, N, f, h, 1, a.ln2.data(), h, P.fc1_w, h, 0, a.fc1_z.data(), f);
  to_storage(a.fc1_z.data(), (size_t)N * f);
  ops_->bias_gelu_forward(a.fc1_z.data(), a.fc1_g.data(), a.fc1_z.data(), P.fc1_b, N, f);
  to_storage(a.fc1_z.data(), (size_t)N * f);
  to_storage(a.fc1_g.data(), (size_t)N * f);
  ops_->gemm(false, true, N, h, f, 1, a.fc1_g.data(), f, P.fc2_w, f, 0, tmp_h_.data(), h);
  to_storage(tmp_h_.data(), Nh);
  tp_all_reduce(tmp_h_.data(), Nh);  // g
  hid.key.stream = dropout_stream(l, kMlpOut);
  ops_->bias_dropout_add_forward(out, a.mid.data(), tmp_h_.data(), P.fc2_b, s, b, h, hid);
  to_storage(out, Nh);
}

template <class T>
void GPT<T>::set_flash_attention(bool on) {
  // Buffers are sized per forward, so only a stashed forward pins the choice.
  if (!live_.empty())
    fail(Status::wrong_state, "set_flash_attention between a forward and its backward");
  flash_ = on;
}

template <class T>
void GPT<T>::attention_forward(int l, LayerActs &a, int s, int b, const StepContext &ctx) {
  const int w = width_, A = heads_, hd = cfg_.head_dim();
  if (flash_) {
    DropoutSpec d{{seed_, dropout_stream(l, kAttentionProbs), ctx.iteration},
                  ctx.training ? cfg_.attention_dropout : 0.f,
                  ctx.sample_offset};
    ops_->flash_attention_forward(a.ctxv.data(), a.lse.data(), a.qkv.data(), s, b, A, hd,
                                  T(1) / std::sqrt((T)hd), tp_.rank * A, d);
    to_storage(a.ctxv.data(), (size_t)s * b * w);
    return;
  }
  const int ld_qkv = b * 3 * w, ld_ctx = b * w;
  const int64_t ss = (int64_t)s * s;
  const T *qkv = a.qkv.data();
  T *probs = a.probs.data();
  // Batch i = bi*a + head: its Q, K, V rows start at qkv + i*3hd with row stride b*3w.
  // (Skipping the causal upper-right blocks was measured: smaller GEMMs ate the gain.)
  ops_->gemm_strided_batched(false, true, s, s, hd, 1, qkv, ld_qkv, 3 * hd, qkv + hd, ld_qkv,
                             3 * hd, 0, probs, s, ss, b * A);
  to_storage(probs, (size_t)(b * A * ss));
  ops_->scale_mask_softmax_forward(probs, probs, b * A, s, s, T(1) / std::sqrt((T)hd), true,
                                   nullptr);
  to_storage(probs, (size_t)(b * A * ss));
  const T *pd = probs;
  if (ctx.training && cfg_.attention_dropout > 0) {
    DropoutSpec d{{seed_, dropout_stream(l, kAttentionProbs), ctx.iteration},
                  cfg_.attention_dropout,
                  ctx.sample_offset};
    ops_->dropout_attention(a.probs_drop.data(), probs, b, A, s, s, tp_.rank * A, d);
    to_storage(a.probs_drop.data(), (size_t)(b * A * ss));
    pd = a.probs_drop.data();
  }
  ops_->gemm_strided_batched(false, false, s, hd, s, 1, pd, s, ss, qkv + 2 * hd, ld_qkv, 3 * hd, 0,
                             a.ctxv.data(), ld_ctx, hd, b * A);
  to_storage(a.ctxv.data(), (size_t)s * ld_ctx);
}

// Cross-entropy over the vocabulary shards without gathering logits: the row
// max (all-reduce max), then the sum of exponentials and the target logit
// (one all-reduce sum of both) — ARCHITECTURE §4.
template <class T>
void GPT<T>::vocab_parallel_loss(ChunkActs &A) {
  const int N = A.s * A.b, cols = local_real_vocab_, ld = local_vocab_;
  T *mx = A.ce.data(), *sums = mx + N;  // sums: [2, N] sum of exp, target logit
  ops_->vocab_ce_local_max(mx, A.logits.data(), N, ld, cols);
  if (tp_.size > 1) tp_.comm->all_reduce(mx, (size_t)N, ReduceOp::max);
  ops_->vocab_ce_local_sums(sums, sums + N, A.logits.data(), mx, A.targets.data(), N, ld, cols,
                            vocab_start_);
  if (tp_.size > 1) tp_.comm->all_reduce(sums, 2 * (size_t)N);  // fp32 statistics
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
  to_storage(A.lnf.data(), (size_t)N * h);
  ops_->gemm(false, true, N, local_real_vocab_, h, 1, A.lnf.data(), h, param_data("wte.weight"), h,
             0, A.logits.data(), local_vocab_);
  to_storage(A.logits.data(), A.logits.size());  // the loss reads them in fp32
  if (targets) vocab_parallel_loss(A);
}

template <class T>
double GPT<T>::forward_chunk(int chunk, int mb, const int32_t *tokens, const int32_t *targets,
                             const T *input, T *output, int s, int b, const StepContext &ctx) {
  if (chunk < 0 || chunk >= pp_.chunks)
    fail(Status::invalid_argument, "model chunk ", chunk, " is outside [0, ", pp_.chunks, ")");
  if (s <= 0 || b <= 0) fail(Status::invalid_argument, "forward needs s > 0 and b > 0");
  if (s > cfg_.max_positions())
    fail(Status::invalid_argument, "sequence of ", s,
         " tokens is longer than max_position_embeddings (", cfg_.max_positions(), ")");
  const bool embedding = has_embedding(chunk), head = has_head(chunk);
  const int N = s * b, h = cfg_.hidden_size, V = cfg_.vocab_size;
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

  ChunkActs &A = acquire(chunk, mb, s, b);
  A.ctx = ctx;
  const bool stash = ctx.training;
  // The embedding (and its backward) reads the tokens, the loss the targets.
  if (embedding) dev_->copy_from_host(A.tokens.data(), tokens, (size_t)N * sizeof(int32_t));
  if (head && targets) dev_->copy_from_host(A.targets.data(), targets, (size_t)N * sizeof(int32_t));
  const size_t Nh = (size_t)N * h;

  T *x = A.layers[0].x.data();
  if (embedding)
    embedding_forward_into(x, A.tokens.data(), s, b, ctx);
  else
    dev_->copy(x, input, Nh * sizeof(T));
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
    T *out;
    if (j + 1 == layers_per_chunk_)
      out = head ? A.final_x.data() : output;
    else if (A.layers[(size_t)j + 1].x.size())
      out = A.layers[(size_t)j + 1].x.data();
    else
      out = x == x_ping_.data() ? x_pong_.data() : x_ping_.data();
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
  if (stash) {
    stashed_bytes_ += A.bytes();
    peak_stashed_bytes_ = std::max(peak_stashed_bytes_, stashed_bytes_);
  } else {
    release(chunk, mb);  // nothing to keep; the pooled buffers still hold the logits
  }
  return loss;
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

template <class T>
const T *GPT<T>::logits() const {
  if (!last_head_) fail(Status::wrong_state, "logits() needs a forward of the head chunk first");
  return last_head_->logits.data();
}

// ---- backward ----

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
    to_storage(dqkv_.data(), (size_t)s * b * 3 * w);
    return;
  }
  const int ld_qkv = b * 3 * w, ld_ctx = b * w;
  const int64_t ss = (int64_t)s * s;
  const T *qkv = a.qkv.data(), *probs = a.probs.data(), *dctx = dctx_.data();
  T *dqkv = dqkv_.data(), *dp = dprobs_.data();
  const float p = ctx.training ? cfg_.attention_dropout : 0.f;
  // dV = dropout(P)^T @ dctx, with the dropped probabilities of the forward
  const T *pd = p > 0 ? a.probs_drop.data() : probs;
  ops_->gemm_strided_batched(true, false, s, hd, s, 1, pd, s, ss, dctx, ld_ctx, hd, 0,
                             dqkv + 2 * hd, ld_qkv, 3 * hd, b * A);
  // dP = dropout'(dctx @ V^T), the mask read back from the dropped probabilities
  ops_->gemm_strided_batched(false, true, s, s, hd, 1, dctx, ld_ctx, hd, qkv + 2 * hd, ld_qkv,
                             3 * hd, 0, dp, s, ss, b * A);
  const size_t nprobs = (size_t)b * A * ss;
  to_storage(dp, nprobs);
  if (p > 0) ops_->dropout_backward_from_output(dp, dp, pd, nprobs, p);
  to_storage(dp, nprobs);
  const T scale = T(1) / std::sqrt((T)hd);
  ops_->scale_mask_softmax_backward(dp, probs, dp, b * A, s, s, scale);  // dp = dL/d(QK^T)
  to_storage(dp, nprobs);
  // dQ = dS @ K, dK = dS^T @ Q
  ops_->gemm_strided_batched(false, false, s, hd, s, 1, dp, s, ss, qkv + hd, ld_qkv, 3 * hd, 0,
                             dqkv, ld_qkv, 3 * hd, b * A);
  ops_->gemm_strided_batched(true, false, s, hd, s, 1, dp, s, ss, qkv, ld_qkv, 3 * hd, 0, dqkv + hd,
                             ld_qkv, 3 * hd, b * A);
  to_storage(dqkv, (size_t)s * ld_qkv);  // dQ, dK, dV, each written by one GEMM
}

// dresid [N, h]: in, the gradient of the layer's output; out, of its input x.
template <class T>
void GPT<T>::layer_backward(int li, const T *x, LayerActs &a, T *dresid, int s, int b,
                            const StepContext &ctx) {
  const int N = s * b, h = cfg_.hidden_size, w = width_, f = ffn_;
  const int l = first_layer(li / layers_per_chunk_) + li % layers_per_chunk_;
  const size_t Nh = (size_t)N * h;
  Layer P = layer(params_.data(), li);
  Layer G = layer(grads_.data(), li);
  T *dy = tmp_h_.data(), *dln = tmp_h2_.data(), *dfc = dfc_.data(), *dqkv = dqkv_.data();
  DropoutSpec hid{{seed_, dropout_stream(l, kMlpOut), ctx.iteration},
                  ctx.training ? cfg_.hidden_dropout : 0.f,
                  ctx.sample_offset};

  // MLP block; the input's gradient is a partial sum over tensor ranks (f backward).
  // Activation gradients are rounded to the storage type; the weight gradients
  // accumulate into grads() in fp32 (rounded per chunk when grads are 16-bit).
  ops_->bias_dropout_add_backward(dy, G.fc2_b, dresid, s, b, h, hid);
  to_storage(dy, Nh);
  ops_->gemm(true, false, h, f, N, 1, dy, h, a.fc1_g.data(), f, 1, G.fc2_w, f);
  ops_->gemm(false, false, N, f, h, 1, dy, h, P.fc2_w, f, 0, dfc, f);
  to_storage(dfc, (size_t)N * f);
  ops_->bias_gelu_backward(dfc, G.fc1_b, dfc, a.fc1_z.data(), N, f);
  to_storage(dfc, (size_t)N * f);
  ops_->gemm(true, false, f, h, N, 1, dfc, f, a.ln2.data(), h, 1, G.fc1_w, h);
  ops_->gemm(false, false, N, h, f, 1, dfc, f, P.fc1_w, h, 0, dln, h);
  to_storage(dln, Nh);
  tp_all_reduce(dln, Nh);
  ops_->layernorm_backward(dresid, G.ln2_w, G.ln2_b, dln, a.mid.data(), P.ln2_w, a.ln2_mean.data(),
                           a.ln2_rstd.data(), N, h);
  to_storage(dresid, Nh);

  // Attention block.
  hid.key.stream = dropout_stream(l, kAttentionOut);
  ops_->bias_dropout_add_backward(dy, G.proj_b, dresid, s, b, h, hid);
  to_storage(dy, Nh);
  ops_->gemm(true, false, h, w, N, 1, dy, h, a.ctxv.data(), w, 1, G.proj_w, w);
  ops_->gemm(false, false, N, w, h, 1, dy, h, P.proj_w, w, 0, dctx_.data(), w);
  to_storage(dctx_.data(), (size_t)N * w);
  attention_backward(l, a, s, b, ctx);
  ops_->colsum_accumulate(G.qkv_b, dqkv, N, 3 * w);
  ops_->gemm(true, false, 3 * w, h, N, 1, dqkv, 3 * w, a.ln1.data(), h, 1, G.qkv_w, h);
  ops_->gemm(false, false, N, h, 3 * w, 1, dqkv, 3 * w, P.qkv_w, h, 0, dln, h);
  to_storage(dln, Nh);
  tp_all_reduce(dln, Nh);
  ops_->layernorm_backward(dresid, G.ln1_w, G.ln1_b, dln, x, P.ln1_w, a.ln1_mean.data(),
                           a.ln1_rstd.data(), N, h);
  to_storage(dresid, Nh);
}

// LM head (vocab-parallel) and final LayerNorm; f's backward all-reduces dlnf.
template <class T>
void GPT<T>::head_backward(ChunkActs &A, T *dresid, T dloss) {
  const int N = A.s * A.b, h = cfg_.hidden_size;
  const size_t Nh = (size_t)N * h;
  const ParamInfo &wte = param("wte.weight"), &lw = param("ln_f.weight"), &lb = param("ln_f.bias");
  T *dlogits = A.logits.data();
  ops_->vocab_ce_backward(dlogits, A.logits.data(), A.ce.data(), A.ce.data() + N, A.targets.data(),
                          N, local_vocab_, local_real_vocab_, vocab_start_, dloss);
  to_storage(dlogits, A.logits.size());
  ops_->gemm(true, false, local_real_vocab_, h, N, 1, dlogits, local_vocab_, A.lnf.data(), h, 1,
             grads_.data() + wte.offset, h);
  ops_->gemm(false, false, N, h, local_real_vocab_, 1, dlogits, local_vocab_,
             params_.data() + wte.offset, h, 0, tmp_h_.data(), h);
  to_storage(tmp_h_.data(), Nh);
  tp_all_reduce(tmp_h_.data(), Nh);
  dev_->zero(dresid, Nh * sizeof(T));
  ops_->layernorm_backward(dresid, grads_.data() + lw.offset, grads_.data() + lb.offset,
                           tmp_h_.data(), A.final_x.data(), params_.data() + lw.offset,
                           A.lnf_mean.data(), A.lnf_rstd.data(), N, h);
  to_storage(dresid, Nh);
}

template <class T>
void GPT<T>::backward_chunk(int chunk, int mb, const T *doutput, T *dinput, T dloss) {
  auto it = live_.find(std::make_pair(chunk, mb));
  if (it == live_.end() || !it->second->ctx.training)
    fail(Status::wrong_state, "backward of micro-batch ", mb, " chunk ", chunk,
         " needs a preceding training forward of it");
  ChunkActs &A = *it->second;
  const bool embedding = has_embedding(chunk), head = has_head(chunk);
  if (!head && !doutput) fail(Status::invalid_argument, "chunk ", chunk, " backward needs doutput");
  if (!embedding && !dinput)
    fail(Status::invalid_argument, "chunk ", chunk, " backward needs dinput");
  const int s = A.s, b = A.b, h = cfg_.hidden_size;
  const size_t Nh = (size_t)s * b * h;
  const StepContext &ctx = A.ctx;
  T *dresid = dresid_.data();
  if (head)
    head_backward(A, dresid, dloss);
  else
    dev_->copy(dresid, doutput, Nh * sizeof(T));

  const int base = chunk * layers_per_chunk_;
  for (int j = layers_per_chunk_ - 1; j >= 0;) {
    if (keeps_all(j)) {
      LayerActs &a = A.layers[(size_t)j];
      layer_backward(base + j, a.x.data(), a, dresid, s, b, ctx);
      j--;
      continue;
    }
    // Recompute the unit [u, j] from its kept input, then back through it.
    const int u = unit_start(j), n = j - u + 1;
    while ((int)recompute_.size() < n + 1) recompute_.push_back(std::make_unique<LayerActs>());
    // recompute_[k] holds layer u+k; recompute_[n] only the unit's output (not needed).
    for (int k = 0; k <= n; k++) size_layer(*recompute_[(size_t)k], s, b, k < n);
    const T *x = A.layers[(size_t)u].x.data();
    for (int k = 0; k < n; k++) {
      T *out = recompute_[(size_t)k + 1]->x.data();
      layer_forward(base + u + k, x, out, *recompute_[(size_t)k], s, b, ctx);
      x = out;
    }
    for (int k = n - 1; k >= 0; k--) {
      const T *xin = k == 0 ? A.layers[(size_t)u].x.data() : recompute_[(size_t)k]->x.data();
      layer_backward(base + u + k, xin, *recompute_[(size_t)k], dresid, s, b, ctx);
    }
    j = u - 1;
  }

  if (embedding) {
    // Embedding (with its dropout): each rank scatters into its vocabulary rows.
    DropoutSpec hid{{seed_, dropout_stream(-1, kEmbedding), ctx.iteration},
                    ctx.training ? cfg_.hidden_dropout : 0.f,
                    ctx.sample_offset};
    ops_->bias_dropout_add_backward(tmp_h_.data(), nullptr, dresid, s, b, h, hid);
    to_storage(tmp_h_.data(), Nh);
    ops_->embedding_backward(grad_data("wte.weight"), grad_data("wpe.weight"), tmp_h_.data(),
                             A.tokens.data(), s, b, h, vocab_start_, local_vocab_);
  } else {
    dev_->copy(dinput, dresid, Nh * sizeof(T));
  }
  // 16-bit gradient accumulation: the sum so far is stored in the 16-bit type.
  if (!prec_.grads_in_fp32) to_storage(grads_.data(), grads_.size());
  if (last_head_ == &A) last_head_ = nullptr;  // its logits now hold gradients
  release(chunk, mb);
}

template <class T>
void GPT<T>::backward(T dloss) {
  if (pp_.size > 1)
    fail(Status::wrong_state, "backward() runs the whole model; with pipeline_model_parallel_size ",
         pp_.size, " use backward_chunk()");
  if (!live_.count(std::make_pair(0, kSerialSlot)))
    fail(Status::wrong_state, "backward() needs a preceding training forward() with targets");
  backward_chunk(0, kSerialSlot, nullptr, nullptr, dloss);
}

template class GPT<float>;
template class GPT<double>;

}  // namespace ptdp
