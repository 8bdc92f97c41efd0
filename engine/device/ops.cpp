// The op table of a device's backend (the registry beside make_device), and
// the entries' shared size check.
#include "engine/device/ops.h"

#include "engine/core/status.h"

namespace ptdp {

#ifndef PTDP_WITH_CUDA
std::unique_ptr<Ops<float>> make_cuda_ops(Device &) {
  fail(Status::invalid_config, "a CUDA device in a ptdp built without CUDA");
}
#endif

// The op tables, by the device's backend.
template <>
std::unique_ptr<Ops<float>> make_ops<float>(Device &dev) {
  if (dev.kind() == DeviceKind::cuda) return make_cuda_ops(dev);
  return make_cpu_ops<float>(dev);
}
template <>
std::unique_ptr<Ops<double>> make_ops<double>(Device &dev) {
  if (dev.kind() != DeviceKind::cpu)
    fail(Status::invalid_argument, "double precision ops exist on the cpu device only (",
         dev.name(), " computes in f32, bf16 or f16)");
  return make_cpu_ops<double>(dev);
}

void check_sizes(const char *op, std::initializer_list<OpSize> sizes) {
  for (const OpSize &s : sizes)
    if (s.value < 0)
      fail(Status::invalid_argument, op, ": ", s.name, " = ", s.value, " (allowed: >= 0)");
}

}  // namespace ptdp
