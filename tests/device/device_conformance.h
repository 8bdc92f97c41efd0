// One conformance suite for every Device backend (engine/device): memory and
// its statistics, copies, DeviceArray, timers, the caching of freed memory,
// and the errors. Plain checks returning a failure count, so the same cases run
// under GoogleTest (tests/device/test_device.cpp: CPU, and CUDA where a GPU is
// present) and in the GPU-only build (tests/gpu/test_cuda_device.cu).
#pragma once
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <functional>
#include <numeric>
#include <string>
#include <vector>

#include "engine/core/status.h"
#include "engine/device/device.h"

namespace device_conformance {

struct Checker {
  int failures = 0;
  void check(bool ok, const std::string &what) {
    if (!ok) {
      std::printf("  FAIL: %s\n", what.c_str());
      failures++;
    }
  }
  // `call` must throw ptdp::Error with `code` and a message containing `needle`.
  void expect_error(const std::function<void()> &call, ptdp::Status code, const char *needle,
                    const std::string &what) {
    try {
      call();
    } catch (const ptdp::Error &e) {
      check(e.code() == code && std::strstr(e.what(), needle),
            what + ": got \"" + e.what() + "\" (status " + std::to_string((int)e.code()) + ")");
      return;
    }
    check(false, what + ": no error");
  }
};

inline int run(ptdp::Device &dev) {
  using ptdp::DeviceArray;
  using ptdp::Status;
  Checker c;
  std::printf("device conformance on %s\n", dev.name().c_str());
  dev.synchronize();
  const ptdp::MemoryStats s0 = dev.memory();

  // Allocation: nullptr for 0 bytes, 256-byte alignment, statistics.
  c.check(dev.allocate(0) == nullptr, "allocate(0) is nullptr");
  void *a = dev.allocate(1000), *b = dev.allocate(3 << 20);
  c.check(a && b && (uintptr_t)a % 256 == 0 && (uintptr_t)b % 256 == 0, "256-byte aligned");
  ptdp::MemoryStats s = dev.memory();
  c.check(s.in_use - s0.in_use == 1000 + (3 << 20), "in_use counts the bytes asked for");
  c.check(s.allocations - s0.allocations == 2, "allocations counted");
  c.check(s.reserved >= s.in_use, "reserved >= in_use");
  dev.free(b);
  s = dev.memory();
  c.check(s.in_use - s0.in_use == 1000, "free returns the bytes");

  // Staging memory (page-locked on CUDA): copies through it round-trip, and it
  // is not the device's memory.
  c.check(dev.allocate_host(0) == nullptr, "allocate_host(0) is nullptr");
  {
    ptdp::HostStage stage(dev);
    float *h = reinterpret_cast<float *>(stage.reserve(1000 * sizeof(float)));
    for (int i = 0; i < 1000; i++) h[i] = 0.5f * (float)i;
    void *d = dev.allocate(1000 * sizeof(float));
    dev.copy_from_host(d, h, 1000 * sizeof(float));
    std::fill(h, h + 1000, -1.0f);
    dev.copy_to_host(h, d, 1000 * sizeof(float));
    bool same = true;
    for (int i = 0; i < 1000; i++) same = same && h[i] == 0.5f * (float)i;
    c.check(same, "copies through staging memory round-trip");
    c.check(stage.reserve(10) == reinterpret_cast<char *>(h), "a smaller reserve keeps the buffer");
    c.check(dev.memory().in_use - s0.in_use == 1000 + 1000 * (int64_t)sizeof(float),
            "staging memory is not counted as the device's");
    dev.free(d);
  }
  c.check(s.peak - s0.in_use >= 1000 + (3 << 20), "peak keeps the high mark");
  dev.reset_peak();
  c.check(dev.memory().peak == dev.memory().in_use, "reset_peak");
  dev.free(a);
  dev.free(nullptr);

  // Copies: host -> device -> device -> host, and zero.
  {
    std::vector<float> v(100003);
    std::iota(v.begin(), v.end(), 1.f);
    DeviceArray<float> x(dev, v.size()), y(dev, v.size());
    x.copy_from_host(v);
    dev.copy(y.data(), x.data(), x.bytes());
    c.check(y.to_host() == v, "round trip host -> device -> device -> host");
    x.zero();
    c.check(x.to_host() == std::vector<float>(v.size(), 0.f), "zero");
    c.expect_error([&] { x.copy_from_host(std::vector<float>(7)); }, Status::invalid_argument,
                   "100003 elements given 7", "copy_from_host of the wrong size");
    DeviceArray<float> z = std::move(y);
    c.check(y.size() == 0 && y.data() == nullptr && z.size() == v.size(), "move leaves the source empty");
    c.check(z.to_host() == v, "moved array keeps its data");
  }
  dev.synchronize();
  c.check(dev.memory().in_use == s0.in_use, "DeviceArray frees its memory");

  // Freed memory is cached: the same size again and again does not grow the reservation.
  {
    DeviceArray<char> warm(dev, 64 << 20);
  }
  const int64_t reserved = dev.memory().reserved;
  for (int i = 0; i < 50; i++) DeviceArray<char> t(dev, 64 << 20);
  dev.synchronize();
  c.check(dev.memory().reserved <= std::max<int64_t>(reserved, 64 << 20),
          "repeated allocations reuse the cache (reserved " + std::to_string(dev.memory().reserved) +
              " after, " + std::to_string(reserved) + " before)");

  // Timers.
  {
    auto t = dev.make_timer();
    c.expect_error([&] { t->elapsed_ms(); }, Status::wrong_state, "before start and stop",
                   "elapsed_ms before stop");
    t->start();
    DeviceArray<float> w(dev, 1 << 20);
    w.zero();
    t->stop();
    const double ms = t->elapsed_ms();
    c.check(ms >= 0 && ms < 10000, "timer measures a span (" + std::to_string(ms) + " ms)");
    auto later = dev.make_timer();
    c.expect_error([&] { later->ms_since(*t); }, Status::wrong_state, "two started timers",
                   "ms_since before start");
    later->start();
    w.zero();
    later->stop();
    const double since = later->ms_since(*t);
    c.check(since >= ms && since < 10000,
            "a later timer starts after the earlier one's span (" + std::to_string(since) + " ms)");
  }

  // Errors: a foreign pointer, an impossible size; the device stays usable.
  int on_stack = 0;
  c.expect_error([&] { dev.free(&on_stack); }, Status::invalid_argument, "did not allocate",
                 "free of a foreign pointer");
  c.expect_error([&] { dev.allocate(size_t(1) << 52); }, Status::out_of_memory, "4503599627370496",
                 "impossible allocation");
  {
    DeviceArray<int> after(dev, 10);
    after.copy_from_host(std::vector<int>(10, 7));
    c.check(after.to_host() == std::vector<int>(10, 7), "usable after an out-of-memory error");
  }
  dev.synchronize();
  c.check(dev.memory().in_use == s0.in_use, "nothing leaked");
  std::printf("%d device checks failed on %s\n", c.failures, dev.name().c_str());
  return c.failures;
}

// make_device's parsing and its errors (no GPU needed).
inline int run_factory() {
  Checker c;
  c.check(ptdp::make_device("cpu", 3)->kind() == ptdp::DeviceKind::cpu, "make_device(cpu)");
  // auto: the GPU when one is visible, else the CPU.
  const auto want = ptdp::cuda_device_count() > 0 ? ptdp::DeviceKind::cuda : ptdp::DeviceKind::cpu;
  c.check(ptdp::make_device("auto", 1)->kind() == want, "make_device(auto)");
  c.expect_error([] { ptdp::make_device("gpu", 0); }, ptdp::Status::bad_value,
                 "allowed: auto, cpu, cuda, cuda:N", "unknown device");
  c.expect_error([] { ptdp::make_device("cuda:x", 0); }, ptdp::Status::bad_value,
                 "allowed: auto, cpu, cuda, cuda:N", "bad ordinal");
  if (ptdp::cuda_device_count() > 0)
    c.expect_error([] { ptdp::make_device("cuda:999", 0); }, ptdp::Status::bad_value,
                   "does not exist", "ordinal out of range");
  else
    c.expect_error([] { ptdp::make_device("cuda", 0); }, ptdp::Status::invalid_config, "cuda",
                   "cuda without a GPU");
  return c.failures;
}

}  // namespace device_conformance
