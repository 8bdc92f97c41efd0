// Choosing a rank's device from a --device value.
#include <cstdlib>

#include "engine/core/status.h"
#include "engine/core/text.h"
#include "engine/device/device.h"

namespace ptdp {

#ifndef PTDP_WITH_CUDA
// Built without CUDA: no GPU can be used.
int cuda_device_count() { return 0; }
std::unique_ptr<Device> make_cuda_device(int) {
  fail(Status::invalid_config, "device 'cuda' asked for, but this ptdp was built without CUDA "
                               "(allowed here: cpu)");
}
#endif

int cuda_ordinal(const std::string &spec) {
  if (spec == "cpu" || spec == "auto" || spec == "cuda") return -1;
  if (spec.rfind("cuda:", 0) == 0 && spec.size() > 5) {
    long long ordinal = -1;  // (digits only: "cuda:-0" is no device)
    if (spec[5] != '-' && parse_whole(spec.substr(5), &ordinal) && ordinal < (1 << 20))
      return (int)ordinal;
  }
  fail(Status::bad_value, "device '", spec, "' (allowed: auto, cpu, cuda, cuda:N)");
}

std::unique_ptr<Device> make_device(const std::string &spec, int rank) {
  const int ordinal = cuda_ordinal(spec);  // the name checked first
  if (ordinal >= 0) return make_cuda_device(ordinal);
  if (spec == "cpu") return make_cpu_device();
  if (spec == "auto") return make_device(cuda_device_count() > 0 ? "cuda" : "cpu", rank);
  const int count = cuda_device_count();  // "cuda"
  if (count == 0) make_cuda_device(0);      // throws with the reason
  return make_cuda_device(rank % count);
}

void device_array_size_mismatch(size_t have, size_t given) {
  fail(Status::invalid_argument, "DeviceArray of ", have, " elements given ", given, " values");
}

}  // namespace ptdp
