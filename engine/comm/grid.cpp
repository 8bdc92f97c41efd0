#include "engine/comm/grid.h"

#include "engine/core/status.h"

namespace ptdp {

RankGrid::RankGrid(ParallelDims dims) : dims_(dims) {
  if (dims.t < 1 || dims.p < 1 || dims.d < 1)
    fail(Status::invalid_config, "parallel sizes must be positive, got t=", dims.t, " p=", dims.p,
         " d=", dims.d);
}

RankCoord RankGrid::coord_of(int rank) const {
  if (rank < 0 || rank >= dims_.world())
    fail(Status::invalid_argument, "rank ", rank, " is outside the world [0, ", dims_.world(), ")");
  RankCoord c;
  c.tp = rank % dims_.t;
  c.dp = (rank / dims_.t) % dims_.d;
  c.pp = rank / (dims_.t * dims_.d);
  return c;
}

std::vector<int> RankGrid::tp_group(int rank) const {
  RankCoord c = coord_of(rank);
  std::vector<int> g;
  for (int i = 0; i < dims_.t; i++) g.push_back(rank_of({i, c.dp, c.pp}));
  return g;
}

std::vector<int> RankGrid::dp_group(int rank) const {
  RankCoord c = coord_of(rank);
  std::vector<int> g;
  for (int i = 0; i < dims_.d; i++) g.push_back(rank_of({c.tp, i, c.pp}));
  return g;
}

std::vector<int> RankGrid::pp_group(int rank) const {
  RankCoord c = coord_of(rank);
  std::vector<int> g;
  for (int i = 0; i < dims_.p; i++) g.push_back(rank_of({c.tp, c.dp, i}));
  return g;
}

std::vector<int> RankGrid::embedding_group(int rank) const {
  RankCoord c = coord_of(rank);
  std::vector<int> g{rank_of({c.tp, c.dp, 0})};
  if (dims_.p > 1) g.push_back(rank_of({c.tp, c.dp, dims_.p - 1}));
  return g;
}

}  // namespace ptdp
