// GPT-2's Hugging Face names and layouts as ptdp's parameters map to them:
// the one mapping that import-safetensors and export-safetensors share.
// ptdp's names are GPT-2's (h.N.attn.c_attn.weight, ...); a linear weight is
// [out, in] in ptdp and Conv1D's [in, out] in GPT-2; c_attn's outputs are
// ordered [a, 3, hd] (per head q, k, v) in ptdp and [3, a, hd] in GPT-2; wte
// is unpadded in GPT-2.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "engine/model/gpt.h"

namespace ptdp {

// How one parameter ([rows, cols] = [out, in]; 1-D: cols = 1) is stored in GPT-2.
struct Gpt2Layout {
  std::vector<int64_t> shape;       // ptdp's global shape, wte unpadded
  std::vector<int64_t> gpt2_shape;  // in the safetensors file
  int64_t rows = 0, cols = 1;
  bool transpose = false;  // a linear weight: Conv1D's [in, out]
  bool qkv = false;        // c_attn: outputs [a, 3, hd] in ptdp, [3, a, hd] in GPT-2
};

// What in the model GPT-2's layout lacks ("" when it holds the model).
std::string gpt2_layout_mismatch(const GptConfig &cfg);
// Refuses (invalid_config) a model gpt2_layout_mismatch names.
Gpt2Layout gpt2_layout(const ParamInfo &p, const GptConfig &cfg);

// GPT-2's output index of ptdp's row r: c_attn's row a*3*hd + q*hd + e (head
// a; q: 0 query, 1 key, 2 value) is GPT-2's q*h + a*hd + e; others stay.
inline int64_t gpt2_row(const Gpt2Layout &l, int64_t r, int64_t h, int64_t hd) {
  if (!l.qkv) return r;
  const int64_t a = r / (3 * hd), q = r / hd % 3, e = r % hd;
  return q * h + a * hd + e;
}

}  // namespace ptdp
