// The rank grid (ARCHITECTURE §2): tensor-parallel ranks adjacent (fastest
// index), then data-parallel, then pipeline — Megatron's default order.
//   world rank = tp + t * (dp + d * pp)
#pragma once
#include <vector>

namespace ptdp {

struct ParallelDims {
  int t = 1, p = 1, d = 1;
  int world() const { return t * p * d; }
};

struct RankCoord {
  int tp = 0, dp = 0, pp = 0;
};

class RankGrid {
 public:
  explicit RankGrid(ParallelDims dims);  // throws invalid_config on a non-positive degree
  const ParallelDims &dims() const { return dims_; }
  int rank_of(RankCoord c) const { return c.tp + dims_.t * (c.dp + dims_.d * c.pp); }
  RankCoord coord_of(int rank) const;
  // World ranks of the groups that `rank` belongs to, ordered by group rank.
  std::vector<int> tp_group(int rank) const;
  std::vector<int> dp_group(int rank) const;
  std::vector<int> pp_group(int rank) const;
  // First and last pipeline stage of rank's (tp, dp) column (one rank when p = 1):
  // the tied embedding's gradient is all-reduced over it.
  std::vector<int> embedding_group(int rank) const;

 private:
  ParallelDims dims_;
};

}  // namespace ptdp
