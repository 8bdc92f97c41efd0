#include "engine/train/optimizer.h"

namespace ptdp {

AdamW::AdamW(GPT<float> &model, AdamWConfig cfg) : cfg_(cfg) {
  Device &dev = model.device();
  const size_t n = model.num_params();
  m_.resize(dev, n);
  v_.resize(dev, n);
  if (model.precision().dtype != DType::f32) {
    master_ = model.take_fp32_init();
    if (master_.size() != n) {  // taken before: the rounded parameters are all there is
      master_.resize(dev, n);
      dev.copy(master_.data(), model.params(), n * sizeof(float));
    }
  }
}

void AdamW::update(GPT<float> &model, double lr, int64_t step, double grad_scale) {
  const bool master = master_.size() > 0;
  float *params = model.params();  // (taken writable once: the update rewrites them)
  float *weights = master ? master_.data() : params;
  for (const ParamInfo &p : model.param_table()) {
    AdamWStep a{lr, cfg_.beta1, cfg_.beta2, cfg_.eps, p.weight_decay ? cfg_.weight_decay : 0.0, step};
    a.grad_scale = grad_scale;
    if (master) {  // the model's copy, rounded, in the same pass
      a.model_copy = params + p.offset;
      a.model_type = model.precision().dtype;
    }
    model.ops().adamw_update(weights + p.offset, model.grads() + p.offset, m_.data() + p.offset,
                             v_.data() + p.offset, p.numel, a);
  }
}

void AdamW::master_to_model(GPT<float> &model) const {
  if (!master_.size()) return;
  model.device().copy(model.params(), master_.data(), model.num_params() * sizeof(float));
  model.ops().round_to_storage(model.params(), model.num_params(), model.precision().dtype);
}

double grad_sum_squares(GPT<float> &model) {
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
    if (p.offset != end) {
      flush();
      begin = p.offset;
    }
    end = p.offset + p.numel;
  }
  flush();
  return total;
}

double clip_factor(double norm, double clip) {
  if (clip <= 0 || !(norm > clip)) return 1.0;
  return clip / (norm + 1e-6);
}

}  // namespace ptdp
