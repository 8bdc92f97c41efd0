// An owning device array whose element type is chosen at run time: the
// model's activations, in the op table's act_type() (ops.h). A DeviceArray of
// bytes with its DType; data() gives typed pointers for the ops.
#pragma once
#include <cstddef>

#include "engine/core/dtype.h"
#include "engine/device/device.h"
#include "engine/device/ops.h"

namespace ptdp {

class ActArray {
 public:
  // n elements of t on dev, zeroed when the byte size or the device changes
  // (DeviceArray::resize: the same size keeps the memory and its contents).
  void resize(Device &dev, size_t n, DType t) {
    bytes_.resize(dev, n * dtype_size(t));
    n_ = n;
    t_ = t;
  }
  Act data() { return {bytes_.data(), t_}; }
  CAct data() const { return {bytes_.data(), t_}; }
  size_t size() const { return n_; }
  size_t bytes() const { return bytes_.bytes(); }
  DType dtype() const { return t_; }

 private:
  DeviceArray<unsigned char> bytes_;
  size_t n_ = 0;
  DType t_ = DType::f32;
};

}  // namespace ptdp
