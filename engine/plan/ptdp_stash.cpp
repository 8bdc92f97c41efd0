#include "engine/plan/ptdp_stash.h"

#include <algorithm>
#include <vector>

#include "engine/core/status.h"
#include "engine/parallel/placement.h"
#include "engine/parallel/schedule.h"

namespace ptdp::plan {

double ptdp_chunk_stash_bytes(const ModelSpec &m, const Layout &L, int stage, int chunk,
                              const PtdpStash &o) {
  const int p = L.p, v = L.v;
  const double N = (double)L.b * m.seq, h = (double)m.hidden, w = h / L.t;
  const double f = (double)m.ffn_size() / L.t, heads = (double)m.heads / L.t;
  const double probs = L.b * heads * m.seq * m.seq;
  const int64_t layers = m.layers / ((int64_t)p * v);
  // Rows of this rank's share of the sequence (sequence parallelism keeps the
  // layer's input, mid, the norms' statistics and the head's input for s/t
  // positions; the GEMMs' inputs ln1 and ln2 for all of them).
  const double R = o.sequence_parallel && L.t > 1 ? N / L.t : N;
  // Floats per layer: everything, or the input only.
  double layer = R * h;  // x
  if (L.recompute != Recompute::full) {
    // Selective recomputation keeps everything but the probabilities.
    const double kept = L.recompute == Recompute::none && !o.flash ? probs : 0;
    layer += N * h + 2 * R;                                // ln1, its mean and rstd
    layer += N * 3 * w;                                    // qkv
    layer += o.flash ? L.b * heads * m.seq : kept;         // log-sum-exp, or probabilities
    layer += o.attention_dropout ? kept : 0;               // after dropout
    layer += N * w + R * h + N * h + 2 * R;                // context, mid, ln2 and stats
    layer += 2 * N * f;                                    // fc1 before and after GeLU
  }
  double floats = (double)layers * layer;
  const int vs = virtual_stage(v_shaped(L.schedule), p, stage, chunk);
  if (vs == 0) floats += N;  // tokens (int32)
  if (vs == p * v - 1) {
    const double vocab = (double)padded_vocab(m, L.t) / L.t;
    floats += R * h + N * h + 2 * R;  // the final norm's input, output and statistics
    floats += N * vocab + 3 * N;      // logits, the loss's max, sum and target logit
    floats += 2 * N;                  // per-token losses (host) and targets (int32)
  }
  return 4 * floats;
}

double ptdp_weight_stash_bytes(const ModelSpec &m, const Layout &L) {
  const double N = (double)L.b * m.seq, h = (double)m.hidden, w = h / L.t;
  const double f = (double)m.ffn_size() / L.t;
  const int64_t layers = m.layers / ((int64_t)L.p * L.v);
  // What the weight GEMMs read, ln1, the context, ln2 and the MLP activation,
  // and their output gradients, dy of the projection and of fc2, dQKV, dfc1.
  const double layer = (h + w + h + f) + (h + h + 3 * w + f);
  return 4 * N * layer * (double)layers;
}

double ptdp_peak_stash_bytes(const ModelSpec &m, const Layout &L, int64_t microbatches, int stage,
                             const PtdpStash &o) {
  const std::vector<PipeOp> ops = pipeline_schedule(
      L.schedule, L.p, L.v, (int)walked_microbatches(L.schedule, L.p, L.v, microbatches), stage);
  const double w_stash = splits_backward(L.schedule) ? ptdp_weight_stash_bytes(m, L) : 0;
  double now = 0, peak = 0;
  for (const PipeOp &op : ops) {
    const double bytes = ptdp_chunk_stash_bytes(m, L, stage, op.chunk, o);
    if (op.kind == PipeOpKind::forward) peak = std::max(peak, now += bytes);
    // A split backward keeps the W stash until its W.
    if (op.kind == PipeOpKind::backward) peak = std::max(peak, now += w_stash - bytes);
    if (op.kind == PipeOpKind::backward_weight) now -= w_stash;
  }
  return peak;
}

}  // namespace ptdp::plan
