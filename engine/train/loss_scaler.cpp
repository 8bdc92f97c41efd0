#include "engine/train/loss_scaler.h"

#include <algorithm>

namespace ptdp {

LossScaler::LossScaler(const LossScalerConfig &c) : cfg_(c) {
  st_.scale = (float)(c.dynamic ? c.initial_scale : c.static_scale);
  st_.hysteresis_tracker = c.hysteresis;
}

void LossScaler::update(bool found_inf) {
  if (!cfg_.dynamic) return;
  if (found_inf) {
    st_.growth_tracker = 0;
    if (--st_.hysteresis_tracker <= 0) st_.scale = std::max(st_.scale * 0.5f, (float)cfg_.min_scale);
    return;
  }
  if (++st_.growth_tracker == cfg_.window) {
    st_.growth_tracker = 0;
    st_.hysteresis_tracker = cfg_.hysteresis;
    st_.scale *= 2.f;
  }
}

}  // namespace ptdp
