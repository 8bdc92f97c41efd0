#include "engine/train/optimizer.h"

namespace ptdp {

AdamW::AdamW(const GPT<float> &model, AdamWConfig cfg) : cfg_(cfg) {
  Device &dev = model.device();
  const size_t n = model.num_params();
  m_.resize(dev, n);
  v_.resize(dev, n);
  if (model.precision().dtype != DType::f32) {
    master_.resize(dev, n);
    dev.copy(master_.data(), model.params(), n * sizeof(float));
  }
}

void AdamW::update(GPT<float> &model, double lr, int64_t step) {
  float *weights = master_.size() ? master_.data() : model.params();
  for (const ParamInfo &p : model.param_table()) {
    const AdamWStep a{lr, cfg_.beta1, cfg_.beta2, cfg_.eps,
                      p.weight_decay ? cfg_.weight_decay : 0.0, step};
    model.ops().adamw_update(weights + p.offset, model.grads() + p.offset, m_.data() + p.offset,
                             v_.data() + p.offset, p.numel, a);
  }
  if (master_.size()) master_to_model(model);
}

void AdamW::master_to_model(GPT<float> &model) const {
  if (!master_.size()) return;
  model.device().copy(model.params(), master_.data(), model.num_params() * sizeof(float));
  model.ops().round_to_storage(model.params(), model.num_params(), model.precision().dtype);
}

double grad_sum_squares(GPT<float> &model) {
  const bool count_replicated = model.tensor_parallel().rank == 0;
  double total = 0;
  for (const ParamInfo &p : model.param_table())
    if (!p.tied_copy && (p.split_axis >= 0 || count_replicated))
      total += model.ops().sum_squares(model.grads() + p.offset, p.numel);
  return total;
}

double clip_factor(double norm, double clip) {
  if (clip <= 0 || !(norm > clip)) return 1.0;
  return clip / (norm + 1e-6);
}

void scale_gradients(GPT<float> &model, double factor) {
  if (factor != 1.0) model.ops().scale_inplace(model.grads(), model.num_params(), (float)factor);
}

}  // namespace ptdp
