// Helpers of the GPU tests and benchmarks: device buffers poisoned with NaN,
// fresh random inputs, an element-wise comparison, and the skip (exit 77) when
// no usable device is present. Header-only: these programs link only the CUDA
// runtime, cuBLASLt and the CPU kernels they compare against.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <type_traits>
#include <random>
#include <string>
#include <vector>

#include "engine/core/dtype.h"

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

// ---- 16-bit storage on the host: the bits of ptdp's own round-to-nearest-even,
// so a reference built from these values sees exactly what the kernel reads.
template <class T>
constexpr ptdp::DType dtype_of() {
  return std::is_same_v<T, __nv_bfloat16> ? ptdp::DType::bf16
         : std::is_same_v<T, __half>      ? ptdp::DType::f16
                                          : ptdp::DType::f32;
}
template <class T>
T to_storage(float x) {
  if constexpr (std::is_same_v<T, float>) {
    return x;
  } else {
    const uint16_t bits = std::is_same_v<T, __nv_bfloat16> ? ptdp::float_to_bf16(x) : ptdp::float_to_f16(x);
    T t;
    std::memcpy(static_cast<void *>(&t), &bits, 2);
    return t;
  }
}
template <class T>
float from_storage(T t) {
  if constexpr (std::is_same_v<T, float>) {
    return t;
  } else {
    uint16_t bits;
    std::memcpy(&bits, static_cast<const void *>(&t), 2);
    return std::is_same_v<T, __nv_bfloat16> ? ptdp::bf16_to_float(bits) : ptdp::f16_to_float(bits);
  }
}
// v rounded to T in place; returns the T values.
template <class T>
std::vector<T> round_host(std::vector<float> &v) {
  std::vector<T> t(v.size());
  for (size_t i = 0; i < v.size(); i++) t[i] = to_storage<T>(v[i]), v[i] = from_storage(t[i]);
  return t;
}
// v rounded to T (in place) and the device copy of it.
template <class T>
DevArray<T> upload_rounded(std::vector<float> &v) {
  return DevArray<T>(round_host<T>(v));
}
template <class T>
std::vector<float> download(const DevArray<T> &d) {
  const auto t = d.get();
  std::vector<float> v(t.size());
  for (size_t i = 0; i < t.size(); i++) v[i] = from_storage(t[i]);
  return v;
}
// The largest relative error of one rounding of an fp32 value to T (half an
// ulp, relative): 2^-8 for bf16, 2^-11 for fp16, 0 for float.
template <class T>
constexpr float storage_eps() {
  return std::is_same_v<T, __nv_bfloat16> ? 1.f / 256 : std::is_same_v<T, __half> ? 1.f / 2048 : 0.f;
}
// Half an fp16 subnormal ulp (2^-25): the absolute rounding error below 2^-14,
// where the relative storage_eps<T>() does not hold. 0 for float and bf16.
template <class T>
constexpr float storage_tiny() {
  return std::is_same_v<T, __half> ? 0x1p-25f : 0.f;
}
template <class T>
const char *type_name() {
  return ptdp::dtype_name(dtype_of<T>());
}

// A check's name: "op type shape what".
template <class T>
std::string label(const char *op, const std::string &shape, const char *what) {
  return std::string(op) + " " + type_name<T>() + " " + shape + " " + what;
}

// Passes where |gpu - ref| <= atol + rtol * |ref| everywhere (NaN fails).
inline void compare(const char *what, const std::vector<float> &gpu, const std::vector<float> &ref,
                    float atol, float rtol) {
  double worst = 0;
  size_t bad = 0, at = 0;
  for (size_t i = 0; i < ref.size(); i++) {
    // Equal values pass (infinities too); NaN never does.
    const double d = gpu[i] == ref[i] ? 0.0 : std::fabs((double)gpu[i] - ref[i]);
    if (gpu[i] != ref[i] && !(d <= atol + rtol * std::fabs(ref[i]))) {
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

// The last line of every GPU test, and its exit code.
inline int finish() {
  std::printf("%d checks failed\n", failures);
  return failures ? 1 : 0;
}

}  // namespace gpu_test
