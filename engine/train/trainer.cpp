#include "engine/train/trainer.h"

#include <omp.h>
#include <xmmintrin.h>

#include <chrono>
#include <cmath>

#include "engine/core/philox.h"
#include "engine/core/status.h"

extern "C" void openblas_set_num_threads(int);

namespace ptdp {

TrainerOptions TrainerOptions::from_config(const Config &c) {
  TrainerOptions o;
  GptConfig &m = o.model;
  m.num_layers = (int)c.get_int("num_layers");
  m.hidden_size = (int)c.get_int("hidden_size");
  m.num_attention_heads = (int)c.get_int("num_attention_heads");
  m.ffn_hidden_size = (int)c.get_int("ffn_hidden_size");
  m.seq_length = (int)c.get_int("seq_length");
  m.max_position_embeddings = (int)c.get_int("max_position_embeddings");
  m.make_vocab_size_divisible_by = (int)c.get_int("make_vocab_size_divisible_by");
  m.hidden_dropout = (float)c.get_double("hidden_dropout");
  m.attention_dropout = (float)c.get_double("attention_dropout");
  m.init_method_std = (float)c.get_double("init_method_std");
  m.layernorm_epsilon = (float)c.get_double("layernorm_epsilon");
  o.tokenizer = c.get("tokenizer_type");
  const int tokenizer_vocab = make_tokenizer(o.tokenizer)->vocab_size();
  m.vocab_size = (int)c.get_int("vocab_size");
  if (m.vocab_size == 0) m.vocab_size = tokenizer_vocab;
  if (m.vocab_size < tokenizer_vocab)
    fail(Status::invalid_config, "vocab_size (", m.vocab_size, ") is smaller than the '",
         o.tokenizer, "' tokenizer's vocabulary (", tokenizer_vocab, ")");
  o.micro_batch_size = (int)c.get_int("micro_batch_size");
  o.global_batch_size = (int)c.get_int("global_batch_size");
  o.train_iters = c.get_int("train_iters");
  o.seed = (uint64_t)c.get_int("seed");
  o.lr.max_lr = c.get_double("lr");
  o.lr.min_lr = c.get_double("min_lr");
  o.lr.warmup_iters = c.get_int("lr_warmup_iters");
  o.lr.decay_iters = c.get_int("lr_decay_iters");
  if (o.lr.decay_iters == 0) o.lr.decay_iters = o.train_iters;
  o.lr.style = c.get("lr_decay_style");
  o.adam.weight_decay = c.get_double("weight_decay");
  o.adam.beta1 = c.get_double("adam_beta1");
  o.adam.beta2 = c.get_double("adam_beta2");
  o.adam.eps = c.get_double("adam_eps");
  o.clip_grad = c.get_double("clip_grad");
  o.data_path = c.get("data_path");
  o.split = c.get("split");
  o.eval_iters = (int)c.get_int("eval_iters");
  o.num_threads = (int)c.get_int("num_threads");

  m.validate();
  if (o.global_batch_size % o.micro_batch_size != 0)
    fail(Status::invalid_config, "global_batch_size (", o.global_batch_size,
         ") must be divisible by micro_batch_size (", o.micro_batch_size, ")");
  if (o.lr.min_lr > o.lr.max_lr)
    fail(Status::invalid_config, "min_lr (", o.lr.min_lr, ") must not exceed lr (", o.lr.max_lr, ")");
  if (o.lr.style != "constant" && o.lr.decay_iters <= o.lr.warmup_iters && o.train_iters > 0)
    fail(Status::invalid_config, "lr_decay_iters (", o.lr.decay_iters,
         ", 0 = train_iters) must exceed lr_warmup_iters (", o.lr.warmup_iters, ")");
  if (o.data_path.empty())
    fail(Status::invalid_config, "data_path is not set: give a token dataset made by `ptdp tokenize`");
  return o;
}

Trainer::Trainer(const TrainerOptions &opt) : opt_(opt) {
  if (opt_.num_threads > 0) {
    omp_set_num_threads(opt_.num_threads);
    openblas_set_num_threads(opt_.num_threads);
  }
  // Flush denormals to zero on every worker thread: tiny attention probabilities
  // and gradients otherwise drop the kernels onto the slow microcode path.
#pragma omp parallel
  _mm_setcsr(_mm_getcsr() | 0x8040);
  tok_ = make_tokenizer(opt_.tokenizer);
  ds_ = std::make_shared<const TokenDataset>(opt_.data_path);
  if (ds_->vocab_size() > opt_.model.vocab_size)
    fail(Status::invalid_config, "dataset '", opt_.data_path, "' has vocabulary size ",
         ds_->vocab_size(), " but the '", opt_.tokenizer, "' tokenizer (and so the model) has ",
         opt_.model.vocab_size);
  auto ranges = parse_split(opt_.split, ds_->num_docs());
  train_ = std::make_unique<GptSampler>(ds_, ranges[0], opt_.model.seq_length, opt_.seed, true);
  valid_ = std::make_unique<GptSampler>(ds_, ranges[1], opt_.model.seq_length, opt_.seed, false);
  if (train_->num_samples() == 0 || valid_->num_samples() == 0)
    fail(Status::invalid_config, "dataset '", opt_.data_path, "' split ", opt_.split, " gives ",
         train_->num_tokens(), " train and ", valid_->num_tokens(),
         " valid tokens; each split needs at least seq_length+1 = ", opt_.model.seq_length + 1);
  model_ = std::make_unique<GPT<float>>(opt_.model, opt_.seed);
  adam_ = std::make_unique<AdamW>(model_->num_params(), opt_.adam);
  sample_.resize((size_t)opt_.model.seq_length + 1);
}

// Lays out b samples starting at global index `first` as [s, b] tokens/targets.
void Trainer::fill_batch(GptSampler &sampler, uint64_t first, int b) {
  const int s = opt_.model.seq_length;
  tokens_.resize((size_t)s * b);
  targets_.resize((size_t)s * b);
  for (int bi = 0; bi < b; bi++) {
    sampler.get(first + (uint64_t)bi, sample_.data());
    for (int si = 0; si < s; si++) {
      tokens_[(size_t)si * b + bi] = sample_[si];
      targets_[(size_t)si * b + bi] = sample_[si + 1];
    }
  }
}

StepMetrics Trainer::step() {
  auto t0 = std::chrono::steady_clock::now();
  const int b = opt_.micro_batch_size, s = opt_.model.seq_length;
  const int m = opt_.global_batch_size / b;
  const int64_t it = iteration_ + 1;
  const double tokens = (double)opt_.global_batch_size * s;
  GPT<float> &model = *model_;
  for (size_t i = 0; i < model.num_params(); i++) model.grads()[i] = 0.f;

  double loss_sum = 0;
  for (int j = 0; j < m; j++) {
    uint64_t first = (uint64_t)consumed_ + (uint64_t)j * b;
    fill_batch(*train_, first, b);
    StepContext ctx{true, (uint32_t)it, (uint32_t)first};
    loss_sum += model.forward(tokens_.data(), targets_.data(), s, b, ctx) * b * s;
    model.backward((float)(1.0 / tokens));
  }

  StepMetrics r;
  r.iteration = it;
  r.lm_loss = loss_sum / tokens;
  r.lr = opt_.lr.at(it);
  r.grad_norm = grad_norm(model);
  if (!std::isfinite(r.lm_loss) || !std::isfinite(r.grad_norm)) {
    nan_++;
    skipped_++;  // no update: parameters and moments stay as they were
  } else {
    clip_gradients(model, r.grad_norm, opt_.clip_grad);
    adam_->update(model, r.lr, it - skipped_);
  }
  iteration_ = it;
  consumed_ += opt_.global_batch_size;

  double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  r.train_iters = opt_.train_iters;
  r.consumed_samples = consumed_;
  r.global_batch_size = opt_.global_batch_size;
  r.skipped_iters = skipped_;
  r.nan_iters = nan_;
  r.elapsed_ms = sec * 1e3;
  r.tokens_per_s = tokens / sec;
  r.tflops_per_rank = opt_.model.flops_per_batch(opt_.global_batch_size, false) / sec / 1e12;
  last_ = r;
  return r;
}

double Trainer::evaluate(int iters) {
  if (iters <= 0) fail(Status::invalid_argument, "evaluate needs iters > 0, got ", iters);
  const int b = opt_.micro_batch_size, s = opt_.model.seq_length;
  const int m = opt_.global_batch_size / b;
  double sum = 0;
  int64_t n = 0;
  for (int k = 0; k < iters; k++) {
    for (int j = 0; j < m; j++) {
      uint64_t first = ((uint64_t)k * m + (uint64_t)j) * b;
      fill_batch(*valid_, first, b);
      StepContext ctx{false, 0, (uint32_t)first};
      sum += model_->forward(tokens_.data(), targets_.data(), s, b, ctx) * b * s;
      n += (int64_t)b * s;
    }
  }
  return sum / (double)n;
}

std::string Trainer::generate(const std::string &prompt, int max_new_tokens, double temperature,
                              uint64_t seed) {
  if (max_new_tokens < 0) fail(Status::invalid_argument, "max_new_tokens must be >= 0");
  if (!(temperature >= 0) || !std::isfinite(temperature))
    fail(Status::invalid_argument, "temperature must be >= 0 (0 = greedy), got ", temperature);
  std::vector<int32_t> toks = tok_->encode(prompt);
  const size_t prompt_len = toks.size();
  if (toks.empty()) toks.push_back(tok_->eod());  // start of a new document
  const int V = opt_.model.vocab_size, Vp = opt_.model.padded_vocab();
  const int window = opt_.model.max_positions();
  std::vector<double> p((size_t)V);
  for (int k = 0; k < max_new_tokens; k++) {
    int n = (int)std::min<size_t>(toks.size(), (size_t)window);
    const int32_t *ctx_toks = toks.data() + toks.size() - n;
    model_->forward(ctx_toks, nullptr, n, 1, StepContext{false, 0, 0});
    const float *row = model_->logits() + (size_t)(n - 1) * Vp;
    int next = 0;
    if (temperature == 0) {
      for (int j = 1; j < V; j++)
        if (row[j] > row[next]) next = j;
    } else {
      double mx = row[0], sum = 0;
      for (int j = 1; j < V; j++) mx = std::max(mx, (double)row[j]);
      for (int j = 0; j < V; j++) sum += p[j] = std::exp(((double)row[j] - mx) / temperature);
      double u = uniform_from_u32(philox4x32((uint32_t)seed, (uint32_t)(seed >> 32), (uint32_t)k,
                                             0, 0x6e6, 0).v[0]) * sum;
      next = V - 1;
      for (int j = 0; j < V; j++) {
        u -= p[j];
        if (u <= 0) {
          next = j;
          break;
        }
      }
    }
    if (next == tok_->eod()) break;
    toks.push_back(next);
  }
  size_t skip = prompt_len == 0 ? 1 : 0;  // the EOD we started from
  return tok_->decode(toks.data() + skip, toks.size() - skip);
}

double Trainer::unigram_entropy() const {
  std::vector<uint64_t> c = train_->token_counts();
  double total = 0, h = 0;
  for (uint64_t x : c) total += (double)x;
  for (uint64_t x : c)
    if (x) h -= (double)x / total * std::log((double)x / total);
  return h;
}

}  // namespace ptdp
