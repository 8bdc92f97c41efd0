// Shape and regularisation of a GPT model (Megatron's argument names).
#pragma once
#include <cstdint>
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
  float layernorm_epsilon = 1e-5f;

  int ffn() const { return ffn_hidden_size > 0 ? ffn_hidden_size : 4 * hidden_size; }
  int max_positions() const {
    return max_position_embeddings > 0 ? max_position_embeddings : seq_length;
  }
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
  enum Kind { Int, Float };
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

  int int_value(const GptConfig &c) const {  // resolved
    return resolved ? (c.*resolved)() : c.*int_member;
  }
  float float_value(const GptConfig &c) const { return c.*float_member; }
};

// In the order of GptConfig's members.
const std::vector<GptConfigField> &gpt_config_fields();

}  // namespace ptdp
