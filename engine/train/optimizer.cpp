#include "engine/train/optimizer.h"

#include <algorithm>

#include "engine/core/status.h"

namespace ptdp {

AdamW::AdamW(GPT<float> &model, AdamWConfig cfg, size_t lo, size_t hi) : cfg_(cfg) {
  Device &dev = model.device();
  const size_t n = model.num_params();
  lo_ = std::min(lo, n);
  hi_ = hi ? std::min(hi, n) : n;
  if (hi_ < lo_) fail(Status::internal, "optimizer range [", lo, ", ", hi, ") is empty");
  const size_t k = hi_ - lo_;
  m_.resize(dev, k);
  v_.resize(dev, k);
  has_master_ = model.precision().dtype != DType::f32;
  if (has_master_) {
    DeviceArray<float> init = model.take_fp32_init();
    // Taken before: the rounded parameters are all there is.
    const float *from = init.size() == n ? init.data() : model.params();
    if (k == n && init.size() == n) {
      master_ = std::move(init);
    } else {
      master_.resize(dev, k);
      dev.copy(master_.data(), from + lo_, k * sizeof(float));
    }
  }
}

void AdamW::update(GPT<float> &model, double lr, int64_t step, double grad_scale) {
  const bool master = master_.size() > 0;
  float *params = model.params();  // (taken writable once: the update rewrites them)
  for (const ParamInfo &p : model.param_table()) {
    const size_t a0 = std::max(p.offset, lo_), a1 = std::min(p.offset + p.numel, hi_);
    if (a0 >= a1) continue;  // outside this optimizer's range
    AdamWStep a{lr, cfg_.beta1, cfg_.beta2, cfg_.eps, p.weight_decay ? cfg_.weight_decay : 0.0, step};
    a.grad_scale = grad_scale;
    if (master) {  // the model's copy, rounded, in the same pass
      a.model_copy = params + a0;
      a.model_type = model.precision().dtype;
    }
    const size_t k = a0 - lo_;  // into the optimizer's arrays
    float *weights = master ? master_.data() + k : params + a0;
    model.ops().adamw_update(weights, model.grads() + a0, m_.data() + k, v_.data() + k, a1 - a0, a);
  }
}

void AdamW::master_to_model(GPT<float> &model) const {
  if (!master_.size()) return;  // fp32, or an empty range
  const size_t k = hi_ - lo_;
  model.device().copy(model.params() + lo_, master_.data(), k * sizeof(float));
  model.ops().round_to_storage(model.params() + lo_, k, model.precision().dtype);
}

double grad_sum_squares(GPT<float> &model, size_t lo, size_t hi) {
  if (!hi) hi = model.num_params();
  const bool count_replicated = model.tensor_parallel().rank == 0;
  // Adjacent counted tensors are summed as one run: on a GPU each call is a
  // launch and a host sync (292 of them for the 1.3B model tensor by tensor,
  // one when every tensor counts).
  double total = 0;
  size_t begin = 0, end = 0;  // the current run [begin, end) of the flat gradients
  auto flush = [&] {
    if (end > begin) total += model.ops().sum_squares(model.grads() + begin, end - begin);
  };
  for (const ParamInfo &p : model.param_table()) {
    if (p.tied_copy || (p.split_axis < 0 && !count_replicated)) continue;
    const size_t a0 = std::max(p.offset, lo), a1 = std::min(p.offset + p.numel, hi);
    if (a0 >= a1) continue;
    if (a0 != end) {
      flush();
      begin = a0;
    }
    end = a1;
  }
  flush();
  return total;
}

double clip_factor(double norm, double clip) {
  if (clip <= 0 || !(norm > clip)) return 1.0;
  return clip / (norm + 1e-6);
}

}  // namespace ptdp
