// The communicator interface (ARCHITECTURE §2): collectives and point-to-point
// transfers over a group of ranks, with byte and call counters per group.
// Backends: threads (ranks in one process, shared memory), mpi (one rank per
// process), mpi-threads (several thread ranks per process); nccl joins with
// the CUDA backend. Every operation moves elements of one DType (f32, f64,
// bf16, f16); tests/comm/comm_conformance.h holds the cases every backend must
// pass. Every blocking operation has a timeout:
// on expiry it names the group, the operation and the ranks still missing,
// and throws (the job then exits non-zero on every rank instead of hanging).
//
// Calls are synchronous on the CPU. The nccl backend will enqueue the same
// operations on a stream; groups are created once per job for that reason.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/core/dtype.h"

namespace ptdp {

enum class ReduceOp { sum, max };

enum class CommOp { all_reduce, all_gather, reduce_scatter, broadcast, send, recv, barrier, count };
const char *comm_op_name(CommOp op);

class Timeline;

struct CommStats {
  int64_t calls[(int)CommOp::count] = {};
  int64_t bytes[(int)CommOp::count] = {};  // payload bytes this rank contributed
  double seconds = 0;                      // wall time inside operations, waiting included
  // Optional: each operation also becomes a span on this rank's timeline.
  Timeline *timeline = nullptr;
  std::string group;
  CommOp last_op = CommOp::barrier;
  int64_t last_bytes = 0;
  void add(CommOp op, int64_t b) {
    calls[(int)op]++;
    bytes[(int)op] += b;
    last_op = op;
    last_bytes = b;
  }
  // The counts since `before` was taken (same group).
  CommStats since(const CommStats &before) const {
    CommStats d = *this;
    for (int i = 0; i < (int)CommOp::count; i++) {
      d.calls[i] -= before.calls[i];
      d.bytes[i] -= before.bytes[i];
    }
    d.seconds -= before.seconds;
    return d;
  }
  int64_t total_bytes() const {
    int64_t n = 0;
    for (int64_t b : bytes) n += b;
    return n;
  }
  int64_t total_calls() const {
    int64_t n = 0;
    for (int64_t c : calls) n += c;
    return n;
  }
};

// Adds the lifetime of the scope to stats.seconds (and to the timeline).
class CommTimer {
 public:
  explicit CommTimer(CommStats &s);
  ~CommTimer();

 private:
  CommStats &s_;
  int64_t start_ns_;
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  const std::string &name() const { return name_; }     // "tp", "dp", "pp", "embedding", "world"
  const std::vector<int> &members() const { return members_; }  // world ranks, by group rank
  int rank() const { return rank_; }
  int size() const { return (int)members_.size(); }

  // The backends implement these; `n` counts elements of `dt`, and byte
  // counters count n * dtype_size(dt).
  //
  // In place over `n` elements; every member passes the same n and dt. The
  // result is bit-identical on every member (replicated parameters stay
  // consistent). bf16/f16 are accumulated in fp32 in member order (0, 1, 2, ...)
  // and rounded once at the end, on every backend.
  virtual void all_reduce(void *buf, size_t n, DType dt, ReduceOp op = ReduceOp::sum) = 0;
  // out[r*n .. (r+1)*n) = member r's `in` (n elements each).
  virtual void all_gather(const void *in, void *out, size_t n, DType dt) = 0;
  // out (n elements) = sum over members of their in[rank*n .. (rank+1)*n).
  virtual void reduce_scatter(const void *in, void *out, size_t n, DType dt) = 0;
  virtual void broadcast(void *buf, size_t n, DType dt, int root) = 0;
  // Point to point by group rank. send does not wait for the matching recv.
  // The receiver names the sender's dtype and element count.
  virtual void send(const void *buf, size_t n, DType dt, int peer) = 0;
  virtual void recv(void *buf, size_t n, DType dt, int peer) = 0;
  virtual void barrier() = 0;

  // Typed shorthands. 16-bit buffers (uint16_t) say which format they hold:
  // bf16 or f16; any other dtype is an invalid_argument error.
  void all_reduce(float *buf, size_t n, ReduceOp op = ReduceOp::sum) {
    all_reduce(buf, n, DType::f32, op);
  }
  void all_reduce(double *buf, size_t n, ReduceOp op = ReduceOp::sum) {
    all_reduce(buf, n, DType::f64, op);
  }
  void all_reduce(uint16_t *buf, size_t n, DType dt, ReduceOp op = ReduceOp::sum) {
    all_reduce((void *)buf, n, check_16bit(dt, CommOp::all_reduce), op);
  }
  void all_gather(const float *in, float *out, size_t n) { all_gather(in, out, n, DType::f32); }
  void all_gather(const double *in, double *out, size_t n) { all_gather(in, out, n, DType::f64); }
  void all_gather(const uint16_t *in, uint16_t *out, size_t n, DType dt) {
    all_gather((const void *)in, (void *)out, n, check_16bit(dt, CommOp::all_gather));
  }
  void reduce_scatter(const float *in, float *out, size_t n) {
    reduce_scatter(in, out, n, DType::f32);
  }
  void reduce_scatter(const double *in, double *out, size_t n) {
    reduce_scatter(in, out, n, DType::f64);
  }
  void reduce_scatter(const uint16_t *in, uint16_t *out, size_t n, DType dt) {
    reduce_scatter((const void *)in, (void *)out, n, check_16bit(dt, CommOp::reduce_scatter));
  }
  void broadcast(float *buf, size_t n, int root) { broadcast(buf, n, DType::f32, root); }
  void broadcast(double *buf, size_t n, int root) { broadcast(buf, n, DType::f64, root); }
  void broadcast(uint16_t *buf, size_t n, DType dt, int root) {
    broadcast((void *)buf, n, check_16bit(dt, CommOp::broadcast), root);
  }
  void send(const float *buf, size_t n, int peer) { send(buf, n, DType::f32, peer); }
  void send(const double *buf, size_t n, int peer) { send(buf, n, DType::f64, peer); }
  void send(const uint16_t *buf, size_t n, DType dt, int peer) {
    send((const void *)buf, n, check_16bit(dt, CommOp::send), peer);
  }
  void recv(float *buf, size_t n, int peer) { recv(buf, n, DType::f32, peer); }
  void recv(double *buf, size_t n, int peer) { recv(buf, n, DType::f64, peer); }
  void recv(uint16_t *buf, size_t n, DType dt, int peer) {
    recv((void *)buf, n, check_16bit(dt, CommOp::recv), peer);
  }

  // Calls, bytes and time of this group (a wrapper reports its backend's).
  virtual CommStats &stats() { return stats_; }

 protected:
  Communicator(std::string name, std::vector<int> members, int rank)
      : name_(std::move(name)), members_(std::move(members)), rank_(rank) {
    stats_.group = name_;
  }
  std::string name_;
  std::vector<int> members_;
  int rank_;
  CommStats stats_;

  // Bytes per element of dt; a value outside DType is an invalid_argument error.
  size_t elem_size(DType dt, CommOp op) const;
  // dt if it is bf16 or f16 (the formats a uint16_t buffer can hold), else an error.
  DType check_16bit(DType dt, CommOp op) const;
};

// The reduction every backend uses where it reduces on the CPU itself:
// out[k] = in[0][k] op in[1][k] op ... op in[count-1][k] for k < n, always in
// that order, so that whoever computes it gets the same bits. bf16/f16 are
// accumulated in fp32 and rounded once. `out` may be one of the inputs
// (the same elements), not a shifted view of one.
void reduce_in_order(const void *const *in, int count, void *out, size_t n, DType dt, ReduceOp op);

// A job's ranks under one backend: it makes the groups and stops the job.
class CommWorld {
 public:
  virtual ~CommWorld() = default;
  // The communicator of world rank `me` in the group `members` (world ranks,
  // ordered by group rank). Every member passes the same name and list.
  virtual std::unique_ptr<Communicator> group(const std::string &name,
                                              const std::vector<int> &members, int me) = 0;
  // Stops every rank of the job: waiting ranks fail with `why` (threads), or
  // the processes exit non-zero (mpi).
  virtual void abort(const std::string &why) = 0;
  virtual std::string abort_reason() const = 0;
};

}  // namespace ptdp
