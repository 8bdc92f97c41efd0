// The device conformance suite (tests/device) on the CPU device, and on the
// CUDA device where a GPU is visible (skipped otherwise).
#include <gtest/gtest.h>
#include <xmmintrin.h>

#include <thread>

#include "tests/device/device_conformance.h"

TEST(Device, CpuConformance) {
  auto dev = ptdp::make_cpu_device();
  EXPECT_EQ(device_conformance::run(*dev), 0);
}

TEST(Device, Factory) { EXPECT_EQ(device_conformance::run_factory(), 0); }

// A rank's worker thread binds to its CPU device: denormals flush to zero there.
TEST(Device, CpuBindThreadFlushesDenormals) {
  auto dev = ptdp::make_cpu_device();
  unsigned before = 0, after = 0;
  std::thread([&] {
    before = _mm_getcsr() & 0x8040;
    dev->bind_thread();
    after = _mm_getcsr() & 0x8040;
  }).join();
  EXPECT_EQ(before, 0u);  // a new thread starts with IEEE denormals
  EXPECT_EQ(after, 0x8040u);
}

TEST(Device, CudaConformance) {
  if (ptdp::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  auto dev = ptdp::make_device("cuda", 0);
  EXPECT_EQ(device_conformance::run(*dev), 0);
}
