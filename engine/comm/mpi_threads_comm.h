// Several ranks per process under mpirun: the ranks are threads of their
// processes and every transfer between two ranks, in the same process or not,
// is an MPI point-to-point message tagged with the (group, sender, receiver)
// world ranks. Collectives are built from those messages: each member receives
// every other member's data and reduces it in member order, so results are
// bit-identical on all members. Meant for CPU-scale jobs; one rank per process
// uses the MPI collectives of the `mpi` backend instead.
// Timeouts as in the other backends: the message names the group, the
// operation and the ranks that have not delivered; the job then aborts.
#pragma once
#include <memory>

#include "engine/comm/communicator.h"
#include "engine/comm/mpi_comm.h"

namespace ptdp {

class MpiThreadsWorld final : public CommWorld {
 public:
  // World rank r lives in process r / ranks_per_process. Collective over the
  // processes (duplicates MPI_COMM_WORLD).
  MpiThreadsWorld(MpiWorld &mpi, int ranks_per_process, double timeout_s);
  ~MpiThreadsWorld() override;
  std::unique_ptr<Communicator> group(const std::string &name, const std::vector<int> &members,
                                      int me) override;
  [[noreturn]] void abort(const std::string &why) override { mpi_.abort(why); }
  std::string abort_reason() const override { return {}; }

  struct Impl;

 private:
  MpiWorld &mpi_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ptdp
