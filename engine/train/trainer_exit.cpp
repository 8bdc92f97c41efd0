// Preemption and time limits, Megatron's --exit-signal-handler, --exit-interval
// and --exit-duration-in-mins: after a step (and, for the signal, before each
// batch of an evaluation), the trainer decides whether the run should end,
// every process alike, and saves first.
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>

#include "engine/train/trainer.h"
#include "engine/train/trainer_rank.h"

namespace ptdp {

namespace {

std::string minutes(double x) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.3g", x);
  return buf;
}

}  // namespace

void Trainer::decide_exit(int64_t it) {
  const bool any = opt_.exit_signal_handler || opt_.exit_interval > 0 || opt_.exit_duration_mins > 0;
  if (!any) return;
  const double elapsed_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count();
  // What each reason says on this process: the signal number, the interval
  // met, and the duration's margin (the longest step and the last save, or
  // twice the longest step before any save: the time the next step and its
  // save would take) against what is left.
  const double limit_s = opt_.exit_duration_mins * 60;
  const double margin_s = longest_step_s_ + (last_save_s_ > 0 ? last_save_s_ : longest_step_s_);
  double why[3] = {(double)exit_signal_received(),
                   opt_.exit_interval > 0 && it % opt_.exit_interval == 0 ? 1.0 : 0.0,
                   limit_s > 0 && elapsed_s + margin_s >= limit_s ? 1.0 : 0.0};
  // A signal may reach one process only, and clocks differ: every process
  // takes the others' reasons too, so that all end after the same step.
  if (local_ranks() < world_size()) {
    make_world_groups();
    run_on_ranks([&](Rank &r) {
      double mine[3] = {why[0], why[1], why[2]};
      r.world->all_reduce(mine, 3, ReduceOp::max);
      if (&r == ranks_[0].get()) std::copy(mine, mine + 3, why);
    });
  }
  if (why[0] == 0 && why[1] == 0 && why[2] == 0) return;
  std::string reason;
  if (why[0] != 0) reason = exit_signal_name((int)why[0]) + " received";
  if (why[1] != 0)
    reason += (reason.empty() ? "" : "; ") + std::string("--exit-interval ") +
              std::to_string(opt_.exit_interval) + " reached";
  if (why[2] != 0)
    reason += (reason.empty() ? "" : "; ") + std::string("--exit-duration-in-mins ") +
              minutes(opt_.exit_duration_mins) + ": " + minutes(elapsed_s / 60) +
              " minutes used, and the next step with its save may take " + minutes(margin_s / 60);
  end_run(reason + " at iteration " + std::to_string(it));
}

// Every rank takes the same answer at the same point: the signal may reach
// one process of several, or arrive between two local ranks' looks.
int Trainer::agreed_signal(Rank &r) {
  double sig = exit_signal_received();
  r.world->all_reduce(&sig, 1, ReduceOp::max);
  return (int)sig;
}

// The end of a run asked for: the training state saved unless this iteration
// already was (or this trainer took no step: a loaded state is on disk), every
// save on disk, and exit_reason saying why and what was saved.
void Trainer::end_run(std::string reason) {
  const bool saved = in_run_saved_iteration_ == iteration_ || steps_taken_ == 0;
  if (!opt_.save_path.empty() && !saved) save_in_run();
  wait_for_saves();  // the run ends: its last save must be on disk
  if (opt_.save_path.empty())
    reason += "; nothing saved (no --save)";
  else if (steps_taken_ == 0)
    reason += "; nothing saved (this trainer took no step)";
  else if (!last_save_error_.empty())
    reason += "; the save failed: " + last_save_error_;
  else
    reason += "; saved " + last_saved();
  exit_reason_ = reason;
}

}  // namespace ptdp
