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

// A log line shows, as Megatron's does, means over the log interval (the
// steps since the previous log line): the lm loss, leaving out steps that were
// skipped (an fp16 overflow) unless every one of them was, and the time per
// iteration (so the throughput too). The first read at an iteration closes the
// interval; later reads at that iteration (the log line, then its JSON record)
// get the same means.
struct IntervalMeans {
  double lm_loss = 0, seconds = 0;
};
class LogInterval {
 public:
  void add(double loss, bool skipped, double seconds);
  // The means of the interval closing at `iteration`; `none` when no step ran in it.
  IntervalMeans mean_at(int64_t iteration, IntervalMeans none);

 private:
  double sum_ = 0, sum_all_ = 0;  // the interval's steps that counted, and all of them
  double seconds_ = 0;            // of all its steps
  int64_t steps_ = 0, steps_all_ = 0;
  int64_t closed_at_ = -1;
  IntervalMeans closed_;
};

// The same step as one JSON object on one line (a JSON-lines metrics file for
// plots): {"kind": "train", "iteration": ..., "lm_loss": ..., ...} with the log
// line's fields; a value that is not finite (a NaN loss) is null.
std::string format_log_json(const StepMetrics &m);

// A JSON number, or null for NaN and infinities (JSON has neither).
std::string json_number(double x);

// Appends `line` and a newline to `path` in one write (the file is created if
// need be); fresh = true replaces the file with that one line, atomically.
// The writers' target rules apply (engine/core/output_file.h); `line` must
// hold no newline.
void append_json_line(const std::string &path, const std::string &line, bool fresh);

}  // namespace ptdp
