// Data-parallel gradient synchronisation (ARCHITECTURE §4): after the last
// backward of a step, the tied embedding's two halves are summed over the
// embedding group (first and last pipeline stage), then every gradient over
// the data-parallel replicas, in buckets of `bucket` elements. Communicators
// take the model's device memory (a StagedComm off the CPU); either may be null.
#pragma once
#include <cstddef>

#include "engine/comm/communicator.h"
#include "engine/model/gpt.h"

namespace ptdp {

void sync_gradients(GPT<float> &model, Communicator *embedding, Communicator *dp, size_t bucket);

}  // namespace ptdp
