#include "engine/parallel/tensor_parallel.h"

namespace ptdp {

template <class T>
void tp_all_reduce(const TensorParallel &tp, Ops<T> &ops, DeviceArray<T> &staging, Act buf,
                   size_t n) {
  if (tp.size == 1) return;
  if (buf.t == dtype_of<T>()) {
    tp.comm->all_reduce(static_cast<T *>(buf.p), n);
    return;
  }
  if (staging.size() < n) staging.resize(ops.device(), n);
  ops.convert(staging.data(), buf, n);
  tp.comm->all_reduce(staging.data(), n);
  ops.convert(buf, staging.data(), n);
}

template void tp_all_reduce<float>(const TensorParallel &, Ops<float> &, DeviceArray<float> &, Act,
                                   size_t);
template void tp_all_reduce<double>(const TensorParallel &, Ops<double> &, DeviceArray<double> &,
                                    Act, size_t);

}  // namespace ptdp
