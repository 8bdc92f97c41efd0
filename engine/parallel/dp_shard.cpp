#include "engine/parallel/dp_shard.h"

#include <algorithm>

namespace ptdp {

DpShardComm::DpShardComm(Device &dev, Communicator &dp, DpShard shard)
    : dev_(dev), dp_(dp), shard_(shard) {
  full_.resize(dev, shard.size * (size_t)dp.size());
  part_.resize(dev, shard.size);
}

void DpShardComm::reduce_scatter(float *grads) {
  // Through d S floats: the last shard may be short (its tail stays zero).
  dev_.copy(full_.data(), grads, shard_.n * sizeof(float));
  dp_.reduce_scatter(full_.data(), part_.data(), shard_.size, DType::f32);
  const size_t own = shard_.hi - shard_.lo;
  if (own) dev_.copy(grads + shard_.lo, part_.data(), own * sizeof(float));
}

void DpShardComm::gather(const float *mine) {
  const size_t own = shard_.hi - shard_.lo;  // 0 for a rank past the end
  if (own) dev_.copy(part_.data(), mine, own * sizeof(float));
  dp_.all_gather(part_.data(), full_.data(), shard_.size, DType::f32);
}

void DpShardComm::all_gather(float *x, const float *mine) {
  gather(mine ? mine : x + shard_.lo);
  dev_.copy(x, full_.data(), shard_.n * sizeof(float));
}

void DpShardComm::gather_to_host(const float *mine, float *host) {
  gather(mine);
  dev_.copy_to_host(host, full_.data(), shard_.n * sizeof(float));
}

}  // namespace ptdp
