#include "engine/core/allocator.h"

#include <atomic>
#include <cstdlib>

#include "engine/core/status.h"

namespace ptdp {

namespace {
std::atomic<int64_t> g_in_use{0};
std::atomic<int64_t> g_peak{0};
}  // namespace

CpuAllocator &CpuAllocator::instance() {
  static CpuAllocator a;
  return a;
}

void *CpuAllocator::allocate(size_t bytes, size_t alignment) {
  size_t rounded = (bytes + alignment - 1) / alignment * alignment;
  void *p = std::aligned_alloc(alignment, rounded);
  if (!p) fail(Status::out_of_memory, "cannot allocate ", bytes, " bytes of host memory");
  int64_t now = g_in_use.fetch_add((int64_t)bytes) + (int64_t)bytes;
  int64_t peak = g_peak.load();
  while (now > peak && !g_peak.compare_exchange_weak(peak, now)) {
  }
  return p;
}

void CpuAllocator::deallocate(void *p, size_t bytes) {
  std::free(p);
  g_in_use.fetch_sub((int64_t)bytes);
}

int64_t CpuAllocator::bytes_in_use() const { return g_in_use.load(); }
int64_t CpuAllocator::peak_bytes() const { return g_peak.load(); }
void CpuAllocator::reset_peak() { g_peak.store(g_in_use.load()); }

}  // namespace ptdp
