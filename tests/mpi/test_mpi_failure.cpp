// Failure modes of the `mpi` backend; every mode must end the whole job with a
// non-zero exit code and a message, never hang. Run under mpirun with >= 2
// processes through expect_failure.sh, which checks the exit code and the output.
//
//   test_mpi_failure skip        rank 1 skips all_reduce #2 of group 'tp' and waits
//                                in a barrier of group 'world' instead; rank 0 (timeout
//                                3 s; the others have 30 s) reports the timeout and
//                                what rank 1 is doing
//   test_mpi_failure skip_sleep  the same, but rank 1 sleeps instead (no answer)
//   test_mpi_failure nosend      rank 0 waits for a message from rank 1 that is never
//                                sent (group 'pp')
//   test_mpi_failure unreceived  rank 0 sends a large message to rank 1 (group 'pp'),
//                                which never receives it, and destroys the group:
//                                the destructor waits for the delivery and times out
//   test_mpi_failure kill        rank 1 raises SIGKILL while the world is in the middle
//                                of a series of large all_reduce calls; mpirun ends the job
//   test_mpi_failure throw       rank 1 leaves main with an exception (no MPI_Finalize)
//                                while the others wait in a barrier; mpirun ends the job
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "engine/comm/communicator.h"
#include "engine/comm/mpi_comm.h"
#include "engine/core/status.h"

using namespace ptdp;

namespace {

void sleep_s(double s) { std::this_thread::sleep_for(std::chrono::duration<double>(s)); }

int run(const std::string &mode) {
  bool short_timeout_on_0 = mode == "skip" || mode == "skip_sleep" || mode == "nosend" ||
                            mode == "unreceived";
  // A short timeout on rank 0 only makes the report deterministic: rank 0 times out first.
  const char *env_rank = std::getenv("OMPI_COMM_WORLD_RANK");
  if (!env_rank) env_rank = std::getenv("PMI_RANK");
  int world_rank_guess = env_rank ? std::atoi(env_rank) : -1;
  MpiWorld world(short_timeout_on_0 && world_rank_guess == 0 ? 3.0 : 30.0);
  const int R = world.rank(), N = world.size();
  if (N < 2) {
    std::fprintf(stderr, "needs at least 2 processes\n");
    return 2;
  }
  std::vector<int> all(N);
  for (int r = 0; r < N; r++) all[r] = r;
  auto w = world.group("world", all, R);
  auto tp = world.group("tp", all, R);
  std::vector<int> pair = {R - R % 2, R - R % 2 + 1};
  if (pair[1] >= N) pair = {R};
  auto pp = world.group("pp", pair, R);
  std::vector<float> x(1000, 1.f);
  tp->all_reduce(x.data(), x.size());  // all_reduce #1 of 'tp' works
  w->barrier();
  std::fprintf(stderr, "rank %d: setup done (%s)\n", R, world.thread_level().c_str());

  if (mode == "skip" || mode == "skip_sleep") {
    if (R == 1) {
      std::fprintf(stderr, "rank 1: skipping all_reduce #2 of group 'tp'\n");
      if (mode == "skip") w->barrier();
      else sleep_s(30);
    } else {
      tp->all_reduce(x.data(), x.size());
      w->barrier();
    }
  } else if (mode == "nosend") {
    if (R == 0) {
      pp->recv(x.data(), 10, 1);
    } else if (R == 1) {
      std::fprintf(stderr, "rank 1: not sending to rank 0\n");
      w->barrier();
    } else {
      if (pp->size() == 2) {
        pp->send(x.data(), 10, 1 - pp->rank());
        pp->recv(x.data(), 10, 1 - pp->rank());
      }
      w->barrier();
    }
  } else if (mode == "unreceived") {
    if (R == 0) {
      std::vector<float> big(3000001, 1.f);  // large: delivered only when received
      pp->send(big.data(), big.size(), 1);
      pp.reset();
    } else if (R == 1) {
      std::fprintf(stderr, "rank 1: not receiving from rank 0\n");
    }
    w->barrier();
  } else if (mode == "kill") {
    std::vector<float> big(1 << 20, 1.f);
    std::thread killer;
    if (R == 1)
      killer = std::thread([] {
        sleep_s(0.3);
        std::fprintf(stderr, "rank 1: raising SIGKILL in the middle of an all_reduce\n");
        std::fflush(stderr);
        std::raise(SIGKILL);
      });
    for (int i = 0; i < 100000; i++) w->all_reduce(big.data(), big.size());
    if (killer.joinable()) killer.join();
  } else if (mode == "throw") {
    if (R == 1) fail(Status::internal, "rank 1 fails on purpose");
    w->barrier();
  } else {
    std::fprintf(stderr, "unknown mode '%s'\n", mode.c_str());
    return 2;
  }
  std::printf("rank %d: not reached: the job should have failed\n", R);
  return 0;
}

}  // namespace

int main(int argc, char **argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s skip|skip_sleep|nosend|unreceived|kill|throw\n", argv[0]);
    return 2;
  }
  try {
    return run(argv[1]);
  } catch (const Error &e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
