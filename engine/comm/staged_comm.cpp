#include "engine/comm/staged_comm.h"

namespace ptdp {

StagedComm::StagedComm(Communicator &host, Device &dev)
    : Communicator(host.name(), host.members(), host.rank()), host_(host), dev_(dev) {}

StagedComm::StagedComm(std::unique_ptr<Communicator> host, Device &dev)
    : Communicator(host->name(), host->members(), host->rank()),
      owned_(std::move(host)),
      host_(*owned_),
      dev_(dev) {}

void *StagedComm::to_host(HostStage &stage, const void *dev_buf, size_t bytes) {
  char *host = stage.reserve(bytes);
  if (bytes) dev_.copy_to_host(host, dev_buf, bytes);  // waits for the queued work
  return host;
}

void StagedComm::from_host(void *dev_buf, const HostStage &stage, size_t bytes) {
  if (bytes) dev_.copy_from_host(dev_buf, stage.data(), bytes);
}

void StagedComm::all_reduce(void *buf, size_t n, DType dt, ReduceOp op) {
  const size_t bytes = n * elem_size(dt, CommOp::all_reduce);
  host_.all_reduce(to_host(in_, buf, bytes), n, dt, op);
  from_host(buf, in_, bytes);
}

void StagedComm::all_gather(const void *in, void *out, size_t n, DType dt) {
  const size_t bytes = n * elem_size(dt, CommOp::all_gather);
  void *gathered = out_.reserve(bytes * (size_t)size());
  host_.all_gather(to_host(in_, in, bytes), gathered, n, dt);
  from_host(out, out_, bytes * (size_t)size());
}

void StagedComm::reduce_scatter(const void *in, void *out, size_t n, DType dt) {
  const size_t bytes = n * elem_size(dt, CommOp::reduce_scatter);
  void *mine = out_.reserve(bytes);
  host_.reduce_scatter(to_host(in_, in, bytes * (size_t)size()), mine, n, dt);
  from_host(out, out_, bytes);
}

void StagedComm::broadcast(void *buf, size_t n, DType dt, int root) {
  const size_t bytes = n * elem_size(dt, CommOp::broadcast);
  // Only the root's values are read; the others' buffers are overwritten.
  if (rank() == root) {
    host_.broadcast(to_host(in_, buf, bytes), n, dt, root);
    return;
  }
  host_.broadcast(in_.reserve(bytes), n, dt, root);
  from_host(buf, in_, bytes);
}

void StagedComm::send(const void *buf, size_t n, DType dt, int peer) {
  const size_t bytes = n * elem_size(dt, CommOp::send);
  host_.send(to_host(in_, buf, bytes), n, dt, peer);  // the backend copies: in_ is free again
}

void StagedComm::recv(void *buf, size_t n, DType dt, int peer) {
  const size_t bytes = n * elem_size(dt, CommOp::recv);
  host_.recv(in_.reserve(bytes), n, dt, peer);
  from_host(buf, in_, bytes);
}

}  // namespace ptdp
