// What each rank reports of the last step: its own report, the reports of
// every world rank gathered to world rank 0 (mpirun), and the pipeline bubble
// replayed from the ranks' measured op times.
#include <algorithm>
#include <string>
#include <vector>

#include "engine/core/status.h"
#include "engine/parallel/schedule.h"
#include "engine/train/trainer.h"
#include "engine/train/trainer_rank.h"

namespace ptdp {

const Trainer::RankReport &Trainer::rank_report(int rank) const {
  return ranks_.at((size_t)rank)->report;
}

namespace {

// A RankReport as doubles for gather_rank_reports (exact: every count is far
// below 2^53): its place and the step's scalars, then for each group of
// kReportGroups whether the rank is in it, its seconds, and its calls and bytes
// per operation.
const char *const kReportGroups[] = {"tp", "pp", "dp", "embedding"};
constexpr size_t kReportScalars = 9;
constexpr size_t kGroupFields = 2 + 2 * (size_t)CommOp::count;
constexpr size_t kReportFields = kReportScalars + 4 * kGroupFields;

std::vector<double> pack_report(const Trainer::RankReport &r) {
  std::vector<double> f = {(double)r.world_rank,
                           (double)r.coord.tp,
                           (double)r.coord.pp,
                           (double)r.coord.dp,
                           r.step_seconds,
                           r.compute_seconds,
                           (double)r.peak_activation_bytes,
                           (double)r.device_peak_bytes,
                           (double)r.device_in_use_bytes};
  for (const char *g : kReportGroups) {
    const auto it = r.comm.find(g);
    f.push_back(it != r.comm.end() ? 1.0 : 0.0);
    const CommStats c = it != r.comm.end() ? it->second : CommStats{};
    f.push_back(c.seconds);
    for (int64_t n : c.calls) f.push_back((double)n);
    for (int64_t n : c.bytes) f.push_back((double)n);
  }
  return f;
}

Trainer::RankReport unpack_report(const double *f) {
  Trainer::RankReport r;
  r.world_rank = (int)f[0];
  r.coord.tp = (int)f[1];
  r.coord.pp = (int)f[2];
  r.coord.dp = (int)f[3];
  r.step_seconds = f[4];
  r.compute_seconds = f[5];
  r.peak_activation_bytes = (int64_t)f[6];
  r.device_peak_bytes = (int64_t)f[7];
  r.device_in_use_bytes = (int64_t)f[8];
  f += kReportScalars;
  for (const char *g : kReportGroups) {
    if (f[0] != 0) {
      CommStats &c = r.comm[g];
      c.group = g;
      c.seconds = f[1];
      for (int i = 0; i < (int)CommOp::count; i++) {
        c.calls[i] = (int64_t)f[2 + i];
        c.bytes[i] = (int64_t)f[2 + (int)CommOp::count + i];
      }
    }
    f += kGroupFields;
  }
  return r;
}

}  // namespace

// Making a group is collective over the processes: each makes it at its first
// use (gather_rank_reports, decide_exit), with every rank it hosts.
void Trainer::make_world_groups() {
  std::vector<int> members((size_t)world_size());
  for (int q = 0; q < world_size(); q++) members[(size_t)q] = q;
  for (auto &r : ranks_)
    if (!r->world) r->world = world_->group("world", members, r->world_rank);
}

void Trainer::gather_rank_reports() {
  if (!has_stepped())
    fail(Status::wrong_state, "the rank reports are not available before the first training step "
         "(of this trainer, since it was made or loaded)");
  const int n = world_size();
  std::vector<RankReport> all;
  if (local_ranks() == n) {  // threads: copies of the local reports
    all.resize((size_t)n);
    for (const auto &r : ranks_) {
      RankReport &c = all[(size_t)r->world_rank];
      c = r->report;
      c.schedule.clear();  // as the ranks of other processes arrive
      c.timings.clear();
    }
  } else {
    make_world_groups();
    if (first_local_rank() == 0) all.resize((size_t)n);
    run_on_ranks([&](Rank &r) {
      const std::vector<double> mine = pack_report(r.report);
      if (r.world_rank != 0) {
        r.world->send(mine.data(), mine.size(), 0);
        return;
      }
      all[0] = unpack_report(mine.data());
      std::vector<double> theirs(kReportFields);
      for (int q = 1; q < n; q++) {
        r.world->recv(theirs.data(), theirs.size(), q);
        all[(size_t)q] = unpack_report(theirs.data());
      }
    });
  }
  gathered_ = std::move(all);
}

const Trainer::RankReport &Trainer::world_rank_report(int world_rank) const {
  const int n = world_size();
  if (world_rank < 0 || world_rank >= n)
    fail(Status::invalid_argument, "world rank ", world_rank, " is outside [0, ", n, ")");
  if (first_local_rank() != 0)
    fail(Status::wrong_state, "the gathered rank reports are held by the process of world rank 0 ",
         "only; this process hosts world rank", local_ranks() == 1 ? " " : "s ", first_local_rank(),
         local_ranks() == 1 ? "" : " to " + std::to_string(first_local_rank() + local_ranks() - 1));
  if (gathered_.empty())
    fail(Status::wrong_state,
         !has_stepped() ? "the rank reports are not available before the first training step"
                         : "the last step's rank reports have not been gathered: gather them (on "
                           "every process) after the step");
  return gathered_[(size_t)world_rank];
}

// An op's cost as the replay takes it: ranks sharing cores run slower while
// more of them are busy; with one thread per rank its CPU time is the op's
// cost on a core of its own. Otherwise the op's span on its device (on the
// CPU device, its wall time).
double Trainer::op_seconds(const OpTiming &t) const {
  const bool cpu_time = ranks_[0]->device->kind() == DeviceKind::cpu && threads_per_rank_ == 1;
  return (double)(cpu_time ? t.cpu_ns : t.device_ns) * 1e-9;
}

// The pipeline ranks of (tp 0, dp 0), which the replay takes.
std::vector<const Trainer::RankReport *> Trainer::pipeline_reports(const char *what) const {
  if ((int)ranks_.size() != world_size())
    fail(Status::wrong_state, what, " needs every rank in this process");
  std::vector<const RankReport *> out;
  for (int st = 0; st < opt_.parallel.p; st++) {
    const RankReport &r = ranks_[(size_t)grid_->rank_of({0, 0, st})]->report;
    if (r.timings.empty()) fail(Status::wrong_state, what, " needs a training step first");
    out.push_back(&r);
  }
  return out;
}

double Trainer::replayed_bubble() const {
  const std::vector<const RankReport *> reports = pipeline_reports("replayed_bubble");
  const int p = opt_.parallel.p;
  std::vector<std::vector<PipeOp>> ops((size_t)p);
  std::vector<std::vector<double>> cost((size_t)p);  // per op of ops[stage]; transfers free
  double busiest = 0;
  for (int st = 0; st < p; st++) {
    const RankReport &r = *reports[(size_t)st];
    ops[(size_t)st] = r.schedule;
    size_t k = 0;
    double busy = 0;
    for (const PipeOp &op : r.schedule) {
      const double c = is_compute(op.kind) ? op_seconds(r.timings.at(k++)) : 0;
      cost[(size_t)st].push_back(c);
      busy += c;
    }
    busiest = std::max(busiest, busy);
  }
  double makespan = replay_makespan(ops, p, opt_.schedule,
                                    [&](int st, size_t i) { return cost[(size_t)st][i]; });
  return makespan / busiest - 1.0;
}

double Trainer::mean_op_seconds(PipeOpKind kind) const {
  if (!is_compute(kind))
    fail(Status::invalid_argument, pipe_op_name(kind), " is not a compute op");
  double sum = 0;
  int n = 0;
  for (const RankReport *r : pipeline_reports("mean_op_seconds"))
    for (const OpTiming &t : r->timings)
      if (t.op.kind == kind) sum += op_seconds(t), n++;
  return n ? sum / n : 0.0;
}

}  // namespace ptdp
