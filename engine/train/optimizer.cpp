#include "engine/train/optimizer.h"

#include <cmath>

#include "kernels/cpu/ops.h"

namespace ptdp {

AdamW::AdamW(size_t num_params, AdamWConfig cfg) : cfg_(cfg), m_(num_params), v_(num_params) {}

void AdamW::update(GPT<float> &model, double lr, int64_t step) {
  for (const ParamInfo &p : model.param_table()) {
    cpu::AdamWParams a{lr, cfg_.beta1, cfg_.beta2, cfg_.eps,
                       p.weight_decay ? cfg_.weight_decay : 0.0, step};
    cpu::adamw_update(model.params() + p.offset, model.grads() + p.offset, m_.data() + p.offset,
                      v_.data() + p.offset, p.numel, a);
  }
}

double grad_sum_squares(GPT<float> &model) {
  const bool count_replicated = model.tensor_parallel().rank == 0;
  double total = 0;
  for (const ParamInfo &p : model.param_table())
    if (!p.tied_copy && (p.split_axis >= 0 || count_replicated))
      total += cpu::sum_squares(model.grads() + p.offset, p.numel);
  return total;
}

double clip_gradients(GPT<float> &model, double norm, double clip) {
  if (clip <= 0 || !(norm > clip)) return 1.0;
  double factor = clip / (norm + 1e-6);
  cpu::scale_inplace(model.grads(), model.num_params(), (float)factor);
  return factor;
}

}  // namespace ptdp
