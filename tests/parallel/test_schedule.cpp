// Pipeline schedules as data: structural properties for every small (p, v, m),
// the paper's bubble fractions from a replay with unit costs, and the
// zero-bubble schedules' bubbles against their formulas.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <tuple>

#include "engine/core/status.h"
#include "engine/parallel/schedule.h"
#include "tests/support/expect_error.h"

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
        for (ScheduleKind k : {ScheduleKind::gpipe, ScheduleKind::one_f_one_b,
                               ScheduleKind::interleaved, ScheduleKind::zbh1, ScheduleKind::zbv}) {
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
  return std::string(schedule_name(c.kind)) + " p=" + std::to_string(c.p) +
         " v=" + std::to_string(c.v) + " m=" + std::to_string(c.m);
}

}  // namespace

TEST(Schedule, EveryComputeOnceTransfersMatchAndNoDeadlock) {
  int checked = 0;
  for (const Case &c : all_cases()) {
    std::vector<std::vector<PipeOp>> ranks;
    std::multiset<std::tuple<int, int, int, int>> sends, recvs;  // (dir, mb, from, to)
    const bool split = splits_backward(c.kind);
    for (int s = 0; s < c.p; s++) {
      ranks.push_back(pipeline_schedule(c.kind, c.p, c.v, c.m, s));
      std::map<std::pair<int, int>, int> fwd, bwd, wgt;  // (mb, chunk) -> position
      std::map<int, int> last_w;                         // chunk -> its last W's micro-batch
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
            if (!split) in_flight--;
            break;
          case PipeOpKind::backward_weight: {
            ASSERT_TRUE(split) << label(c) << " W in a schedule that does not split";
            ASSERT_TRUE(wgt.emplace(key, (int)i).second) << label(c) << " duplicate W";
            ASSERT_TRUE(bwd.count(key)) << label(c) << " W before its B on rank " << s;
            // W's of a chunk in micro-batch order: the weight gradients sum as 1F1B's do.
            auto it = last_w.find(op.chunk);
            ASSERT_TRUE(it == last_w.end() || it->second < op.microbatch) << label(c);
            last_w[op.chunk] = op.microbatch;
            in_flight--;
            break;
          }
          case PipeOpKind::send_forward: sends.insert({0, op.microbatch, s, op.peer}); break;
          case PipeOpKind::send_backward: sends.insert({1, op.microbatch, s, op.peer}); break;
          case PipeOpKind::recv_forward: recvs.insert({0, op.microbatch, op.peer, s}); break;
          case PipeOpKind::recv_backward: recvs.insert({1, op.microbatch, op.peer, s}); break;
        }
      }
      ASSERT_EQ((int)fwd.size(), c.m * c.v) << label(c) << " rank " << s;
      ASSERT_EQ((int)bwd.size(), c.m * c.v) << label(c) << " rank " << s;
      ASSERT_EQ((int)wgt.size(), split ? c.m * c.v : 0) << label(c) << " rank " << s;
      // Activation memory: at most p micro-batches in flight (F done, B or,
      // when split, W not) for 1F1B and ZB-H1, as 1F1B's first stage; 2p
      // chunks for ZB-V (p of each chunk's, again 1F1B's first stage).
      if (c.kind == ScheduleKind::one_f_one_b || c.kind == ScheduleKind::zbh1) {
        ASSERT_LE(max_in_flight, c.p) << label(c);
      }
      if (c.kind == ScheduleKind::zbv) {
        ASSERT_LE(max_in_flight, 2 * c.p) << label(c);
      }
      if (c.kind == ScheduleKind::gpipe) {
        ASSERT_LE(max_in_flight, c.m * c.v) << label(c);
      }
    }
    ASSERT_EQ(sends, recvs) << label(c) << ": every send has exactly one receive";
    // Cross-rank dependencies: a replay with buffered sends completes.
    ASSERT_NO_THROW(replay_makespan(ranks, c.p, c.kind, 1, 2, 1)) << label(c);
    checked++;
  }
  EXPECT_GT(checked, 1790);  // every valid (kind, p <= 8, v <= 4, m <= 32)
}

// Unit costs F = 1, B = 2 per stage (each of v chunks costs 1/v of that): the
// bubble (makespan - ideal) / ideal is (p-1)/m for GPipe and 1F1B, and
// (p-1)/(v m) for the interleaved schedule (the paper's §2.2).
TEST(Schedule, BubbleFractionsMatchThePaper) {
  for (const Case &c : all_cases()) {
    std::vector<std::vector<PipeOp>> ranks;
    if (splits_backward(c.kind)) continue;  // below
    for (int s = 0; s < c.p; s++) ranks.push_back(pipeline_schedule(c.kind, c.p, c.v, c.m, s));
    double T = replay_makespan(ranks, c.p, c.kind, 1.0 / c.v, 2.0 / c.v);
    double ideal = 3.0 * c.m, bubble = (T - ideal) / ideal;
    double formula = c.kind == ScheduleKind::interleaved ? (c.p - 1.0) / (c.v * c.m)
                                                         : (c.p - 1.0) / c.m;
    if (c.kind == ScheduleKind::gpipe && c.v > 1) continue;  // no closed form given
    ASSERT_NEAR(bubble, formula, 1e-9) << label(c);
  }
}

// The zero-bubble schedules with a stage's costs F, B (input gradient) and W
// (weight gradients) for one chunk, W <= F <= B as in a transformer layer:
// ZB-H1's bubble (idle time of the busiest rank) is (p-1)(F+B-W) against 1F1B's
// (p-1)(F+B+W) (Qi et al., section 3); ZB-V's, with F, B, W a chunk's (half a
// stage's) costs, is (p-1) max(B, 2(B-W)) once m >= 2p-1: the V's start leaves
// each rank (p-1) B's idle, and a B much longer than W (B > 2W) leaves the
// steady state short of W's to fill with. The replay must match exactly (up
// to rounding): the formulas are the schedules' own.
TEST(Schedule, ZeroBubbleBubblesMatchTheirFormulas) {
  const double costs[][3] = {{1, 1, 1}, {1, 1.2, 0.8}, {1, 1.5, 0.5}, {1, 1.3, 1.0}, {1, 2, 0.6}};
  for (int p = 2; p <= 8; p++)
    for (int m : {2 * p - 1, 2 * p, 3 * p + 1})
      for (auto &k : costs) {
        const double F = k[0], B = k[1], W = k[2];
        for (ScheduleKind kind : {ScheduleKind::zbh1, ScheduleKind::zbv}) {
          const int v = kind == ScheduleKind::zbv ? 2 : 1;
          std::vector<std::vector<PipeOp>> ranks;
          for (int s = 0; s < p; s++) ranks.push_back(pipeline_schedule(kind, p, v, m, s));
          const double work = v * m * (F + B + W);
          const double bubble = replay_makespan(ranks, p, kind, F, B, W) - work;
          const double formula = kind == ScheduleKind::zbh1 ? (p - 1) * (F + B - W)
                                                            : (p - 1) * std::max(B, 2 * (B - W));
          ASSERT_NEAR(bubble, formula, 1e-9 * work)
              << schedule_name(kind) << " p=" << p << " m=" << m << " F=" << F << " B=" << B
              << " W=" << W;
        }
      }
}

TEST(Schedule, InvalidChoicesAreClearErrors) {
  expect_error([] { parse_schedule("zero-bubble"); }, Status::bad_value,
               "allowed: gpipe, 1f1b, interleaved, zbh1, zbv");
  expect_error([] { validate_schedule(ScheduleKind::zbv, 4, 1, 8); }, Status::invalid_config,
               "exactly 2 model chunks per rank");
  expect_error([] { validate_schedule(ScheduleKind::zbv, 4, 3, 8); }, Status::invalid_config,
               "exactly 2 model chunks per rank");
  expect_error([] { validate_schedule(ScheduleKind::zbv, 4, 2, 3); }, Status::invalid_config,
               "at least as many micro-batches (3) as pipeline stages (4)");
  expect_error([] { validate_schedule(ScheduleKind::zbh1, 4, 2, 8); }, Status::invalid_config,
               "zbh1 runs one model chunk per rank");
  expect_error([] { validate_schedule(ScheduleKind::interleaved, 4, 2, 6); }, Status::invalid_config,
               "multiple of pipeline_model_parallel_size (4)");
  expect_error([] { validate_schedule(ScheduleKind::interleaved, 4, 1, 8); }, Status::invalid_config,
               "needs v >= 2");
  expect_error([] { validate_schedule(ScheduleKind::one_f_one_b, 1, 2, 8); }, Status::invalid_config,
               "need pipeline_model_parallel_size > 1");
  expect_error([] { pipeline_schedule(ScheduleKind::gpipe, 2, 1, 4, 2); }, Status::invalid_argument,
               "outside [0, 2)");
}
