#include "engine/train/metrics.h"

#include <cstdio>

namespace ptdp {

std::string format_log_line(const StepMetrics &m) {
  char buf[768];
  int n = std::snprintf(
      buf, sizeof buf,
      " iteration %8lld/%8lld | consumed samples: %12lld | elapsed time per iteration (ms): %.1f"
      " | learning rate: %.3E | global batch size: %5lld | lm loss: %.6E | loss scale: %.1f"
      " | grad norm: %.3f | number of skipped iterations: %3lld | number of nan iterations: %3lld"
      " | tokens/s: %.0f | TFLOP/s per rank: %.3f |",
      (long long)m.iteration, (long long)m.train_iters, (long long)m.consumed_samples,
      m.elapsed_ms, m.lr, (long long)m.global_batch_size, m.lm_loss, m.loss_scale, m.grad_norm,
      (long long)m.skipped_iters, (long long)m.nan_iters, m.tokens_per_s, m.tflops_per_rank);
  std::string s(buf, n > 0 ? (size_t)n : 0);
  if (m.mfu >= 0) {
    std::snprintf(buf, sizeof buf, " MFU: %.1f%% |", 100.0 * m.mfu);
    s += buf;
  }
  return s;
}

}  // namespace ptdp
