#include "checkpoints/llama_layout.h"

#include "engine/core/status.h"
#include "engine/core/text.h"

namespace ptdp {

std::string llama_layout_mismatch(const GptConfig &cfg) {
  if (!cfg.rms_norm()) return "normalization is LayerNorm (the LLaMA layout has RMSNorm)";
  if (!cfg.rope()) return "positions are learned (the LLaMA layout has rotary embeddings)";
  if (!cfg.swiglu) return "the MLP is GeLU (the LLaMA layout has SwiGLU)";
  return "";
}

HfMapping llama_mapping(const ParamInfo &p, const GptConfig &cfg) {
  const std::string why = llama_layout_mismatch(cfg);
  if (!why.empty()) fail(Status::invalid_config, "the Hugging Face LLaMA layout: ", why);
  const int64_t h = cfg.hidden_size, hd = cfg.head_dim(), a = cfg.num_attention_heads,
                G = cfg.query_groups(), r = a / G;
  const bool weight = ends_with(p.name, ".weight");
  HfMapping m;
  m.cols = p.global_shape.size() > 1 ? p.global_shape[1] : 1;
  const int64_t rows = p.vocab_rows ? cfg.vocab_size : p.global_shape[0];
  m.rows = rows;
  auto one = [&](const std::string &name) {  // the same tensor, row for row
    m.sources.push_back({name, p.vocab_rows ? std::vector<int64_t>{rows, m.cols} : p.global_shape});
    return m;
  };
  if (p.name == "wte.weight") return one("model.embed_tokens.weight");
  if (p.name == "lm_head.weight") return one("lm_head.weight");
  if (p.name == "ln_f.weight") return one("model.norm.weight");
  if (!starts_with(p.name, "h."))
    fail(Status::invalid_config, "parameter '", p.name, "' has no place in the LLaMA layout");
  const size_t dot = p.name.find('.', 2);
  const std::string layer = p.name.substr(2, dot - 2), role = p.name.substr(dot + 1);
  const std::string pre = "model.layers." + layer + ".";
  if (role == "ln_1.weight") return one(pre + "input_layernorm.weight");
  if (role == "ln_2.weight") return one(pre + "post_attention_layernorm.weight");
  if (role == "attn.c_proj.weight") return one(pre + "self_attn.o_proj.weight");
  if (role == "mlp.gate_proj.weight") return one(pre + "mlp.gate_proj.weight");
  if (role == "mlp.up_proj.weight") return one(pre + "mlp.up_proj.weight");
  if (role == "mlp.c_proj.weight") return one(pre + "mlp.down_proj.weight");
  // Linear biases: LLaMA's attention_bias (o_proj's; q, k, v below) and mlp_bias.
  if (role == "attn.c_proj.bias") return one(pre + "self_attn.o_proj.bias");
  if (role == "mlp.c_proj.bias") return one(pre + "mlp.down_proj.bias");
  if (role == "mlp.gate_up_proj.bias") {
    const int64_t f = p.global_shape[1];
    m.sources = {{pre + "mlp.gate_proj.bias", {f}}, {pre + "mlp.up_proj.bias", {f}}};
    m.row_per_source = true;
    return m;
  }
  if (role == "attn.c_attn.weight" || role == "attn.c_attn.bias") {
    const std::string kind = weight ? ".weight" : ".bias";
    auto shape = [&](int64_t n) {
      return weight ? std::vector<int64_t>{n, h} : std::vector<int64_t>{n};
    };
    m.sources = {{pre + "self_attn.q_proj" + kind, shape(a * hd)},
                 {pre + "self_attn.k_proj" + kind, shape(G * hd)},
                 {pre + "self_attn.v_proj" + kind, shape(G * hd)}};
    m.group_rows = (r + 2) * hd;
    m.queries = r;
    m.hd = hd;
    return m;
  }
  fail(Status::invalid_config, "parameter '", p.name, "' has no place in the LLaMA layout");
}

}  // namespace ptdp
