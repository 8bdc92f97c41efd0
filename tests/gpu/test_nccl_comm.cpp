// The communicator conformance suite (tests/comm/comm_conformance.h) on the
// NCCL backend: thread ranks of one process, one GPU each, buffers in managed
// memory. World sizes up to the GPUs present (one GPU runs the one-rank
// cases). Exits 77 (skipped) without a GPU or without NCCL in the build.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "engine/comm/nccl_comm.h"
#include "engine/comm/thread_comm.h"
#include "engine/device/device.h"
#include "tests/comm/comm_conformance.h"

namespace {

using namespace ptdp;
using comm_conformance::iota_ranks;

constexpr double kTimeout = 60;

// Every group an NcclComm over its own GPU, its NCCL id carried by the
// threads backend's group of the same members.
class NcclWorld final : public CommWorld {
 public:
  NcclWorld(ThreadWorld &host, int size) : host_(host) {
    for (int r = 0; r < size; r++) devices_.push_back(make_device("cuda:" + std::to_string(r), r));
  }
  std::unique_ptr<Communicator> group(const std::string &name, const std::vector<int> &members,
                                      int me) override {
    return make_nccl_comm(host_.group(name, members, me), *devices_[(size_t)me], kTimeout);
  }
  void abort(const std::string &why) override { host_.abort(why); }
  std::string abort_reason() const override { return host_.abort_reason(); }

 private:
  ThreadWorld &host_;
  std::vector<std::unique_ptr<Device>> devices_;
};

class NcclBackend final : public comm_conformance::CommBackend {
 public:
  std::string name() const override { return "nccl"; }
  std::string unavailable() const override {
    if (!nccl_built()) return "this build has no NCCL";
    if (cuda_device_count() == 0) return "no CUDA device";
    return "";
  }
  void run(int world_size, const Body &body) override {
    ThreadWorld host(world_size, kTimeout);
    NcclWorld world(host, world_size);
    comm_conformance::run_on_threads(
        iota_ranks(world_size),
        [&](int me) {
          cudaSetDevice(me);  // the rank's GPU for the suite's own CUDA calls
          body(world, me);
        },
        [&](int me, const std::string &what) {
          ADD_FAILURE() << "rank " << me << " threw: " << what;
          host.abort("rank " + std::to_string(me) + " failed: " + what);
        });
  }
  // Managed memory: NCCL reads it on the device, the suite checks it on the host.
  void *alloc(size_t bytes) override {
    void *p = nullptr;
    if (cudaMallocManaged(&p, bytes ? bytes : 1) != cudaSuccess) std::abort();
    return p;
  }
  void release(void *p) override { cudaFree(p); }
};

NcclBackend g_nccl;

std::vector<comm_conformance::CommSetup> nccl_setups() {
  std::vector<comm_conformance::CommSetup> v{{&g_nccl, 1}};
  const int gpus = nccl_built() ? cuda_device_count() : 0;
  for (int w : {2, 4, 8})
    if (w <= gpus) v.push_back({&g_nccl, w});
  return v;
}

}  // namespace

namespace comm_conformance {
INSTANTIATE_TEST_SUITE_P(Nccl, CommConformance, ::testing::ValuesIn(nccl_setups()), setup_name);
}  // namespace comm_conformance

int main(int argc, char **argv) {
  if (!nccl_built() || cuda_device_count() == 0) {
    std::printf("%s: skipped\n", nccl_built() ? "no CUDA device" : "no NCCL in this build");
    return 77;
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
