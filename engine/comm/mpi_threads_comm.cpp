#include "engine/comm/mpi_threads_comm.h"

// The C API only: no MPI C++ bindings (they need a library of their own).
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <chrono>
#include <cstring>
#include <list>
#include <thread>

#include "engine/core/status.h"

namespace ptdp {

namespace {

using Clock = std::chrono::steady_clock;

// Group names share the tag space: tag = name id << 26 | sender << 13 | receiver.
constexpr int kRankBits = 13;
int name_id(const std::string &name) {
  static const char *names[] = {"world", "tp", "dp", "pp", "embedding"};
  for (int i = 0; i < 5; i++)
    if (name == names[i]) return i + 1;
  fail(Status::invalid_argument, "group name '", name,
       "' is not one of world, tp, dp, pp, embedding (needed to tag its MPI messages)");
}

}  // namespace

struct MpiThreadsWorld::Impl {
  MPI_Comm comm = MPI_COMM_NULL;
  int k = 1;
  double timeout_s = 300;
};

namespace {

class MpiThreadsComm final : public Communicator {
 public:
  MpiThreadsComm(MpiWorld &mpi, MpiThreadsWorld::Impl &w, std::string name,
                 std::vector<int> members, int rank)
      : Communicator(std::move(name), std::move(members), rank), mpi_(mpi), w_(w),
        id_(name_id(name_)) {}

  ~MpiThreadsComm() override {
    // Sends not yet received must complete before their buffers go.
    for (auto &p : pending_) wait_all({p.req}, {p.peer}, "send (at group destruction)");
  }

  void all_reduce(float *buf, size_t n, ReduceOp op) override { reduce_impl(buf, n, op); }
  void all_reduce(double *buf, size_t n, ReduceOp op) override { reduce_impl(buf, n, op); }

  void all_gather(const float *in, float *out, size_t n) override {
    CommTimer timer(stats_);
    stats_.add(CommOp::all_gather, (int64_t)(n * sizeof(float)));
    std::vector<const void *> send(size(), in);
    std::vector<void *> recv(size());
    for (int r = 0; r < size(); r++) recv[r] = out + (size_t)r * n;
    exchange(send, recv, n * sizeof(float), "all_gather");
    if (out + (size_t)rank_ * n != in) std::memmove(out + (size_t)rank_ * n, in, n * sizeof(float));
  }

  void reduce_scatter(const float *in, float *out, size_t n) override {
    CommTimer timer(stats_);
    stats_.add(CommOp::reduce_scatter, (int64_t)(n * size() * sizeof(float)));
    std::vector<float> parts((size_t)size() * n);
    std::vector<const void *> send(size());
    std::vector<void *> recv(size());
    for (int r = 0; r < size(); r++) {
      send[r] = in + (size_t)r * n;
      recv[r] = parts.data() + (size_t)r * n;
    }
    exchange(send, recv, n * sizeof(float), "reduce_scatter");
    if (n) std::memcpy(parts.data() + (size_t)rank_ * n, in + (size_t)rank_ * n, n * sizeof(float));
    for (size_t k = 0; k < n; k++) {
      float acc = parts[k];
      for (int r = 1; r < size(); r++) acc += parts[(size_t)r * n + k];
      out[k] = acc;
    }
  }

  void broadcast(float *buf, size_t n, int root) override {
    check_peer(root, "broadcast root");
    CommTimer timer(stats_);
    stats_.add(CommOp::broadcast, (int64_t)(n * sizeof(float)));
    std::vector<const void *> send(size(), nullptr);
    std::vector<void *> recv(size(), nullptr);
    if (rank_ == root)
      for (int r = 0; r < size(); r++) send[r] = buf;
    else
      recv[root] = buf;
    exchange(send, recv, n * sizeof(float), "broadcast");
  }

  void send(const float *buf, size_t n, int peer) override {
    check_peer(peer, "send peer");
    CommTimer timer(stats_);
    stats_.add(CommOp::send, (int64_t)(n * sizeof(float)));
    progress();
    pending_.emplace_back();
    Pending &p = pending_.back();
    p.peer = peer;
    p.data.assign(buf, buf + n);  // send returns at once: the message owns a copy
    post_send(p.data.data(), n * sizeof(float), peer, &p.req);
  }

  void recv(float *buf, size_t n, int peer) override {
    check_peer(peer, "recv peer");
    CommTimer timer(stats_);
    stats_.add(CommOp::recv, (int64_t)(n * sizeof(float)));
    progress();
    MPI_Request req;
    post_recv(buf, n * sizeof(float), peer, &req);
    wait_all({req}, {peer}, "recv");
  }

  void barrier() override {
    CommTimer timer(stats_);
    stats_.add(CommOp::barrier, 0);
    std::vector<const void *> send(size(), this);
    std::vector<void *> recv(size(), this);
    exchange(send, recv, 0, "barrier");
  }

 private:
  struct Pending {
    int peer = 0;
    std::vector<float> data;
    MPI_Request req = MPI_REQUEST_NULL;
  };

  int tag(int from_world, int to_world) const {
    return id_ << (2 * kRankBits) | from_world << kRankBits | to_world;
  }
  int process_of(int group_rank) const { return members_[group_rank] / w_.k; }

  void post_send(const void *p, size_t bytes, int peer, MPI_Request *req) {
    check_count(bytes);
    MPI_Isend(p, (int)bytes, MPI_BYTE, process_of(peer), tag(members_[rank_], members_[peer]),
              w_.comm, req);
  }
  void post_recv(void *p, size_t bytes, int peer, MPI_Request *req) {
    check_count(bytes);
    MPI_Irecv(p, (int)bytes, MPI_BYTE, process_of(peer), tag(members_[peer], members_[rank_]),
              w_.comm, req);
  }
  void check_count(size_t bytes) const {
    if (bytes > (size_t)INT32_MAX)
      fail(Status::invalid_argument, "group '", name_, "': message of ", bytes,
           " bytes exceeds the 2 GiB limit of one MPI message");
  }

  // Sends send[r] to and receives recv[r] from every other member r that has one.
  void exchange(const std::vector<const void *> &send, const std::vector<void *> &recv,
                size_t bytes, const char *op) {
    if (size() == 1) return;
    progress();
    std::vector<MPI_Request> reqs;
    std::vector<int> peers;
    for (int r = 0; r < size(); r++) {
      if (r == rank_) continue;
      if (recv[r]) {
        reqs.emplace_back();
        peers.push_back(r);
        post_recv(recv[r], bytes, r, &reqs.back());
      }
    }
    for (int r = 0; r < size(); r++) {
      if (r == rank_ || !send[r]) continue;
      reqs.emplace_back();
      peers.push_back(r);
      post_send(send[r], bytes, r, &reqs.back());
    }
    wait_all(reqs, peers, op);
  }

  template <class T>
  void reduce_impl(T *buf, size_t n, ReduceOp op) {
    CommTimer timer(stats_);
    stats_.add(CommOp::all_reduce, (int64_t)(n * sizeof(T)));
    if (size() == 1) return;
    std::vector<T> all((size_t)size() * n);
    std::vector<const void *> send(size(), buf);
    std::vector<void *> recv(size());
    for (int r = 0; r < size(); r++) recv[r] = all.data() + (size_t)r * n;
    exchange(send, recv, n * sizeof(T), "all_reduce");
    // Member order on every member: the same bits everywhere.
    for (size_t k = 0; k < n; k++) {
      T acc = rank_ == 0 ? buf[k] : all[k];
      for (int r = 1; r < size(); r++) {
        T v = r == rank_ ? buf[k] : all[(size_t)r * n + k];
        acc = op == ReduceOp::sum ? acc + v : (v > acc ? v : acc);
      }
      all[k] = acc;  // slot 0 is free once read
    }
    if (n) std::memcpy(buf, all.data(), n * sizeof(T));
  }

  // Completes finished sends, keeping the message order of the rest.
  void progress() {
    for (auto it = pending_.begin(); it != pending_.end();) {
      int done = 0;
      MPI_Test(&it->req, &done, MPI_STATUS_IGNORE);
      it = done ? pending_.erase(it) : std::next(it);
    }
  }

  void wait_all(std::vector<MPI_Request> reqs, const std::vector<int> &peers, const char *op) {
    auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                       std::chrono::duration<double>(w_.timeout_s));
    std::vector<char> done(reqs.size(), 0);
    size_t left = reqs.size();
    int sleep_us = 0;
    while (left) {
      for (size_t i = 0; i < reqs.size(); i++) {
        if (done[i]) continue;
        int flag = 0;
        MPI_Test(&reqs[i], &flag, MPI_STATUS_IGNORE);
        if (flag) {
          done[i] = 1;
          left--;
        }
      }
      if (!left) break;
      if (Clock::now() > deadline) {
        std::string missing;
        for (size_t i = 0; i < reqs.size(); i++)
          if (!done[i]) missing += " " + std::to_string(members_[peers[i]]);
        mpi_.abort("communicator timeout after " + std::to_string(w_.timeout_s) + " s in group '" +
                   name_ + "' during " + op + " on rank " + std::to_string(members_[rank_]) +
                   ": ranks still missing:" + missing);
      }
      if (sleep_us) std::this_thread::sleep_for(std::chrono::microseconds(sleep_us));
      sleep_us = std::min(1000, sleep_us + 10);
    }
  }

  void check_peer(int peer, const char *what) const {
    if (peer < 0 || peer >= size())
      fail(Status::invalid_argument, "group '", name_, "': ", what, " ", peer, " is outside [0, ",
           size(), ")");
  }

  MpiWorld &mpi_;
  MpiThreadsWorld::Impl &w_;
  int id_;
  std::list<Pending> pending_;
};

}  // namespace

MpiThreadsWorld::MpiThreadsWorld(MpiWorld &mpi, int ranks_per_process, double timeout_s)
    : mpi_(mpi), impl_(std::make_unique<Impl>()) {
  if (!mpi.thread_multiple())
    fail(Status::invalid_config, "several ranks per process need MPI_THREAD_MULTIPLE; this MPI "
         "provides ", mpi.thread_level(), ": start one process per rank");
  impl_->k = ranks_per_process;
  impl_->timeout_s = timeout_s;
  const int world = mpi.size() * ranks_per_process;
  if (world >= (1 << kRankBits))
    fail(Status::invalid_config, "several ranks per process support up to ", (1 << kRankBits) - 1,
         " ranks, the layout has ", world);
  int *tag_ub = nullptr, flag = 0;
  MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &tag_ub, &flag);
  if (!flag || *tag_ub < (6 << (2 * kRankBits)))
    fail(Status::invalid_config, "this MPI's tag range (", flag ? *tag_ub : 0,
         ") is too small for several ranks per process");
  MPI_Comm_dup(MPI_COMM_WORLD, &impl_->comm);
}

MpiThreadsWorld::~MpiThreadsWorld() {
  if (impl_->comm != MPI_COMM_NULL) MPI_Comm_free(&impl_->comm);
}

std::unique_ptr<Communicator> MpiThreadsWorld::group(const std::string &name,
                                                     const std::vector<int> &members, int me) {
  int rank = -1;
  for (size_t i = 0; i < members.size(); i++)
    if (members[i] == me) rank = (int)i;
  if (rank < 0) fail(Status::invalid_argument, "rank ", me, " is not a member of group '", name, "'");
  return std::make_unique<MpiThreadsComm>(mpi_, *impl_, name, members, rank);
}

}  // namespace ptdp
