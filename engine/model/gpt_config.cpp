#include "engine/model/gpt_config.h"

#include <cmath>

#include "engine/core/gpt_math.h"
#include "engine/core/philox.h"
#include "engine/core/status.h"

namespace ptdp {

const std::vector<GptConfigField> &gpt_config_fields() {
  using F = GptConfigField;
  using G = GptConfig;
  auto i = [](const char *name, int G::*m, bool shape, const char *def, double lo, double hi,
              const char *help, int (G::*resolved)() const = nullptr) {
    return F{name, F::Int, m, nullptr, resolved, shape, def, lo, hi, help};
  };
  auto f = [](const char *name, float G::*m, const char *def, double lo, double hi,
              const char *help) {
    return F{name, F::Float, nullptr, m, nullptr, false, def, lo, hi, help};
  };
  const bool shape = true, run = false;
  static const std::vector<F> fields = {
      i("num_layers", &G::num_layers, shape, "4", 1, 4096, "transformer layers"),
      i("hidden_size", &G::hidden_size, shape, "256", 1, 1 << 20, "hidden size h"),
      i("num_attention_heads", &G::num_attention_heads, shape, "4", 1, 1 << 16,
        "attention heads a"),
      i("ffn_hidden_size", &G::ffn_hidden_size, shape, "0", 0, 1 << 22, "MLP hidden size (0 = 4h)",
        &G::ffn),
      // The option's 0 is the tokenizer's vocabulary (TrainerOptions::from_config).
      i("vocab_size", &G::vocab_size, shape, "0", 0, 1 << 24,
        "model vocabulary (0 = the tokenizer's; larger leaves ids unused)"),
      // Checkpoints hold the unpadded vocabulary, so the padding may change on load.
      i("make_vocab_size_divisible_by", &G::make_vocab_size_divisible_by, run, "128", 1, 1 << 16,
        "vocabulary padding"),
      i("seq_length", &G::seq_length, run, "128", 1, 1 << 20, "tokens per sample s"),
      i("max_position_embeddings", &G::max_position_embeddings, shape, "0", 0, 1 << 20,
        "learned positions (0 = seq_length)", &G::max_positions),
      f("hidden_dropout", &G::hidden_dropout, "0.1", 0, 0.999, "dropout on the residual branches"),
      f("attention_dropout", &G::attention_dropout, "0.1", 0, 0.999,
        "dropout on attention probabilities (drawn in 8 bits: p rounded to a multiple of 1/256)"),
      f("init_method_std", &G::init_method_std, "0.02", 1e-8, 10, "std of the normal init"),
      f("layernorm_epsilon", &G::layernorm_epsilon, "1e-5", 1e-12, 1, "LayerNorm epsilon"),
  };
  return fields;
}

int GptConfig::padded_vocab(int t) const {
  return (int)padded_vocab_size(vocab_size, (int64_t)make_vocab_size_divisible_by * t);
}

void GptConfig::validate(int t) const {
  auto positive = [](const char *name, int v) {
    if (v <= 0) fail(Status::invalid_config, name, " must be positive, got ", v);
  };
  positive("num_layers", num_layers);
  positive("hidden_size", hidden_size);
  positive("num_attention_heads", num_attention_heads);
  positive("vocab_size", vocab_size);
  positive("seq_length", seq_length);
  positive("make_vocab_size_divisible_by", make_vocab_size_divisible_by);
  if (hidden_size % num_attention_heads != 0)
    fail(Status::invalid_config, "num_attention_heads (", num_attention_heads,
         ") must divide hidden_size (", hidden_size, ")");
  if (t < 1) fail(Status::invalid_config, "tensor_model_parallel_size must be positive, got ", t);
  // ffn() and padded_vocab() compute in int: sizes past it are refused, not wrapped.
  if (ffn_hidden_size <= 0 && hidden_size > INT32_MAX / 4)
    fail(Status::invalid_config, "hidden_size ", hidden_size,
         " is too large: its 4 x hidden_size MLP does not fit in 32 bits");
  if ((int64_t)vocab_size + (int64_t)make_vocab_size_divisible_by * t > INT32_MAX)
    fail(Status::invalid_config, "vocab_size ", vocab_size, " padded to a multiple of ",
         (int64_t)make_vocab_size_divisible_by * t, " does not fit in 32 bits");
  if (num_attention_heads % t != 0)
    fail(Status::invalid_config, "tensor_model_parallel_size (", t,
         ") must divide num_attention_heads (", num_attention_heads, ")");
  if (ffn() % t != 0)
    fail(Status::invalid_config, "tensor_model_parallel_size (", t,
         ") must divide ffn_hidden_size (", ffn(), ")");
  // The vocabulary is padded to a multiple of make_vocab_size_divisible_by * t,
  // so t always divides it: no check needed.
  if (ffn_hidden_size < 0)
    fail(Status::invalid_config, "ffn_hidden_size must be positive (or 0 for 4*hidden_size), got ",
         ffn_hidden_size);
  if (max_position_embeddings < 0)
    fail(Status::invalid_config,
         "max_position_embeddings must be positive (or 0 for seq_length), got ",
         max_position_embeddings);
  if (seq_length > max_positions())
    fail(Status::invalid_config, "seq_length (", seq_length,
         ") is longer than max_position_embeddings (", max_positions(), ")");
  auto probability = [](const char *name, float p) {
    if (!(p >= 0.f && p < 1.f)) fail(Status::invalid_config, name, " must be in [0, 1), got ", p);
  };
  probability("hidden_dropout", hidden_dropout);
  probability("attention_dropout", attention_dropout);
  // Drawn in 8 bits (philox.h): a rate more than half a step (1/512) from
  // multiples of 1/256 in [1/256, 255/256] would not be the rate asked for.
  if (std::fabs(attention_dropout_rate(attention_dropout) - attention_dropout) > 1.f / 512)
    fail(Status::invalid_config, "attention_dropout ", attention_dropout,
         " cannot be drawn: attention dropout is drawn in 8 bits, so it is 0 or in [1/512, ",
         "255.5/256) = [0.00195, 0.998), rounded to a multiple of 1/256 (got ",
         attention_dropout_rate(attention_dropout), ")");
  if (!(init_method_std > 0.f))
    fail(Status::invalid_config, "init_method_std must be > 0, got ", init_method_std);
  if (!(layernorm_epsilon > 0.f))
    fail(Status::invalid_config, "layernorm_epsilon must be > 0, got ", layernorm_epsilon);
}

double GptConfig::flops_per_batch(int64_t samples, bool recompute) const {
  // The LM head skips padding: the real vocabulary.
  return training_flops((double)samples, seq_length, hidden_size, ffn(), vocab_size, num_layers,
                        recompute ? 1 : 0);
}

void GptConfig::validate_pipeline(int p, int v) const {
  if (p < 1) fail(Status::invalid_config, "pipeline_model_parallel_size must be positive, got ", p);
  if (v < 1)
    fail(Status::invalid_config, "virtual pipeline stages per rank must be positive, got ", v);
  if (v > 1 && p == 1)
    fail(Status::invalid_config, "virtual pipeline stages (v = ", v,
         ") need pipeline_model_parallel_size > 1; with p = 1 leave "
         "num_layers_per_virtual_pipeline_stage unset");
  if ((int64_t)p * v > num_layers)
    fail(Status::invalid_config, "p x v = ", p, " x ", v, " = ", (int64_t)p * v,
         " pipeline stages but only ", num_layers, " layers: each model chunk needs a layer");
  if (num_layers % (p * v) != 0)
    fail(Status::invalid_config, "num_layers (", num_layers,
         ") must be divisible by pipeline_model_parallel_size x virtual stages (", p, " x ", v,
         " = ", p * v, ")");
}

}  // namespace ptdp
