// The CPU device: host memory, every call done at once on the calling thread.
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <unordered_map>

#include "engine/core/status.h"
#include "engine/device/device.h"

namespace ptdp {

namespace {

class CpuTimer : public DeviceTimer {
 public:
  void start() override { t0_ = std::chrono::steady_clock::now(), stopped_ = false; }
  void stop() override { t1_ = std::chrono::steady_clock::now(), stopped_ = true; }
  double elapsed_ms() override {
    if (!stopped_) fail(Status::wrong_state, "DeviceTimer::elapsed_ms before start and stop");
    return std::chrono::duration<double, std::milli>(t1_ - t0_).count();
  }

 private:
  std::chrono::steady_clock::time_point t0_, t1_;
  bool stopped_ = false;
};

class CpuDevice : public Device {
 public:
  DeviceKind kind() const override { return DeviceKind::cpu; }
  std::string name() const override { return "cpu"; }

  void *allocate(size_t bytes) override {
    if (bytes == 0) return nullptr;
    const size_t rounded = (bytes + 255) / 256 * 256;
    void *p = std::aligned_alloc(256, rounded);
    std::lock_guard<std::mutex> lock(mu_);
    if (!p)
      fail(Status::out_of_memory, "cpu: out of memory allocating ", bytes, " bytes (", stats_.in_use,
           " in use)");
    sizes_[p] = bytes;
    stats_.in_use += (int64_t)bytes;
    stats_.reserved = stats_.in_use;
    stats_.peak = std::max(stats_.peak, stats_.in_use);
    stats_.allocations++;
    return p;
  }
  void free(void *p) override {
    if (!p) return;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = sizes_.find(p);
      if (it == sizes_.end()) fail(Status::invalid_argument, "cpu: free of a pointer this device did not allocate");
      stats_.in_use -= (int64_t)it->second;
      stats_.reserved = stats_.in_use;
      sizes_.erase(it);
    }
    std::free(p);
  }
  void zero(void *p, size_t bytes) override {
    if (bytes) std::memset(p, 0, bytes);
  }
  void copy_from_host(void *dst, const void *host, size_t bytes) override { copy(dst, host, bytes); }
  void copy_to_host(void *host, const void *src, size_t bytes) override { copy(host, src, bytes); }
  void copy(void *dst, const void *src, size_t bytes) override {
    if (bytes) std::memmove(dst, src, bytes);
  }
  void synchronize() override {}
  std::unique_ptr<DeviceTimer> make_timer() override { return std::make_unique<CpuTimer>(); }
  void *stream() const override { return nullptr; }
  MemoryStats memory() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return stats_;
  }
  void reset_peak() override {
    std::lock_guard<std::mutex> lock(mu_);
    stats_.peak = stats_.in_use;
  }

 private:
  mutable std::mutex mu_;
  std::unordered_map<void *, size_t> sizes_;
  MemoryStats stats_;
};

}  // namespace

std::unique_ptr<Device> make_cpu_device() { return std::make_unique<CpuDevice>(); }

}  // namespace ptdp
