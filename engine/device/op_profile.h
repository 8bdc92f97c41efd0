// Where a step's device time goes: an op table with profiling on (Ops<T>::
// set_profiling) times every op on the device's own clock (a DeviceTimer each:
// CUDA events around the op on the stream, or the CPU's clock) and sums the
// times per op. The timers are read only when the profile is taken, so
// profiling adds no waits between ops; on CUDA each op costs two event records
// more (about a microsecond each of host time).
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/device/device.h"

namespace ptdp {

// One op's sums: GEMMs by shape ("gemm 4096x6144x2048 NT", batched ones with
// " xB"), the other ops by name. flops: the arithmetic counted for GEMMs and
// the fused attention (its causal half), 0 for the rest.
struct OpTime {
  std::string op;
  int64_t calls = 0;
  double ms = 0;
  double flops = 0;
};

class OpProfiler {
 public:
  explicit OpProfiler(Device &dev) : dev_(dev) {}
  // Runs f between the start and stop of a pooled timer, charged to `op`. An
  // op called inside another's f is part of the outer one's time, not timed
  // itself (its timer would take the outer one's slot).
  template <class F>
  void timed(const std::string &op, double flops, F &&f) {
    if (inside_) return f();
    struct Inside {
      bool &flag;
      explicit Inside(bool &b) : flag(b) { flag = true; }
      ~Inside() { flag = false; }
    } inside(inside_);
    DeviceTimer &t = next_timer();
    OpTime &row = rows_[op];
    row.op = op;
    row.calls++;
    row.flops += flops;
    t.start();
    f();
    t.stop();
    pending_.push_back(&row);
  }
  // The sums since the last take, slowest first; waits for the device.
  std::vector<OpTime> take();

 private:
  DeviceTimer &next_timer();

  Device &dev_;
  std::map<std::string, OpTime> rows_;
  std::vector<std::unique_ptr<DeviceTimer>> timers_;  // reused by every take
  std::vector<OpTime *> pending_;                     // the row of timers_[i]
  bool inside_ = false;                               // in a timed op's f
};

// The profile's name of a GEMM: "gemm MxNxK TN", " xB" when batched.
std::string gemm_op_name(bool ta, bool tb, int M, int N, int K, int batch);
// Causal attention's two products over the visible half: 2 b a s^2 hd.
double attention_flops(int s, int b, int heads, int hd);

// The profile as a table: op, calls, ms, share of the total, TFLOP/s where
// flops are counted.
std::string format_op_profile(const std::vector<OpTime> &rows);

}  // namespace ptdp
