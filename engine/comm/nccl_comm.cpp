#include "engine/comm/nccl_comm.h"

#include "engine/core/status.h"

#ifndef PTDP_WITH_NCCL

namespace ptdp {

bool nccl_built() { return false; }

std::unique_ptr<Communicator> make_nccl_comm(Communicator &host, Device &, double) {
  fail(Status::invalid_config, "group '", host.name(),
       "': this build of ptdp has no NCCL (nccl.h and libnccl were not found when it was "
       "configured); use --distributed-backend host");
}

std::unique_ptr<Communicator> make_nccl_comm(std::unique_ptr<Communicator> host, Device &dev,
                                             double timeout_s) {
  return make_nccl_comm(*host, dev, timeout_s);
}

}  // namespace ptdp

#else

#include <cuda_runtime.h>
#include <nccl.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

namespace ptdp {

namespace {

using Clock = std::chrono::steady_clock;

ncclDataType_t nccl_type(DType dt) {
  return dt == DType::f64 ? ncclFloat64 : ncclFloat32;  // f32 and f64 only reach here
}

class NcclComm final : public Communicator {
 public:
  NcclComm(Communicator &host, Device &dev, double timeout_s);
  NcclComm(std::unique_ptr<Communicator> host, Device &dev, double timeout_s)
      : NcclComm(*host, dev, timeout_s) {
    owned_ = std::move(host);
  }
  ~NcclComm() override;

  void all_reduce(void *buf, size_t n, DType dt, ReduceOp op) override;
  void all_gather(const void *in, void *out, size_t n, DType dt) override;
  void reduce_scatter(const void *in, void *out, size_t n, DType dt) override;
  void broadcast(void *buf, size_t n, DType dt, int root) override;
  void send(const void *buf, size_t n, DType dt, int peer) override;
  void recv(void *buf, size_t n, DType dt, int peer) override;
  void barrier() override;
  CommStats &stats() override { return host_.stats(); }

 private:
  void release();  // the CUDA and NCCL resources (destructor, failed constructor)
  void check_cuda(cudaError_t e, const char *what);
  void check_peer(int peer, const char *what) const;
  // Before an operation: usable, counted, this thread on the GPU.
  void begin(CommOp op, size_t bytes);
  // Waits out the nonblocking communicator's ncclInProgress; any error aborts.
  void settle(ncclResult_t rc, const std::string &what);
  // Makes the collective stream wait for the work queued on the device's stream so far.
  void after_compute();
  // Records an event on the collective stream and polls it, NCCL's
  // asynchronous error and the timeout.
  void finish(const std::string &what);
  [[noreturn]] void abort(const std::string &why);
  // Copies in the device's stream order (either side may be host memory).
  void copy(void *dst, const void *src, size_t bytes);
  void *scratch(size_t bytes);
  // Each member's `bytes` of `in`, in member order, on the host.
  std::vector<char> gather_to_host(const void *in, size_t bytes);

  std::unique_ptr<Communicator> owned_;  // when made owning its host communicator
  Communicator &host_;
  Device &dev_;
  double timeout_s_;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;  // the collectives'
  cudaEvent_t event_ = nullptr;
  DeviceArray<char> scratch_;  // grows only
  HostStage stage_{dev_};  // host copies of point-to-point messages (page-locked)
  bool aborted_ = false;
};

NcclComm::NcclComm(Communicator &host, Device &dev, double timeout_s)
    : Communicator(host.name(), host.members(), host.rank()),
      host_(host),
      dev_(dev),
      timeout_s_(timeout_s) {
  if (dev_.kind() != DeviceKind::cuda)
    fail(Status::invalid_config, "group '", name_, "': the nccl backend needs every rank on a CUDA ",
         "device; this rank is on ", dev_.name());
  dev_.bind_thread();
  try {
    // Group rank 0 makes the id; the host group carries its bytes (a
    // broadcast copies bits, whatever the dtype says). Not counted as the
    // group's traffic.
    ncclUniqueId id;
    if (rank_ == 0) {
      const ncclResult_t rc = ncclGetUniqueId(&id);
      if (rc != ncclSuccess)
        fail(Status::comm_failure, "group '", name_, "': ncclGetUniqueId: ", ncclGetErrorString(rc));
    }
    static_assert(sizeof(ncclUniqueId) % sizeof(double) == 0, "the id travels as doubles");
    const CommStats before = host_.stats();
    host_.broadcast(reinterpret_cast<double *>(&id), sizeof(ncclUniqueId) / sizeof(double), 0);
    host_.stats() = before;
    check_cuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
    check_cuda(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming), "cudaEventCreate");
    // Nonblocking, so that a member that never arrives is a timeout.
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    settle(ncclCommInitRankConfig(&comm_, size(), id, rank_, &config),
           "ncclCommInitRankConfig (ranks that share a GPU need --distributed-backend host)");
  } catch (...) {
    release();
    throw;
  }
}

NcclComm::~NcclComm() { release(); }

void NcclComm::release() {
  dev_.bind_thread();
  if (comm_) {
    // Every operation completed before it returned: finalizing waits for nothing.
    ncclResult_t rc = ncclCommFinalize(comm_);
    const auto deadline = Clock::now() + std::chrono::duration<double>(timeout_s_);
    while (rc == ncclInProgress && Clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::microseconds(100));
      if (ncclCommGetAsyncError(comm_, &rc) != ncclSuccess) break;
    }
    if (rc == ncclSuccess)
      ncclCommDestroy(comm_);
    else
      ncclCommAbort(comm_);
    comm_ = nullptr;
  }
  scratch_ = DeviceArray<char>();
  if (event_) cudaEventDestroy(event_);
  event_ = nullptr;
  if (stream_) cudaStreamDestroy(stream_);
  stream_ = nullptr;
}

void NcclComm::check_cuda(cudaError_t e, const char *what) {
  if (e != cudaSuccess)
    fail(Status::comm_failure, "group '", name_, "' (nccl): ", what, ": ", cudaGetErrorString(e));
}

void NcclComm::check_peer(int peer, const char *what) const {
  if (peer < 0 || peer >= size())
    fail(Status::invalid_argument, "group '", name_, "': ", what, " ", peer, " is outside [0, ",
         size(), ")");
}

void NcclComm::begin(CommOp op, size_t bytes) {
  if (aborted_)
    fail(Status::comm_failure, "group '", name_,
         "' (nccl): the communicator was aborted after an earlier failure");
  stats().add(op, (int64_t)bytes);
  dev_.bind_thread();
}

void NcclComm::abort(const std::string &why) {
  aborted_ = true;
  if (comm_) ncclCommAbort(comm_);
  comm_ = nullptr;
  fail(Status::comm_failure, "group '", name_, "' (nccl), rank ", members_[rank_], ": ", why);
}

void NcclComm::settle(ncclResult_t rc, const std::string &what) {
  const auto deadline = Clock::now() + std::chrono::duration<double>(timeout_s_);
  for (int polls = 0; rc == ncclInProgress; polls++) {
    if (Clock::now() > deadline)
      abort(what + " did not complete within " + std::to_string(timeout_s_) +
            " s (comm_timeout): a member of the group never called it");
    if (polls < 1000)
      std::this_thread::yield();
    else
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    if (ncclCommGetAsyncError(comm_, &rc) != ncclSuccess) break;
  }
  if (rc != ncclSuccess)
    abort(what + ": " + ncclGetErrorString(rc) + " (" + ncclGetLastError(comm_) + ")");
}

void NcclComm::after_compute() {
  check_cuda(cudaEventRecord(event_, (cudaStream_t)dev_.stream()), "cudaEventRecord");
  check_cuda(cudaStreamWaitEvent(stream_, event_, 0), "cudaStreamWaitEvent");
}

void NcclComm::finish(const std::string &what) {
  check_cuda(cudaEventRecord(event_, stream_), "cudaEventRecord");
  const auto deadline = Clock::now() + std::chrono::duration<double>(timeout_s_);
  for (int polls = 0;; polls++) {
    const cudaError_t e = cudaEventQuery(event_);
    if (e == cudaSuccess) return;
    if (e != cudaErrorNotReady) check_cuda(e, what.c_str());
    ncclResult_t a = ncclSuccess;
    if (ncclCommGetAsyncError(comm_, &a) == ncclSuccess && a != ncclSuccess && a != ncclInProgress)
      abort(what + ": " + ncclGetErrorString(a) + " (" + ncclGetLastError(comm_) + ")");
    if (Clock::now() > deadline)
      abort(what + " did not complete within " + std::to_string(timeout_s_) +
            " s (comm_timeout): a member of the group has stopped, failed or never called it");
    if (polls < 100)
      std::this_thread::yield();
    else
      std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

void NcclComm::copy(void *dst, const void *src, size_t bytes) {
  if (!bytes) return;
  cudaStream_t s = (cudaStream_t)dev_.stream();
  check_cuda(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, s), "cudaMemcpyAsync");
  check_cuda(cudaStreamSynchronize(s), "cudaStreamSynchronize");
}

void *NcclComm::scratch(size_t bytes) {
  // Stream-ordered memory of the device: after_compute() orders its use.
  if (scratch_.size() < bytes) scratch_.resize(dev_, bytes);
  return scratch_.data();
}

std::vector<char> NcclComm::gather_to_host(const void *in, size_t bytes) {
  const size_t all = bytes * (size_t)size();
  void *gathered = scratch(all);
  after_compute();
  settle(ncclAllGather(in, gathered, bytes, ncclUint8, comm_, stream_), "ncclAllGather");
  finish("all_gather");
  std::vector<char> host(all);
  copy(host.data(), gathered, all);
  return host;
}

void NcclComm::all_reduce(void *buf, size_t n, DType dt, ReduceOp op) {
  const size_t es = elem_size(dt, CommOp::all_reduce);
  CommTimer timer(stats());
  begin(CommOp::all_reduce, n * es);
  if (n == 0) return;
  if (dt == DType::bf16 || dt == DType::f16) {
    const std::vector<char> all = gather_to_host(buf, n * es);
    std::vector<const void *> parts;
    for (int m = 0; m < size(); m++) parts.push_back(all.data() + (size_t)m * n * es);
    std::vector<char> out(n * es);
    reduce_in_order(parts.data(), size(), out.data(), n, dt, op);
    copy(buf, out.data(), out.size());
    return;
  }
  after_compute();
  settle(ncclAllReduce(buf, buf, n, nccl_type(dt), op == ReduceOp::max ? ncclMax : ncclSum, comm_,
                       stream_),
         "ncclAllReduce");
  finish("all_reduce");
}

void NcclComm::all_gather(const void *in, void *out, size_t n, DType dt) {
  const size_t bytes = n * elem_size(dt, CommOp::all_gather);
  CommTimer timer(stats());
  begin(CommOp::all_gather, bytes);
  if (n == 0) return;
  after_compute();
  settle(ncclAllGather(in, out, bytes, ncclUint8, comm_, stream_), "ncclAllGather");
  finish("all_gather");
}

void NcclComm::reduce_scatter(const void *in, void *out, size_t n, DType dt) {
  const size_t es = elem_size(dt, CommOp::reduce_scatter);
  CommTimer timer(stats());
  begin(CommOp::reduce_scatter, n * es * (size_t)size());
  if (n == 0) return;
  if (dt == DType::bf16 || dt == DType::f16) {
    // Each member's whole input, then this rank's block summed in member order.
    const size_t block = n * es, whole = block * (size_t)size();
    const std::vector<char> all = gather_to_host(in, whole);
    std::vector<const void *> parts;
    for (int m = 0; m < size(); m++)
      parts.push_back(all.data() + (size_t)m * whole + (size_t)rank_ * block);
    std::vector<char> mine(block);
    reduce_in_order(parts.data(), size(), mine.data(), n, dt, ReduceOp::sum);
    copy(out, mine.data(), block);
    return;
  }
  after_compute();
  settle(ncclReduceScatter(in, out, n, nccl_type(dt), ncclSum, comm_, stream_),
         "ncclReduceScatter");
  finish("reduce_scatter");
}

void NcclComm::broadcast(void *buf, size_t n, DType dt, int root) {
  const size_t bytes = n * elem_size(dt, CommOp::broadcast);
  check_peer(root, "broadcast root");
  CommTimer timer(stats());
  begin(CommOp::broadcast, bytes);
  if (n == 0) return;
  after_compute();
  settle(ncclBroadcast(buf, buf, bytes, ncclUint8, root, comm_, stream_), "ncclBroadcast");
  finish("broadcast");
}

void NcclComm::barrier() {
  CommTimer timer(stats());
  begin(CommOp::barrier, 0);
  void *one = scratch(sizeof(float));
  after_compute();
  settle(ncclAllReduce(one, one, 1, ncclFloat32, ncclSum, comm_, stream_),
         "ncclAllReduce (barrier)");
  finish("barrier");
}

// Point to point goes through the host group: a send must not wait for its
// recv, which NCCL's sends do (on the GPU, and on the host for a pair's first
// message), and the host backends check sizes and dtypes. The host group
// counts these messages itself.
void NcclComm::send(const void *buf, size_t n, DType dt, int peer) {
  const size_t bytes = n * elem_size(dt, CommOp::send);
  dev_.bind_thread();
  char *host = stage_.reserve(bytes);
  copy(host, buf, bytes);
  host_.send(host, n, dt, peer);  // the backend copies: stage_ is free again
}

void NcclComm::recv(void *buf, size_t n, DType dt, int peer) {
  const size_t bytes = n * elem_size(dt, CommOp::recv);
  dev_.bind_thread();
  char *host = stage_.reserve(bytes);
  host_.recv(host, n, dt, peer);
  copy(buf, host, bytes);
}

}  // namespace

bool nccl_built() { return true; }

std::unique_ptr<Communicator> make_nccl_comm(Communicator &host, Device &dev, double timeout_s) {
  return std::make_unique<NcclComm>(host, dev, timeout_s);
}

std::unique_ptr<Communicator> make_nccl_comm(std::unique_ptr<Communicator> host, Device &dev,
                                             double timeout_s) {
  return std::make_unique<NcclComm>(std::move(host), dev, timeout_s);
}

}  // namespace ptdp

#endif  // PTDP_WITH_NCCL
