// The CUDA device through the device conformance suite: on GPU 0, and as two
// ranks sharing that GPU (two devices, two streams, separate statistics).
// Exits 77 (skipped) without a device.
#include <cuda_runtime.h>

#include <thread>

#include "tests/device/device_conformance.h"
#include "tests/gpu/gpu_test_util.h"

int main() {
  gpu_test::require_device();
  int &failures = gpu_test::failures;
  failures += device_conformance::run_factory();
  auto dev = ptdp::make_device("cuda", 0);
  failures += device_conformance::run(*dev);
  // Two ranks on one GPU: each its own stream and its own accounting.
  auto other = ptdp::make_device("cuda:0", 1);
  ptdp::DeviceArray<float> x(*dev, 1000);
  const bool separate = other->memory().in_use == 0 && dev->memory().in_use == 4000 &&
                        other->stream() != dev->stream();
  std::printf("two devices on one GPU: %s\n", separate ? "ok" : "FAIL");
  failures += !separate;
  failures += device_conformance::run(*other);
  // A rank's worker thread binds to its device: that GPU becomes current there.
  int current = -1;
  std::thread([&] {
    other->bind_thread();
    cudaGetDevice(&current);
  }).join();
  std::printf("bind_thread makes the rank's GPU current: %s\n", current == 0 ? "ok" : "FAIL");
  failures += current != 0;
  return gpu_test::finish();
}
