#include "checkpoints/gpt2_layout.h"

#include "engine/core/text.h"

namespace ptdp {

Gpt2Layout gpt2_layout(const ParamInfo &p, const GptConfig &cfg) {
  Gpt2Layout l;
  l.shape = p.global_shape;
  if (p.name == "wte.weight") l.shape[0] = cfg.vocab_size;  // GPT-2's wte is unpadded
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
