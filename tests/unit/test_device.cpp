// The device conformance suite (tests/device) on the CPU device, and on the
// CUDA device where a GPU is visible (skipped otherwise).
#include <gtest/gtest.h>

#include "tests/device/device_conformance.h"

TEST(Device, CpuConformance) {
  auto dev = ptdp::make_cpu_device();
  EXPECT_EQ(device_conformance::run(*dev), 0);
}

TEST(Device, Factory) { EXPECT_EQ(device_conformance::run_factory(), 0); }

TEST(Device, CudaConformance) {
  if (ptdp::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  auto dev = ptdp::make_device("cuda", 0);
  EXPECT_EQ(device_conformance::run(*dev), 0);
}
