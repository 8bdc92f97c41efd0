// A dropout site as the CUDA kernels see it (dropout.cu, flash_attention.cu):
// the Philox key and the keep threshold and scale, computed on the host exactly
// as the CPU computes them (dropout_keep's threshold; 1 / (1 - p) in float), so
// the masks are the CPU's bit for bit.
#pragma once
#include <cstdint>

#include "engine/core/philox.h"

namespace ptdp::cuda {

struct Drop {
  DropoutKey key;
  uint32_t sample_offset;
  uint32_t threshold;   // keep where bits >= threshold (attention: a byte, make_attention_drop)
  float scale;          // 1 / (1 - p) (attention: of the rate drawn)
  bool on;              // p > 0; off = identity, no draws
  int head_offset = 0;  // attention: heads are numbered from here in the element index
};

inline Drop make_drop(const DropoutSpec &d, int head_offset = 0) {
  Drop r;
  r.key = d.key;
  r.sample_offset = d.sample_offset;
  r.on = d.p > 0;
  r.threshold = r.on ? (uint32_t)(d.p * 4294967296.0) : 0u;
  r.scale = r.on ? 1.f / (1.f - d.p) : 1.f;
  r.head_offset = head_offset;
  return r;
}

// Attention-probability dropout: 8-bit draws (attention_keep), so the
// threshold compares a byte and the scale is 1 / (1 - attention_dropout_rate).
inline Drop make_attention_drop(const DropoutSpec &d, int head_offset = 0) {
  Drop r = make_drop(d, head_offset);
  r.threshold = attention_drop_threshold(d.p);
  r.scale = r.on ? 1.f / (1.f - attention_dropout_rate(d.p)) : 1.f;
  return r;
}

}  // namespace ptdp::cuda
