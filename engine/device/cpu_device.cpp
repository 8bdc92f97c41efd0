// The CPU device: host memory, every call done at once on the calling thread.
#include <xmmintrin.h>

#include <chrono>
#include <cstdlib>
#include <cstring>

#include "engine/core/allocator.h"
#include "engine/core/status.h"
#include "engine/device/device.h"
#include "engine/device/memory_ledger.h"

namespace ptdp {

namespace {

class CpuTimer : public DeviceTimer {
 public:
  void start() override { t0_ = std::chrono::steady_clock::now(), started_ = true, stopped_ = false; }
  void stop() override { t1_ = std::chrono::steady_clock::now(), stopped_ = true; }
  double elapsed_ms() override {
    if (!stopped_) fail(Status::wrong_state, "DeviceTimer::elapsed_ms before start and stop");
    return std::chrono::duration<double, std::milli>(t1_ - t0_).count();
  }
  double ms_since(DeviceTimer &earlier) override {
    auto *e = dynamic_cast<CpuTimer *>(&earlier);
    if (!e || !started_ || !e->started_)
      fail(Status::wrong_state, "DeviceTimer::ms_since needs two started timers of one device");
    return std::chrono::duration<double, std::milli>(t0_ - e->t0_).count();
  }

 private:
  std::chrono::steady_clock::time_point t0_, t1_;
  bool started_ = false, stopped_ = false;
};

class CpuDevice : public Device {
 public:
  DeviceKind kind() const override { return DeviceKind::cpu; }
  std::string name() const override { return "cpu"; }
  std::string hardware_id() const override { return "cpu"; }

  void *allocate(size_t bytes) override {
    if (bytes == 0) return nullptr;
    // Through the process's host allocator (it throws out_of_memory), whose
    // peak the C ABI reports.
    void *p = CpuAllocator::instance().allocate(bytes, 256);
    ledger_.add(p, bytes);
    return p;
  }
  void free(void *p) override {
    if (!p) return;
    const size_t bytes = ledger_.remove(p, "cpu");
    CpuAllocator::instance().deallocate(p, bytes);
  }
  void zero(void *p, size_t bytes) override {
    if (bytes) std::memset(p, 0, bytes);
  }
  // The device's memory is the host's: staging is plain memory.
  void *allocate_host(size_t bytes) override {
    if (bytes == 0) return nullptr;
    void *p = std::aligned_alloc(256, (bytes + 255) / 256 * 256);
    if (!p) fail(Status::out_of_memory, "cpu: cannot allocate ", bytes, " bytes of staging memory");
    return p;
  }
  void free_host(void *p) override { std::free(p); }
  void copy_from_host(void *dst, const void *host, size_t bytes) override { copy(dst, host, bytes); }
  void copy_to_host(void *host, const void *src, size_t bytes) override { copy(host, src, bytes); }
  void copy(void *dst, const void *src, size_t bytes) override {
    if (bytes) std::memmove(dst, src, bytes);
  }
  void synchronize() override {}
  void bind_thread() override {
#pragma omp parallel
    _mm_setcsr(_mm_getcsr() | 0x8040);  // FTZ | DAZ
  }
  std::unique_ptr<DeviceTimer> make_timer() override { return std::make_unique<CpuTimer>(); }
  void *stream() const override { return nullptr; }
  MemoryStats memory() const override {
    MemoryStats s = ledger_.stats();
    s.reserved = s.in_use;  // freed memory goes back to the C library
    return s;
  }
  void reset_peak() override { ledger_.reset_peak(); }

 private:
  MemoryLedger ledger_;
};

}  // namespace

std::unique_ptr<Device> make_cpu_device() { return std::make_unique<CpuDevice>(); }

}  // namespace ptdp
