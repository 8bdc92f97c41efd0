#include "engine/comm/fault_comm.h"

#include <utility>

namespace ptdp {

FaultComm::FaultComm(std::unique_ptr<Communicator> inner, int call, float delta)
    : Communicator(inner->name(), inner->members(), inner->rank()),
      inner_(std::move(inner)),
      call_(call),
      delta_(delta) {}

void FaultComm::corrupt(void *buf, size_t n, DType dt) {
  if (dt != DType::f32 || n == 0 || ++calls_ != call_ || rank() != 0) return;
  static_cast<float *>(buf)[0] += delta_;
}

void FaultComm::all_reduce(void *buf, size_t n, DType dt, ReduceOp op) {
  inner_->all_reduce(buf, n, dt, op);
  corrupt(buf, n, dt);
}

void FaultComm::reduce_scatter(const void *in, void *out, size_t n, DType dt) {
  inner_->reduce_scatter(in, out, n, dt);
  corrupt(out, n, dt);
}

}  // namespace ptdp
