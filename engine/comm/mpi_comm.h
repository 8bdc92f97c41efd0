// The `mpi` backend (ARCHITECTURE §2): ranks in separate processes (one rank
// per MPI process, world rank = MPI_COMM_WORLD rank), CPU buffers, OpenMPI.
//
// Every operation is an MPI nonblocking call followed by a polling loop
// (MPI_Test plus a short sleep) that enforces the timeout. On expiry the rank
// asks the other members of the group what they are doing, prints
//   ptdp: rank R: communicator timeout after T s in group 'NAME' (world ranks ...)
//   during OP on rank R: ranks still missing: ...
// and calls MPI_Abort, so every process of the job exits non-zero instead of
// hanging (an exception on one process would leave the others waiting).
// Argument errors (a bad peer, a recv of the wrong size) throw ptdp::Error like
// the threads backend.
//
// f32/f64 reduce with MPI's own collectives. bf16/f16 travel as MPI_UINT16_T;
// MPI cannot add them, so their all_reduce and reduce_scatter are all-to-alls
// followed by the fixed-order fp32 reduction of communicator.h (all_reduce
// then all-gathers the reduced slices).
//
// This header does not include <mpi.h>: code that only picks a backend needs
// no MPI include path.
#pragma once
#include <cstdint>
#include <exception>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/comm/communicator.h"

namespace ptdp {

// When MPI is running in this process: prints "ptdp: <why>" and stops every
// process of the job (MPI_Abort). Otherwise does nothing and returns.
void abort_mpi_job_if_running(const std::string &why);

class MpiWorld final : public CommWorld {
 public:
  // True when this process was started by mpirun/mpiexec/srun (OMPI_COMM_WORLD_SIZE,
  // PMI_SIZE or PMIX_RANK is set).
  static bool launched_by_mpirun();

  // Initialises MPI (MPI_Init_thread asking for MPI_THREAD_MULTIPLE) unless it
  // already is. Collective over MPI_COMM_WORLD: every process constructs one.
  // MPI cannot start again after MPI_Finalize: once an MpiWorld that initialised
  // MPI is destroyed, constructing another throws Status::wrong_state.
  explicit MpiWorld(double timeout_s);
  // The one world of a process that mpirun started, made at the first call
  // (MPI starts once per process and ends at its exit). A process that exits
  // with a failure status leaves without the shutdown barrier and MPI_Finalize,
  // so that mpirun ends the job: its barrier met the others in whatever
  // collective they had gone on to (a gather of options read it as "0 script
  // options", or MPI aborted with MPI_ERR_TRUNCATE).
  static MpiWorld &of_this_process(double timeout_s);
  // Waits (with the timeout) until every process got here, then MPI_Finalize if
  // this object initialised MPI. Destroy the communicators first. While an
  // exception is propagating it does neither, so the process exits without
  // finalising and mpirun terminates the job.
  ~MpiWorld() override;
  MpiWorld(const MpiWorld &) = delete;
  MpiWorld &operator=(const MpiWorld &) = delete;

  int rank() const;
  int size() const;
  double timeout_s() const;
  // The thread support level MPI provided, e.g. "MPI_THREAD_MULTIPLE". Below
  // MPI_THREAD_MULTIPLE this backend serialises its own MPI calls with a mutex.
  std::string thread_level() const;
  bool thread_multiple() const;
  bool initialised_mpi() const;  // this object called MPI_Init_thread

  // The communicator of this process in the group `members` (MPI world ranks,
  // ordered by group rank); `me` must be this process's world rank. Collective
  // over MPI_COMM_WORLD: every process calls group() for its own groups in the
  // same order, with the same name in each call, and the groups of one call
  // partition the world (tp groups, then dp groups, ...); a process outside every
  // group of a call (e.g. a middle pipeline stage for the embedding groups) passes
  // {me}. Inconsistent calls throw ptdp::Error(invalid_argument) on every process.
  std::unique_ptr<Communicator> group(const std::string &name, const std::vector<int> &members,
                                      int me) override;

  // That every process was given the same `items` (name, value), compared by
  // hash (collective, with the timeout): else Error(invalid_config) on every
  // process naming the first item that differs and this process's value. A run
  // whose processes took other model options ended in MPI's own abort
  // (MPI_ERR_TRUNCATE) at its first collective.
  void agree(const std::string &what, const std::vector<std::pair<std::string, std::string>> &items);
  // Every process's `mine`, in world-rank order (collective, with the timeout;
  // `what` names the exchange in a timeout's message).
  std::vector<int64_t> gather_values(const std::string &what, int64_t mine);
  // Every process's verdict on a check it made alone (its own files), in one
  // collective: when one failed, all fail now, it with its own error (`mine`)
  // and the others naming it. (Each went on alone into the next collective,
  // where a process gone made the others' messages about something else.)
  void fail_together(const std::string &what, std::exception_ptr mine);

  // Prints "ptdp: rank N: <why>" to stderr and terminates the whole job (MPI_Abort).
  [[noreturn]] void abort(const std::string &why) override;
  // Always empty: a process that aborts does not come back to ask.
  std::string abort_reason() const override { return {}; }

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace ptdp
