// Tensor parallelism's communication (Megatron-Core's tensor_parallel
// mappings), in one place: g, the all-reduce that sums a row-parallel layer's
// partial outputs (and f's backward, a column-parallel layer's input
// gradient), in any activation type; and the vocab-parallel cross-entropy's
// all-reduces of its statistics. It needs only the communicator, the device
// and the op table, so the model's layers call it (it sits below engine/model).
#pragma once
#include <cstddef>

#include "engine/comm/communicator.h"
#include "engine/device/device.h"
#include "engine/device/ops.h"

namespace ptdp {

// This rank's place among the t tensor ranks, and their communicator (none when t = 1).
struct TensorParallel {
  int rank = 0, size = 1;
  Communicator *comm = nullptr;
};

// Sums buf [n] over the tensor ranks in place. 16-bit values are summed in T
// in the communicator's order and rounded once, as a 16-bit all-reduce of
// every backend does, through `staging` (grown to n), without the host round
// trip NCCL's would take (nccl_comm.h). Nothing to do when t = 1.
template <class T>
void tp_all_reduce(const TensorParallel &tp, Ops<T> &ops, DeviceArray<T> &staging, Act buf,
                   size_t n);

// Sequence parallelism's pair (Korthikanti et al.): full [t n] = every
// rank's local [n] in rank order (an all-gather along the sequence: exact in
// any type); and local [n] = this rank's part of the sum over ranks of full
// [t n] (a reduce-scatter: summed in T in the communicator's member order and
// rounded once, so each element equals tp_all_reduce's). Nothing to do (a
// copy) when t = 1.
template <class T>
void tp_all_gather(const TensorParallel &tp, Ops<T> &ops, CAct local, Act full, size_t n);
template <class T>
void tp_reduce_scatter(const TensorParallel &tp, Ops<T> &ops, DeviceArray<T> &staging, CAct full,
                       Act local, size_t n);

// The vocab-parallel statistics [n] in T: each rank's row maxima (max), then
// its sums of exponentials and target logits (sum).
template <class T>
void tp_all_reduce_max(const TensorParallel &tp, T *x, size_t n) {
  if (tp.size > 1) tp.comm->all_reduce(x, n, ReduceOp::max);
}
template <class T>
void tp_all_reduce_sum(const TensorParallel &tp, T *x, size_t n) {
  if (tp.size > 1) tp.comm->all_reduce(x, n);
}

}  // namespace ptdp
