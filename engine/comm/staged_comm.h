// A communicator over a device's memory for the backends that move host
// memory (threads, mpi): every call copies its device buffers to host staging
// buffers, runs the host communicator, and copies the results back. This is
// how ranks on GPUs (several may share one, each its own stream) run tensor,
// pipeline and data parallelism before NCCL, which takes device memory itself.
// The host communicator keeps the byte counters and timeline spans.
#pragma once
#include <memory>
#include <vector>

#include "engine/comm/communicator.h"
#include "engine/device/device.h"

namespace ptdp {

class StagedComm final : public Communicator {
 public:
  // `host` and `dev` must outlive this communicator.
  StagedComm(Communicator &host, Device &dev);
  // Owning `host`; `dev` must outlive this communicator.
  StagedComm(std::unique_ptr<Communicator> host, Device &dev);
  void all_reduce(void *buf, size_t n, DType dt, ReduceOp op) override;
  void all_gather(const void *in, void *out, size_t n, DType dt) override;
  void reduce_scatter(const void *in, void *out, size_t n, DType dt) override;
  void broadcast(void *buf, size_t n, DType dt, int root) override;
  void send(const void *buf, size_t n, DType dt, int peer) override;
  void recv(void *buf, size_t n, DType dt, int peer) override;
  void barrier() override { host_.barrier(); }
  // The backend's counters: it counts each operation once.
  CommStats &stats() override { return host_.stats(); }

 private:
  // Host copies of a device buffer (to_host) and back (from_host); two staging
  // areas in the device's host memory (page-locked on a GPU), for the ops that
  // read one buffer and write another.
  void *to_host(HostStage &stage, const void *dev_buf, size_t bytes);
  void from_host(void *dev_buf, const HostStage &stage, size_t bytes);
  std::unique_ptr<Communicator> owned_;
  Communicator &host_;
  Device &dev_;
  HostStage in_{dev_}, out_{dev_};
};

}  // namespace ptdp
