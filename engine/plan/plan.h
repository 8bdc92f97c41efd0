// `ptdp plan`: enumerate every layout (t, p, d, b, v, schedule, recomputation)
// of a model on n devices, drop what cannot work or does not fit (saying why),
// rank the rest by predicted iteration time and report them.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "engine/plan/model.h"

namespace ptdp::plan {

struct PlanRequest {
  ModelSpec model;
  TrainSpec train;
  std::string machine = "selene";
  bool machine_given = false;  // --machine named (else the default)
  bool calibrate = false;
  std::string device = "auto";  // what calibrate measures
  std::string save_machine;  // write the machine used (e.g. calibrated) as JSON
  // Constraints on the layout; 0 / -1 = search.
  int t = 0, p = 0, d = 0, b = 0, v = 0;
  int schedule = -1;        // ScheduleKind
  int recompute = -1;       // Recompute
  int scatter_gather = -1;  // 0 or 1
  bool sequence_parallel = false;  // --sequence-parallel: every layout with t > 1 uses it
  int grads_fp32 = -1;
  int max_micro_batch = 64;
  int top = 5;
  std::string explain;  // a layout label: "t=8,p=2,b=4,v=2[,interleaved][,full]"
  std::string format = "text";  // text | records
  std::string plot;             // PNG of predicted throughput against t, p, d, b
};

// Options as key=value pairs, keys Megatron's argument names (dashes or
// underscores). Unknown keys and bad values are errors that say what is allowed.
PlanRequest parse_plan_request(const std::vector<std::pair<std::string, std::string>> &options);
std::string plan_help();

struct PlanResult {
  Machine machine;
  std::string machine_log;            // what calibration measured
  std::vector<Prediction> ranked;     // fits, fastest first
  std::vector<Prediction> too_big;    // valid but over the device memory, smallest first
  std::vector<std::pair<Layout, std::string>> invalid;  // cannot work, with the reason
  int64_t considered = 0;
  bool fixed = false;  // the request named one layout in full
};

PlanResult run_plan(const PlanRequest &req);
// Reads "t=8,p=2,d=32,b=4,v=2,interleaved,full,no-sg" (any subset, any order)
// over defaults, saying which parts the label names.
struct LayoutLabel {
  Layout layout;
  bool t = false, p = false, d = false, b = false, v = false;
  bool schedule = false, recompute = false, scatter_gather = false;
};
LayoutLabel parse_layout(const std::string &label, const Layout &defaults);

// The report: table, winner's trade-offs (or --explain's breakdown), and last
// the machine-readable line. format=records gives one line per layout instead.
std::string format_plan(const PlanRequest &req, const PlanResult &res);

// parse + run + format: what the C ABI calls.
std::string plan_report(const std::vector<std::pair<std::string, std::string>> &options);

// Draws predicted TFLOP/s per GPU of the ranked layouts against t, p, d and b
// (four panels with numbered, titled axes; each point the best layout with
// that value) as a PNG.
void plot_plan_png(const PlanResult &res, const std::string &png_path);

}  // namespace ptdp::plan
