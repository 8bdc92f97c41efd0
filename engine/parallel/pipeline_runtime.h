// Executes one pipeline rank's schedule (engine/parallel/schedule.h) for one
// batch: forward and backward of (micro-batch, model chunk) pairs on the
// model, boundary tensors moved with point-to-point transfers. Sends are
// buffered by every backend, so a list that replays without deadlock (the
// schedule tests check this) runs without one (ARCHITECTURE §4).
//
// Scatter/gather (t > 1): the sender sends its 1/t slice of the [s, b, h]
// boundary tensor to the same tensor rank of the next stage, and the receiver
// all-gathers the slices inside its tensor group. The boundary tensor is
// replicated over the tensor group, so this moves t times fewer bytes between
// stages and gives the same values.
//
// With sequence parallelism a boundary tensor is already this rank's 1/t of
// the rows, so it goes whole (the trainer turns scatter/gather off).
//
// Boundary tensors live on the model's device; pp and tp must take that
// device's memory (a StagedComm for a GPU with the threads or mpi backend).
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <utility>
#include <vector>

#include "engine/comm/communicator.h"
#include "engine/model/gpt.h"
#include "engine/parallel/schedule.h"

namespace ptdp {

struct MicroBatch {
  const int32_t *tokens = nullptr;   // [s, b] (embedding chunk)
  const int32_t *targets = nullptr;  // [s, b] (head chunk)
  uint32_t sample_offset = 0;        // global index of its first sample (keys dropout)
  bool kv_cache = false;             // incremental decoding (StepContext::kv_cache)
  int first_position = 0;
};

// When one compute op (forward or backward) ran, by steady_clock ns, and the
// CPU time of the calling thread meanwhile: with one thread per rank, that is
// what the op costs on a core of its own, whatever else shares the cores.
// And when it ran on the device: on a GPU, where the host only queues the
// work, the op's span from DeviceTimers (its start mapped onto the host's
// clock); on the CPU device, [start_ns, end_ns) itself.
struct OpTiming {
  PipeOp op;
  int64_t start_ns = 0, end_ns = 0;
  int64_t cpu_ns = 0;
  int64_t device_start_ns = 0, device_ns = 0;
};

class PipelineRuntime {
 public:
  // pp: the pipeline group (ranks by stage), null when p = 1; tp: the tensor
  // group, null when t = 1.
  PipelineRuntime(GPT<float> &model, Communicator *pp, Communicator *tp, bool scatter_gather);
  // Runs `ops` for micro-batches of b samples of s tokens; `batch(mb, data)`
  // gives micro-batch mb's sample offset, and its tokens and targets when
  // `data` (only the embedding and head chunks read them). In training, each token's loss is weighted by dloss.
  // Returns the sum over this rank's head micro-batches of mean loss x b x s
  // (0 on ranks without the head). Timings of the compute ops go to `timings`.
  double run(const std::vector<PipeOp> &ops, int s, int b, uint32_t iteration, bool training,
             float dloss, const std::function<MicroBatch(int, bool)> &batch,
             std::vector<OpTiming> *timings = nullptr);

 private:
  // Boundary tensors hold the model's activation type (16-bit in a 16-bit
  // run: half the bytes cross between stages).
  using Tensors = std::map<std::pair<int, int>, ActArray>;
  void send_boundary(const ActArray &x, int peer);
  void recv_boundary(ActArray &x, int peer);

  GPT<float> &model_;
  Communicator *pp_, *tp_;
  bool scatter_gather_;
  ActArray slice_;
  // Boundary tensors between ops, by (micro-batch, chunk).
  Tensors inputs_, outputs_, doutputs_, dinputs_;
};

}  // namespace ptdp
