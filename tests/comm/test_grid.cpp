// The rank grid (engine/comm/grid.h): world rank = tp + t * (dp + d * pp).
// Coordinates, the four kinds of groups and argument errors, for every
// (t, p, d) with each degree in 1..4.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "engine/comm/grid.h"
#include "engine/core/status.h"
#include "tests/support/expect_error.h"

using namespace ptdp;

namespace {

using Groups = std::function<std::vector<int>(const RankGrid &, int)>;

struct Kind {
  const char *name;
  Groups of;
};

const std::vector<Kind> &kinds() {
  static const std::vector<Kind> k = {
      {"tp", [](const RankGrid &g, int r) { return g.tp_group(r); }},
      {"dp", [](const RankGrid &g, int r) { return g.dp_group(r); }},
      {"pp", [](const RankGrid &g, int r) { return g.pp_group(r); }},
      {"embedding", [](const RankGrid &g, int r) { return g.embedding_group(r); }},
  };
  return k;
}

template <class F>
void for_all_dims(F f) {
  for (int t = 1; t <= 4; t++)
    for (int p = 1; p <= 4; p++)
      for (int d = 1; d <= 4; d++) {
        SCOPED_TRACE("t=" + std::to_string(t) + " p=" + std::to_string(p) + " d=" + std::to_string(d));
        f(RankGrid(ParallelDims{t, p, d}));
      }
}

bool contains(const std::vector<int> &v, int x) { return std::find(v.begin(), v.end(), x) != v.end(); }

TEST(RankGrid, CoordinatesRoundTrip) {
  for_all_dims([](const RankGrid &g) {
    const ParallelDims &dm = g.dims();
    ASSERT_EQ(dm.world(), dm.t * dm.p * dm.d);
    std::vector<int> hits(dm.world(), 0);
    for (int pp = 0; pp < dm.p; pp++)
      for (int dp = 0; dp < dm.d; dp++)
        for (int tp = 0; tp < dm.t; tp++) {
          const int r = g.rank_of({tp, dp, pp});
          ASSERT_EQ(r, tp + dm.t * (dp + dm.d * pp));
          ASSERT_GE(r, 0);
          ASSERT_LT(r, dm.world());
          hits[r]++;
          const RankCoord c = g.coord_of(r);
          EXPECT_EQ(c.tp, tp);
          EXPECT_EQ(c.dp, dp);
          EXPECT_EQ(c.pp, pp);
        }
    for (int r = 0; r < dm.world(); r++) {
      EXPECT_EQ(hits[r], 1) << "rank " << r;  // a bijection onto [0, world)
      EXPECT_EQ(g.rank_of(g.coord_of(r)), r);
    }
  });
}

TEST(RankGrid, GroupsVaryOneCoordinateInOrder) {
  for_all_dims([](const RankGrid &g) {
    const ParallelDims &dm = g.dims();
    for (int r = 0; r < dm.world(); r++) {
      const RankCoord c = g.coord_of(r);
      const auto tp = g.tp_group(r), dp = g.dp_group(r), pp = g.pp_group(r);
      ASSERT_EQ((int)tp.size(), dm.t);
      ASSERT_EQ((int)dp.size(), dm.d);
      ASSERT_EQ((int)pp.size(), dm.p);
      // Tensor-parallel ranks are adjacent: [r - tp, r - tp + t).
      for (int i = 0; i < dm.t; i++) EXPECT_EQ(tp[i], r - c.tp + i) << "rank " << r;
      for (int i = 0; i < dm.d; i++) {
        const RankCoord q = g.coord_of(dp[i]);
        EXPECT_EQ(q.tp, c.tp);
        EXPECT_EQ(q.dp, i);
        EXPECT_EQ(q.pp, c.pp);
      }
      for (int i = 0; i < dm.p; i++) {
        const RankCoord q = g.coord_of(pp[i]);
        EXPECT_EQ(q.tp, c.tp);
        EXPECT_EQ(q.dp, c.dp);
        EXPECT_EQ(q.pp, i);
      }
      // The group rank of r in each group is its coordinate.
      EXPECT_EQ(tp[c.tp], r);
      EXPECT_EQ(dp[c.dp], r);
      EXPECT_EQ(pp[c.pp], r);
    }
  });
}

TEST(RankGrid, GroupsOfOneKindPartitionTheWorld) {
  for_all_dims([](const RankGrid &g) {
    const int world = g.dims().world();
    for (const Kind &k : kinds()) {
      SCOPED_TRACE(k.name);
      std::set<std::vector<int>> distinct;
      for (int r = 0; r < world; r++) distinct.insert(k.of(g, r));
      std::vector<int> owner(world, 0);
      for (const auto &grp : distinct) {
        EXPECT_EQ(std::set<int>(grp.begin(), grp.end()).size(), grp.size()) << "duplicate member";
        for (int m : grp) {
          ASSERT_GE(m, 0);
          ASSERT_LT(m, world);
          owner[m]++;
        }
      }
      if (std::string(k.name) == "embedding") {
        // Only first and last stages are members; every middle rank is in none.
        for (int r = 0; r < world; r++) {
          const int pp = g.coord_of(r).pp;
          const bool edge = pp == 0 || pp == g.dims().p - 1;
          EXPECT_EQ(owner[r], edge ? 1 : 0) << "rank " << r;
        }
      } else {
        for (int r = 0; r < world; r++) EXPECT_EQ(owner[r], 1) << "rank " << r;
      }
    }
    // Number of groups of each kind.
    const ParallelDims &dm = g.dims();
    std::set<std::vector<int>> tp, dp, pp;
    for (int r = 0; r < world; r++) {
      tp.insert(g.tp_group(r));
      dp.insert(g.dp_group(r));
      pp.insert(g.pp_group(r));
    }
    EXPECT_EQ((int)tp.size(), dm.p * dm.d);
    EXPECT_EQ((int)dp.size(), dm.t * dm.p);
    EXPECT_EQ((int)pp.size(), dm.t * dm.d);
  });
}

// Every rank is in exactly the groups that list it: a list of one kind that
// names r is r's own list of that kind (so every member builds the same
// communicator), and r's tp/dp/pp groups contain r. A middle pipeline stage is
// named by no embedding group: it is handed its column's edge stages.
TEST(RankGrid, EveryRankIsInExactlyTheGroupsThatListIt) {
  for_all_dims([](const RankGrid &g) {
    const int world = g.dims().world();
    for (const Kind &k : kinds()) {
      SCOPED_TRACE(k.name);
      for (int r = 0; r < world; r++) {
        const auto mine = k.of(g, r);
        if (std::string(k.name) != "embedding") {
          EXPECT_TRUE(contains(mine, r)) << "rank " << r;
        }
        // Every member of r's group is handed the same list.
        for (int q : mine) EXPECT_EQ(k.of(g, q), mine) << "rank " << r << " lists " << q;
        // Any list that names r is r's own group (r sits in no other group of this kind).
        for (int q = 0; q < world; q++) {
          const auto theirs = k.of(g, q);
          if (contains(theirs, r)) {
            EXPECT_EQ(theirs, mine) << "rank " << q << "'s group lists " << r;
          }
        }
      }
    }
    // Two ranks share a tp group iff they share dp and pp, and so on.
    for (int a = 0; a < world; a++)
      for (int b = 0; b < world; b++) {
        const RankCoord ca = g.coord_of(a), cb = g.coord_of(b);
        EXPECT_EQ(contains(g.tp_group(a), b), ca.dp == cb.dp && ca.pp == cb.pp);
        EXPECT_EQ(contains(g.dp_group(a), b), ca.tp == cb.tp && ca.pp == cb.pp);
        EXPECT_EQ(contains(g.pp_group(a), b), ca.tp == cb.tp && ca.dp == cb.dp);
      }
  });
}

TEST(RankGrid, EmbeddingGroupIsFirstAndLastStage) {
  for_all_dims([](const RankGrid &g) {
    const ParallelDims &dm = g.dims();
    for (int r = 0; r < dm.world(); r++) {
      const RankCoord c = g.coord_of(r);
      const auto emb = g.embedding_group(r);
      const auto pp = g.pp_group(r);
      if (dm.p == 1) {
        EXPECT_EQ(emb, std::vector<int>{r});
      } else {
        EXPECT_EQ(emb, (std::vector<int>{g.rank_of({c.tp, c.dp, 0}), g.rank_of({c.tp, c.dp, dm.p - 1})}));
        EXPECT_EQ(emb.front(), pp.front());
        EXPECT_EQ(emb.back(), pp.back());
      }
      const bool edge = c.pp == 0 || c.pp == dm.p - 1;
      EXPECT_EQ(contains(emb, r), edge) << "rank " << r;
    }
  });
}

TEST(RankGrid, KnownLayout) {
  // t=2, p=2, d=2: rank 5 is tp 1, dp 0, pp 1.
  const RankGrid g(ParallelDims{2, 2, 2});
  const RankCoord c = g.coord_of(5);
  EXPECT_EQ(c.tp, 1);
  EXPECT_EQ(c.dp, 0);
  EXPECT_EQ(c.pp, 1);
  EXPECT_EQ(g.tp_group(5), (std::vector<int>{4, 5}));
  EXPECT_EQ(g.dp_group(5), (std::vector<int>{5, 7}));
  EXPECT_EQ(g.pp_group(5), (std::vector<int>{1, 5}));
  EXPECT_EQ(g.embedding_group(5), (std::vector<int>{1, 5}));
  // t=2, p=1, d=4 (the concurrent-groups layout of test_comm_threads).
  const RankGrid h(ParallelDims{2, 1, 4});
  EXPECT_EQ(h.tp_group(6), (std::vector<int>{6, 7}));
  EXPECT_EQ(h.dp_group(3), (std::vector<int>{1, 3, 5, 7}));
  EXPECT_EQ(h.pp_group(3), (std::vector<int>{3}));
  EXPECT_EQ(h.embedding_group(3), (std::vector<int>{3}));
  // t=1, p=4, d=1: the pipeline is the whole world.
  const RankGrid k(ParallelDims{1, 4, 1});
  EXPECT_EQ(k.pp_group(2), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(k.embedding_group(2), (std::vector<int>{0, 3}));
  EXPECT_EQ(k.embedding_group(3), (std::vector<int>{0, 3}));
}

TEST(RankGrid, InvalidSizesThrow) {
  for (int bad : {0, -1, -4}) {
    expect_error([&] { RankGrid g(ParallelDims{bad, 1, 1}); }, Status::invalid_config,
                 "t=" + std::to_string(bad));
    expect_error([&] { RankGrid g(ParallelDims{1, bad, 1}); }, Status::invalid_config,
                 "p=" + std::to_string(bad));
    expect_error([&] { RankGrid g(ParallelDims{1, 1, bad}); }, Status::invalid_config,
                 "d=" + std::to_string(bad));
    expect_error([&] { RankGrid g(ParallelDims{2, 2, 2}); RankGrid h(ParallelDims{bad, bad, bad}); },
                 Status::invalid_config, "must be positive");
  }
}

TEST(RankGrid, OutOfRangeRanksThrow) {
  for_all_dims([](const RankGrid &g) {
    const int world = g.dims().world();
    for (int bad : {-1, world, world + 7, -100}) {
      expect_error([&] { g.coord_of(bad); }, Status::invalid_argument, "outside the world");
      expect_error([&] { g.tp_group(bad); }, Status::invalid_argument, "outside the world");
      expect_error([&] { g.dp_group(bad); }, Status::invalid_argument, "outside the world");
      expect_error([&] { g.pp_group(bad); }, Status::invalid_argument, "outside the world");
      expect_error([&] { g.embedding_group(bad); }, Status::invalid_argument, "outside the world");
    }
  });
}

}  // namespace
