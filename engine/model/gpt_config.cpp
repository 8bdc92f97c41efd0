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
  // The LLaMA family's options came later: absent from older manifests.
  auto later = [](F field) {
    field.optional_in_manifest = true;
    return field;
  };
  auto changes_function = [](F field) {
    field.function = true;
    return field;
  };
  // The default is the first choice (index 0, GPT-2's).
  auto choice = [&](const char *name, int G::*m, const char *def, const char *choices,
                    const char *help) {
    F c = later(i(name, m, true, def, 0, 0, help));
    c.kind = F::Choice;
    c.choices = choices;
    return c;
  };
  const bool shape = true, run = false;
  static const std::vector<F> fields = [&] {
    std::vector<F> v = {
        i("num_layers", &G::num_layers, shape, "4", 1, 4096, "transformer layers"),
        i("hidden_size", &G::hidden_size, shape, "256", 1, 1 << 20, "hidden size h"),
        i("num_attention_heads", &G::num_attention_heads, shape, "4", 1, 1 << 16,
          "attention heads a"),
        i("ffn_hidden_size", &G::ffn_hidden_size, shape, "0", 0, 1 << 22,
          "MLP hidden size (0 = 4h)", &G::ffn),
        // The option's 0 is the tokenizer's vocabulary (TrainerOptions::from_config).
        i("vocab_size", &G::vocab_size, shape, "0", 0, 1 << 24,
          "model vocabulary (0 = the tokenizer's; larger leaves ids unused)"),
        // Checkpoints hold the unpadded vocabulary, so the padding may change on load.
        i("make_vocab_size_divisible_by", &G::make_vocab_size_divisible_by, run, "128", 1, 1 << 16,
          "vocabulary padding"),
        i("seq_length", &G::seq_length, run, "128", 1, 1 << 20, "tokens per sample s"),
        i("max_position_embeddings", &G::max_position_embeddings, shape, "0", 0, 1 << 20,
          "positions the model takes (0 = seq_length; learned ones are parameters)",
          &G::max_positions),
        f("hidden_dropout", &G::hidden_dropout, "0.1", 0, 0.999, "dropout on the residual branches"),
        f("attention_dropout", &G::attention_dropout, "0.1", 0, 0.999,
          "dropout on attention probabilities (drawn in 8 bits: p rounded to a multiple of 1/256)"),
        f("init_method_std", &G::init_method_std, "0.02", 1e-8, 10, "std of the normal init"),
        changes_function(f("layernorm_epsilon", &G::layernorm_epsilon, "1e-5", 1e-12, 1,
                           "the norm's epsilon (LayerNorm or RMSNorm)")),
        choice("normalization", &G::normalization, "LayerNorm", "LayerNorm,RMSNorm", "the layers' norm"),
        later(i("swiglu", &G::swiglu, shape, "0", 0, 1,
                "SwiGLU MLP: down(silu(gate x) * up x), ffn_hidden_size wide")),
        choice("position_embedding_type", &G::position_embedding_type, "learned_absolute",
               "learned_absolute,rope",
               "learned positions added to the input, or rotary embeddings of q and k"),
        changes_function(later(f("rotary_base", &G::rotary_base, "10000", 1, 1e12,
                                 "rope: theta_j = rotary_base^(-2j / head_dim)"))),
        later(i("num_query_groups", &G::num_query_groups, shape, "0", 0, 1 << 16,
                "grouped-query attention: key/value heads (0 = num_attention_heads)",
                &G::query_groups)),
        later(i("untie_embeddings_and_output_weights", &G::untie_embeddings_and_output_weights,
                shape, "0", 0, 1, "the LM head has its own weight (not the input embedding's)")),
        later(i("disable_bias_linear", &G::disable_bias_linear, shape, "0", 0, 1,
                "no biases in the linear layers")),
        later(i("add_qkv_bias", &G::add_qkv_bias, shape, "0", 0, 1,
                "a QKV bias even with disable_bias_linear (Qwen2)")),
    };
    return v;
  }();
  return fields;
}

std::string GptConfigField::choice_name(int i) const {
  if (!choices || i < 0) return "";
  std::string all = choices;
  size_t at = 0;
  for (int k = 0; k < i; k++) {
    at = all.find(',', at);
    if (at == std::string::npos) return "";
    at++;
  }
  return all.substr(at, all.find(',', at) - at);
}

int GptConfigField::choice_index(const std::string &name) const {
  for (int i = 0;; i++) {
    const std::string c = choice_name(i);
    if (c.empty()) return -1;
    if (c == name) return i;
  }
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
         "255.5/256) = [0.00195, 0.998), rounded to a multiple of 1/256 (", attention_dropout,
         " would be drawn as ", attention_dropout_rate(attention_dropout), ")");
  // Every field within what its option allows (an import, a manifest or a
  // caller's struct as much as the options): a float that is not finite, a
  // size past what the engine takes, a choice or switch that is none.
  for (const GptConfigField &f : gpt_config_fields()) {
    if (f.kind == GptConfigField::Float) {
      const float v = this->*f.float_member;
      if (!(v >= f.option_min && v <= f.option_max))
        fail(Status::invalid_config, f.name, " ", v, " is outside [", f.option_min, ", ",
             f.option_max, "]");
      continue;
    }
    const int v = this->*f.int_member;
    if (f.kind == GptConfigField::Choice && f.choice_name(v).empty())
      fail(Status::invalid_config, f.name, " ", v, " is not one of {", f.choices, "} (indices 0..)");
    if (f.kind == GptConfigField::Int && (v < f.option_min || v > f.option_max))
      fail(Status::invalid_config, f.name, " ", v, " is outside [", (int64_t)f.option_min, ", ",
           (int64_t)f.option_max, "]");
  }
  if (num_query_groups < 0)
    fail(Status::invalid_config, "num_query_groups must be positive (or 0 for num_attention_heads), got ",
         num_query_groups);
  if (num_attention_heads % query_groups() != 0)
    fail(Status::invalid_config, "num_query_groups (", query_groups(),
         ") must divide num_attention_heads (", num_attention_heads, ")");
  if (query_groups() % t != 0)
    fail(Status::invalid_config, "tensor_model_parallel_size (", t,
         ") must divide num_query_groups (", query_groups(), "): each rank holds whole groups");
  if (rope() && head_dim() % 2 != 0)
    fail(Status::invalid_config, "position_embedding_type rope turns pairs of values: the head dim (",
         head_dim(), " = hidden_size / num_attention_heads) must be even");
}

double GptConfig::flops_per_batch(int64_t samples, bool recompute) const {
  // The LM head skips padding: the real vocabulary.
  return training_flops((double)samples, seq_length, hidden_size, ffn(), vocab_size, num_layers,
                        recompute ? 1 : 0, 0, (double)qkv_rows(), swiglu ? 3 : 2);
}

int64_t GptConfig::num_params() const {
  const int64_t h = hidden_size, f = ffn(), q = qkv_rows();
  const int64_t norm = rms_norm() ? h : 2 * h;  // weight (and LayerNorm's bias)
  const int64_t attention = q * h + (qkv_bias() ? q : 0) + h * h + (linear_bias() ? h : 0);
  const int64_t mlp = (swiglu ? 3 : 2) * f * h + (linear_bias() ? (swiglu ? 2 * f : f) + h : 0);
  const int64_t per_layer = 2 * norm + attention + mlp;
  return num_layers * per_layer + norm + (int64_t)vocab_size * h * (tied() ? 1 : 2) +
         (rope() ? 0 : (int64_t)max_positions() * h);
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
