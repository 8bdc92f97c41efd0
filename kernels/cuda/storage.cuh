// Storage types of the CUDA kernels: float, __nv_bfloat16 and __half. Kernels
// load to fp32, compute in fp32 and round each stored value once to nearest
// even (ARCHITECTURE §3), as the CPU's emulated 16-bit path does.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "engine/core/status.h"

namespace ptdp::cuda {

__device__ __forceinline__ float to_f32(float x) { return x; }
__device__ __forceinline__ float to_f32(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float to_f32(__half x) { return __half2float(x); }

template <class T>
__device__ __forceinline__ T from_f32(float x);
template <>
__device__ __forceinline__ float from_f32<float>(float x) { return x; }
template <>
__device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }
template <>
__device__ __forceinline__ __half from_f32<__half>(float x) { return __float2half_rn(x); }

// x rounded to the nearest value of T, held in a float (float: x itself): the
// emulated storage of a 16-bit run on fp32 arrays, as dtype.h's round_to.
template <class T>
__device__ __forceinline__ float round_as(float x) {
  return to_f32(from_f32<T>(x));
}

// W elements of T loaded or stored as one access: 16 bytes when W = kVec<T>.
template <class T, int W>
struct alignas(sizeof(T) * W) Vec {
  T v[W];
};
template <class T>
constexpr int kVec = 16 / sizeof(T);

inline bool aligned16(const void *p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// Butterfly: every lane ends with the same sum.
__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// For kernels that hold a row in registers, kPacks packs of kVec<T> values per
// lane: launches launch(integral_constant<kPacks>) with the smallest kPacks in
// {1, 2, 4, ...} >= per_lane, up to kMaxValues values per lane.
template <class T, int kMaxValues, int kPacks = 1, class Launch>
void with_packs(int per_lane, Launch launch) {
  if constexpr (2 * kPacks * kVec<T> <= kMaxValues)
    if (per_lane > kPacks) return with_packs<T, kMaxValues, 2 * kPacks>(per_lane, launch);
  launch(std::integral_constant<int, kPacks>{});
}

// A failed CUDA call or kernel launch as a ptdp::Error naming what failed.
inline void check(cudaError_t e, const char *what) {
  if (e == cudaSuccess) return;
  fail(e == cudaErrorMemoryAllocation ? Status::out_of_memory : Status::internal, what,
       " failed: ", cudaGetErrorString(e));
}
inline void check_launch(const char *what) {
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) fail(Status::internal, what, " kernel launch failed: ", cudaGetErrorString(e));
}

// The memory pool StreamScratch draws from on this thread: the rank's device
// pool, set with the current GPU whenever a CudaDevice binds its GPU to a
// thread, so scratch counts in that device's reserved memory and is kept
// between steps instead of trimmed at every synchronization. Used only while
// that GPU is still the thread's current one; otherwise (and for kernels
// called without a Device, as the op tests call them) the current GPU's
// default pool.
struct ScratchPool {
  cudaMemPool_t pool = nullptr;
  int device = -1;  // the GPU the pool is on
};
inline thread_local ScratchPool scratch_pool;

// Scratch memory from scratch_pool, stream-ordered, freed on the stream when
// it goes out of scope: also when a launch check after it throws.
class StreamScratch {
 public:
  StreamScratch(size_t bytes, cudaStream_t stream, const char *what) : stream_(stream) {
    int current = -1;
    const bool own = scratch_pool.pool && cudaGetDevice(&current) == cudaSuccess &&
                     current == scratch_pool.device;
    check(own ? cudaMallocFromPoolAsync(&p_, bytes, scratch_pool.pool, stream)
              : cudaMallocAsync(&p_, bytes, stream),
          what);
  }
  ~StreamScratch() {
    if (p_) cudaFreeAsync(p_, stream_);  // stream-ordered: after the kernels queued before
  }
  StreamScratch(const StreamScratch &) = delete;
  StreamScratch &operator=(const StreamScratch &) = delete;
  template <class T>
  T *as() const {
    return static_cast<T *>(p_);
  }

 private:
  void *p_ = nullptr;
  cudaStream_t stream_;
};

// A grid-stride loop's grid: enough blocks to cover n, at most 8 per SM's worth.
inline int grid_for(size_t n, int threads) {
  return (int)std::max<size_t>(1, std::min<size_t>((n + threads - 1) / threads, 132 * 16));
}

}  // namespace ptdp::cuda

// Explicit instantiations for the three storage types: X(float) X(__nv_bfloat16) X(__half).
#define PTDP_CUDA_STORAGE_TYPES(X) X(float) X(__nv_bfloat16) X(__half)
