// The NCCL communicator (ARCHITECTURE §2, §4): a group's collectives and
// point-to-point messages between GPUs, on device memory, one rank per GPU.
//
// Made from the group's host communicator (threads or MPI), which carries
// NCCL's unique id from group rank 0 to the others, so the same code serves
// thread ranks of one process with several GPUs and one rank per process
// under mpirun. Operations:
//   - collectives run on a stream of the communicator's own, after the work
//     queued on the device's stream; f32 and f64 are reduced by NCCL (its ring
//     or tree order: the result is the same on every member but not summed in
//     member order); bf16 and f16 are gathered and summed on the host in
//     member order in fp32 and rounded once, as every backend does (the
//     trainer's arrays are f32: these serve the API, not the training step);
//   - every collective completes before it returns: the host polls its
//     completion, NCCL's asynchronous error and the timeout, so a dead or
//     stopped peer ends the job with a message naming the group and the
//     operation, never a silent hang;
//   - send and recv go through the host group with host copies, as StagedComm
//     does: an NCCL send waits for its recv (on the GPU, and on the host for
//     a pair's first message), which the Communicator contract does not allow.
//     Pipeline boundaries therefore do not use NVLink yet.
// Its counters and timeline spans are the host communicator's.
//
// Several ranks cannot share one GPU in NCCL: such a layout keeps the host
// communicators (StagedComm). Without NCCL in the build, make_nccl_comm is an
// error saying so.
#pragma once
#include <memory>

#include "engine/comm/communicator.h"
#include "engine/device/device.h"

namespace ptdp {

// Whether this build has NCCL.
bool nccl_built();
// Collective over `host`'s members (each calls it on its rank's thread, with
// its own CUDA device). `host` must outlive the result.
std::unique_ptr<Communicator> make_nccl_comm(Communicator &host, Device &dev, double timeout_s);
// The same, owning `host`.
std::unique_ptr<Communicator> make_nccl_comm(std::unique_ptr<Communicator> host, Device &dev,
                                             double timeout_s);

}  // namespace ptdp
