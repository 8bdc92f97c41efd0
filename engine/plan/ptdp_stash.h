// What ptdp's own engine keeps from a forward until its backward
// (engine/model/activation_stash.cpp), in bytes: the planner's prediction of
// ptdp's peak activation memory, which tests/plan checks against the engine's
// own count. activation_bytes_per_layer is Megatron's stash on the paper's
// GPUs; ptdp's differs: fp32 arrays (a 16-bit run rounds them in place), no
// dropout masks (the dropped attention probabilities are kept instead and the
// hidden dropout is drawn again), LayerNorm statistics, and the head's logits.
#pragma once
#include <cstdint>

#include "engine/plan/model.h"

namespace ptdp::plan {

struct PtdpStash {
  bool attention_dropout = true;  // attention_dropout > 0: dropped probabilities kept
  bool flash = false;             // --use-flash-attn: each row's log-sum-exp instead
  bool sequence_parallel = false; // --sequence-parallel (t > 1): s/t of the rows per rank
};

// One (model chunk, micro-batch) of pipeline rank `stage` holding chunk
// `chunk` (virtual stage chunk * p + stage, or in a V under zbv). Recompute::full is ptdp's
// uniform method with units of one layer (each layer's input kept);
// selective keeps all but the attention probabilities.
double ptdp_chunk_stash_bytes(const ModelSpec &m, const Layout &L, int stage, int chunk,
                              const PtdpStash &o);

// What one (model chunk, micro-batch) keeps from its B until its W under a
// zero-bubble schedule (GPT::keep_weight_inputs), GeLU's MLP.
double ptdp_weight_stash_bytes(const ModelSpec &m, const Layout &L);

// The peak over the training schedule of pipeline rank `stage` with
// `microbatches` micro-batches: the chunks in flight at once, summed.
double ptdp_peak_stash_bytes(const ModelSpec &m, const Layout &L, int64_t microbatches, int stage,
                             const PtdpStash &o);

}  // namespace ptdp::plan
