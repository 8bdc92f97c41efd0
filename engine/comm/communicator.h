// The communicator interface (ARCHITECTURE §2): collectives and point-to-point
// transfers over a group of ranks, with byte and call counters per group.
// Backends: threads (ranks in one process, shared memory), mpi (processes);
// nccl joins with the CUDA backend. Every blocking operation has a timeout:
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

  // In place over `n` elements; every member passes the same n. The result is
  // bit-identical on every member (replicated parameters stay consistent).
  virtual void all_reduce(float *buf, size_t n, ReduceOp op = ReduceOp::sum) = 0;
  virtual void all_reduce(double *buf, size_t n, ReduceOp op = ReduceOp::sum) = 0;
  // out[r*n .. (r+1)*n) = member r's `in` (n elements each).
  virtual void all_gather(const float *in, float *out, size_t n) = 0;
  // out (n elements) = sum over members of their in[rank*n .. (rank+1)*n).
  virtual void reduce_scatter(const float *in, float *out, size_t n) = 0;
  virtual void broadcast(float *buf, size_t n, int root) = 0;
  // Point to point by group rank. send does not wait for the matching recv.
  virtual void send(const float *buf, size_t n, int peer) = 0;
  virtual void recv(float *buf, size_t n, int peer) = 0;
  virtual void barrier() = 0;

  CommStats &stats() { return stats_; }

 protected:
  Communicator(std::string name, std::vector<int> members, int rank)
      : name_(std::move(name)), members_(std::move(members)), rank_(rank) {
    stats_.group = name_;
  }
  std::string name_;
  std::vector<int> members_;
  int rank_;
  CommStats stats_;
};

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
