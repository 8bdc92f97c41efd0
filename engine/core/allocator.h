// Host memory for tensors: 64-byte aligned (AVX-512 lines), counted so that a
// run can report its current and peak bytes per rank.
#pragma once
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace ptdp {

class CpuAllocator {
 public:
  static CpuAllocator &instance();
  // Zeroed, `alignment`-byte aligned (a power of two >= 64); throws out_of_memory.
  void *allocate(size_t bytes, size_t alignment = 64);
  void deallocate(void *p, size_t bytes);
  int64_t bytes_in_use() const;
  int64_t peak_bytes() const;
  void reset_peak();
};

// An owning, aligned, zero-initialised array of T. Moveable, not copyable.
template <class T>
class Buffer {
 public:
  Buffer() = default;
  explicit Buffer(size_t n) { resize(n); }
  ~Buffer() { release(); }
  Buffer(const Buffer &) = delete;
  Buffer &operator=(const Buffer &) = delete;
  Buffer(Buffer &&o) noexcept : p_(std::exchange(o.p_, nullptr)), n_(std::exchange(o.n_, 0)) {}
  Buffer &operator=(Buffer &&o) noexcept {
    if (this != &o) {
      release();
      p_ = std::exchange(o.p_, nullptr);
      n_ = std::exchange(o.n_, 0);
    }
    return *this;
  }
  // Reallocates (and zeroes) only when the size changes.
  void resize(size_t n) {
    if (n == n_) return;
    release();
    if (n) p_ = static_cast<T *>(CpuAllocator::instance().allocate(n * sizeof(T)));
    n_ = n;
  }
  T *data() { return p_; }
  const T *data() const { return p_; }
  size_t size() const { return n_; }
  T &operator[](size_t i) { return p_[i]; }
  const T &operator[](size_t i) const { return p_[i]; }

 private:
  void release() {
    if (p_) CpuAllocator::instance().deallocate(p_, n_ * sizeof(T));
    p_ = nullptr;
    n_ = 0;
  }
  T *p_ = nullptr;
  size_t n_ = 0;
};

}  // namespace ptdp
