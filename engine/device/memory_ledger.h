// Bookkeeping shared by the device backends: which pointers are live, their
// sizes, and the statistics (in use, peak, allocations). Thread-safe, so a
// device may be used from more than one thread.
#pragma once
#include <algorithm>
#include <mutex>
#include <string>
#include <unordered_map>

#include "engine/core/status.h"
#include "engine/device/device.h"

namespace ptdp {

class MemoryLedger {
 public:
  void add(void *p, size_t bytes) {
    std::lock_guard<std::mutex> lock(mu_);
    sizes_[p] = bytes;
    stats_.in_use += (int64_t)bytes;
    stats_.peak = std::max(stats_.peak, stats_.in_use);
    stats_.allocations++;
  }
  // Forgets p and returns its size; a pointer the ledger does not hold is an
  // error naming `who`.
  size_t remove(void *p, const std::string &who) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = sizes_.find(p);
    if (it == sizes_.end())
      fail(Status::invalid_argument, who, ": free of a pointer this device did not allocate");
    const size_t bytes = it->second;
    stats_.in_use -= (int64_t)bytes;
    sizes_.erase(it);
    return bytes;
  }
  MemoryStats stats() const {
    std::lock_guard<std::mutex> lock(mu_);
    return stats_;
  }
  void reset_peak() {
    std::lock_guard<std::mutex> lock(mu_);
    stats_.peak = stats_.in_use;
  }
  // The live pointers (for a backend's destructor).
  template <class F>
  void for_each_live(F f) const {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto &kv : sizes_) f(kv.first);
  }

 private:
  mutable std::mutex mu_;
  std::unordered_map<void *, size_t> sizes_;
  MemoryStats stats_;
};

}  // namespace ptdp
