// The distributed optimizer's data-parallel split (Megatron's
// --use-distributed-optimizer, ZeRO-1; ARCHITECTURE §4): the flat parameter
// buffer of n elements is cut into d equal shards of S = ceil(n/d) elements,
// data rank k owning [k S, min(n, (k+1) S)). Each rank keeps the fp32 master
// weights and Adam's moments of its shard only; the step reduce-scatters the
// gradients (each rank receiving its shard's sums) instead of all-reducing
// them, updates its shard, and all-gathers the parameters.
//
// The communicators sum a reduce-scatter's elements in the same member order
// as an all-reduce's, so each shard's gradients are bit-identical to the plain
// optimizer's, and so is the update.
#pragma once
#include <algorithm>
#include <cstddef>

#include "engine/comm/communicator.h"
#include "engine/device/device.h"

namespace ptdp {

struct DpShard {
  size_t n = 0, size = 0;  // the buffer's elements, S
  size_t lo = 0, hi = 0;   // this rank's range
  static DpShard of(size_t n, int d, int rank) {
    DpShard s;
    s.n = n;
    s.size = (n + (size_t)d - 1) / (size_t)d;
    s.lo = std::min(n, (size_t)rank * s.size);
    s.hi = std::min(n, s.lo + s.size);
    return s;
  }
};

// The collectives of the split, with device scratch of d S + S floats (kept
// between steps). dp: the data-parallel group over the device's memory.
class DpShardComm {
 public:
  DpShardComm(Device &dev, Communicator &dp, DpShard shard);
  const DpShard &shard() const { return shard_; }
  // grads [n]: every replica's sum lands in this rank's range of `grads`
  // (the rest of `grads` is left as it was: this rank's own partial sums).
  void reduce_scatter(float *grads);
  // x [n]: each rank's range to every rank (the parameters after an update,
  // or the optimizer's state of n floats for a checkpoint, from `mine` [S]:
  // this rank's range when not null, else x's own range).
  void all_gather(float *x, const float *mine = nullptr);
  // Every rank's `mine` [S] (device), laid end to end as n floats in host memory.
  void gather_to_host(const float *mine, float *host);

 private:
  void gather(const float *mine);  // every rank's `mine` into full_
  Device &dev_;
  Communicator &dp_;
  DpShard shard_;
  DeviceArray<float> full_, part_;  // [d S], [S]
};

}  // namespace ptdp
