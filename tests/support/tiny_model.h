// The model and layout tests' small GPT shapes, built in one place.
#pragma once
#include "engine/model/gpt_config.h"

// GPT-2's block: `layers` layers of width `hidden` with `heads` heads, a
// vocabulary of `vocab` padded to a multiple of 8 (the padding must stay out
// of the loss), `seq` positions; dropout 0.2 and init std 0.2, large enough
// that attention is far from uniform.
inline ptdp::GptConfig tiny_gpt(int layers, int hidden, int heads, int vocab, int seq) {
  ptdp::GptConfig c;
  c.num_layers = layers;
  c.hidden_size = hidden;
  c.num_attention_heads = heads;
  c.vocab_size = vocab;
  c.make_vocab_size_divisible_by = 8;
  c.seq_length = seq;
  c.hidden_dropout = 0.2f;
  c.attention_dropout = 0.2f;
  c.init_method_std = 0.2f;
  return c;
}

// The LLaMA family's block on c: RMSNorm, rope at `rotary_base`, `groups`
// key/value heads, SwiGLU with `ffn` hidden units, an untied head, no linear
// biases but QKV's (Qwen2's shape).
inline ptdp::GptConfig with_llama_block(ptdp::GptConfig c, float rotary_base, int groups, int ffn) {
  c.normalization = ptdp::GptConfig::RMSNorm;
  c.position_embedding_type = ptdp::GptConfig::Rope;
  c.rotary_base = rotary_base;
  c.num_query_groups = groups;
  c.swiglu = 1;
  c.ffn_hidden_size = ffn;
  c.untie_embeddings_and_output_weights = 1;
  c.disable_bias_linear = 1;
  c.add_qkv_bias = 1;
  return c;
}
