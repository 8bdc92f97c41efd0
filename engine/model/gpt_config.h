// Shape and regularisation of a GPT model (Megatron's argument names): GPT-2's
// block by default; the LLaMA family's pieces (RMSNorm, SwiGLU, rotary
// positions, grouped-query attention, untied output, no linear biases) by
// options, in any combination.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace ptdp {

struct GptConfig {
  int num_layers = 4;
  int hidden_size = 256;
  int num_attention_heads = 4;
  int ffn_hidden_size = 0;  // 0 = 4 * hidden_size
  int vocab_size = 257;     // real vocabulary; padded for the embedding
  int make_vocab_size_divisible_by = 128;
  int seq_length = 128;
  int max_position_embeddings = 0;  // 0 = seq_length
  float hidden_dropout = 0.1f;
  float attention_dropout = 0.1f;
  float init_method_std = 0.02f;
  float layernorm_epsilon = 1e-5f;  // the norm's epsilon (LayerNorm or RMSNorm)
  int normalization = 0;            // NormKind
  int swiglu = 0;                   // the MLP is down(silu(gate(x)) * up(x))
  int position_embedding_type = 0;  // PositionKind
  float rotary_base = 10000.f;      // rope: theta_j = base^(-2j / head_dim)
  int num_query_groups = 0;         // K/V heads (0 = num_attention_heads: no grouping)
  int untie_embeddings_and_output_weights = 0;  // the LM head has its own weight
  int disable_bias_linear = 0;      // no biases in the linear layers...
  int add_qkv_bias = 0;             // ...except QKV's (Qwen2)

  enum NormKind { LayerNorm = 0, RMSNorm = 1 };
  enum PositionKind { LearnedAbsolute = 0, Rope = 1 };
  bool rms_norm() const { return normalization == RMSNorm; }
  bool rope() const { return position_embedding_type == Rope; }
  bool tied() const { return untie_embeddings_and_output_weights == 0; }
  bool linear_bias() const { return disable_bias_linear == 0; }
  bool qkv_bias() const { return linear_bias() || add_qkv_bias != 0; }
  int query_groups() const { return num_query_groups > 0 ? num_query_groups : num_attention_heads; }
  // Rows of the QKV weight: per query group, its heads' queries, one key, one value.
  int64_t qkv_rows() const {
    return (int64_t)(num_attention_heads + 2 * query_groups()) * head_dim();
  }
  int ffn() const { return ffn_hidden_size > 0 ? ffn_hidden_size : 4 * hidden_size; }
  int max_positions() const {
    return max_position_embeddings > 0 ? max_position_embeddings : seq_length;
  }
  // Parameters of the whole model (no vocabulary padding).
  int64_t num_params() const;
  // Padded to a multiple of make_vocab_size_divisible_by * t, so that every
  // tensor-parallel rank holds the same number of rows.
  int padded_vocab(int t = 1) const;
  int head_dim() const { return hidden_size / num_attention_heads; }
  // Throws Error(invalid_config) naming the first inconsistent field.
  void validate(int t = 1) const;
  // Checks that num_layers splits into p*v model chunks (p stages, v chunks
  // each); throws invalid_config saying what would be valid.
  void validate_pipeline(int p, int v) const;
  // Training FLOPs of one global batch of `samples` sequences: the paper's Eq. 3
  // generalised to any ffn size; recompute adds one more forward of every layer.
  double flops_per_batch(int64_t samples, bool recompute) const;
};

// One row per GptConfig field: the one list behind the training options, the
// checkpoint manifest (writer, reader, resume checks) and `ckpt inspect`, so a
// new field is one row in gpt_config_fields().
struct GptConfigField {
  enum Kind { Int, Float, Choice };  // Choice: an int member holding the index into `choices`
  const char *name;  // the option key and the manifest key
  Kind kind;
  int GptConfig::*int_member;      // Int fields
  float GptConfig::*float_member;  // Float fields
  // Int fields whose 0 means a default: the value the manifest records and
  // resume compares (ffn(), max_positions()); null = the member itself.
  int (GptConfig::*resolved)() const;
  // Parameter shapes depend on it, so a checkpoint loads only into the same
  // value (an Int field); the others must match only to resume the same run.
  bool shape;
  // The training option: its default as text, inclusive range, help line.
  const char *option_default;
  double option_min, option_max;
  const char *option_help;
  const char *choices = nullptr;  // Choice: the names, comma-separated, in index order
  // Added after checkpoints were first written: a manifest without it holds
  // the default (GPT-2's block).
  bool optional_in_manifest = false;
  // Not a shape, but another value is another function of the same weights
  // (the norm's epsilon, the rotary base): a load must match it too.
  bool function = false;

  int int_value(const GptConfig &c) const {  // resolved
    return resolved ? (c.*resolved)() : c.*int_member;
  }
  float float_value(const GptConfig &c) const { return c.*float_member; }
  // Choice: the name of index i ("" when out of range); the index of a name (-1 if none).
  std::string choice_name(int i) const;
  int choice_index(const std::string &name) const;
};

// In the order of GptConfig's members.
const std::vector<GptConfigField> &gpt_config_fields();

}  // namespace ptdp
