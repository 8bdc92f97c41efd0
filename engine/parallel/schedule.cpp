#include "engine/parallel/schedule.h"

#include <algorithm>
#include <map>
#include <tuple>

#include "engine/core/status.h"

namespace ptdp {

const char *pipe_op_name(PipeOpKind k) {
  switch (k) {
    case PipeOpKind::recv_forward: return "recv_forward";
    case PipeOpKind::forward: return "forward";
    case PipeOpKind::send_forward: return "send_forward";
    case PipeOpKind::recv_backward: return "recv_backward";
    case PipeOpKind::backward: return "backward";
    case PipeOpKind::send_backward: return "send_backward";
  }
  return "?";
}

const char *schedule_names() { return "gpipe, 1f1b, interleaved"; }

ScheduleKind parse_schedule(const std::string &name) {
  if (name == "gpipe") return ScheduleKind::gpipe;
  if (name == "1f1b") return ScheduleKind::one_f_one_b;
  if (name == "interleaved") return ScheduleKind::interleaved;
  fail(Status::bad_value, "unknown pipeline schedule '", name, "'; allowed: ", schedule_names());
}

void validate_schedule(ScheduleKind kind, int p, int v, int m) {
  if (p < 1 || v < 1 || m < 1)
    fail(Status::invalid_config, "pipeline schedule needs p, v, m >= 1, got p=", p, " v=", v,
         " m=", m);
  if (v > 1 && p == 1)
    fail(Status::invalid_config, "virtual pipeline stages (v=", v,
         ") need pipeline_model_parallel_size > 1");
  if (kind == ScheduleKind::interleaved) {
    if (v < 2)
      fail(Status::invalid_config, "the interleaved schedule needs v >= 2 model chunks per rank, got ",
           v, "; use 1f1b for v = 1");
    if (m % p != 0)
      fail(Status::invalid_config, "the interleaved schedule needs the number of micro-batches (",
           m, ") to be a multiple of pipeline_model_parallel_size (", p, ")");
  } else if (v > 1 && kind == ScheduleKind::one_f_one_b) {
    fail(Status::invalid_config, "1f1b runs one model chunk per rank; v=", v,
         " needs the interleaved schedule");
  }
}

namespace {

// Appends a forward of (mb, chunk) with its transfers, or a backward.
struct Builder {
  int p, v, stage;
  std::vector<PipeOp> ops;
  int vstage(int chunk) const { return chunk * p + stage; }
  void forward(int mb, int chunk) {
    int vs = vstage(chunk);
    if (vs > 0) ops.push_back({PipeOpKind::recv_forward, mb, chunk, (stage + p - 1) % p});
    ops.push_back({PipeOpKind::forward, mb, chunk, -1});
    if (vs < p * v - 1) ops.push_back({PipeOpKind::send_forward, mb, chunk, (stage + 1) % p});
  }
  void backward(int mb, int chunk) {
    int vs = vstage(chunk);
    if (vs < p * v - 1) ops.push_back({PipeOpKind::recv_backward, mb, chunk, (stage + 1) % p});
    ops.push_back({PipeOpKind::backward, mb, chunk, -1});
    if (vs > 0) ops.push_back({PipeOpKind::send_backward, mb, chunk, (stage + p - 1) % p});
  }
};

}  // namespace

std::vector<PipeOp> pipeline_schedule(ScheduleKind kind, int p, int v, int m, int stage) {
  validate_schedule(kind, p, v, m);
  if (stage < 0 || stage >= p)
    fail(Status::invalid_argument, "pipeline stage ", stage, " is outside [0, ", p, ")");
  Builder b{p, v, stage, {}};
  if (kind == ScheduleKind::gpipe) {
    // All forwards (chunk by chunk), then all backwards in reverse.
    for (int c = 0; c < v; c++)
      for (int mb = 0; mb < m; mb++) b.forward(mb, c);
    for (int c = v - 1; c >= 0; c--)
      for (int mb = m - 1; mb >= 0; mb--) b.backward(mb, c);
    return b.ops;
  }
  // 1F1B (PipeDream-Flush) and its interleaved form: the k-th forward of this
  // rank is micro-batch fwd_mb(k) of chunk fwd_chunk(k); backwards mirror it.
  // With v = 1 this is plain 1F1B (warmup p - stage - 1).
  const int total = m * v;
  auto chunk_of = [&](int k, bool forward) {
    int c = (k / p) % v;
    return forward ? c : v - 1 - c;
  };
  auto mb_of = [&](int k) { return (k / (p * v)) * p + k % p; };
  int warmup = v == 1 ? p - stage - 1 : (p - stage - 1) * 2 + (v - 1) * p;
  warmup = std::min(warmup, total);
  int f = 0, bk = 0;
  for (; f < warmup; f++) b.forward(mb_of(f), chunk_of(f, true));
  for (; f < total; f++, bk++) {
    b.forward(mb_of(f), chunk_of(f, true));
    b.backward(mb_of(bk), chunk_of(bk, false));
  }
  for (; bk < total; bk++) b.backward(mb_of(bk), chunk_of(bk, false));
  return b.ops;
}

std::vector<PipeOp> forward_only_schedule(int p, int v, int m, int stage) {
  validate_schedule(ScheduleKind::gpipe, p, v, m);
  Builder b{p, v, stage, {}};
  for (int c = 0; c < v; c++)
    for (int mb = 0; mb < m; mb++) b.forward(mb, c);
  return b.ops;
}

double replay_makespan(const std::vector<std::vector<PipeOp>> &ranks, int p, int v,
                       double forward_cost, double backward_cost) {
  (void)v;
  return replay_makespan(ranks, p, [&](int r, size_t i) {
    return ranks[(size_t)r][i].kind == PipeOpKind::forward ? forward_cost : backward_cost;
  });
}

double replay_makespan(const std::vector<std::vector<PipeOp>> &ranks, int p,
                       const std::function<double(int, size_t)> &cost) {
  // Messages in flight: (kind, mb, chunk of receiver, from, to) -> time sent.
  std::map<std::tuple<int, int, int, int, int>, double> sent;
  std::vector<size_t> next(ranks.size(), 0);
  std::vector<double> clock(ranks.size(), 0.0);
  size_t remaining = 0;
  for (auto &r : ranks) remaining += r.size();
  // The chunk a transfer reaches on the receiver: the next (forward) or
  // previous (backward) virtual stage.
  auto receiver_chunk = [&](int from, int chunk, bool forward_dir) {
    int vs = chunk * p + from + (forward_dir ? 1 : -1);
    return vs / p;
  };
  while (remaining) {
    bool progressed = false;
    for (size_t s = 0; s < ranks.size(); s++) {
      while (next[s] < ranks[s].size()) {
        const PipeOp &op = ranks[s][next[s]];
        if (op.kind == PipeOpKind::recv_forward || op.kind == PipeOpKind::recv_backward) {
          int kind = op.kind == PipeOpKind::recv_forward ? 0 : 1;
          auto key = std::make_tuple(kind, op.microbatch, op.chunk, op.peer, (int)s);
          auto it = sent.find(key);
          if (it == sent.end()) break;  // not sent yet: try other ranks
          clock[s] = std::max(clock[s], it->second);
          sent.erase(it);
        } else if (op.kind == PipeOpKind::send_forward || op.kind == PipeOpKind::send_backward) {
          bool fwd = op.kind == PipeOpKind::send_forward;
          int c = receiver_chunk((int)s, op.chunk, fwd);
          sent[std::make_tuple(fwd ? 0 : 1, op.microbatch, c, (int)s, op.peer)] = clock[s];
        } else {
          clock[s] += cost((int)s, next[s]);
        }
        next[s]++;
        remaining--;
        progressed = true;
      }
    }
    if (!progressed) fail(Status::internal, "pipeline schedule deadlocks: no rank can proceed");
  }
  return *std::max_element(clock.begin(), clock.end());
}

}  // namespace ptdp
