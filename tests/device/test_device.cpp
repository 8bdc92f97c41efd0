// The device conformance suite (tests/device) on the CPU device, and on the
// CUDA device where a GPU is visible (skipped otherwise).
#include <gtest/gtest.h>
#include <xmmintrin.h>

#include <thread>
#include <vector>

#include "engine/device/ops.h"
#include "tests/device/device_conformance.h"
#include "tests/support/expect_error.h"

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

// ---- the op table's entries: checks and profiling shared by every backend ----

TEST(OpTable, NegativeSizesAreRefusedNamingTheSize) {
  auto dev = ptdp::make_cpu_device();
  auto ops = ptdp::make_ops<float>(*dev);
  std::vector<float> x(8);
  expect_error([&] { ops->layernorm_forward(x.data(), x.data(), x.data(), x.data(), x.data(),
                                            x.data(), -1, 4, 1e-5f); },
               ptdp::Status::invalid_argument, "layernorm_forward: N = -1 (allowed: >= 0)");
  expect_error([&] { ops->gemm(false, false, 2, 2, -3, 1.f, x.data(), 2, x.data(), 2, 0.f,
                               x.data(), 2); },
               ptdp::Status::invalid_argument, "gemm: K = -3");
  expect_error([&] { ops->vocab_ce_local_max(x.data(), x.data(), 1, 2, 3); },
               ptdp::Status::invalid_argument, "cols = 3 > ld = 2");
  expect_error([&] { ops->dropout_backward_from_output(x.data(), x.data(), x.data(), 8, 1.f); },
               ptdp::Status::invalid_argument, "p = 1 (allowed: 0 <= p < 1)");
  expect_error([&] { ops->rope_rotate(x.data(), x.data(), x.data(), 1, 1, 8, 1, 8, 3, false); },
               ptdp::Status::invalid_argument, "rope_rotate: hd = 3 (allowed: even)");
  expect_error([&] { ops->rope_rotate(x.data(), x.data(), x.data(), 1, 1, 8, 2, 6, 6, false); },
               ptdp::Status::invalid_argument, "2 vectors of 6 values 6 apart overrun a row of ld = 8");
  expect_error([&] { ops->rope_rotate(x.data(), x.data(), x.data(), 1, 1, 8, 2, 2, 4, false); },
               ptdp::Status::invalid_argument, "vectors of 4 values 2 apart overlap");
  expect_error([&] { ops->swiglu_forward(x.data(), x.data(), x.data(), nullptr, 2, -4); },
               ptdp::Status::invalid_argument, "swiglu_forward: f = -4");
}

// A GEMM with K = 0 (a tensor-parallel rank holding no vocabulary columns):
// C = beta C, done by the entry, so every backend agrees.
TEST(OpTable, GemmWithNoInnerDimensionScalesC) {
  auto dev = ptdp::make_cpu_device();
  auto ops = ptdp::make_ops<float>(*dev);
  std::vector<float> c(12, 5.f);
  ops->gemm(false, false, 3, 4, 0, 1.f, nullptr, 1, nullptr, 4, 1.f, c.data(), 4);
  EXPECT_EQ(c, std::vector<float>(12, 5.f));
  // beta 0 on a strided C (ldc 4, N 3): the fourth column stays.
  ops->gemm(false, false, 3, 3, 0, 1.f, nullptr, 1, nullptr, 3, 0.f, c.data(), 4);
  for (int i = 0; i < 3; i++)
    for (int j = 0; j < 4; j++) EXPECT_EQ(c[i * 4 + j], j < 3 ? 0.f : 5.f) << i << "," << j;
  expect_error([&] { ops->gemm(false, false, 3, 4, 0, 1.f, nullptr, 1, nullptr, 4, 0.5f,
                               c.data(), 4); },
               ptdp::Status::invalid_argument, "K = 0 with beta = 0.5");
}

TEST(OpTable, ProfilingTimesEveryEntryOnlyWhenOn) {
  auto dev = ptdp::make_cpu_device();
  auto ops = ptdp::make_ops<float>(*dev);
  std::vector<float> a(6, 1.f), b(6, 1.f), c(4);
  ops->gemm(false, false, 2, 2, 3, 1.f, a.data(), 3, b.data(), 2, 0.f, c.data(), 2);
  EXPECT_TRUE(ops->take_profile().empty());
  ops->set_profiling(true);
  ops->gemm(false, false, 2, 2, 3, 1.f, a.data(), 3, b.data(), 2, 0.f, c.data(), 2);
  ops->gemm(false, false, 2, 2, 3, 1.f, a.data(), 3, b.data(), 2, 0.f, c.data(), 2);
  ops->scale_inplace(c.data(), 4, 2.f);
  const auto rows = ops->take_profile();
  ASSERT_EQ(rows.size(), 2u);
  for (const ptdp::OpTime &r : rows) {
    if (r.op == "gemm 2x2x3 NN") {
      EXPECT_EQ(r.calls, 2);
      EXPECT_EQ(r.flops, 2 * 2.0 * 2 * 2 * 3);
    } else {
      EXPECT_EQ(r.op, "scale_inplace");
      EXPECT_EQ(r.calls, 1);
    }
  }
  EXPECT_EQ(c, std::vector<float>(4, 6.f));  // the timed ops ran
  ops->set_profiling(false);
  ops->scale_inplace(c.data(), 4, 2.f);
  EXPECT_TRUE(ops->take_profile().empty());
}
