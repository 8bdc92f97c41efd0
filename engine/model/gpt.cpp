#include "engine/model/gpt.h"

#include <cmath>

#include "engine/core/philox.h"
#include "engine/core/status.h"
#include "kernels/cpu/ops.h"

namespace ptdp {

using namespace cpu;

namespace {
constexpr int kParamsPerLayer = 12;
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

template <class T>
GPT<T>::GPT(const GptConfig &cfg, uint64_t seed, TensorParallel tp)
    : cfg_(cfg), seed_(seed), tp_(tp) {
  const int t = tp_.size;
  cfg_.validate(t);
  if (tp_.rank < 0 || tp_.rank >= t || (t > 1 && (!tp_.comm || tp_.comm->size() != t)))
    fail(Status::invalid_argument, "tensor-parallel rank ", tp_.rank, " of ", t,
         " needs a communicator of that size");
  const int64_t h = cfg_.hidden_size, f = cfg_.ffn(), V = cfg_.padded_vocab(t),
                P = cfg_.max_positions();
  heads_ = cfg_.num_attention_heads / t;
  width_ = (int)h / t;
  ffn_ = (int)f / t;
  local_vocab_ = (int)V / t;
  vocab_start_ = tp_.rank * local_vocab_;
  local_real_vocab_ = std::max(0, std::min(local_vocab_, cfg_.vocab_size - vocab_start_));

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
    table_.push_back(std::move(p));
  };
  for (int l = 0; l < cfg_.num_layers; l++) {
    std::string pre = "h." + std::to_string(l) + ".";
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
  add("ln_f.weight", {h}, -1, false);
  add("ln_f.bias", {h}, -1, false);
  add("wte.weight", {V, h}, 0, true);
  add("wpe.weight", {P, h}, -1, true);
  size_t total = 0;
  for (auto &p : table_) {
    p.offset = total;
    total += (p.numel + 15) / 16 * 16;  // keep each tensor 64-byte aligned
  }
  params_.resize(total);
  grads_.resize(total);
  init_parameters(seed);
}

template <class T>
const ParamInfo &GPT<T>::param(const std::string &name) const {
  for (auto &p : table_)
    if (p.name == name) return p;
  fail(Status::invalid_argument, "no parameter named '", name, "'");
}

template <class T>
int64_t GPT<T>::num_real_params() const {
  int64_t n = 0;
  for (auto &p : table_) {
    int64_t g = 1;
    for (int64_t d : p.global_shape) g *= d;
    n += g;
  }
  return n - (int64_t)(cfg_.padded_vocab(tp_.size) - cfg_.vocab_size) * cfg_.hidden_size;
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
  for (auto &p : table_) {
    T *w = params_.data() + p.offset;
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
}

template <class T>
typename GPT<T>::Layer GPT<T>::layer(T *base, int l) {
  T *g[kParamsPerLayer];
  for (int k = 0; k < kParamsPerLayer; k++)
    g[k] = base + table_[(size_t)l * kParamsPerLayer + k].offset;
  return {g[0], g[1], g[2], g[3], g[4], g[5], g[6], g[7], g[8], g[9], g[10], g[11]};
}

template <class T>
void GPT<T>::tp_all_reduce(T *buf, size_t n) {
  if (tp_.size > 1) tp_.comm->all_reduce(buf, n);
}

template <class T>
void GPT<T>::ensure_activations(int s, int b) {
  const size_t L = cfg_.num_layers, N = (size_t)s * b, h = cfg_.hidden_size, w = width_,
               f = ffn_, a = heads_, Vl = local_vocab_;
  resid_.resize((L + 1) * N * h);
  ln1_.resize(L * N * h);
  ln1_mean_.resize(L * N);
  ln1_rstd_.resize(L * N);
  qkv_.resize(L * N * 3 * w);
  probs_.resize(L * b * a * s * s);
  ctxv_.resize(L * N * w);
  mid_.resize(L * N * h);
  ln2_.resize(L * N * h);
  ln2_mean_.resize(L * N);
  ln2_rstd_.resize(L * N);
  fc1_z_.resize(L * N * f);
  fc1_g_.resize(L * N * f);
  lnf_.resize(N * h);
  lnf_mean_.resize(N);
  lnf_rstd_.resize(N);
  logits_.resize(N * Vl);
  losses_.resize(N);
  ce_max_.resize(N);
  ce_sums_.resize(2 * N);
  // Dropped attention probabilities are kept per layer: backward reads them
  // instead of regenerating the mask twice.
  const bool keep_dropped = cfg_.attention_dropout > 0;
  probs_drop_.resize(keep_dropped ? L * b * a * s * s : 0);
  dprobs_.resize((size_t)b * a * s * s);
  tmp_h_.resize(N * h);
  tmp_h2_.resize(N * h);
  dresid_.resize(N * h);
  dctx_.resize(N * w);
  dqkv_.resize(N * 3 * w);
  dfc_.resize(N * f);
}

// Cross-entropy over the vocabulary shards without gathering logits: the row
// max (all-reduce max), then the sum of exponentials and the target logit
// (one all-reduce sum of both) — ARCHITECTURE §4.
template <class T>
void GPT<T>::vocab_parallel_loss(const int32_t *targets, int N) {
  const int cols = local_real_vocab_, ld = local_vocab_;
  T *mx = ce_max_.data(), *sum = ce_sums_.data(), *tl = ce_sums_.data() + N;
  vocab_ce_local_max(mx, logits_.data(), N, ld, cols);
  if (tp_.size > 1) tp_.comm->all_reduce(mx, (size_t)N, ReduceOp::max);
  vocab_ce_local_sums(sum, tl, logits_.data(), mx, targets, N, ld, cols, vocab_start_);
  tp_all_reduce(ce_sums_.data(), 2 * (size_t)N);
  for (int i = 0; i < N; i++) losses_[i] = std::log(sum[i]) + mx[i] - tl[i];
}

template <class T>
double GPT<T>::forward(const int32_t *tokens, const int32_t *targets, int s, int b,
                       const StepContext &ctx) {
  if (s <= 0 || b <= 0) fail(Status::invalid_argument, "forward needs s > 0 and b > 0");
  if (s > cfg_.max_positions())
    fail(Status::invalid_argument, "sequence of ", s,
         " tokens is longer than max_position_embeddings (", cfg_.max_positions(), ")");
  const int N = s * b, h = cfg_.hidden_size, w = width_, f = ffn_, V = cfg_.vocab_size;
  for (int i = 0; i < N; i++) {
    if (tokens[i] < 0 || tokens[i] >= V)
      fail(Status::invalid_argument, "token ", tokens[i], " at position ", i,
           " is outside the vocabulary [0, ", V, ")");
    if (targets && (targets[i] < 0 || targets[i] >= V))
      fail(Status::invalid_argument, "target ", targets[i], " at position ", i,
           " is outside the vocabulary [0, ", V, ")");
  }
  ensure_activations(s, b);
  s_ = s;
  b_ = b;
  ctx_ = ctx;
  tokens_.assign(tokens, tokens + N);
  if (targets) targets_.assign(targets, targets + N);
  have_backward_state_ = ctx.training && targets;

  const T *wte = params_.data() + param("wte.weight").offset;
  const T *wpe = params_.data() + param("wpe.weight").offset;
  const size_t Nh = (size_t)N * h;
  DropoutSpec hid{{seed_, dropout_stream(-1, kEmbedding), ctx.iteration},
                  ctx.training ? cfg_.hidden_dropout : 0.f, ctx.sample_offset};

  // Vocab-parallel embedding: each rank looks up its rows, the sum completes it.
  if (tp_.size == 1) {
    embedding_forward(tmp_h_.data(), tokens, wte, wpe, s, b, h);
  } else {
    embedding_forward<T>(tmp_h_.data(), tokens, wte, vocab_start_, local_vocab_, nullptr, s, b, h);
    tp_all_reduce(tmp_h_.data(), Nh);
    add_position_embedding(tmp_h_.data(), wpe, s, b, h);
  }
  bias_dropout_add_forward<T>(resid_.data(), nullptr, tmp_h_.data(), nullptr, s, b, h, hid);

  for (int l = 0; l < cfg_.num_layers; l++) {
    Layer P = layer(params_.data(), l);
    T *x = resid_.data() + l * Nh, *out = resid_.data() + (l + 1) * Nh;
    T *ln1 = ln1_.data() + l * Nh, *mid = mid_.data() + l * Nh, *ln2 = ln2_.data() + l * Nh;
    T *qkv = qkv_.data() + (size_t)l * N * 3 * w;
    T *z = fc1_z_.data() + (size_t)l * N * f, *g = fc1_g_.data() + (size_t)l * N * f;
    // Attention block: mid = x + dropout(g(proj(attn(f(ln1(x))))) + proj_b)
    layernorm_forward(ln1, ln1_mean_.data() + l * N, ln1_rstd_.data() + l * N, x, P.ln1_w, P.ln1_b,
                      N, h, (T)cfg_.layernorm_epsilon);
    gemm<T>(false, true, N, 3 * w, h, 1, ln1, h, P.qkv_w, h, 0, qkv, 3 * w);  // column-parallel
    bias_dropout_add_forward<T>(qkv, nullptr, qkv, P.qkv_b, s, b, 3 * w, DropoutSpec{});
    attention_forward(l, s, b, ctx);
    gemm<T>(false, true, N, h, w, 1, ctxv_.data() + (size_t)l * N * w, w, P.proj_w, w, 0,
            tmp_h_.data(), h);  // row-parallel: partial sums
    tp_all_reduce(tmp_h_.data(), Nh);  // g
    hid.key.stream = dropout_stream(l, kAttentionOut);
    bias_dropout_add_forward<T>(mid, x, tmp_h_.data(), P.proj_b, s, b, h, hid);
    // MLP block: out = mid + dropout(g(fc2(gelu(fc1(f(ln2(mid)))))) + fc2_b)
    layernorm_forward(ln2, ln2_mean_.data() + l * N, ln2_rstd_.data() + l * N, mid, P.ln2_w,
                      P.ln2_b, N, h, (T)cfg_.layernorm_epsilon);
    gemm<T>(false, true, N, f, h, 1, ln2, h, P.fc1_w, h, 0, z, f);
    bias_gelu_forward(z, g, z, P.fc1_b, N, f);
    gemm<T>(false, true, N, h, f, 1, g, f, P.fc2_w, f, 0, tmp_h_.data(), h);
    tp_all_reduce(tmp_h_.data(), Nh);  // g
    hid.key.stream = dropout_stream(l, kMlpOut);
    bias_dropout_add_forward<T>(out, mid, tmp_h_.data(), P.fc2_b, s, b, h, hid);
  }

  const T *lnf_w = params_.data() + param("ln_f.weight").offset;
  const T *lnf_b = params_.data() + param("ln_f.bias").offset;
  layernorm_forward(lnf_.data(), lnf_mean_.data(), lnf_rstd_.data(),
                    resid_.data() + cfg_.num_layers * Nh, lnf_w, lnf_b, N, h,
                    (T)cfg_.layernorm_epsilon);
  // Tied, vocab-parallel LM head: logits = lnf @ wte_shard^T. Padding rows are
  // zero and masked out of the loss, so only the real columns are computed.
  gemm<T>(false, true, N, local_real_vocab_, h, 1, lnf_.data(), h, wte, h, 0, logits_.data(),
          local_vocab_);
  if (!targets) return 0.0;
  vocab_parallel_loss(targets, N);
  double sum = 0;
  for (int i = 0; i < N; i++) sum += (double)losses_[i];
  return sum / N;
}

template <class T>
void GPT<T>::attention_forward(int l, int s, int b, const StepContext &ctx) {
  const int w = width_, a = heads_, hd = cfg_.head_dim();
  const int N = s * b, ld_qkv = b * 3 * w, ld_ctx = b * w;
  const int64_t ss = (int64_t)s * s;
  const T *qkv = qkv_.data() + (size_t)l * N * 3 * w;
  T *probs = probs_.data() + (size_t)l * b * a * ss;
  T *ctxv = ctxv_.data() + (size_t)l * N * w;
  // Batch i = bi*a + head: its Q, K, V rows start at qkv + i*3hd with row stride b*3w.
  // (Skipping the causal upper-right blocks was measured: smaller GEMMs ate the gain.)
  gemm_strided_batched<T>(false, true, s, s, hd, 1, qkv, ld_qkv, 3 * hd, qkv + hd, ld_qkv, 3 * hd,
                          0, probs, s, ss, b * a);
  scale_mask_softmax_forward<T>(probs, probs, b * a, s, s, T(1) / std::sqrt((T)hd), true, nullptr);
  const T *pd = probs;
  if (ctx.training && cfg_.attention_dropout > 0) {
    DropoutSpec d{{seed_, dropout_stream(l, kAttentionProbs), ctx.iteration},
                  cfg_.attention_dropout, ctx.sample_offset};
    T *dropped = probs_drop_.data() + (size_t)l * b * a * ss;
    dropout_attention(dropped, probs, b, a, s, s, tp_.rank * a, d);
    pd = dropped;
  }
  gemm_strided_batched<T>(false, false, s, hd, s, 1, pd, s, ss, qkv + 2 * hd, ld_qkv, 3 * hd, 0,
                          ctxv, ld_ctx, hd, b * a);
}

template <class T>
void GPT<T>::attention_backward(int l, int s, int b) {
  // In: dctx_ = dL/dctx [N, w]. Out: dqkv_ [N, 3w].
  const int w = width_, a = heads_, hd = cfg_.head_dim();
  const int N = s * b, ld_qkv = b * 3 * w, ld_ctx = b * w;
  const int64_t ss = (int64_t)s * s;
  const T *qkv = qkv_.data() + (size_t)l * N * 3 * w;
  const T *probs = probs_.data() + (size_t)l * b * a * ss;
  const T *dctx = dctx_.data();
  T *dqkv = dqkv_.data();
  T *dp = dprobs_.data();
  const float p = ctx_.training ? cfg_.attention_dropout : 0.f;
  // dV = dropout(P)^T @ dctx, with the dropped probabilities of the forward
  const T *pd = p > 0 ? probs_drop_.data() + (size_t)l * b * a * ss : probs;
  gemm_strided_batched<T>(true, false, s, hd, s, 1, pd, s, ss, dctx, ld_ctx, hd, 0, dqkv + 2 * hd,
                          ld_qkv, 3 * hd, b * a);
  // dP = dropout'(dctx @ V^T), the mask read back from the dropped probabilities
  gemm_strided_batched<T>(false, true, s, s, hd, 1, dctx, ld_ctx, hd, qkv + 2 * hd, ld_qkv, 3 * hd,
                          0, dp, s, ss, b * a);
  if (p > 0) dropout_backward_from_output(dp, dp, pd, (size_t)b * a * ss, p);
  const T scale = T(1) / std::sqrt((T)hd);
  scale_mask_softmax_backward<T>(dp, probs, dp, b * a, s, s, scale);  // dp = dL/d(QK^T)
  // dQ = dS @ K, dK = dS^T @ Q
  gemm_strided_batched<T>(false, false, s, hd, s, 1, dp, s, ss, qkv + hd, ld_qkv, 3 * hd, 0, dqkv,
                          ld_qkv, 3 * hd, b * a);
  gemm_strided_batched<T>(true, false, s, hd, s, 1, dp, s, ss, qkv, ld_qkv, 3 * hd, 0, dqkv + hd,
                          ld_qkv, 3 * hd, b * a);
}

template <class T>
void GPT<T>::backward(T dloss) {
  if (!have_backward_state_)
    fail(Status::wrong_state, "backward() needs a preceding training forward() with targets");
  have_backward_state_ = false;  // activations are consumed (logits overwritten)
  const int s = s_, b = b_, N = s * b, h = cfg_.hidden_size, w = width_, f = ffn_;
  const size_t Nh = (size_t)N * h;
  auto grad = [&](const char *name) { return grads_.data() + param(name).offset; };
  auto prm = [&](const char *name) { return params_.data() + param(name).offset; };
  T *dwte = grad("wte.weight");
  const T *wte = prm("wte.weight");

  // LM head (vocab-parallel) and final LayerNorm; f's backward all-reduces dlnf.
  T *dlogits = logits_.data();
  vocab_ce_backward(dlogits, logits_.data(), ce_max_.data(), ce_sums_.data(), targets_.data(), N,
                    local_vocab_, local_real_vocab_, vocab_start_, dloss);
  gemm<T>(true, false, local_real_vocab_, h, N, 1, dlogits, local_vocab_, lnf_.data(), h, 1, dwte,
          h);
  gemm<T>(false, false, N, h, local_real_vocab_, 1, dlogits, local_vocab_, wte, h, 0,
          tmp_h_.data(), h);
  tp_all_reduce(tmp_h_.data(), Nh);
  T *dresid = dresid_.data();
  for (size_t i = 0; i < Nh; i++) dresid[i] = 0;
  layernorm_backward(dresid, grad("ln_f.weight"), grad("ln_f.bias"), tmp_h_.data(),
                     resid_.data() + cfg_.num_layers * Nh, prm("ln_f.weight"), lnf_mean_.data(),
                     lnf_rstd_.data(), N, h);

  DropoutSpec hid{{seed_, 0, ctx_.iteration}, ctx_.training ? cfg_.hidden_dropout : 0.f,
                  ctx_.sample_offset};
  for (int l = cfg_.num_layers - 1; l >= 0; l--) {
    Layer P = layer(params_.data(), l);
    Layer G = layer(grads_.data(), l);
    const T *x = resid_.data() + l * Nh, *ln1 = ln1_.data() + l * Nh, *mid = mid_.data() + l * Nh,
            *ln2 = ln2_.data() + l * Nh, *ctxv = ctxv_.data() + (size_t)l * N * w;
    const T *z = fc1_z_.data() + (size_t)l * N * f, *g = fc1_g_.data() + (size_t)l * N * f;
    T *dy = tmp_h_.data(), *dln = tmp_h2_.data(), *dfc = dfc_.data(), *dqkv = dqkv_.data();

    // MLP block; the input's gradient is a partial sum over tensor ranks (f backward).
    hid.key.stream = dropout_stream(l, kMlpOut);
    bias_dropout_add_backward<T>(dy, G.fc2_b, dresid, s, b, h, hid);
    gemm<T>(true, false, h, f, N, 1, dy, h, g, f, 1, G.fc2_w, f);
    gemm<T>(false, false, N, f, h, 1, dy, h, P.fc2_w, f, 0, dfc, f);
    bias_gelu_backward(dfc, G.fc1_b, dfc, z, N, f);
    gemm<T>(true, false, f, h, N, 1, dfc, f, ln2, h, 1, G.fc1_w, h);
    gemm<T>(false, false, N, h, f, 1, dfc, f, P.fc1_w, h, 0, dln, h);
    tp_all_reduce(dln, Nh);
    layernorm_backward(dresid, G.ln2_w, G.ln2_b, dln, mid, P.ln2_w, ln2_mean_.data() + l * N,
                       ln2_rstd_.data() + l * N, N, h);

    // Attention block.
    hid.key.stream = dropout_stream(l, kAttentionOut);
    bias_dropout_add_backward<T>(dy, G.proj_b, dresid, s, b, h, hid);
    gemm<T>(true, false, h, w, N, 1, dy, h, ctxv, w, 1, G.proj_w, w);
    gemm<T>(false, false, N, w, h, 1, dy, h, P.proj_w, w, 0, dctx_.data(), w);
    attention_backward(l, s, b);
    colsum_accumulate(G.qkv_b, dqkv, N, 3 * w);
    gemm<T>(true, false, 3 * w, h, N, 1, dqkv, 3 * w, ln1, h, 1, G.qkv_w, h);
    gemm<T>(false, false, N, h, 3 * w, 1, dqkv, 3 * w, P.qkv_w, h, 0, dln, h);
    tp_all_reduce(dln, Nh);
    layernorm_backward(dresid, G.ln1_w, G.ln1_b, dln, x, P.ln1_w, ln1_mean_.data() + l * N,
                       ln1_rstd_.data() + l * N, N, h);
  }

  // Embedding (with its dropout): each rank scatters into its vocabulary rows.
  hid.key.stream = dropout_stream(-1, kEmbedding);
  bias_dropout_add_backward<T>(tmp_h_.data(), nullptr, dresid, s, b, h, hid);
  embedding_backward(dwte, grad("wpe.weight"), tmp_h_.data(), tokens_.data(), s, b, h,
                     vocab_start_, local_vocab_);
}

template class GPT<float>;
template class GPT<double>;

}  // namespace ptdp
