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

template <class T>
void tp_all_gather(const TensorParallel &tp, Ops<T> &ops, CAct local, Act full, size_t n) {
  if (tp.size == 1) {
    ops.device().copy(full.p, local.p, n * dtype_size(local.t));
    return;
  }
  tp.comm->all_gather(local.p, full.p, n, local.t);
}

template <class T>
void tp_reduce_scatter(const TensorParallel &tp, Ops<T> &ops, DeviceArray<T> &staging, CAct full,
                       Act local, size_t n) {
  const size_t all = n * (size_t)tp.size;
  if (tp.size == 1) {
    ops.device().copy(local.p, full.p, n * dtype_size(full.t));
    return;
  }
  if (full.t == dtype_of<T>()) {
    tp.comm->reduce_scatter(full.p, local.p, n, full.t);
    return;
  }
  // In T: [t n] converted, then the sum of this rank's part into its tail.
  if (staging.size() < all + n) staging.resize(ops.device(), all + n);
  ops.convert(staging.data(), full, all);
  tp.comm->reduce_scatter(staging.data(), staging.data() + all, n, dtype_of<T>());
  ops.convert(local, staging.data() + all, n);
}

template void tp_all_gather<float>(const TensorParallel &, Ops<float> &, CAct, Act, size_t);
template void tp_all_gather<double>(const TensorParallel &, Ops<double> &, CAct, Act, size_t);
template void tp_reduce_scatter<float>(const TensorParallel &, Ops<float> &, DeviceArray<float> &,
                                       CAct, Act, size_t);
template void tp_reduce_scatter<double>(const TensorParallel &, Ops<double> &,
                                        DeviceArray<double> &, CAct, Act, size_t);
template void tp_all_reduce<float>(const TensorParallel &, Ops<float> &, DeviceArray<float> &, Act,
                                   size_t);
template void tp_all_reduce<double>(const TensorParallel &, Ops<double> &, DeviceArray<double> &,
                                    Act, size_t);

}  // namespace ptdp
