#include "engine/comm/communicator.h"

#include "engine/trace/timeline.h"

#include <chrono>

namespace ptdp {

const char *comm_op_name(CommOp op) {
  switch (op) {
    case CommOp::all_reduce: return "all_reduce";
    case CommOp::all_gather: return "all_gather";
    case CommOp::reduce_scatter: return "reduce_scatter";
    case CommOp::broadcast: return "broadcast";
    case CommOp::send: return "send";
    case CommOp::recv: return "recv";
    case CommOp::barrier: return "barrier";
    case CommOp::count: break;
  }
  return "?";
}

static int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
CommTimer::CommTimer(CommStats &s) : s_(s), start_ns_(now_ns()) {}
CommTimer::~CommTimer() {
  const int64_t end = now_ns();
  s_.seconds += (double)(end - start_ns_) * 1e-9;
  if (s_.timeline && s_.timeline->enabled()) {
    const char *op = comm_op_name(s_.last_op);
    const bool p2p = s_.last_op == CommOp::send || s_.last_op == CommOp::recv;
    s_.timeline->add(Span{op, p2p ? op : "comm", start_ns_, end, -1, -1, s_.group, s_.last_bytes});
  }
}

}  // namespace ptdp
