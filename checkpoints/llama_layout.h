// The Hugging Face names and layouts of the LLaMA family (LlamaForCausalLM,
// and the Mistral and Qwen2 models that share it) as ptdp's parameters map to
// them: the one mapping that the import and the export share. A linear
// weight is [out, in] in both; the differences are names, QKV: ptdp keeps
// one tensor with rows [G, a/G + 2, hd] (each query group's queries, its key,
// its value), Hugging Face three (q_proj [a hd, h], k_proj and v_proj [G hd, h]),
// and SwiGLU's biases: ptdp's one [2, f] tensor, Hugging Face's gate_proj.bias
// and up_proj.bias.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "engine/model/gpt.h"

namespace ptdp {

// Why the model cannot be written in the LLaMA layout ("" when it can): it
// needs RMSNorm, rotary positions and SwiGLU. Linear biases map to LLaMA's
// attention_bias and mlp_bias (every one), QKV's alone to Qwen2's.
std::string llama_layout_mismatch(const GptConfig &cfg);

struct HfTensor {
  std::string name;            // "model.layers.3.self_attn.q_proj.weight"
  std::vector<int64_t> shape;  // in the file
};

// Where one ptdp parameter p (of gpt_param_table(cfg, 1, {}): the whole model)
// lives in Hugging Face's tensors: row i of p (i below rows; a vocabulary
// tensor's padding rows have none) is row row(i).second of
// sources[row(i).first]; every row has `cols` values (1-D: 1). Computed per
// row, so a mapping costs nothing before the shapes are checked.
struct HfMapping {
  std::vector<HfTensor> sources;
  int64_t rows = 0, cols = 1;
  int64_t group_rows = 0, queries = 0, hd = 0;  // QKV: groups of (queries + 2) hd rows
  bool row_per_source = false;                   // SwiGLU's biases: row i is sources[i]
  std::pair<int, int64_t> row(int64_t i) const {
    if (row_per_source) return {(int)i, 0};
    if (!group_rows) return {0, i};
    const int64_t g = i / group_rows, slot = i % group_rows / hd, e = i % hd;
    if (slot < queries) return {0, (g * queries + slot) * hd + e};  // query head g r + slot
    return {slot == queries ? 1 : 2, g * hd + e};                    // the group's key, value
  }
};
HfMapping llama_mapping(const ParamInfo &p, const GptConfig &cfg);

}  // namespace ptdp
