// Pipeline schedules as data: structural properties for every small (p, v, m),
// and the paper's bubble fractions from a replay with unit costs.
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <tuple>

#include "engine/core/status.h"
#include "engine/parallel/schedule.h"
#include "tests/unit/expect_error.h"

using namespace ptdp;

namespace {

struct Case {
  ScheduleKind kind;
  int p, v, m;
};

std::vector<Case> all_cases() {
  std::vector<Case> out;
  for (int p = 1; p <= 8; p++)
    for (int v = 1; v <= 4; v++)
      for (int m = 1; m <= 32; m++)
        for (ScheduleKind k : {ScheduleKind::gpipe, ScheduleKind::one_f_one_b, ScheduleKind::interleaved}) {
          try {
            validate_schedule(k, p, v, m);
          } catch (const Error &) {
            continue;
          }
          out.push_back({k, p, v, m});
        }
  return out;
}

std::string label(const Case &c) {
  static const char *names[] = {"gpipe", "1f1b", "interleaved"};
  return std::string(names[(int)c.kind]) + " p=" + std::to_string(c.p) +
         " v=" + std::to_string(c.v) + " m=" + std::to_string(c.m);
}

}  // namespace

TEST(Schedule, EveryComputeOnceTransfersMatchAndNoDeadlock) {
  int checked = 0;
  for (const Case &c : all_cases()) {
    std::vector<std::vector<PipeOp>> ranks;
    std::multiset<std::tuple<int, int, int, int>> sends, recvs;  // (dir, mb, from, to)
    for (int s = 0; s < c.p; s++) {
      ranks.push_back(pipeline_schedule(c.kind, c.p, c.v, c.m, s));
      std::map<std::pair<int, int>, int> fwd, bwd;  // (mb, chunk) -> position
      int in_flight = 0, max_in_flight = 0;
      for (size_t i = 0; i < ranks[s].size(); i++) {
        const PipeOp &op = ranks[s][i];
        auto key = std::make_pair(op.microbatch, op.chunk);
        switch (op.kind) {
          case PipeOpKind::forward:
            ASSERT_TRUE(fwd.emplace(key, (int)i).second) << label(c) << " duplicate F";
            max_in_flight = std::max(max_in_flight, ++in_flight);
            break;
          case PipeOpKind::backward:
            ASSERT_TRUE(bwd.emplace(key, (int)i).second) << label(c) << " duplicate B";
            ASSERT_TRUE(fwd.count(key)) << label(c) << " B before its F on rank " << s;
            in_flight--;
            break;
          case PipeOpKind::send_forward: sends.insert({0, op.microbatch, s, op.peer}); break;
          case PipeOpKind::send_backward: sends.insert({1, op.microbatch, s, op.peer}); break;
          case PipeOpKind::recv_forward: recvs.insert({0, op.microbatch, op.peer, s}); break;
          case PipeOpKind::recv_backward: recvs.insert({1, op.microbatch, op.peer, s}); break;
        }
      }
      ASSERT_EQ((int)fwd.size(), c.m * c.v) << label(c) << " rank " << s;
      ASSERT_EQ((int)bwd.size(), c.m * c.v) << label(c) << " rank " << s;
      // Activation memory: at most p micro-batches in flight for 1F1B, m for GPipe.
      if (c.kind == ScheduleKind::one_f_one_b) {
        ASSERT_LE(max_in_flight, c.p) << label(c);
      }
      if (c.kind == ScheduleKind::gpipe) {
        ASSERT_LE(max_in_flight, c.m * c.v) << label(c);
      }
    }
    ASSERT_EQ(sends, recvs) << label(c) << ": every send has exactly one receive";
    // Cross-rank dependencies: a replay with buffered sends completes.
    ASSERT_NO_THROW(replay_makespan(ranks, c.p, c.v, 1, 2)) << label(c);
    checked++;
  }
  EXPECT_GT(checked, 1300);  // every valid (kind, p <= 8, v <= 4, m <= 32)
}

// Unit costs F = 1, B = 2 per stage (each of v chunks costs 1/v of that): the
// bubble (makespan - ideal) / ideal is (p-1)/m for GPipe and 1F1B, and
// (p-1)/(v m) for the interleaved schedule (the paper's §2.2).
TEST(Schedule, BubbleFractionsMatchThePaper) {
  for (const Case &c : all_cases()) {
    std::vector<std::vector<PipeOp>> ranks;
    for (int s = 0; s < c.p; s++) ranks.push_back(pipeline_schedule(c.kind, c.p, c.v, c.m, s));
    double T = replay_makespan(ranks, c.p, c.v, 1.0 / c.v, 2.0 / c.v);
    double ideal = 3.0 * c.m, bubble = (T - ideal) / ideal;
    double formula = c.kind == ScheduleKind::interleaved ? (c.p - 1.0) / (c.v * c.m)
                                                         : (c.p - 1.0) / c.m;
    if (c.kind == ScheduleKind::gpipe && c.v > 1) continue;  // no closed form given
    ASSERT_NEAR(bubble, formula, 1e-9) << label(c);
  }
}

TEST(Schedule, InvalidChoicesAreClearErrors) {
  expect_error([] { parse_schedule("zero-bubble"); }, Status::bad_value,
               "allowed: gpipe, 1f1b, interleaved");
  expect_error([] { validate_schedule(ScheduleKind::interleaved, 4, 2, 6); }, Status::invalid_config,
               "multiple of pipeline_model_parallel_size (4)");
  expect_error([] { validate_schedule(ScheduleKind::interleaved, 4, 1, 8); }, Status::invalid_config,
               "needs v >= 2");
  expect_error([] { validate_schedule(ScheduleKind::one_f_one_b, 1, 2, 8); }, Status::invalid_config,
               "need pipeline_model_parallel_size > 1");
  expect_error([] { pipeline_schedule(ScheduleKind::gpipe, 2, 1, 4, 2); }, Status::invalid_argument,
               "outside [0, 2)");
}
