// Choosing a rank's device from a --device value, and the op table of a
// device's backend.
#include <cstdlib>

#include "engine/core/status.h"
#include "engine/device/device.h"
#include "engine/device/ops.h"

namespace ptdp {

#ifndef PTDP_WITH_CUDA
// Built without CUDA: no GPU can be used.
int cuda_device_count() { return 0; }
std::unique_ptr<Device> make_cuda_device(int) {
  fail(Status::invalid_config, "device 'cuda' asked for, but this ptdp was built without CUDA "
                               "(allowed here: cpu)");
}
#endif

std::unique_ptr<Device> make_device(const std::string &spec, int rank) {
  if (spec == "cpu") return make_cpu_device();
  if (spec == "auto") return make_device(cuda_device_count() > 0 ? "cuda" : "cpu", rank);
  if (spec == "cuda") {
    const int count = cuda_device_count();
    if (count == 0) make_cuda_device(0);  // throws with the reason
    return make_cuda_device(rank % count);
  }
  if (spec.rfind("cuda:", 0) == 0 && spec.size() > 5) {
    char *end = nullptr;
    const long ordinal = std::strtol(spec.c_str() + 5, &end, 10);
    if (*end == '\0' && ordinal >= 0 && ordinal < (1 << 20)) return make_cuda_device((int)ordinal);
  }
  fail(Status::bad_value, "device '", spec, "' (allowed: auto, cpu, cuda, cuda:N)");
}

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

void device_array_size_mismatch(size_t have, size_t given) {
  fail(Status::invalid_argument, "DeviceArray of ", have, " elements given ", given, " values");
}

}  // namespace ptdp
