// Helpers of the GPU tests and benchmarks: device buffers poisoned with NaN,
// fresh random inputs, an element-wise comparison, and the skip (exit 77) when
// no usable device is present. Header-only: these programs link only the CUDA
// runtime, cuBLASLt and the CPU kernels they compare against.
#pragma once
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#define CUDA_OK(call)                                                                   \
  do {                                                                                  \
    cudaError_t e_ = (call);                                                            \
    if (e_ != cudaSuccess) {                                                            \
      std::fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, cudaGetErrorString(e_)); \
      std::exit(1);                                                                     \
    }                                                                                   \
  } while (0)

namespace gpu_test {

inline int failures = 0;

// Prints the device, or exits 77 (ctest's "skipped") when there is none.
inline void require_device() {
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0) {
    std::printf("SKIPPED: no CUDA device (%s)\n",
                e != cudaSuccess ? cudaGetErrorString(e) : "none found");
    std::exit(77);
  }
  cudaDeviceProp prop{};
  CUDA_OK(cudaGetDeviceProperties(&prop, 0));
  std::printf("device: %s (sm_%d%d, %d SMs, %.1f GiB)\n", prop.name, prop.major, prop.minor,
              prop.multiProcessorCount, prop.totalGlobalMem / 1073741824.0);
}

inline std::vector<float> randn(size_t n, unsigned seed, float scale = 1.f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.f, scale);
  std::vector<float> v(n);
  for (auto &x : v) x = d(rng);
  return v;
}

inline std::vector<int32_t> random_ids(size_t n, int below, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> d(0, below - 1);
  std::vector<int32_t> v(n);
  for (auto &x : v) x = d(rng);
  return v;
}

// A device array of n elements of T, poisoned with all-ones bits (NaN for floats).
template <class T>
struct DevArray {
  T *p = nullptr;
  size_t n = 0;
  explicit DevArray(size_t n_) : n(n_) {
    CUDA_OK(cudaMalloc(&p, n * sizeof(T) + 16));
    CUDA_OK(cudaMemset(p, 0xff, n * sizeof(T)));
  }
  explicit DevArray(const std::vector<T> &v) : DevArray(v.size()) {
    CUDA_OK(cudaMemcpy(p, v.data(), n * sizeof(T), cudaMemcpyHostToDevice));
  }
  ~DevArray() { cudaFree(p); }
  DevArray(const DevArray &) = delete;
  DevArray &operator=(const DevArray &) = delete;
  std::vector<T> get() const {
    std::vector<T> v(n);
    CUDA_OK(cudaMemcpy(v.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost));
    return v;
  }
};
using Dev = DevArray<float>;
using DevI = DevArray<int32_t>;

// Passes where |gpu - ref| <= atol + rtol * |ref| everywhere (NaN fails).
inline void compare(const char *what, const std::vector<float> &gpu, const std::vector<float> &ref,
                    float atol, float rtol) {
  double worst = 0;
  size_t bad = 0, at = 0;
  for (size_t i = 0; i < ref.size(); i++) {
    double d = std::fabs((double)gpu[i] - ref[i]);
    if (!(d <= atol + rtol * std::fabs(ref[i]))) {
      if (!bad) at = i;
      bad++;
    }
    if (d > worst || std::isnan(d)) worst = d;
  }
  std::printf("%-48s max abs err %.3g %s\n", what, worst, bad ? "FAIL" : "ok");
  if (bad) {
    std::printf("  %zu of %zu elements out of tolerance; first at %zu: gpu %g ref %g\n", bad,
                ref.size(), at, gpu[at], ref[at]);
    failures++;
  }
}

// Passes where |gpu - ref| <= bound[i] everywhere (NaN fails): for results whose
// error scales with their terms rather than with themselves.
inline void compare_bound(const char *what, const std::vector<float> &gpu,
                          const std::vector<float> &ref, const std::vector<float> &bound) {
  double worst = 0;
  size_t bad = 0, at = 0;
  for (size_t i = 0; i < ref.size(); i++) {
    const double d = std::fabs((double)gpu[i] - ref[i]);
    if (!(d <= bound[i])) {
      if (!bad) at = i;
      bad++;
    }
    if (bound[i] > 0 && (d / bound[i] > worst || std::isnan(d))) worst = d / bound[i];
  }
  std::printf("%-48s max err/bound %.3g %s\n", what, worst, bad ? "FAIL" : "ok");
  if (bad) {
    std::printf("  %zu of %zu elements out of bound; first at %zu: gpu %g ref %g bound %g\n", bad,
                ref.size(), at, gpu[at], ref[at], bound[at]);
    failures++;
  }
}

}  // namespace gpu_test
