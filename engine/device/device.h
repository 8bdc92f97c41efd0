// A rank's device (ARCHITECTURE §2): its memory, one in-order stream of work,
// timers for op timings, and memory statistics. The CPU device does every call
// at once on the calling thread; the CUDA device queues work on its stream and
// caches freed memory in a stream-ordered pool, so activations resized every
// micro-batch never reach cudaMalloc twice.
//
// Device memory is reached only through these calls: DeviceArray has no
// element access, so host code cannot read a device tensor by accident.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace ptdp {

enum class DeviceKind : uint8_t { cpu, cuda };

struct MemoryStats {
  int64_t in_use = 0;       // bytes allocated and not yet freed
  int64_t peak = 0;         // most bytes in use at once since the last reset_peak
  int64_t reserved = 0;     // bytes the device holds, cached free memory included
  int64_t allocations = 0;  // calls to allocate
};

// Times work on a device's stream: the span from start() to stop().
class DeviceTimer {
 public:
  virtual ~DeviceTimer() = default;
  virtual void start() = 0;
  virtual void stop() = 0;
  // Milliseconds between start and stop; waits for the stop to be reached.
  virtual double elapsed_ms() = 0;
  // Milliseconds from `earlier`'s start to this timer's start (both started on
  // the same device): where a span sits on the device's own time line. Waits
  // for both starts to be reached.
  virtual double ms_since(DeviceTimer &earlier) = 0;
};

class Device {
 public:
  virtual ~Device() = default;
  virtual DeviceKind kind() const = 0;
  // "cpu", "cuda:0 (NVIDIA H100 80GB HBM3)".
  virtual std::string name() const = 0;
  // The hardware, the same whatever a process's numbering: "cpu", or a GPU's
  // PCI bus id ("0000:1b:00.0"). Together with the host name it tells whether
  // ranks of different processes share a GPU.
  virtual std::string hardware_id() const = 0;

  // 256-byte aligned; 0 bytes gives nullptr. Throws Error(out_of_memory) naming
  // the size asked for and what is in use.
  virtual void *allocate(size_t bytes) = 0;
  // Stream-ordered: the memory may be reused by work queued after this call.
  virtual void free(void *p) = 0;
  virtual void zero(void *p, size_t bytes) = 0;
  // Host memory that copies to and from this device are fastest with (page-
  // locked on CUDA: the DMA reads it directly; ordinary memory on the CPU), for
  // staging buffers. Not counted in memory(). 0 bytes gives nullptr.
  virtual void *allocate_host(size_t bytes) = 0;
  virtual void free_host(void *p) = 0;
  // Returns when `host` may be reused (the copy itself may still be queued).
  virtual void copy_from_host(void *dst, const void *host, size_t bytes) = 0;
  // Returns when the bytes are in `host` (waits for the work queued before).
  virtual void copy_to_host(void *host, const void *src, size_t bytes) = 0;
  virtual void copy(void *dst, const void *src, size_t bytes) = 0;  // device to device
  // Waits for all queued work; reports an asynchronous failure as an Error.
  virtual void synchronize() = 0;
  // Readies the calling thread to queue work here; a rank's worker thread
  // calls it first. CUDA: makes this GPU the thread's current device (ranks on
  // different GPUs in one process). CPU: flushes denormals to zero on the
  // thread and its OpenMP team (tiny attention probabilities and gradients
  // otherwise drop the kernels onto the slow microcode path).
  virtual void bind_thread() = 0;

  virtual std::unique_ptr<DeviceTimer> make_timer() = 0;
  // The stream work is queued on: cudaStream_t on CUDA, nullptr on the CPU.
  virtual void *stream() const = 0;

  virtual MemoryStats memory() const = 0;
  virtual void reset_peak() = 0;
};

// A reusable staging buffer in `dev`'s host memory (allocate_host): grows to
// the largest size reserved, never shrinks. The device must outlive it.
class HostStage {
 public:
  explicit HostStage(Device &dev) : dev_(dev) {}
  ~HostStage() { dev_.free_host(p_); }
  HostStage(const HostStage &) = delete;
  HostStage &operator=(const HostStage &) = delete;
  // At least `bytes` bytes; earlier contents are lost when it grows.
  char *reserve(size_t bytes) {
    if (bytes > capacity_) {
      dev_.free_host(p_);
      p_ = nullptr;
      capacity_ = 0;
      p_ = static_cast<char *>(dev_.allocate_host(bytes));
      capacity_ = bytes;
    }
    return p_;
  }
  char *data() const { return p_; }

 private:
  Device &dev_;
  char *p_ = nullptr;
  size_t capacity_ = 0;
};

std::unique_ptr<Device> make_cpu_device();
// `ordinal` of the visible GPUs. Throws when ptdp was built without CUDA, no GPU
// is visible, or the ordinal is out of range.
std::unique_ptr<Device> make_cuda_device(int ordinal);
// "cpu", "cuda" (rank r gets GPU r mod count: several ranks may share one GPU,
// each with its own stream), "cuda:N", or "auto" (cuda when a GPU is visible,
// else cpu). Anything else is an error naming the choices.
std::unique_ptr<Device> make_device(const std::string &spec, int rank);
// A --device value's check, needing no device: N of "cuda:N", else -1 for
// auto, cpu and cuda; Error(bad_value) naming the allowed values otherwise.
int cuda_ordinal(const std::string &spec);
// Number of visible CUDA devices; 0 without CUDA or without a GPU.
int cuda_device_count();

// An owning array of n elements of T in a device's memory, with no element
// access: data() is a device pointer for kernels, and values move only by the
// explicit copies below. Moveable, not copyable.
template <class T>
class DeviceArray {
 public:
  DeviceArray() = default;
  DeviceArray(Device &dev, size_t n) : dev_(&dev), n_(n) {
    p_ = static_cast<T *>(dev.allocate(n * sizeof(T)));
  }
  ~DeviceArray() { release(); }
  DeviceArray(const DeviceArray &) = delete;
  DeviceArray &operator=(const DeviceArray &) = delete;
  DeviceArray(DeviceArray &&o) noexcept
      : dev_(o.dev_), p_(std::exchange(o.p_, nullptr)), n_(std::exchange(o.n_, 0)) {}
  DeviceArray &operator=(DeviceArray &&o) noexcept {
    if (this != &o) {
      release();
      dev_ = o.dev_;
      p_ = std::exchange(o.p_, nullptr);
      n_ = std::exchange(o.n_, 0);
    }
    return *this;
  }

  // Reallocates on `dev`, zeroed, when the size or the device changes (the
  // model sizes its activations per micro-batch; same sizes keep the memory).
  void resize(Device &dev, size_t n) {
    if (n == n_ && &dev == dev_) return;
    release();
    dev_ = &dev;
    n_ = n;
    p_ = static_cast<T *>(dev.allocate(n * sizeof(T)));
    dev.zero(p_, bytes());
  }

  T *data() { return p_; }
  const T *data() const { return p_; }
  size_t size() const { return n_; }
  size_t bytes() const { return n_ * sizeof(T); }

  void zero() { dev_->zero(p_, bytes()); }
  void copy_from_host(const std::vector<T> &v) {
    check_size(v.size());
    dev_->copy_from_host(p_, v.data(), bytes());
  }
  std::vector<T> to_host() const {
    std::vector<T> v(n_);
    dev_->copy_to_host(v.data(), p_, bytes());
    return v;
  }

 private:
  void check_size(size_t n) const;
  void release() {
    if (p_) dev_->free(p_);
    p_ = nullptr;
    n_ = 0;
  }
  Device *dev_ = nullptr;
  T *p_ = nullptr;
  size_t n_ = 0;
};

void device_array_size_mismatch(size_t have, size_t given);  // throws invalid_argument
template <class T>
void DeviceArray<T>::check_size(size_t n) const {
  if (n != n_) device_array_size_mismatch(n_, n);
}

}  // namespace ptdp
