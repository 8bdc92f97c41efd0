// Learning rate: linear warmup from 0, then constant / linear / cosine decay to
// min_lr at decay_iters, min_lr after (Megatron's schedule).
#pragma once
#include <cstdint>
#include <string>

namespace ptdp {

struct LrSchedule {
  double max_lr = 1e-3, min_lr = 0;
  int64_t warmup_iters = 0, decay_iters = 0;
  std::string style = "cosine";  // constant | linear | cosine
  double at(int64_t iteration) const;  // iteration is 1-based
};

}  // namespace ptdp
