#include "engine/parallel/grad_sync.h"

#include <algorithm>

namespace ptdp {

void sync_gradients(GPT<float> &model, Communicator *embedding, Communicator *dp, size_t bucket) {
  float *grads = model.grads();
  // The tied embedding: the first stage's lookup gradient and the last
  // stage's LM-head gradient add up to the serial one.
  if (embedding) {
    const ParamInfo &wte = model.param("wte.weight");
    embedding->all_reduce(grads + wte.offset, wte.numel);
  }
  // Data parallel: one gradient reduction, in buckets (ready to overlap with
  // the backward once buckets are reduced as they fill).
  if (dp && dp->size() > 1) {
    const size_t n = model.num_params();
    for (size_t off = 0; off < n; off += bucket)
      dp->all_reduce(grads + off, std::min(bucket, n - off));
  }
}

}  // namespace ptdp
