// Pipeline schedules as data (ARCHITECTURE §4): a pure function gives each
// pipeline rank its ordered list of operations — forward/backward of a
// (micro-batch, model chunk) and the transfers around them. Any runtime that
// executes such lists with buffered sends runs any schedule.
//
// Model chunk c of pipeline rank s is virtual stage c*p + s of the p*v stages,
// except under zbv, whose chunks sit in a V (engine/parallel/placement.h).
// The zero-bubble schedules (Qi et al., ICLR 2024) split each backward in two:
// `backward` is then B, the input gradient only (on the critical path to the
// previous stage), and `backward_weight` is W, the layers' weight gradients,
// run later to fill what would have been bubbles.
#pragma once
#include <functional>
#include <string>
#include <vector>

namespace ptdp {

enum class PipeOpKind {
  recv_forward, forward, send_forward, recv_backward, backward, send_backward, backward_weight
};
const char *pipe_op_name(PipeOpKind k);
// F, B or W: the ops that compute (the rest move tensors).
inline bool is_compute(PipeOpKind k) {
  return k == PipeOpKind::forward || k == PipeOpKind::backward || k == PipeOpKind::backward_weight;
}

struct PipeOp {
  PipeOpKind kind;
  int microbatch = 0;
  int chunk = 0;  // model chunk on this rank (0..v-1)
  int peer = -1;  // pipeline rank sent to / received from (itself at zbv's turn)
  bool operator==(const PipeOp &o) const {
    return kind == o.kind && microbatch == o.microbatch && chunk == o.chunk && peer == o.peer;
  }
};

enum class ScheduleKind { gpipe, one_f_one_b, interleaved, zbh1, zbv };
// "gpipe", "1f1b", "interleaved", "zbh1", "zbv"; throws bad_value listing the names.
ScheduleKind parse_schedule(const std::string &name);
const char *schedule_names();
const char *schedule_name(ScheduleKind k);
// The schedule runs B and W apart (zbh1, zbv).
bool splits_backward(ScheduleKind k);
// Its chunks sit in a V (zbv).
bool v_shaped(ScheduleKind k);

// Checks p, v, m for the schedule; throws invalid_config saying what is allowed
// (interleaving needs v > 1, p > 1 and m a multiple of p, as in the paper;
// zbh1 one chunk per rank; zbv two, p > 1 and m >= p).
void validate_schedule(ScheduleKind kind, int p, int v, int m);

// Operations of pipeline rank `stage` (0..p-1), in execution order.
std::vector<PipeOp> pipeline_schedule(ScheduleKind kind, int p, int v, int m, int stage);

// Forward passes only (evaluation): every chunk's forwards in virtual-stage
// order, micro-batch by micro-batch, with their transfers; `kind` places the
// chunks (a V for zbv).
std::vector<PipeOp> forward_only_schedule(ScheduleKind kind, int p, int v, int m, int stage);

// Replays every rank's list of a `kind` schedule with the given costs per
// chunk operation (transfers free, sends buffered) and returns the makespan;
// throws internal on a deadlock.
double replay_makespan(const std::vector<std::vector<PipeOp>> &ranks, int p, ScheduleKind kind,
                       double forward_cost, double backward_cost, double weight_cost = 0);
// The same with each compute op's own cost: cost(rank, index into ranks[rank]).
double replay_makespan(const std::vector<std::vector<PipeOp>> &ranks, int p, ScheduleKind kind,
                       const std::function<double(int, size_t)> &cost);

}  // namespace ptdp
