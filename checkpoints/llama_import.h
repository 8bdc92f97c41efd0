// The LLaMA family's side of `ptdp ckpt import-safetensors` (safetensors_import.h
// dispatches here when the config's model_type is llama, mistral or qwen2).
#pragma once
#include <string>

#include "engine/model/gpt_config.h"

namespace ptdp {

// Whether a config.json's text names a model of the LLaMA family.
bool is_llama_family(const std::string &config_text);

// The GptConfig of a LlamaConfig, MistralConfig or Qwen2Config given as JSON
// text (`where` names it in errors): RMSNorm, rope (rope_theta, or
// rope_parameters' in transformers 5), SwiGLU of intermediate_size, query
// groups of num_key_value_heads, no linear biases but Qwen2's (or
// attention_bias's) QKV ones, untied unless tie_word_embeddings. A field that
// changes the function and that ptdp does not compute (a scaled rope, sliding
// windows, another activation, MLP or o_proj biases, a head_dim other than
// hidden_size / heads) is invalid_config naming it.
GptConfig gpt_config_from_llama(const std::string &text, const std::string &where);

// weights: a .safetensors file, or a model.safetensors.index.json whose shards
// lie beside it (a shard missing: io_error naming it; an index and shards that
// disagree: corrupt_data). Checks every tensor's name, shape and dtype before
// it writes; then as import_safetensors.
std::string import_llama(const std::string &weights, const std::string &config_text,
                         const std::string &where, const std::string &dir);

}  // namespace ptdp
