// The rank runner: a Trainer's operations run on every rank of this process,
// each rank on a thread of its own bound to its device, and one rank's failure
// stops the others.
#include <omp.h>
#include <xmmintrin.h>

#include <exception>
#include <functional>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "engine/core/status.h"
#include "engine/train/trainer.h"
#include "engine/train/trainer_rank.h"

namespace ptdp {

// Runs fn on every rank, each on its own thread (inline when there is one rank).
// A failure on any rank aborts the world, so that no rank waits forever, and
// is rethrown here; the job cannot continue after it.
void Trainer::run_on_ranks(const std::function<void(Rank &)> &fn) {
  if (!failure_.empty())
    fail(Status::wrong_state, "the job failed earlier and cannot continue: ", failure_);
  auto guarded = [&](Rank &r) {
    omp_set_num_threads(threads_per_rank_);
    r.device->bind_thread();  // its GPU current; on the CPU, denormals flushed
    fn(r);
  };
  if (ranks_.size() == 1) {
    // Runs on the caller's thread: leave its FP mode and OpenMP setting as found.
    const unsigned csr = _mm_getcsr();
    const int omp_threads = omp_get_max_threads();
    struct Restore {
      unsigned csr;
      int omp;
      ~Restore() {
        _mm_setcsr(csr);
        omp_set_num_threads(omp);
      }
    } restore{csr, omp_threads};
    try {
      guarded(*ranks_[0]);
    } catch (const std::exception &e) {
      // Other processes may be waiting for this rank: stop them (mpi exits here).
      if (world_size() > 1)
        world_->abort("rank " + std::to_string(ranks_[0]->world_rank) + " failed: " + e.what());
      throw;
    }
    return;
  }
  std::vector<std::exception_ptr> errors(ranks_.size());
  std::vector<std::thread> threads;
  auto join_all = [&] {
    for (auto &t : threads) t.join();
  };
  for (size_t i = 0; i < ranks_.size(); i++) {
    const std::string who = "rank " + std::to_string(ranks_[i]->world_rank);
    try {
      threads.emplace_back([&, i, who] {
        try {
          guarded(*ranks_[i]);
        } catch (const std::exception &e) {
          errors[i] = std::current_exception();
          world_->abort(who + " failed: " + e.what());
        } catch (...) {
          errors[i] = std::current_exception();
          world_->abort(who + " failed");
        }
      });
    } catch (const std::system_error &e) {  // no thread for this rank: stop the others
      world_->abort("cannot start a thread for " + who + ": " + e.what());
      join_all();
      failure_ = "cannot start a thread for " + who;
      fail(Status::internal, "cannot start a thread for ", who, ": ", e.what());
    }
  }
  join_all();
  // Report the root cause: a rank's own error before the others' aborts.
  std::exception_ptr first;
  for (auto &e : errors) {
    if (!e) continue;
    try {
      std::rethrow_exception(e);
    } catch (const Error &err) {
      if (!first || err.code() != Status::comm_failure) first = e;
      if (err.code() != Status::comm_failure) break;
    } catch (...) {
      first = e;
      break;
    }
  }
  if (first) {
    failure_ = world_->abort_reason();
    std::rethrow_exception(first);
  }
}

}  // namespace ptdp
