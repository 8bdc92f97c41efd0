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
#include <deque>
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
  // Collectives; messages to higher group ranks; messages to lower ones. Each
  // lane has its own NCCL communicator and stream.
  enum Lane { kColl, kUp, kDown, kLanes };
  struct Header {
    int64_t n, dt;
  };
  struct Sent {  // a send's own copy: header then payload, freed once sent
    void *buf;
    cudaEvent_t done;
    Header header;  // (for a send to itself, read by its recv)
  };

  void check_cuda(cudaError_t e, const char *what);
  void check_peer(int peer, const char *what) const;
  void check_usable() const;
  // Waits out a nonblocking communicator's ncclInProgress; any error aborts.
  void settle(int lane, ncclResult_t rc, const std::string &what);
  // Makes `lane` wait for the work queued on the device's stream so far.
  void after_compute(int lane);
  // Records an event on `lane` and polls it, NCCL's asynchronous errors and the timeout.
  void finish(int lane, const std::string &what);
  [[noreturn]] void abort_all(const std::string &why);
  void reap_sends(bool wait_all);
  // A 16-bit reduction in member order on the host (every backend's contract):
  // each member's `in` (count elements) gathered, then reduced.
  std::vector<char> gather_to_host(const void *in, size_t bytes);
  void send_header(int lane, int peer, void *buf, size_t bytes);

  std::unique_ptr<Communicator> owned_;  // when made owning its host communicator
  Communicator &host_;
  Device &dev_;
  double timeout_s_;
  ncclComm_t comm_[kLanes] = {};
  cudaStream_t stream_[kLanes] = {};
  cudaEvent_t event_ = nullptr;
  void *header_ = nullptr;   // device: a received header
  void *scratch_ = nullptr;  // device: the barrier's float, 16-bit gathers
  size_t scratch_bytes_ = 0;
  std::deque<Sent> sends_, to_self_;
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
  // Group rank 0 makes the ids; the host group carries their bytes (a
  // broadcast copies bits, whatever the dtype says).
  ncclUniqueId ids[kLanes];
  static_assert(sizeof ids % sizeof(double) == 0, "ids travel as doubles");
  if (rank_ == 0)
    for (auto &id : ids) {
      const ncclResult_t rc = ncclGetUniqueId(&id);
      if (rc != ncclSuccess)
        fail(Status::comm_failure, "group '", name_, "': ncclGetUniqueId: ", ncclGetErrorString(rc));
    }
  constexpr size_t kIdDoubles = sizeof(ncclUniqueId) * kLanes / sizeof(double);
  host_.broadcast(reinterpret_cast<double *>(ids), kIdDoubles, 0);
  for (int l = 0; l < kLanes; l++)
    check_cuda(cudaStreamCreateWithFlags(&stream_[l], cudaStreamNonBlocking), "cudaStreamCreate");
  check_cuda(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming), "cudaEventCreate");
  check_cuda(cudaMalloc(&header_, sizeof(Header)), "cudaMalloc");
  // Nonblocking communicators, so that a member that never arrives is a timeout.
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclResult_t rc[kLanes];
  for (int l = 0; l < kLanes; l++)
    rc[l] = ncclCommInitRankConfig(&comm_[l], size(), ids[l], rank_, &config);
  for (int l = 0; l < kLanes; l++) settle(l, rc[l], "ncclCommInitRankConfig");
}

NcclComm::~NcclComm() {
  dev_.bind_thread();
  // A send nobody received would keep its communicator busy forever: abort
  // rather than wait for it (the job is ending).
  bool unmatched = false;
  for (Sent &s : sends_) unmatched |= cudaEventQuery(s.done) != cudaSuccess;
  for (int l = 0; l < kLanes; l++) {
    if (!comm_[l]) continue;
    if (aborted_ || unmatched) {
      ncclCommAbort(comm_[l]);
      continue;
    }
    ncclResult_t rc = ncclCommFinalize(comm_[l]);
    const auto deadline = Clock::now() + std::chrono::duration<double>(timeout_s_);
    while (rc == ncclInProgress && Clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::microseconds(100));
      ncclCommGetAsyncError(comm_[l], &rc);
    }
    if (rc == ncclSuccess)
      ncclCommDestroy(comm_[l]);
    else
      ncclCommAbort(comm_[l]);
  }
  for (int l = 0; l < kLanes; l++)
    if (stream_[l]) cudaStreamSynchronize(stream_[l]);
  for (auto *q : {&sends_, &to_self_})
    for (Sent &s : *q) {
      if (s.done) cudaEventDestroy(s.done);
      cudaFree(s.buf);
    }
  if (header_) cudaFree(header_);
  if (scratch_) cudaFree(scratch_);
  if (event_) cudaEventDestroy(event_);
  for (int l = 0; l < kLanes; l++)
    if (stream_[l]) cudaStreamDestroy(stream_[l]);
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

void NcclComm::check_usable() const {
  if (aborted_)
    fail(Status::comm_failure, "group '", name_,
         "' (nccl): the communicator was aborted after an earlier failure");
}

void NcclComm::abort_all(const std::string &why) {
  aborted_ = true;
  for (ncclComm_t c : comm_)
    if (c) ncclCommAbort(c);
  for (ncclComm_t &c : comm_) c = nullptr;
  fail(Status::comm_failure, "group '", name_, "' (nccl), rank ", members_[rank_], ": ", why);
}

void NcclComm::settle(int lane, ncclResult_t rc, const std::string &what) {
  const auto deadline = Clock::now() + std::chrono::duration<double>(timeout_s_);
  while (rc == ncclInProgress) {
    if (Clock::now() > deadline)
      abort_all(what + " did not complete within " + std::to_string(timeout_s_) +
                " s (comm_timeout): a member of the group never called it");
    std::this_thread::yield();
    if (ncclCommGetAsyncError(comm_[lane], &rc) != ncclSuccess) break;
  }
  if (rc != ncclSuccess)
    abort_all(what + ": " + ncclGetErrorString(rc) + " (" + ncclGetLastError(comm_[lane]) + ")");
}

void NcclComm::after_compute(int lane) {
  check_cuda(cudaEventRecord(event_, (cudaStream_t)dev_.stream()), "cudaEventRecord");
  check_cuda(cudaStreamWaitEvent(stream_[lane], event_, 0), "cudaStreamWaitEvent");
}

void NcclComm::finish(int lane, const std::string &what) {
  check_cuda(cudaEventRecord(event_, stream_[lane]), "cudaEventRecord");
  const auto deadline = Clock::now() + std::chrono::duration<double>(timeout_s_);
  for (int polls = 0;; polls++) {
    const cudaError_t e = cudaEventQuery(event_);
    if (e == cudaSuccess) return;
    if (e != cudaErrorNotReady) check_cuda(e, what.c_str());
    for (int l = 0; l < kLanes; l++) {
      ncclResult_t a = ncclSuccess;
      if (ncclCommGetAsyncError(comm_[l], &a) == ncclSuccess && a != ncclSuccess &&
          a != ncclInProgress)
        abort_all(what + ": " + ncclGetErrorString(a) + " (" + ncclGetLastError(comm_[l]) + ")");
    }
    if (Clock::now() > deadline)
      abort_all(what + " did not complete within " + std::to_string(timeout_s_) +
                " s (comm_timeout): a member of the group has stopped, failed or never called it");
    if (polls < 100)
      std::this_thread::yield();
    else
      std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

void NcclComm::reap_sends(bool wait_all) {
  while (!sends_.empty()) {
    Sent &s = sends_.front();
    if (wait_all)
      check_cuda(cudaEventSynchronize(s.done), "cudaEventSynchronize");
    else if (cudaEventQuery(s.done) != cudaSuccess)
      break;
    cudaEventDestroy(s.done);
    dev_.free(s.buf);
    sends_.pop_front();
  }
}

std::vector<char> NcclComm::gather_to_host(const void *in, size_t bytes) {
  const size_t all = bytes * (size_t)size();
  if (scratch_bytes_ < all) {
    if (scratch_) cudaFree(scratch_);
    scratch_ = nullptr;
    check_cuda(cudaMalloc(&scratch_, all), "cudaMalloc");
    scratch_bytes_ = all;
  }
  after_compute(kColl);
  settle(kColl, ncclAllGather(in, scratch_, bytes, ncclUint8, comm_[kColl], stream_[kColl]),
         "ncclAllGather");
  finish(kColl, "all_gather");
  std::vector<char> host(all);
  check_cuda(cudaMemcpy(host.data(), scratch_, all, cudaMemcpyDeviceToHost), "cudaMemcpy");
  return host;
}

void NcclComm::all_reduce(void *buf, size_t n, DType dt, ReduceOp op) {
  const size_t es = elem_size(dt, CommOp::all_reduce);
  check_usable();
  CommTimer timer(stats());
  stats().add(CommOp::all_reduce, (int64_t)(n * es));
  if (n == 0) return;
  dev_.bind_thread();
  if (dt == DType::bf16 || dt == DType::f16) {
    const std::vector<char> all = gather_to_host(buf, n * es);
    std::vector<const void *> parts;
    for (int m = 0; m < size(); m++) parts.push_back(all.data() + (size_t)m * n * es);
    std::vector<char> out(n * es);
    reduce_in_order(parts.data(), size(), out.data(), n, dt, op);
    check_cuda(cudaMemcpy(buf, out.data(), out.size(), cudaMemcpyHostToDevice), "cudaMemcpy");
    return;
  }
  after_compute(kColl);
  settle(kColl,
         ncclAllReduce(buf, buf, n, nccl_type(dt), op == ReduceOp::max ? ncclMax : ncclSum,
                       comm_[kColl], stream_[kColl]),
         "ncclAllReduce");
  finish(kColl, "all_reduce");
}

void NcclComm::all_gather(const void *in, void *out, size_t n, DType dt) {
  const size_t bytes = n * elem_size(dt, CommOp::all_gather);
  check_usable();
  CommTimer timer(stats());
  stats().add(CommOp::all_gather, (int64_t)bytes);
  if (n == 0) return;
  dev_.bind_thread();
  after_compute(kColl);
  settle(kColl, ncclAllGather(in, out, bytes, ncclUint8, comm_[kColl], stream_[kColl]),
         "ncclAllGather");
  finish(kColl, "all_gather");
}

void NcclComm::reduce_scatter(const void *in, void *out, size_t n, DType dt) {
  const size_t es = elem_size(dt, CommOp::reduce_scatter);
  check_usable();
  CommTimer timer(stats());
  stats().add(CommOp::reduce_scatter, (int64_t)(n * es * (size_t)size()));
  if (n == 0) return;
  dev_.bind_thread();
  if (dt == DType::bf16 || dt == DType::f16) {
    // Each member's whole input, then this rank's block summed in member order.
    const size_t block = n * es, whole = block * (size_t)size();
    const std::vector<char> all = gather_to_host(in, whole);
    std::vector<const void *> parts;
    for (int m = 0; m < size(); m++)
      parts.push_back(all.data() + (size_t)m * whole + (size_t)rank_ * block);
    std::vector<char> mine(block);
    reduce_in_order(parts.data(), size(), mine.data(), n, dt, ReduceOp::sum);
    check_cuda(cudaMemcpy(out, mine.data(), block, cudaMemcpyHostToDevice), "cudaMemcpy");
    return;
  }
  after_compute(kColl);
  settle(kColl,
         ncclReduceScatter(in, out, n, nccl_type(dt), ncclSum, comm_[kColl], stream_[kColl]),
         "ncclReduceScatter");
  finish(kColl, "reduce_scatter");
}

void NcclComm::broadcast(void *buf, size_t n, DType dt, int root) {
  const size_t bytes = n * elem_size(dt, CommOp::broadcast);
  check_peer(root, "broadcast root");
  check_usable();
  CommTimer timer(stats());
  stats().add(CommOp::broadcast, (int64_t)bytes);
  if (n == 0) return;
  dev_.bind_thread();
  after_compute(kColl);
  settle(kColl, ncclBroadcast(buf, buf, bytes, ncclUint8, root, comm_[kColl], stream_[kColl]),
         "ncclBroadcast");
  finish(kColl, "broadcast");
}

void NcclComm::barrier() {
  check_usable();
  CommTimer timer(stats());
  stats().add(CommOp::barrier, 0);
  dev_.bind_thread();
  if (scratch_bytes_ < sizeof(float)) {
    if (scratch_) cudaFree(scratch_);
    scratch_ = nullptr;
    check_cuda(cudaMalloc(&scratch_, sizeof(float)), "cudaMalloc");
    scratch_bytes_ = sizeof(float);
  }
  settle(kColl,
         ncclAllReduce(scratch_, scratch_, 1, ncclFloat32, ncclSum, comm_[kColl], stream_[kColl]),
         "ncclAllReduce (barrier)");
  finish(kColl, "barrier");
}

// A message is a header {n, dtype} and then the payload, so that a recv of
// the wrong size or dtype is an error, as on the other backends.
void NcclComm::send(const void *buf, size_t n, DType dt, int peer) {
  const size_t bytes = n * elem_size(dt, CommOp::send);
  check_peer(peer, "send peer");
  check_usable();
  CommTimer timer(stats());
  stats().add(CommOp::send, (int64_t)bytes);
  dev_.bind_thread();
  reap_sends(false);
  Sent s{dev_.allocate(sizeof(Header) + bytes), nullptr, Header{(int64_t)n, (int64_t)dt}};
  cudaStream_t compute = (cudaStream_t)dev_.stream();
  check_cuda(cudaMemcpyAsync(s.buf, &s.header, sizeof(Header), cudaMemcpyHostToDevice, compute),
             "cudaMemcpyAsync");
  if (bytes)
    check_cuda(cudaMemcpyAsync((char *)s.buf + sizeof(Header), buf, bytes,
                               cudaMemcpyDeviceToDevice, compute),
               "cudaMemcpyAsync");
  // The caller may reuse buf once this returns.
  check_cuda(cudaStreamSynchronize(compute), "cudaStreamSynchronize");
  if (peer == rank_) {
    to_self_.push_back(s);
    return;
  }
  const int lane = peer > rank_ ? kUp : kDown;
  send_header(lane, peer, s.buf, bytes);
  check_cuda(cudaEventCreateWithFlags(&s.done, cudaEventDisableTiming), "cudaEventCreate");
  check_cuda(cudaEventRecord(s.done, stream_[lane]), "cudaEventRecord");
  sends_.push_back(s);
}

void NcclComm::send_header(int lane, int peer, void *buf, size_t bytes) {
  settle(lane, ncclSend(buf, sizeof(Header), ncclUint8, peer, comm_[lane], stream_[lane]),
         "ncclSend");
  if (bytes)
    settle(lane,
           ncclSend((char *)buf + sizeof(Header), bytes, ncclUint8, peer, comm_[lane],
                    stream_[lane]),
           "ncclSend");
}

void NcclComm::recv(void *buf, size_t n, DType dt, int peer) {
  const size_t bytes = n * elem_size(dt, CommOp::recv);
  check_peer(peer, "recv peer");
  check_usable();
  CommTimer timer(stats());
  stats().add(CommOp::recv, (int64_t)bytes);
  dev_.bind_thread();
  Header h{};
  auto check_header = [&] {
    if (h.dt != (int64_t)dt)
      fail(Status::comm_failure, "group '", name_, "': recv of ", n, " ", dtype_name(dt),
           " elements from rank ", members_[peer], " got a message of ", h.n, " ",
           dtype_name((DType)h.dt), " elements");
    if (h.n != (int64_t)n)
      fail(Status::comm_failure, "group '", name_, "': recv of ", n, " elements from rank ",
           members_[peer], " got a message of ", h.n);
  };
  if (peer == rank_) {
    if (to_self_.empty())
      fail(Status::comm_failure, "group '", name_, "': recv from itself (rank ", members_[rank_],
           ") with no message sent to itself");
    Sent s = to_self_.front();
    to_self_.pop_front();
    h = s.header;
    check_header();
    if (bytes)
      check_cuda(cudaMemcpy(buf, (char *)s.buf + sizeof(Header), bytes, cudaMemcpyDeviceToDevice),
                 "cudaMemcpy");
    dev_.free(s.buf);
    return;
  }
  const int lane = peer < rank_ ? kUp : kDown;  // the direction the message travels
  after_compute(lane);  // buf may still be in use by queued work
  settle(lane, ncclRecv(header_, sizeof(Header), ncclUint8, peer, comm_[lane], stream_[lane]),
         "ncclRecv");
  finish(lane, "recv");
  check_cuda(cudaMemcpy(&h, header_, sizeof h, cudaMemcpyDeviceToHost), "cudaMemcpy");
  check_header();
  if (!bytes) return;
  settle(lane, ncclRecv(buf, bytes, ncclUint8, peer, comm_[lane], stream_[lane]), "ncclRecv");
  finish(lane, "recv");
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
