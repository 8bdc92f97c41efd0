// The `mpi` communicator backends (engine/comm/mpi_comm.h: one rank per
// process; engine/comm/mpi_threads_comm.h: two thread ranks per process), run under
//   mpirun --allow-run-as-root --oversubscribe -np N test_comm_mpi      (N = 2, 4, ...)
// Both run the conformance suite of every backend (tests/comm/comm_conformance.h:
// every collective and point-to-point transfer in every dtype, several groups,
// counters, argument errors); then what only the mpi backend has: collective
// group creation that fails on every process alike.
// Every process runs the same GoogleTest cases in the same order (the cases are
// collective); expected values are computed locally. Rank 0 prints the usual
// GoogleTest report, the other ranks print only their failures, prefixed
// "[rank R]". The exit code is non-zero on every rank if any rank failed.
#include <gtest/gtest.h>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "engine/comm/communicator.h"
#include "engine/comm/mpi_comm.h"
#include "engine/comm/mpi_threads_comm.h"
#include "engine/core/status.h"
#include "tests/comm/comm_conformance.h"

using namespace ptdp;

namespace {

// Generous: a test that works never waits for it; a broken one aborts instead of hanging.
constexpr double kTimeout = 60.0;
constexpr int kThreadRanks = 2;  // ranks per process of the mpi-threads backend

MpiWorld *g_world = nullptr;
MpiThreadsWorld *g_threads_world = nullptr;  // null without MPI_THREAD_MULTIPLE
int R = 0, N = 1;  // world rank and size (processes)
std::unique_ptr<Communicator> g_all;

// One rank per process: the body runs on this process's rank; a body that
// throws ends the job (the other processes would wait in their next collective).
class MpiBackend final : public comm_conformance::CommBackend {
 public:
  std::string name() const override { return "mpi"; }
  bool threads_per_rank() const override { return g_world->thread_multiple(); }
  void run(int world_size, const Body &body) override {
    ASSERT_EQ(world_size, N);
    try {
      body(*g_world, R);
    } catch (const std::exception &e) {
      g_world->abort(std::string("the test body threw: ") + e.what());
    }
  }
};

// kThreadRanks ranks per process, each a thread: world rank R * k + i.
class MpiThreadsBackend final : public comm_conformance::CommBackend {
 public:
  std::string name() const override { return "mpi_threads"; }
  std::string unavailable() const override {
    return g_threads_world ? "" : "MPI provided " + g_world->thread_level();
  }
  void run(int world_size, const Body &body) override {
    ASSERT_EQ(world_size, N * kThreadRanks);
    std::vector<int> mine;
    for (int i = 0; i < kThreadRanks; i++) mine.push_back(R * kThreadRanks + i);
    comm_conformance::run_on_threads(
        mine, [&](int me) { body(*g_threads_world, me); },
        [&](int me, const std::string &what) {
          g_world->abort("rank " + std::to_string(me) + ": the test body threw: " + what);
        });
  }
};

MpiBackend g_mpi;
MpiThreadsBackend g_mpi_threads;

std::vector<comm_conformance::CommSetup> mpi_setups() {
  return {{&g_mpi, N}, {&g_mpi_threads, N * kThreadRanks}};
}

// ---------------------------------------------------------------------------

TEST(MpiWorld, Basics) {
  EXPECT_TRUE(MpiWorld::launched_by_mpirun());
  std::vector<int> all(N), rev(N);
  for (int r = 0; r < N; r++) all[r] = r, rev[r] = N - 1 - r;
  auto reversed = g_world->group("reversed", rev, R);
  EXPECT_EQ(g_all->size(), N);
  EXPECT_EQ(g_all->rank(), R);
  EXPECT_EQ(reversed->rank(), N - 1 - R);
  EXPECT_EQ(g_world->timeout_s(), kTimeout);
  const CommWorld &as_comm_world = *g_world;  // the backend-neutral interface
  EXPECT_EQ(as_comm_world.abort_reason(), "");
  if (R == 0)
    std::printf("MPI world of %d processes, thread support provided: %s\n", N,
                g_world->thread_level().c_str());
}

// Inconsistent group() calls throw on every process (none hangs in MPI_Comm_split),
// and group creation still works afterwards.
template <class F>
void expect_group_error(F f, const std::string &text) {
  try {
    f();
    ADD_FAILURE() << "no error; expected: " << text;
  } catch (const Error &e) {
    EXPECT_EQ(e.code(), Status::invalid_argument) << e.what();
    EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << e.what();
  }
}

TEST(Groups, InconsistentCreationFailsEverywhere) {
  std::vector<int> all(N), rotated(N);
  for (int r = 0; r < N; r++) all[r] = r, rotated[r] = (r + 1) % N;
  // rank 0 lists the world in order, the others rotated: rank 0 leads a group that
  // nobody else joins
  expect_group_error([&] { g_world->group("bad_lists", R == 0 ? all : rotated, R); },
                     "group 'bad_lists': ");
  expect_group_error([&] { g_world->group("not_member", {(R + 1) % N}, R); },
                     "world rank 0 passed an invalid member list");
  expect_group_error([&] { g_world->group(R == 0 ? "tp" : "dp", all, R); },
                     "group creation out of step");
  expect_group_error([&] { g_world->group("wrong_me", all, (R + 1) % N); },
                     "passed an invalid member list");
  auto ok = g_world->group("after_errors", all, R);
  float x = 1;
  ok->all_reduce(&x, 1);
  EXPECT_EQ(x, N);
}

// Failures of the other ranks, one line each, prefixed with the rank.
class RankFailurePrinter : public ::testing::EmptyTestEventListener {
  void OnTestPartResult(const ::testing::TestPartResult &r) override {
    if (r.failed())
      std::fprintf(stderr, "[rank %d] %s:%d: %s\n", R, r.file_name() ? r.file_name() : "?",
                   r.line_number(), r.summary());
  }
};

}  // namespace

namespace comm_conformance {
INSTANTIATE_TEST_SUITE_P(Mpi, CommConformance, ::testing::ValuesIn(mpi_setups()), setup_name);
}  // namespace comm_conformance

int main(int argc, char **argv) {
  int failed = 1;
  {
    MpiWorld world(kTimeout);
    g_world = &world;
    R = world.rank();
    N = world.size();
    ::testing::InitGoogleTest(&argc, argv);  // after N is known: it names the suite's instances
    std::vector<int> all(N);
    for (int r = 0; r < N; r++) all[r] = r;
    g_all = world.group("all", all, R);
    std::unique_ptr<MpiThreadsWorld> threads_world;
    if (world.thread_multiple()) {
      threads_world = std::make_unique<MpiThreadsWorld>(world, kThreadRanks, kTimeout);
      g_threads_world = threads_world.get();
    }
    if (R != 0) {
      auto &listeners = ::testing::UnitTest::GetInstance()->listeners();
      delete listeners.Release(listeners.default_result_printer());
      listeners.Append(new RankFailurePrinter);
    }
    float f = RUN_ALL_TESTS() != 0 ? 1.f : 0.f;
    g_all->all_reduce(&f, 1, ReduceOp::max);
    failed = f != 0;
    if (R == 0 && failed) std::fprintf(stderr, "FAILED on at least one rank\n");
    g_all.reset();
    g_threads_world = nullptr;
  }  // ~MpiWorld: shutdown barrier, MPI_Finalize
  return failed;
}
