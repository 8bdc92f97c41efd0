// Host memory for the CPU device's tensors, counted process-wide so that a run
// can report its current and peak bytes (the C ABI's peak_memory_bytes).
#pragma once
#include <cstddef>
#include <cstdint>

namespace ptdp {

class CpuAllocator {
 public:
  static CpuAllocator &instance();
  // `alignment`-byte aligned (a power of two >= 64), not initialised (the
  // device's users zero what needs it: DeviceArray::resize); throws out_of_memory.
  void *allocate(size_t bytes, size_t alignment = 64);
  void deallocate(void *p, size_t bytes);
  int64_t bytes_in_use() const;
  int64_t peak_bytes() const;
  void reset_peak();
};

}  // namespace ptdp
