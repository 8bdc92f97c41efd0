// Pipeline schedules as data (ARCHITECTURE §4): a pure function gives each
// pipeline rank its ordered list of operations — forward/backward of a
// (micro-batch, model chunk) and the transfers around them. Any runtime that
// executes such lists with buffered sends runs any schedule.
//
// Model chunk c of pipeline rank s is virtual stage c*p + s of the p*v stages.
#pragma once
#include <functional>
#include <string>
#include <vector>

namespace ptdp {

enum class PipeOpKind { recv_forward, forward, send_forward, recv_backward, backward, send_backward };
const char *pipe_op_name(PipeOpKind k);

struct PipeOp {
  PipeOpKind kind;
  int microbatch = 0;
  int chunk = 0;  // model chunk on this rank (0..v-1)
  int peer = -1;  // pipeline rank sent to / received from
  bool operator==(const PipeOp &o) const {
    return kind == o.kind && microbatch == o.microbatch && chunk == o.chunk && peer == o.peer;
  }
};

enum class ScheduleKind { gpipe, one_f_one_b, interleaved };
// "gpipe", "1f1b", "interleaved"; throws bad_value listing the names.
ScheduleKind parse_schedule(const std::string &name);
const char *schedule_names();

// Checks p, v, m for the schedule; throws invalid_config saying what is allowed
// (interleaving needs v > 1, p > 1 and m a multiple of p, as in the paper).
void validate_schedule(ScheduleKind kind, int p, int v, int m);

// Operations of pipeline rank `stage` (0..p-1), in execution order.
std::vector<PipeOp> pipeline_schedule(ScheduleKind kind, int p, int v, int m, int stage);

// Forward passes only (evaluation): every chunk's forwards in micro-batch
// order, with their transfers — the first half of GPipe.
std::vector<PipeOp> forward_only_schedule(int p, int v, int m, int stage);

// Replays every rank's list with the given costs per chunk operation (transfers
// free, sends buffered) and returns the makespan; throws internal on a deadlock.
double replay_makespan(const std::vector<std::vector<PipeOp>> &ranks, int p, int v,
                       double forward_cost, double backward_cost);
// The same with each compute op's own cost: cost(rank, index into ranks[rank]).
double replay_makespan(const std::vector<std::vector<PipeOp>> &ranks, int p,
                       const std::function<double(int, size_t)> &cost);

}  // namespace ptdp
