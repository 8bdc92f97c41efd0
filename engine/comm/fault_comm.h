// A communicator that corrupts one result, for tests: the checks that hold
// every layout to the serial run must catch a collective that is wrong once
// (tests/parallel/compose_fuzz.cpp --self-test). Wraps another communicator of
// host memory; its `call`-th all-reduce or reduce-scatter of fp32 (counting
// from 1) gets `delta` added to element 0 of the result on group rank 0.
#pragma once
#include <memory>

#include "engine/comm/communicator.h"

namespace ptdp {

class FaultComm final : public Communicator {
 public:
  FaultComm(std::unique_ptr<Communicator> inner, int call, float delta);
  void all_reduce(void *buf, size_t n, DType dt, ReduceOp op) override;
  void all_gather(const void *in, void *out, size_t n, DType dt) override {
    inner_->all_gather(in, out, n, dt);
  }
  void reduce_scatter(const void *in, void *out, size_t n, DType dt) override;
  void broadcast(void *buf, size_t n, DType dt, int root) override {
    inner_->broadcast(buf, n, dt, root);
  }
  void send(const void *buf, size_t n, DType dt, int peer) override {
    inner_->send(buf, n, dt, peer);
  }
  void recv(void *buf, size_t n, DType dt, int peer) override { inner_->recv(buf, n, dt, peer); }
  void barrier() override { inner_->barrier(); }
  CommStats &stats() override { return inner_->stats(); }

 private:
  void corrupt(void *buf, size_t n, DType dt);
  std::unique_ptr<Communicator> inner_;
  int call_, calls_ = 0;
  float delta_;
};

}  // namespace ptdp
