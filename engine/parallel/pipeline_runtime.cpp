#include "engine/parallel/pipeline_runtime.h"

#include <time.h>

#include <chrono>
#include <memory>

#include "engine/core/status.h"

namespace ptdp {

namespace {
int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
int64_t thread_cpu_ns() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}
// The tensor stored under `key`, which must exist: its absence means the
// schedule consumes something it never produced.
ActArray &take(std::map<std::pair<int, int>, ActArray> &m, std::pair<int, int> key,
               const char *what) {
  auto it = m.find(key);
  if (it == m.end())
    fail(Status::internal, "pipeline schedule uses the ", what, " of micro-batch ", key.first,
         " chunk ", key.second, " before producing it");
  return it->second;
}
}  // namespace

PipelineRuntime::PipelineRuntime(GPT<float> &model, Communicator *pp, Communicator *tp,
                                 bool scatter_gather)
    : model_(model), pp_(pp), tp_(tp), scatter_gather_(scatter_gather && tp && tp->size() > 1) {}

void PipelineRuntime::send_boundary(const ActArray &x, int peer) {
  if (!pp_) fail(Status::internal, "pipeline send without a pipeline group");
  const size_t n = scatter_gather_ ? x.size() / (size_t)tp_->size() : x.size();
  const size_t first = scatter_gather_ ? (size_t)tp_->rank() * n : 0;
  pp_->send((x.data() + (int64_t)first).p, n, x.dtype(), peer);
}

void PipelineRuntime::recv_boundary(ActArray &x, int peer) {
  if (!pp_) fail(Status::internal, "pipeline recv without a pipeline group");
  if (!scatter_gather_) {
    pp_->recv(x.data().p, x.size(), x.dtype(), peer);
    return;
  }
  const size_t n = x.size() / (size_t)tp_->size();
  slice_.resize(model_.device(), n, x.dtype());
  pp_->recv(slice_.data().p, n, x.dtype(), peer);
  tp_->all_gather(slice_.data().p, x.data().p, n, x.dtype());
}

double PipelineRuntime::run(const std::vector<PipeOp> &ops, int s, int b, uint32_t iteration,
                            bool training, float dloss,
                            const std::function<MicroBatch(int, bool)> &batch,
                            std::vector<OpTiming> *timings) {
  // Boundary tensors: [s, b, h], or this rank's s/t rows with sequence parallelism.
  const size_t Nh = model_.boundary_elements(s, b);
  const DType act = model_.activation_type();
  Device &dev = model_.device();
  double loss_sum = 0;
  // Off the CPU, device timers of the compute ops, read once the run is over
  // (a GPU's events are reached only then); `origin` maps them onto the host's clock.
  const bool device_timers = timings && dev.kind() != DeviceKind::cpu;
  std::unique_ptr<DeviceTimer> origin;
  std::vector<std::unique_ptr<DeviceTimer>> timers;
  int64_t origin_ns = 0;
  if (timings) timings->clear();
  if (device_timers) {
    origin = dev.make_timer();
    origin->start();
    origin_ns = now_ns();
  }
  // Runs one compute op, timed when timings are asked for.
  auto timed = [&](const PipeOp &op, auto &&compute) {
    if (!timings) return compute();
    if (device_timers) {
      timers.push_back(dev.make_timer());
      timers.back()->start();
    }
    const int64_t t0 = now_ns(), c0 = thread_cpu_ns();
    auto result = compute();
    const int64_t t1 = now_ns();
    timings->push_back({op, t0, t1, thread_cpu_ns() - c0, t0, t1 - t0});
    if (device_timers) timers.back()->stop();
    return result;
  };
  // Each chunk's last backward of the run finalises its gradients, and its
  // last W those of its layers when a zero-bubble schedule splits them.
  std::map<int, size_t> last_backward, last_weight;
  bool split = false;
  for (size_t i = 0; i < ops.size(); i++) {
    if (ops[i].kind == PipeOpKind::backward) last_backward[ops[i].chunk] = i;
    if (ops[i].kind == PipeOpKind::backward_weight) last_weight[ops[i].chunk] = i, split = true;
  }
  // A transfer to this rank itself (zbv's turn) hands the tensor over to the
  // neighbouring chunk's input or output gradient.
  const PipelineStage &stage = model_.pipeline_stage();
  auto neighbour = [&](int chunk, bool forward_dir) {
    const int vs = stage.virtual_stage(chunk) + (forward_dir ? 1 : -1);
    return chunk_home(stage.v_shape, stage.size, vs).chunk;
  };
  for (size_t i = 0; i < ops.size(); i++) {
    const PipeOp &op = ops[i];
    const auto key = std::make_pair(op.microbatch, op.chunk);
    switch (op.kind) {
      case PipeOpKind::recv_forward: {
        if (op.peer == stage.rank) {
          take(inputs_, key, "input");  // handed over by this rank's send
          break;
        }
        auto &x = inputs_[key];
        x.resize(dev, Nh, act);
        recv_boundary(x, op.peer);
        break;
      }
      case PipeOpKind::forward: {
        const bool head = model_.has_head(op.chunk), embedding = model_.has_embedding(op.chunk);
        MicroBatch mbd = batch(op.microbatch, head || embedding);
        CAct in = embedding ? CAct() : CAct(take(inputs_, key, "input").data());
        Act out;
        if (!head) {
          auto &o = outputs_[key];
          o.resize(dev, Nh, act);
          out = o.data();
        }
        StepContext ctx{training, iteration, mbd.sample_offset, mbd.kv_cache, mbd.first_position};
        const double loss = timed(op, [&] {
          return model_.forward_chunk(op.chunk, op.microbatch, mbd.tokens, mbd.targets, in, out, s,
                                      b, ctx);
        });
        if (head) loss_sum += loss * b * s;
        if (!embedding) inputs_.erase(key);
        break;
      }
      case PipeOpKind::send_forward:
        if (op.peer == stage.rank)
          inputs_[{op.microbatch, neighbour(op.chunk, true)}] =
              std::move(take(outputs_, key, "output"));
        else
          send_boundary(take(outputs_, key, "output"), op.peer);
        outputs_.erase(key);
        break;
      case PipeOpKind::recv_backward: {
        if (op.peer == stage.rank) {
          take(doutputs_, key, "output gradient");
          break;
        }
        auto &d = doutputs_[key];
        d.resize(dev, Nh, act);
        recv_boundary(d, op.peer);
        break;
      }
      case PipeOpKind::backward: {
        const bool head = model_.has_head(op.chunk), embedding = model_.has_embedding(op.chunk);
        CAct dout = head ? CAct() : CAct(take(doutputs_, key, "output gradient").data());
        Act din;
        if (!embedding) {
          auto &d = dinputs_[key];
          d.resize(dev, Nh, act);
          din = d.data();
        }
        timed(op, [&] {
          model_.backward_chunk(op.chunk, op.microbatch, dout, din, dloss,
                                last_backward[op.chunk] == i, split);
          return 0;
        });
        if (!head) doutputs_.erase(key);
        break;
      }
      case PipeOpKind::backward_weight:
        timed(op, [&] {
          model_.backward_weight_chunk(op.chunk, op.microbatch, last_weight[op.chunk] == i);
          return 0;
        });
        break;
      case PipeOpKind::send_backward:
        if (op.peer == stage.rank)
          doutputs_[{op.microbatch, neighbour(op.chunk, false)}] =
              std::move(take(dinputs_, key, "input gradient"));
        else
          send_boundary(take(dinputs_, key, "input gradient"), op.peer);
        dinputs_.erase(key);
        break;
    }
  }
  if (!inputs_.empty() || !outputs_.empty() || !doutputs_.empty() || !dinputs_.empty())
    fail(Status::internal, "pipeline schedule left boundary tensors unconsumed");
  for (size_t i = 0; i < timers.size(); i++) {
    OpTiming &t = (*timings)[i];
    t.device_ns = (int64_t)(timers[i]->elapsed_ms() * 1e6);
    t.device_start_ns = origin_ns + (int64_t)(timers[i]->ms_since(*origin) * 1e6);
  }
  return loss_sum;
}

}  // namespace ptdp
