// `ptdp plot LOG.jsonl OUT.png`: the training loss and validation loss against
// iteration (top panel) and the learning rate against iteration (bottom
// panel) of a --log-json metrics file (engine/train/metrics.h), as a PNG.
#pragma once
#include <cstdint>
#include <map>
#include <string>

namespace ptdp {

// What a metrics file holds for the plot, by iteration. A later record for an
// iteration replaces an earlier one (a run resumed from an older checkpoint
// logs those iterations again). Non-finite values (null) are left out.
struct MetricsSeries {
  std::map<int64_t, double> train_loss, valid_loss, lr;
  int64_t train_records = 0;
  double num_parameters = -1;  // from the first "run" record, -1 when absent
};

// Reads JSON lines: blank lines are skipped, records of other kinds ignored.
// Errors: io_error (unreadable), corrupt_data naming the line (not JSON, not
// an object, a train/valid record without a numeric iteration; a last line
// cut short by a run still writing is skipped) or when no iteration was logged.
MetricsSeries read_metrics_log(const std::string &path);

// Draws the plot and writes it atomically. The output must not be the log
// itself, a directory or a device (invalid_argument).
void plot_metrics_png(const std::string &log_path, const std::string &png_path);

}  // namespace ptdp
