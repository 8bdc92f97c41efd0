// The `threads` communicator backend (engine/comm/thread_comm.h): the
// conformance suite of every backend (tests/comm/comm_conformance.h: every
// collective and point-to-point transfer in every dtype, several groups,
// counters, argument errors) on worlds of 1, 2, 3, 4 and 8 ranks, then what
// only this backend has: timeouts and abort that throw, and its group errors.
// Each rank is a std::thread; a rank that throws aborts the world so the
// others fail fast instead of waiting for the timeout.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "engine/comm/communicator.h"
#include "engine/comm/grid.h"
#include "engine/comm/staged_comm.h"
#include "engine/comm/thread_comm.h"
#include "engine/core/status.h"
#include "engine/device/device.h"
#include "tests/comm/comm_conformance.h"
#include "tests/support/expect_error.h"

using namespace ptdp;
using comm_conformance::iota_ranks;

namespace {

// Generous: a test that works never waits for it; a broken one fails instead of hanging.
constexpr double kTimeout = 60.0;

const std::vector<int> kWorlds = {1, 2, 3, 4, 8};

struct RankResult {
  bool threw = false;
  Status code = Status::ok;
  std::string what;
  double seconds = 0;  // from the start of the rank's function to its return or throw
};

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Runs fn(rank) on one thread per world rank. A rank that throws aborts the world.
template <class F>
std::vector<RankResult> run_ranks(ThreadWorld &world, F fn) {
  std::vector<RankResult> res(world.size());
  std::vector<std::thread> threads;
  for (int r = 0; r < world.size(); r++)
    threads.emplace_back([&, r] {
      auto t0 = Clock::now();
      try {
        fn(r);
      } catch (const Error &e) {
        res[r].threw = true;
        res[r].code = e.code();
        res[r].what = e.what();
        world.abort("rank " + std::to_string(r) + " failed: " + e.what());
      } catch (const std::exception &e) {
        res[r].threw = true;
        res[r].code = Status::internal;
        res[r].what = e.what();
        world.abort("rank " + std::to_string(r) + " failed: " + e.what());
      }
      res[r].seconds = since(t0);
    });
  for (auto &t : threads) t.join();
  return res;
}

// Runs fn(world, rank) on every rank of a fresh world and expects no rank to throw.
template <class F>
void run_ok(int size, F fn, double timeout = kTimeout) {
  ThreadWorld world(size, timeout);
  auto res = run_ranks(world, [&](int r) { fn(world, r); });
  for (int r = 0; r < size; r++) EXPECT_FALSE(res[r].threw) << "rank " << r << ": " << res[r].what;
}

// ---------------------------------------------------------------------------
// The conformance suite (tests/comm/comm_conformance.h) on the threads backend:
// a fresh world per case, one thread per rank.

class ThreadsBackend final : public comm_conformance::CommBackend {
 public:
  std::string name() const override { return "threads"; }
  void run(int world_size, const Body &body) override {
    ThreadWorld world(world_size, kTimeout);
    comm_conformance::run_on_threads(
        iota_ranks(world_size), [&](int me) { body(world, me); },
        [&](int me, const std::string &what) {
          ADD_FAILURE() << "rank " << me << " threw: " << what;
          world.abort("rank " + std::to_string(me) + " failed: " + what);
        });
  }
};

ThreadsBackend g_threads;

// The threads backend as a GPU rank uses it: every group a StagedComm over the
// rank's device (here a CPU device), so device buffers go through host copies.
class StagedWorld final : public CommWorld {
 public:
  StagedWorld(ThreadWorld &inner, int size) : inner_(inner) {
    for (int r = 0; r < size; r++) devices_.push_back(make_cpu_device());
  }
  std::unique_ptr<Communicator> group(const std::string &name, const std::vector<int> &members,
                                      int me) override {
    return std::make_unique<StagedComm>(inner_.group(name, members, me), *devices_[(size_t)me]);
  }
  void abort(const std::string &why) override { inner_.abort(why); }
  std::string abort_reason() const override { return inner_.abort_reason(); }

 private:
  ThreadWorld &inner_;
  std::vector<std::unique_ptr<Device>> devices_;
};

class StagedThreadsBackend final : public comm_conformance::CommBackend {
 public:
  std::string name() const override { return "staged_threads"; }
  void run(int world_size, const Body &body) override {
    ThreadWorld world(world_size, kTimeout);
    StagedWorld staged(world, world_size);
    comm_conformance::run_on_threads(
        iota_ranks(world_size), [&](int me) { body(staged, me); },
        [&](int me, const std::string &what) {
          ADD_FAILURE() << "rank " << me << " threw: " << what;
          world.abort("rank " + std::to_string(me) + " failed: " + what);
        });
  }
};

StagedThreadsBackend g_staged;

std::vector<comm_conformance::CommSetup> threads_setups() {
  std::vector<comm_conformance::CommSetup> v;
  for (int w : kWorlds) v.push_back({&g_threads, w});
  for (int w : kWorlds) v.push_back({&g_staged, w});
  return v;
}

// ---------------------------------------------------------------------------
// Backend-specific: barrier rounds seen through shared memory, names, timeouts, abort.

TEST(ThreadComm, BarrierRounds) {
  for (int w : kWorlds) {
    std::atomic<int> arrived{0};
    run_ok(w, [&](ThreadWorld &world, int r) {
      auto c = world.group("world", iota_ranks(w), r);
      for (int round = 0; round < 5; round++) {
        if ((r + round) % 3 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(2));
        arrived.fetch_add(1);
        c->barrier();
        // Everyone has arrived at this round's barrier; nobody can be past the next one.
        int seen = arrived.load();
        EXPECT_GE(seen, w * (round + 1)) << "rank " << r << " round " << round;
        EXPECT_LT(seen, w * (round + 2)) << "rank " << r << " round " << round;
        c->barrier();  // keep the count of the next round out of this round's check
      }
    });
  }
}

TEST(ThreadComm, CommOpNames) {
  EXPECT_STREQ(comm_op_name(CommOp::all_reduce), "all_reduce");
  EXPECT_STREQ(comm_op_name(CommOp::all_gather), "all_gather");
  EXPECT_STREQ(comm_op_name(CommOp::reduce_scatter), "reduce_scatter");
  EXPECT_STREQ(comm_op_name(CommOp::broadcast), "broadcast");
  EXPECT_STREQ(comm_op_name(CommOp::send), "send");
  EXPECT_STREQ(comm_op_name(CommOp::recv), "recv");
  EXPECT_STREQ(comm_op_name(CommOp::barrier), "barrier");
}

// ---------------------------------------------------------------------------
// Timeout and abort.

// One rank never joins an all_reduce: the others give up after the world's
// timeout with a message naming the group and the missing rank.
void check_timeout(int w, const std::string &group, int skipper) {
  ThreadWorld world(w, 0.5);
  auto res = run_ranks(world, [&](int r) {
    auto c = world.group(group, iota_ranks(w), r);
    if (r == skipper) return;
    std::vector<float> buf(7, 1.0f);
    c->all_reduce(buf.data(), buf.size());
  });
  for (int r = 0; r < w; r++) {
    SCOPED_TRACE("rank " + std::to_string(r));
    if (r == skipper) {
      EXPECT_FALSE(res[r].threw) << res[r].what;
      continue;
    }
    ASSERT_TRUE(res[r].threw);
    EXPECT_EQ((int)res[r].code, (int)Status::comm_failure) << res[r].what;
    EXPECT_NE(res[r].what.find("communicator timeout"), std::string::npos) << res[r].what;
    EXPECT_NE(res[r].what.find("'" + group + "'"), std::string::npos) << res[r].what;
    EXPECT_NE(res[r].what.find("all_reduce"), std::string::npos) << res[r].what;
    EXPECT_NE(res[r].what.find("ranks still missing: " + std::to_string(skipper)), std::string::npos)
        << res[r].what;
    EXPECT_GE(res[r].seconds, 0.3);
    EXPECT_LT(res[r].seconds, 2.0);
  }
  EXPECT_TRUE(world.aborted());
}

TEST(ThreadComm, TimeoutNamesGroupAndMissingRank) {
  check_timeout(4, "world", 3);
  check_timeout(3, "dp", 0);
  check_timeout(2, "tp", 1);
}

TEST(ThreadComm, RecvTimesOut) {
  ThreadWorld world(2, 0.3);
  auto res = run_ranks(world, [&](int r) {
    auto c = world.group("pp", {0, 1}, r);
    if (r == 1) return;
    float x[4];
    c->recv(x, 4, 1);
  });
  ASSERT_TRUE(res[0].threw);
  EXPECT_EQ((int)res[0].code, (int)Status::comm_failure);
  EXPECT_NE(res[0].what.find("communicator timeout"), std::string::npos) << res[0].what;
  EXPECT_NE(res[0].what.find("'pp'"), std::string::npos) << res[0].what;
  EXPECT_NE(res[0].what.find("recv"), std::string::npos) << res[0].what;
  EXPECT_LT(res[0].seconds, 2.0);
  EXPECT_FALSE(res[1].threw);
}

// world.abort wakes ranks blocked in a collective and in a recv, long before the timeout.
TEST(ThreadComm, AbortWakesBlockedRanks) {
  ThreadWorld world(4, 30.0);
  auto res = run_ranks(world, [&](int r) {
    switch (r) {
      case 0:  // never joins anything; aborts once the others are blocked
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        world.abort("boom");
        return;
      case 1: {
        auto c = world.group("a", {0, 1, 3}, r);
        std::vector<double> buf(1001, 1.0);
        c->all_reduce(buf.data(), buf.size());
        return;
      }
      case 2: {
        auto c = world.group("p", {0, 2}, r);
        float x[3];
        c->recv(x, 3, 0);
        return;
      }
      case 3: {
        auto c = world.group("a", {0, 1, 3}, r);
        std::vector<double> buf(1001, 1.0);
        c->all_reduce(buf.data(), buf.size());
        return;
      }
    }
  });
  EXPECT_FALSE(res[0].threw) << res[0].what;
  for (int r = 1; r < 4; r++) {
    ASSERT_TRUE(res[r].threw) << "rank " << r;
    EXPECT_EQ((int)res[r].code, (int)Status::comm_failure) << res[r].what;
    EXPECT_NE(res[r].what.find("boom"), std::string::npos) << res[r].what;
    EXPECT_LT(res[r].seconds, 2.0) << "rank " << r;
  }
  EXPECT_TRUE(world.aborted());
  EXPECT_EQ(world.abort_reason(), "boom");
}

TEST(ThreadComm, AbortedWorldFailsLaterCollectives) {
  ThreadWorld world(2, 30.0);
  world.abort("earlier failure");
  world.abort("second reason is ignored");
  EXPECT_EQ(world.abort_reason(), "earlier failure");
  auto res = run_ranks(world, [&](int r) {
    auto c = world.group("g", {0, 1}, r);
    if (r == 0) c->barrier();  // rank 1 never comes: the abort, not the timeout, ends it
  });
  ASSERT_TRUE(res[0].threw);
  EXPECT_NE(res[0].what.find("earlier failure"), std::string::npos) << res[0].what;
  EXPECT_LT(res[0].seconds, 2.0);
}

// ---------------------------------------------------------------------------
// Argument errors.

// ---------------------------------------------------------------------------
// Argument errors.

TEST(ThreadComm, GroupMembershipErrors) {
  ThreadWorld world(4, kTimeout);
  EXPECT_EQ(world.size(), 4);
  EXPECT_EQ(world.timeout_s(), kTimeout);
  EXPECT_FALSE(world.aborted());
  expect_error([&] { world.group("tp", {0, 1}, 2); }, Status::invalid_argument, "not a member");
  expect_error([&] { world.group("tp", {0, 1}, -1); }, Status::invalid_argument, "not a member");
  expect_error([&] { world.group("tp", {}, 0); }, Status::invalid_argument, "not a member");
  expect_error([&] { world.group("tp", {0, 4}, 0); }, Status::invalid_argument, "outside the world");
  expect_error([&] { world.group("tp", {-1, 0}, 0); }, Status::invalid_argument, "outside the world");
  auto c = world.group("tp", {3, 1}, 1);  // group rank follows the list order
  EXPECT_EQ(c->rank(), 1);
  EXPECT_EQ(c->size(), 2);
  EXPECT_EQ(c->name(), "tp");
  EXPECT_EQ(c->members(), (std::vector<int>{3, 1}));
}

}  // namespace

namespace comm_conformance {
INSTANTIATE_TEST_SUITE_P(ThreadComm, CommConformance, ::testing::ValuesIn(threads_setups()),
                         setup_name);
}  // namespace comm_conformance
