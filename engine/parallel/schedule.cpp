#include "engine/parallel/schedule.h"

#include <algorithm>
#include <deque>
#include <map>
#include <set>
#include <tuple>

#include "engine/core/status.h"
#include "engine/parallel/placement.h"

namespace ptdp {

const char *pipe_op_name(PipeOpKind k) {
  switch (k) {
    case PipeOpKind::recv_forward: return "recv_forward";
    case PipeOpKind::forward: return "forward";
    case PipeOpKind::send_forward: return "send_forward";
    case PipeOpKind::recv_backward: return "recv_backward";
    case PipeOpKind::backward: return "backward";
    case PipeOpKind::send_backward: return "send_backward";
    case PipeOpKind::backward_weight: return "backward_weight";
  }
  return "?";
}

namespace {
constexpr ScheduleKind kKinds[] = {ScheduleKind::gpipe, ScheduleKind::one_f_one_b,
                                   ScheduleKind::interleaved, ScheduleKind::zbh1, ScheduleKind::zbv};
}  // namespace

const char *schedule_name(ScheduleKind k) {
  switch (k) {
    case ScheduleKind::gpipe: return "gpipe";
    case ScheduleKind::one_f_one_b: return "1f1b";
    case ScheduleKind::interleaved: return "interleaved";
    case ScheduleKind::zbh1: return "zbh1";
    case ScheduleKind::zbv: return "zbv";
  }
  return "?";
}

const char *schedule_names() { return "gpipe, 1f1b, interleaved, zbh1, zbv"; }

ScheduleKind parse_schedule(const std::string &name) {
  for (ScheduleKind k : kKinds)
    if (name == schedule_name(k)) return k;
  fail(Status::bad_value, "unknown pipeline schedule '", name, "'; allowed: ", schedule_names());
}

bool splits_backward(ScheduleKind k) { return k == ScheduleKind::zbh1 || k == ScheduleKind::zbv; }
bool v_shaped(ScheduleKind k) { return k == ScheduleKind::zbv; }

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
  } else if (kind == ScheduleKind::zbv) {
    // The V needs two chunks on each of at least two ranks, and enough
    // micro-batches to reach the turn before the first backward returns.
    if (v != 2)
      fail(Status::invalid_config, "zbv places exactly 2 model chunks per rank in a V, got v=", v,
           "; set num_layers_per_virtual_pipeline_stage to num_layers / (2 p)");
    if (p < 2) fail(Status::invalid_config, "zbv needs pipeline_model_parallel_size >= 2, got ", p);
    if (m < p)
      fail(Status::invalid_config, "zbv needs at least as many micro-batches (", m,
           ") as pipeline stages (", p, ")");
  } else if (v > 1 && kind != ScheduleKind::gpipe) {
    fail(Status::invalid_config, schedule_name(kind), " runs one model chunk per rank; v=", v,
         " needs the interleaved or zbv schedule");
  }
}

namespace {

// Appends a forward of (mb, chunk) with its transfers, a backward, or a
// weight-gradient pass. Peers follow the chunks' placement; at zbv's turn the
// peer is the rank itself.
struct Builder {
  int p, v, stage;
  bool v_shape;
  std::vector<PipeOp> ops;
  int vstage(int chunk) const { return virtual_stage(v_shape, p, stage, chunk); }
  int rank_of(int vs) const { return chunk_home(v_shape, p, vs).rank; }
  void forward(int mb, int chunk) {
    int vs = vstage(chunk);
    if (vs > 0) ops.push_back({PipeOpKind::recv_forward, mb, chunk, rank_of(vs - 1)});
    ops.push_back({PipeOpKind::forward, mb, chunk, -1});
    if (vs < p * v - 1) ops.push_back({PipeOpKind::send_forward, mb, chunk, rank_of(vs + 1)});
  }
  void backward(int mb, int chunk) {
    int vs = vstage(chunk);
    if (vs < p * v - 1) ops.push_back({PipeOpKind::recv_backward, mb, chunk, rank_of(vs + 1)});
    ops.push_back({PipeOpKind::backward, mb, chunk, -1});
    if (vs > 0) ops.push_back({PipeOpKind::send_backward, mb, chunk, rank_of(vs - 1)});
  }
  void weight(int mb, int chunk) { ops.push_back({PipeOpKind::backward_weight, mb, chunk, -1}); }
};

// ZB-H1: 1F1B's order of F and B (p - stage forwards before the first B), each
// B followed by the W of an earlier micro-batch, stage i keeping i of them
// back for the end. The B chain back up the pipeline no longer waits for any
// W, and the held-back W's fill the tail, so the bubble falls from 1F1B's
// (p-1)(F+B+W) to (p-1)(F+B-W) (for W <= F <= B), with at most p micro-batches
// stashed on any rank (F done, W not), as 1F1B's first stage.
void zbh1(Builder &b, int m) {
  const int i = b.stage;
  int f = 0, w = 0;
  for (; f < std::min(b.p - i, m); f++) b.forward(f, 0);
  for (int j = 0; j < m; j++) {
    b.backward(j, 0);
    if (j + 1 - w > i) b.weight(w++, 0);
    if (f < m) b.forward(f++, 0);
  }
  while (w < m) b.weight(w++, 0);
}

// ZB-V (Qi et al., section 6): two chunks per rank in a V, so the first rank
// holds the embedding and the head. Rank r warms up with 2(p-r)-1 forwards of
// chunk 0 and r pairs (chunk 1, chunk 0); then p-r rounds of F B W on chunk 1;
// the steady state alternates F B W on chunk 0 and on chunk 1; the cool-down
// runs the remaining B's, W's filling the gaps. Built for at least 2p-1
// micro-batches and cut to m (the cut list keeps its order, so it still
// replays).
void zbv(Builder &b, int m) {
  const int p = b.p, r = b.stage, n = std::max(2 * p - 1, m);
  int F[2] = {0, 0}, B[2] = {0, 0}, W[2] = {0, 0};
  auto f = [&](int c) { if (F[c] < m) b.forward(F[c], c); F[c]++; };
  auto bk = [&](int c) { if (B[c] < m) b.backward(B[c], c); B[c]++; };
  auto w = [&](int c) { if (W[c] < m) b.weight(W[c], c); W[c]++; };
  for (int k = 0; k < 2 * (p - r) - 1; k++) f(0);
  for (int k = 0; k < r; k++) f(1), f(0);
  for (int k = 0; k < p - r; k++) f(1), bk(1), w(1);
  while (F[1] < F[0] || F[0] < n) {
    if (F[0] < n) f(0);
    bk(0), w(0), f(1), bk(1), w(1);
  }
  for (int k = 0; k < r; k++) bk(0), bk(1);
  for (int k = 0; k < p - r; k++) bk(0), w(0);
  while (W[1] < B[1]) w(1);
  while (W[0] < B[0]) w(0);
  if (F[0] != n || B[0] != n || W[0] != n || F[1] != n || B[1] != n || W[1] != n)
    fail(Status::internal, "zbv schedule of rank ", r, " is unbalanced");
}

}  // namespace

namespace {

// A transfer as its receiver names it: direction (0 forward, 1 backward),
// micro-batch and the receiver's chunk.
using Message = std::tuple<int, int, int>;

bool is_send(PipeOpKind k) { return k == PipeOpKind::send_forward || k == PipeOpKind::send_backward; }
bool is_recv(PipeOpKind k) { return k == PipeOpKind::recv_forward || k == PipeOpKind::recv_backward; }

// The message a send puts on its link, named as its receive names it.
Message sent_message(bool v_shape, int p, int from, const PipeOp &op) {
  const bool fwd = op.kind == PipeOpKind::send_forward;
  const int vs = virtual_stage(v_shape, p, from, op.chunk) + (fwd ? 1 : -1);
  return {fwd ? 0 : 1, op.microbatch, chunk_home(v_shape, p, vs).chunk};
}
Message received_message(const PipeOp &op) {
  return {op.kind == PipeOpKind::recv_forward ? 0 : 1, op.microbatch, op.chunk};
}

// The communicators match point-to-point messages by order on each link
// (from, to), not by name: a rank must receive a link's messages in the order
// they were sent. Where a rank's list needs a later message first, the
// earlier ones are received just before it (the runtime keeps received
// tensors by micro-batch and chunk until their op). Sends are buffered, so a
// message sent before one that has arrived has arrived too: no new waits.
void receive_in_send_order(std::vector<PipeOp> &mine, int stage, bool v_shape, int p,
                           const std::vector<std::vector<PipeOp>> &all) {
  std::map<int, std::deque<Message>> order;  // per sending rank, in send order
  for (int q = 0; q < p; q++)
    for (const PipeOp &op : all[(size_t)q])
      if (q != stage && is_send(op.kind) && op.peer == stage)
        order[q].push_back(sent_message(v_shape, p, q, op));
  std::map<std::pair<int, Message>, PipeOp> recv_of;  // (peer, message) -> its receive
  for (const PipeOp &op : mine)
    if (is_recv(op.kind) && op.peer != stage) recv_of[{op.peer, received_message(op)}] = op;
  std::set<std::pair<int, Message>> done;
  std::vector<PipeOp> out;
  for (const PipeOp &op : mine) {
    if (!is_recv(op.kind) || op.peer == stage) {
      out.push_back(op);
      continue;
    }
    const auto key = std::make_pair(op.peer, received_message(op));
    if (done.count(key)) continue;  // received earlier
    std::deque<Message> &q = order[op.peer];
    for (;;) {
      if (q.empty())
        fail(Status::internal, "pipeline rank ", stage, " receives from rank ", op.peer,
             " a message it never sends");
      const auto first = std::make_pair(op.peer, q.front());
      q.pop_front();
      if (!recv_of.count(first))
        fail(Status::internal, "pipeline rank ", op.peer, " sends rank ", stage,
             " a message it never receives");
      out.push_back(recv_of[first]);
      done.insert(first);
      if (first == key) break;
    }
  }
  mine = std::move(out);
}

}  // namespace

namespace {

// One rank's list in the order its computation wants, receives included.
std::vector<PipeOp> compute_order(ScheduleKind kind, int p, int v, int m, int stage) {
  Builder b{p, v, stage, v_shaped(kind), {}};
  if (kind == ScheduleKind::gpipe) {
    // All forwards (chunk by chunk), then all backwards in reverse.
    for (int c = 0; c < v; c++)
      for (int mb = 0; mb < m; mb++) b.forward(mb, c);
    for (int c = v - 1; c >= 0; c--)
      for (int mb = m - 1; mb >= 0; mb--) b.backward(mb, c);
    return b.ops;
  }
  if (kind == ScheduleKind::zbh1) {
    zbh1(b, m);
    return b.ops;
  }
  if (kind == ScheduleKind::zbv) {
    zbv(b, m);
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

// Rank `stage`'s list from `order` (a rank's list in its computation's
// order), its receives put in send order: only its neighbours (stage -+ 1 in
// either placement) send to it, so only their lists are built.
std::vector<PipeOp> in_send_order(ScheduleKind kind, int p, int stage,
                                  const std::function<std::vector<PipeOp>(int)> &order) {
  std::vector<std::vector<PipeOp>> all((size_t)p);
  for (int r : {(stage + p - 1) % p, stage, (stage + 1) % p})
    if (all[(size_t)r].empty()) all[(size_t)r] = order(r);
  std::vector<PipeOp> mine = all[(size_t)stage];
  receive_in_send_order(mine, stage, v_shaped(kind), p, all);
  return mine;
}

}  // namespace

std::vector<PipeOp> pipeline_schedule(ScheduleKind kind, int p, int v, int m, int stage) {
  validate_schedule(kind, p, v, m);
  if (stage < 0 || stage >= p)
    fail(Status::invalid_argument, "pipeline stage ", stage, " is outside [0, ", p, ")");
  return in_send_order(kind, p, stage,
                       [&](int r) { return compute_order(kind, p, v, m, r); });
}

std::vector<PipeOp> forward_only_schedule(ScheduleKind kind, int p, int v, int m, int stage) {
  validate_schedule(ScheduleKind::gpipe, p, v, m);
  if (stage < 0 || stage >= p)
    fail(Status::invalid_argument, "pipeline stage ", stage, " is outside [0, ", p, ")");
  return in_send_order(kind, p, stage, [&](int r) {
    Builder b{p, v, r, v_shaped(kind), {}};
    for (int vs = 0; vs < p * v; vs++) {
      const ChunkHome home = chunk_home(b.v_shape, p, vs);
      if (home.rank == r)
        for (int mb = 0; mb < m; mb++) b.forward(mb, home.chunk);
    }
    return b.ops;
  });
}

double replay_makespan(const std::vector<std::vector<PipeOp>> &ranks, int p, ScheduleKind kind,
                       double forward_cost, double backward_cost, double weight_cost) {
  return replay_makespan(ranks, p, kind, [&](int r, size_t i) {
    const PipeOpKind k = ranks[(size_t)r][i].kind;
    return k == PipeOpKind::forward ? forward_cost
           : k == PipeOpKind::backward ? backward_cost : weight_cost;
  });
}

double replay_makespan(const std::vector<std::vector<PipeOp>> &ranks, int p, ScheduleKind kind,
                       const std::function<double(int, size_t)> &cost) {
  const bool v_shape = v_shaped(kind);
  // Messages in flight per link (from, to), in send order with their send
  // times: a receive takes the oldest, which must be the one it names.
  std::map<std::pair<int, int>, std::deque<std::pair<Message, double>>> links;
  std::vector<size_t> next(ranks.size(), 0);
  std::vector<double> clock(ranks.size(), 0.0);
  size_t remaining = 0;
  for (auto &r : ranks) remaining += r.size();
  while (remaining) {
    bool progressed = false;
    for (size_t s = 0; s < ranks.size(); s++) {
      while (next[s] < ranks[s].size()) {
        const PipeOp &op = ranks[s][next[s]];
        if (is_recv(op.kind)) {
          auto &q = links[{op.peer, (int)s}];
          if (q.empty()) break;  // not sent yet: try other ranks
          if (q.front().first != received_message(op))
            fail(Status::internal, "pipeline rank ", s, " receives micro-batch ", op.microbatch,
                 " chunk ", op.chunk, " from rank ", op.peer,
                 " out of the order the messages were sent");
          clock[s] = std::max(clock[s], q.front().second);
          q.pop_front();
        } else if (is_send(op.kind)) {
          links[{(int)s, op.peer}].push_back({sent_message(v_shape, p, (int)s, op), clock[s]});
        } else if (is_compute(op.kind)) {
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
