#include "engine/train/lr_schedule.h"

#include <cmath>

namespace ptdp {

double LrSchedule::at(int64_t it) const {
  if (warmup_iters > 0 && it <= warmup_iters) return max_lr * (double)it / (double)warmup_iters;
  if (style == "constant") return max_lr;
  if (it >= decay_iters) return min_lr;
  double ratio = (double)(it - warmup_iters) / (double)(decay_iters - warmup_iters);
  double coeff = style == "linear" ? 1.0 - ratio : 0.5 * (std::cos(M_PI * ratio) + 1.0);
  return min_lr + coeff * (max_lr - min_lr);
}

}  // namespace ptdp
