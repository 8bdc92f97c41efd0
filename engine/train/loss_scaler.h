// Loss scaling for fp16 (Megatron's DynamicGradScaler / ConstantGradScaler).
// The loss's gradient is multiplied by scale() so that small activation
// gradients survive fp16; an overflow (an inf or NaN gradient) skips the step.
// Dynamic: after `hysteresis` overflows (not necessarily in a row) the scale
// is halved (never below min_scale); after `window` clean steps in a row it
// doubles and the hysteresis budget is refilled.
#pragma once
#include <cstdint>

namespace ptdp {

struct LossScalerConfig {
  bool dynamic = true;
  double static_scale = 1.0;         // used when !dynamic
  double initial_scale = 4294967296.0;  // 2^32, Megatron's default
  double min_scale = 1.0;
  int64_t window = 1000;
  int64_t hysteresis = 2;
};

// What a resumed run needs to continue the same scale sequence.
// The scale is a float, as Megatron's scale tensor (saved as such).
struct LossScalerState {
  float scale = 1.f;
  int64_t growth_tracker = 0, hysteresis_tracker = 0;
};

class LossScaler {
 public:
  explicit LossScaler(const LossScalerConfig &c);
  double scale() const { return st_.scale; }
  // After a step: found_inf says whether its gradients overflowed.
  void update(bool found_inf);
  const LossScalerState &state() const { return st_; }
  void set_state(const LossScalerState &s) { st_ = s; }

 private:
  LossScalerConfig cfg_;
  LossScalerState st_;
};

}  // namespace ptdp
