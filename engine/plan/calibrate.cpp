// --calibrate: measure this machine's CPU so that the model predicts ptdp's own
// thread-rank runs. Each measurement takes a few tens of milliseconds.
#include <cblas.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>

#include "engine/plan/machine.h"

namespace ptdp::plan {

namespace {

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Best-of-`reps` seconds of an m x n x k fp32 GEMM (OpenBLAS, all its threads).
double time_sgemm(int m, int n, int k, int reps) {
  std::vector<float> a((size_t)m * k, 0.01f), b((size_t)k * n, 0.02f), c((size_t)m * n, 0.f);
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, n, k, 1.f, a.data(), k, b.data(), n, 0.f, c.data(), n);
  double best = 1e30;
  for (int r = 0; r < reps; r++) {
    double t0 = now();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, n, k, 1.f, a.data(), k, b.data(), n, 0.f, c.data(), n);
    best = std::min(best, now() - t0);
  }
  return best;
}

// Streaming bandwidth: bytes read + written per second by a large copy.
double copy_bandwidth() {
  const size_t n = (size_t)32 << 20;  // 32M floats = 128 MiB each way
  std::vector<float> a(n, 1.f), b(n, 0.f);
  double best = 1e30;
  for (int r = 0; r < 3; r++) {
    double t0 = now();
    std::memcpy(b.data(), a.data(), n * sizeof(float));
    best = std::min(best, now() - t0);
  }
  volatile float sink = b[n / 2];
  (void)sink;
  return 2.0 * n * sizeof(float) / best;
}

}  // namespace

Machine calibrate_this_machine(std::string *log) {
  Machine m;
  m.name = "this-cpu";
  int cores = (int)std::max(1u, std::thread::hardware_concurrency());
  // Peak: a large square GEMM; k_half from a thin one (K = 32) of the same output.
  const int N = 1024;
  double big = time_sgemm(N, N, N, 3);
  double peak = 2.0 * N * N * N / big;
  const int K = 32;
  double thin = time_sgemm(N, N, K, 5);
  double thin_rate = 2.0 * N * N * K / thin;
  double ratio = std::min(1.0, thin_rate / peak);  // = K / (K + k_half)
  m.peak_fp32 = m.peak_bf16 = m.peak_fp16 = peak;  // the CPU computes 16-bit types in fp32
  m.gemm_units = cores;
  m.gemm_tile_m = m.gemm_tile_n = 64;
  m.gemm_k_half = K * (1 / std::max(ratio, 0.05) - 1);
  m.gemm_max_efficiency = 1.0;
  m.memory_bandwidth = copy_bandwidth();
  m.memory_efficiency = 1.0;
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  m.memory_bytes = pages > 0 && page > 0 ? (double)pages * page : 8e9;
  m.memory_reserved_bytes = 0.5e9;
  m.op_overhead_s = 3e-6;  // an OpenMP region
  // Thread ranks exchange data through shared memory: a copy.
  m.intra = {m.memory_bandwidth / 2, 1.0, 5e-6};
  m.inter = m.intra;
  m.devices_per_node = 1 << 16;
  m.shared_node = true;
  m.description = "this machine's CPU, measured: " + std::to_string(cores) + " cores shared by the thread ranks";
  if (log) {
    char buf[400];
    std::snprintf(buf, sizeof buf,
                  "  calibrated this CPU (%d cores): sgemm %.1f GFLOP/s (%dx%dx%d), %.0f%% of it at K=%d "
                  "(k_half %.0f); copy bandwidth %.1f GB/s; memory %.1f GB\n",
                  cores, peak / 1e9, N, N, N, 100 * ratio, K, m.gemm_k_half, m.memory_bandwidth / 1e9,
                  m.memory_bytes / 1e9);
    *log = buf;
  }
  return m;
}

}  // namespace ptdp::plan
