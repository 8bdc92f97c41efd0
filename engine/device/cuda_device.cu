// The CUDA device: one stream per rank, memory from a stream-ordered pool that
// keeps freed blocks (release threshold: never), so the per-micro-batch
// allocations are served from the cache; CUDA events for timings.
#include <cuda_runtime.h>

#include <cstdint>

#include "engine/core/status.h"
#include "engine/device/device.h"
#include "engine/device/memory_ledger.h"
#include "kernels/cuda/storage.cuh"

namespace ptdp {

namespace {

std::string gib(int64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f GiB", bytes / 1073741824.0);
  return buf;
}

void check(cudaError_t e, const std::string &where, const char *call) {
  if (e == cudaSuccess) return;
  cudaGetLastError();  // clear a non-sticky error so later calls are not blamed
  fail(e == cudaErrorMemoryAllocation ? Status::out_of_memory : Status::internal, where, ": ", call,
       " failed: ", cudaGetErrorName(e), " (", cudaGetErrorString(e), ")");
}

class CudaTimer : public DeviceTimer {
 public:
  CudaTimer(cudaStream_t s, std::string where) : stream_(s), where_(std::move(where)) {
    check(cudaEventCreate(&a_), where_, "cudaEventCreate");
    check(cudaEventCreate(&b_), where_, "cudaEventCreate");
  }
  ~CudaTimer() override {
    cudaEventDestroy(a_);
    cudaEventDestroy(b_);
  }
  void start() override { check(cudaEventRecord(a_, stream_), where_, "cudaEventRecord"), started_ = true; }
  void stop() override { check(cudaEventRecord(b_, stream_), where_, "cudaEventRecord"), stopped_ = started_; }
  double elapsed_ms() override {
    if (!stopped_) fail(Status::wrong_state, "DeviceTimer::elapsed_ms before start and stop");
    check(cudaEventSynchronize(b_), where_, "cudaEventSynchronize");
    float ms = 0;
    check(cudaEventElapsedTime(&ms, a_, b_), where_, "cudaEventElapsedTime");
    return ms;
  }
  double ms_since(DeviceTimer &earlier) override {
    auto *e = dynamic_cast<CudaTimer *>(&earlier);
    if (!e || !started_ || !e->started_)
      fail(Status::wrong_state, "DeviceTimer::ms_since needs two started timers of one device");
    check(cudaEventSynchronize(a_), where_, "cudaEventSynchronize");
    float ms = 0;
    check(cudaEventElapsedTime(&ms, e->a_, a_), where_, "cudaEventElapsedTime");
    return ms;
  }

 private:
  cudaStream_t stream_;
  std::string where_;
  cudaEvent_t a_ = nullptr, b_ = nullptr;
  bool started_ = false, stopped_ = false;
};

class CudaDevice : public Device {
 public:
  explicit CudaDevice(int ordinal) : ordinal_(ordinal) {
    where_ = "cuda:" + std::to_string(ordinal);
    cudaDeviceProp prop{};
    check(cudaGetDeviceProperties(&prop, ordinal), where_, "cudaGetDeviceProperties");
    name_ = where_ + " (" + prop.name + ")";
    char bus[32] = {};
    check(cudaDeviceGetPCIBusId(bus, sizeof bus, ordinal), where_, "cudaDeviceGetPCIBusId");
    hardware_id_ = bus;
    use();
    check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), where_, "cudaStreamCreate");
    cudaMemPoolProps props{};
    props.allocType = cudaMemAllocationTypePinned;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = ordinal;
    check(cudaMemPoolCreate(&pool_, &props), where_, "cudaMemPoolCreate");
    uint64_t keep_all = UINT64_MAX;
    check(cudaMemPoolSetAttribute(pool_, cudaMemPoolAttrReleaseThreshold, &keep_all), where_,
          "cudaMemPoolSetAttribute(ReleaseThreshold)");
    use();  // again, now that the pool exists: the kernels' scratch comes from it
  }
  ~CudaDevice() override {
    cudaSetDevice(ordinal_);
    cuda::scratch_pool = {};  // this thread's kernels no longer draw from pool_
    cudaStreamSynchronize(stream_);
    ledger_.for_each_live([&](void *p) { cudaFreeAsync(p, stream_); });
    cudaStreamSynchronize(stream_);
    cudaMemPoolDestroy(pool_);
    cudaStreamDestroy(stream_);
  }

  DeviceKind kind() const override { return DeviceKind::cuda; }
  std::string name() const override { return name_; }
  std::string hardware_id() const override { return hardware_id_; }

  void *allocate(size_t bytes) override {
    if (bytes == 0) return nullptr;
    use();
    void *p = nullptr;
    const cudaError_t e = cudaMallocFromPoolAsync(&p, bytes, pool_, stream_);
    if (e != cudaSuccess) {
      cudaGetLastError();
      size_t free_b = 0, total_b = 0;
      cudaMemGetInfo(&free_b, &total_b);
      const MemoryStats st = ledger_.stats();
      fail(e == cudaErrorMemoryAllocation ? Status::out_of_memory : Status::internal, where_,
           ": cannot allocate ", bytes, " bytes = ", gib((int64_t)bytes), " (", cudaGetErrorString(e),
           "; ptdp has ", gib(st.in_use), " in use, peak ", gib(st.peak), "; the GPU has ",
           gib((int64_t)free_b), " free of ", gib((int64_t)total_b), ")");
    }
    ledger_.add(p, bytes);
    return p;
  }
  void free(void *p) override {
    if (!p) return;
    ledger_.remove(p, where_);
    use();
    check(cudaFreeAsync(p, stream_), where_, "cudaFreeAsync");
  }
  void zero(void *p, size_t bytes) override {
    if (!bytes) return;
    use();
    check(cudaMemsetAsync(p, 0, bytes, stream_), where_, "cudaMemsetAsync");
  }
  // Portable page-locked memory: any GPU's DMA reads and writes it directly.
  void *allocate_host(size_t bytes) override {
    if (bytes == 0) return nullptr;
    use();
    void *p = nullptr;
    const cudaError_t e = cudaHostAlloc(&p, bytes, cudaHostAllocPortable);
    if (e != cudaSuccess) {
      cudaGetLastError();
      fail(Status::out_of_memory, where_, ": cannot allocate ", bytes,
           " bytes of page-locked host memory (", cudaGetErrorString(e), ")");
    }
    return p;
  }
  void free_host(void *p) override {
    if (p) cudaFreeHost(p);
  }
  // Both copies wait for the stream, so the host buffer (pageable or
  // page-locked) may be reused when they return.
  void copy_from_host(void *dst, const void *host, size_t bytes) override {
    if (!bytes) return;
    use();
    check(cudaMemcpyAsync(dst, host, bytes, cudaMemcpyHostToDevice, stream_), where_,
          "cudaMemcpyAsync(host to device)");
    check(cudaStreamSynchronize(stream_), where_, "cudaStreamSynchronize");
  }
  void copy_to_host(void *host, const void *src, size_t bytes) override {
    if (!bytes) return;
    use();
    check(cudaMemcpyAsync(host, src, bytes, cudaMemcpyDeviceToHost, stream_), where_,
          "cudaMemcpyAsync(device to host)");
    check(cudaStreamSynchronize(stream_), where_, "cudaStreamSynchronize");
  }
  void copy(void *dst, const void *src, size_t bytes) override {
    if (!bytes) return;
    use();
    check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_), where_,
          "cudaMemcpyAsync(device to device)");
  }
  void synchronize() override {
    use();
    check(cudaStreamSynchronize(stream_), where_, "cudaStreamSynchronize");
  }
  void bind_thread() override { use(); }
  std::unique_ptr<DeviceTimer> make_timer() override {
    use();
    return std::make_unique<CudaTimer>(stream_, where_);
  }
  void *stream() const override { return stream_; }
  MemoryStats memory() const override {
    MemoryStats s = ledger_.stats();
    uint64_t reserved = 0;
    if (cudaMemPoolGetAttribute(pool_, cudaMemPoolAttrReservedMemCurrent, &reserved) == cudaSuccess)
      s.reserved = (int64_t)reserved;
    return s;
  }
  void reset_peak() override { ledger_.reset_peak(); }

 private:
  // Ranks are threads that may share a GPU or use different ones: every entry
  // point makes this rank's GPU current on the calling thread, and its pool
  // the one the kernels' scratch comes from.
  void use() {
    check(cudaSetDevice(ordinal_), where_, "cudaSetDevice");
    cuda::scratch_pool = {pool_, ordinal_};
  }

  int ordinal_;
  std::string hardware_id_;
  std::string where_, name_;
  cudaStream_t stream_ = nullptr;
  cudaMemPool_t pool_ = nullptr;
  MemoryLedger ledger_;
};

}  // namespace

int cuda_device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
}

std::unique_ptr<Device> make_cuda_device(int ordinal) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    cudaGetLastError();
    fail(Status::invalid_config, "device 'cuda:", ordinal, "' asked for, but no GPU can be used: ",
         cudaGetErrorString(e), " (use --device cpu)");
  }
  if (n == 0)
    fail(Status::invalid_config, "device 'cuda:", ordinal, "' asked for, but no GPU is visible (use --device cpu)");
  if (ordinal < 0 || ordinal >= n)
    fail(Status::bad_value, "device cuda:", ordinal, " does not exist (", n, " GPU",
         n == 1 ? "" : "s", " visible: cuda:0 .. cuda:", n - 1, ")");
  return std::make_unique<CudaDevice>(ordinal);
}

}  // namespace ptdp
