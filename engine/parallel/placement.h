// Where a pipeline's model chunks sit (ARCHITECTURE §4): one rule for the
// model (which layers a rank holds), the schedules (who sends to whom) and the
// planner. Header-only, so the planner needs no model.
//
// Loop (Megatron's interleaving; v = 1 is plain pipelining): chunk c of rank r
// is virtual stage c*p + r. V (ZB-V): chunks zig-zag, so with v = 2 rank r
// holds stages r and 2p-1-r — the first rank holds the first and the last
// stage, and the turn from stage p-1 to p stays on rank p-1.
#pragma once

namespace ptdp {

inline int virtual_stage(bool v_shape, int p, int rank, int chunk) {
  if (v_shape && chunk % 2 == 1) return (chunk + 1) * p - 1 - rank;
  return chunk * p + rank;
}

struct ChunkHome {
  int rank, chunk;
};
// The rank and chunk holding virtual stage vs.
inline ChunkHome chunk_home(bool v_shape, int p, int vs) {
  const int chunk = vs / p, pos = vs % p;
  return {v_shape && chunk % 2 == 1 ? p - 1 - pos : pos, chunk};
}

}  // namespace ptdp
