#include "checkpoints/gpt2_layout.h"

#include <string>

#include "checkpoints/llama_layout.h"
#include "engine/core/status.h"
#include "engine/core/text.h"

namespace ptdp {

std::string gpt2_layout_mismatch(const GptConfig &c) {
  if (c.rms_norm()) return "RMSNorm";
  if (c.rope()) return "rotary positions";
  if (c.swiglu) return "a SwiGLU MLP";
  if (c.query_groups() != c.num_attention_heads) return "grouped-query attention";
  if (!c.tied()) return "an untied output layer";
  if (!c.linear_bias()) return "linear layers without biases";
  return "";
}

Gpt2Layout gpt2_layout(const ParamInfo &p, const GptConfig &cfg) {
  // The LLaMA family's options change the tensors: GPT-2's layout would be wrong.
  const std::string why = gpt2_layout_mismatch(cfg);
  if (!why.empty())
    fail(Status::invalid_config, "the Hugging Face GPT-2 layout has no ", why,
         ", and the model is not of the LLaMA family's shape either (", llama_layout_mismatch(cfg),
         "): no Hugging Face layout holds it");
  Gpt2Layout l;
  l.shape = p.global_shape;
  if (p.vocab_rows) l.shape[0] = cfg.vocab_size;  // GPT-2's wte is unpadded
  l.rows = l.shape[0];
  l.cols = l.shape.size() > 1 ? l.shape[1] : 1;
  for (const char *w :
       {".attn.c_attn.weight", ".attn.c_proj.weight", ".mlp.c_fc.weight", ".mlp.c_proj.weight"})
    l.transpose = l.transpose || ends_with(p.name, w);
  l.qkv = ends_with(p.name, ".attn.c_attn.weight") || ends_with(p.name, ".attn.c_attn.bias");
  l.gpt2_shape = l.transpose ? std::vector<int64_t>{l.cols, l.rows} : l.shape;
  return l;
}

}  // namespace ptdp
