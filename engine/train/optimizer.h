// AdamW over the model's flat fp32 parameters, with global-norm clipping.
// Weight decay skips biases and LayerNorm parameters (ParamInfo::weight_decay).
#pragma once
#include <vector>

#include "engine/core/allocator.h"
#include "engine/model/gpt.h"

namespace ptdp {

struct AdamWConfig {
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8, weight_decay = 0.01;
};

class AdamW {
 public:
  AdamW(size_t num_params, AdamWConfig cfg);
  // One update with learning rate lr; `step` counts updates from 1.
  void update(GPT<float> &model, double lr, int64_t step);
  Buffer<float> &exp_avg() { return m_; }
  Buffer<float> &exp_avg_sq() { return v_; }

 private:
  AdamWConfig cfg_;
  Buffer<float> m_, v_;
};

// Sum of squared gradients of this rank's shards, each replicated tensor counted
// on tensor rank 0 only and the tied embedding on the first stage only, so that
// the sum over the tensor and pipeline groups is the serial sum.
// Deterministic for any thread count.
double grad_sum_squares(GPT<float> &model);
// Scales the gradients by clip / norm when norm > clip > 0; returns the factor.
double clip_gradients(GPT<float> &model, double norm, double clip);

}  // namespace ptdp
