// The trainer's named numbers (capi/trainer_values.h).
#include "capi/trainer_values.h"

#include "engine/core/allocator.h"
#include "engine/core/status.h"
#include "engine/train/trainer.h"

namespace ptdp::capi {

namespace {

double comm_seconds(const Trainer &t) {  // the first local rank's, over its groups
  double s = 0;
  for (const char *g : {"tp", "pp", "dp", "embedding"})
    if (t.has_group(0, g)) s += t.comm_stats(0, g).seconds;
  return s;
}

double device_peak(const Trainer &t) {  // summed over this process's ranks
  double b = 0;
  for (int r = 0; r < t.local_ranks(); r++) b += (double)t.rank_report(r).device_peak_bytes;
  return b;
}

const StepMetrics &last(const Trainer &t) { return t.last_metrics(); }

}  // namespace

const std::vector<TrainerValue> &trainer_values() {
  using T = const Trainer &;
  static const std::vector<TrainerValue> rows = {
      // The step's result: its position in the run, then the last step's metrics.
      {"iteration", true, false, [](T t) { return (double)t.iteration(); }},
      {"consumed_samples", true, false, [](T t) { return (double)t.consumed_samples(); }},
      {"lm_loss", true, true, [](T t) { return last(t).lm_loss; }},
      {"lr", true, true, [](T t) { return last(t).lr; }},
      {"grad_norm", true, true, [](T t) { return last(t).grad_norm; }},
      {"loss_scale", true, true, [](T t) { return last(t).loss_scale; }},
      {"skipped_iters", true, true, [](T t) { return (double)last(t).skipped_iters; }},
      {"nan_iters", true, true, [](T t) { return (double)last(t).nan_iters; }},
      {"elapsed_ms", true, true, [](T t) { return last(t).elapsed_ms; }},
      {"tokens_per_s", true, true, [](T t) { return last(t).tokens_per_s; }},
      {"tflops_per_rank", true, true, [](T t) { return last(t).tflops_per_rank; }},
      // Facts of the run.
      {"train_iters", false, false, [](T t) { return (double)t.options().train_iters; }},
      {"num_parameters", false, false, [](T t) { return (double)t.model().num_real_params(); }},
      {"failed_saves", false, false, [](T t) { return (double)t.failed_saves(); }},
      {"steps_taken", false, false, [](T t) { return (double)t.steps_taken(); }},
      {"steps_skipped", false, false, [](T t) { return (double)t.steps_skipped(); }},
      {"padded_vocab_size", false, false,
       [](T t) { return (double)t.options().model.padded_vocab(t.options().parallel.t); }},
      {"unigram_entropy", false, false, [](T t) { return t.unigram_entropy(); }},
      {"train_samples", false, false, [](T t) { return (double)t.train_samples(); }},
      {"valid_samples", false, false, [](T t) { return (double)t.valid_samples(); }},
      {"peak_memory_bytes", false, false,
       [](T) { return (double)CpuAllocator::instance().peak_bytes(); }},
      {"device_peak_memory_bytes", false, true, device_peak},
      {"world_size", false, false, [](T t) { return (double)t.world_size(); }},
      {"local_ranks", false, false, [](T t) { return (double)t.local_ranks(); }},
      {"rank", false, false, [](T t) { return (double)t.first_local_rank(); }},
      {"tp_rank", false, false, [](T t) { return (double)t.first_local_coord().tp; }},
      {"dp_rank", false, false, [](T t) { return (double)t.first_local_coord().dp; }},
      {"pp_rank", false, false, [](T t) { return (double)t.first_local_coord().pp; }},
      {"tensor_model_parallel_size", false, false, [](T t) { return (double)t.options().parallel.t; }},
      {"pipeline_model_parallel_size", false, false, [](T t) { return (double)t.options().parallel.p; }},
      {"data_parallel_size", false, false, [](T t) { return (double)t.options().parallel.d; }},
      {"virtual_pipeline_stages", false, false, [](T t) { return (double)t.options().virtual_stages; }},
      {"comm_seconds", false, false, comm_seconds},
      {"replayed_bubble", false, true, [](T t) { return t.replayed_bubble(); }},
      {"forward_op_seconds", false, true, [](T t) { return t.mean_op_seconds(PipeOpKind::forward); }},
      {"backward_op_seconds", false, true, [](T t) { return t.mean_op_seconds(PipeOpKind::backward); }},
      {"weight_op_seconds", false, true,
       [](T t) { return t.mean_op_seconds(PipeOpKind::backward_weight); }},
  };
  return rows;
}

const TrainerValue &trainer_value(const std::string &name) {
  std::string known;
  for (const TrainerValue &v : trainer_values()) {
    if (name == v.name) return v;
    known += (known.empty() ? "" : ", ") + std::string(v.name);
  }
  fail(Status::invalid_argument, "unknown trainer value '", name, "'; known: ", known);
}

}  // namespace ptdp::capi
