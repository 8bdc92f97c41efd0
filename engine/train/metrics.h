// What one training step reports, and its log line (ARCHITECTURE §8).
#pragma once
#include <cstdint>
#include <string>

namespace ptdp {

struct StepMetrics {
  int64_t iteration = 0, train_iters = 0, consumed_samples = 0;
  int64_t global_batch_size = 0;
  double lm_loss = 0, lr = 0, grad_norm = 0, loss_scale = 1.0;
  int64_t skipped_iters = 0, nan_iters = 0;  // running totals
  double elapsed_ms = 0, tokens_per_s = 0, tflops_per_rank = 0;
  double mfu = -1;                           // < 0: device peak unknown (CPU)
};

std::string format_log_line(const StepMetrics &m);

}  // namespace ptdp
