// AdamW over the model's flat parameters, with global-norm clipping, on the
// model's device through its op table. With the distributed optimizer it
// holds and updates one range of the flat buffer only (engine/parallel/
// dp_shard.h): its moments and master weights are that range's.
// Weight decay skips biases and LayerNorm parameters (ParamInfo::weight_decay).
// Mixed precision (Megatron's Float16 optimizer): a 16-bit model gets fp32
// master weights here; the update runs on them and the model receives them
// rounded to its dtype. Adam's moments are fp32 either way.
#pragma once
#include "engine/device/device.h"
#include "engine/model/gpt.h"

namespace ptdp {

struct AdamWConfig {
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8, weight_decay = 0.01;
};

class AdamW {
 public:
  // Moments start at zero; a 16-bit model's master weights are its fp32
  // initial parameters (GPT::take_fp32_init: moved, not copied), or its
  // rounded parameters when another optimizer took those first. All on the
  // model's device.
  // [lo, hi) of the flat buffer; hi = 0: all of it.
  AdamW(GPT<float> &model, AdamWConfig cfg, size_t lo = 0, size_t hi = 0);
  // One update with learning rate lr; `step` counts updates from 1. The
  // gradients are used times grad_scale (loss-scale unscaling and clipping in
  // the same pass; the gradient array is left as it is), and a 16-bit model's
  // parameters are rewritten from the master weights in that pass too. Only
  // the optimizer's range of the parameters changes.
  void update(GPT<float> &model, double lr, int64_t step, double grad_scale = 1.0);
  // The range it holds, and device pointers laid out like the model's
  // parameters of that range.
  size_t lo() const { return lo_; }
  size_t hi() const { return hi_; }
  float *exp_avg() { return m_.data(); }
  float *exp_avg_sq() { return v_.data(); }
  // fp32 master weights; null for an fp32 model, whose parameters are their
  // own master (and for an empty range).
  float *master() { return master_.size() ? master_.data() : nullptr; }
  // A 16-bit model's optimizer: it keeps master weights (of its range).
  bool has_master() const { return has_master_; }
  // The model's parameters of the range = the master weights rounded to its
  // dtype (after a load).
  void master_to_model(GPT<float> &model) const;

 private:
  AdamWConfig cfg_;
  size_t lo_ = 0, hi_ = 0;
  bool has_master_ = false;
  DeviceArray<float> m_, v_, master_;
};

// Sum of squared gradients of this rank's shards in [lo, hi) of the flat
// buffer (hi = 0: to the end), each replicated tensor counted on tensor rank 0
// only and the tied embedding on the first stage only, so that the sum over
// the tensor and pipeline groups (and the ranges) is the serial sum.
// Deterministic for any thread count.
double grad_sum_squares(GPT<float> &model, size_t lo = 0, size_t hi = 0);
// The factor that clips the gradient norm to `clip` (1 when norm <= clip or clip = 0).
double clip_factor(double norm, double clip);

}  // namespace ptdp
