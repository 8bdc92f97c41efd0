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

  void all_reduce(void *buf, size_t n, DType dt, ReduceOp op) override {
    const size_t es = elem_size(dt, CommOp::all_reduce);
    CommTimer timer(stats_);
    stats_.add(CommOp::all_reduce, (int64_t)(n * es));
    // n == 0 (on every member): nothing to move. Returning also keeps empty
    // buffers, which may be null, away from exchange(), where null means "no
    // transfer" and one side would post a message the other never takes.
    if (size() == 1 || n == 0) return;
    std::vector<char> all((size_t)size() * n * es);
    std::vector<const void *> send(size(), buf);
    std::vector<void *> recv(size());
    for (int r = 0; r < size(); r++) recv[r] = all.data() + (size_t)r * n * es;
    exchange(send, recv, n * es, "all_reduce");
    // Member order on every member: the same bits everywhere.
    std::vector<const void *> in(size());
    for (int r = 0; r < size(); r++) in[r] = r == rank_ ? buf : recv[r];
    reduce_in_order(in.data(), size(), buf, n, dt, op);
  }

  void all_gather(const void *in, void *out, size_t n, DType dt) override {
    const size_t es = elem_size(dt, CommOp::all_gather);
    CommTimer timer(stats_);
    stats_.add(CommOp::all_gather, (int64_t)(n * es));
    if (n == 0) return;
    char *o = static_cast<char *>(out);
    std::vector<const void *> send(size(), in);
    std::vector<void *> recv(size());
    for (int r = 0; r < size(); r++) recv[r] = o + (size_t)r * n * es;
    exchange(send, recv, n * es, "all_gather");
    if (o + (size_t)rank_ * n * es != in) std::memmove(o + (size_t)rank_ * n * es, in, n * es);
  }

  void reduce_scatter(const void *in, void *out, size_t n, DType dt) override {
    const size_t es = elem_size(dt, CommOp::reduce_scatter);
    CommTimer timer(stats_);
    stats_.add(CommOp::reduce_scatter, (int64_t)(n * size() * es));
    if (n == 0) return;
    const char *x = static_cast<const char *>(in);
    std::vector<char> parts((size_t)size() * n * es);
    std::vector<const void *> send(size());
    std::vector<void *> recv(size());
    for (int r = 0; r < size(); r++) {
      send[r] = x + (size_t)r * n * es;
      recv[r] = parts.data() + (size_t)r * n * es;
    }
    exchange(send, recv, n * es, "reduce_scatter");
    // Our own block is copied too: `out` may overlap `in` anywhere.
    std::memcpy(recv[rank_], x + (size_t)rank_ * n * es, n * es);
    reduce_in_order(recv.data(), size(), out, n, dt, ReduceOp::sum);
  }

  void broadcast(void *buf, size_t n, DType dt, int root) override {
    const size_t es = elem_size(dt, CommOp::broadcast);
    check_peer(root, "broadcast root");
    CommTimer timer(stats_);
    stats_.add(CommOp::broadcast, (int64_t)(n * es));
    if (n == 0) return;
    std::vector<const void *> send(size(), nullptr);
    std::vector<void *> recv(size(), nullptr);
    if (rank_ == root)
      for (int r = 0; r < size(); r++) send[r] = buf;
    else
      recv[root] = buf;
    exchange(send, recv, n * es, "broadcast");
  }

  void send(const void *buf, size_t n, DType dt, int peer) override {
    const size_t es = elem_size(dt, CommOp::send);
    check_peer(peer, "send peer");
    CommTimer timer(stats_);
    stats_.add(CommOp::send, (int64_t)(n * es));
    progress();
    pending_.emplace_back();
    Pending &p = pending_.back();
    p.peer = peer;
    const char *b = static_cast<const char *>(buf);
    p.data.assign(b, b + n * es);  // send returns at once: the message owns a copy
    post_send(p.data.data(), n * es, peer, &p.req);
  }

  void recv(void *buf, size_t n, DType dt, int peer) override {
    const size_t es = elem_size(dt, CommOp::recv);
    check_peer(peer, "recv peer");
    CommTimer timer(stats_);
    stats_.add(CommOp::recv, (int64_t)(n * es));
    progress();
    check_count(n * es);
    // Probe first: a message of another length is taken off the queue and reported.
    MPI_Message msg = MPI_MESSAGE_NULL;
    MPI_Status st;
    const int from = process_of(peer), t = tag(members_[peer], members_[rank_]);
    poll([&] {
      int flag = 0;
      MPI_Improbe(from, t, w_.comm, &flag, &msg, &st);
      return flag != 0;
    }, [&] { return " " + std::to_string(members_[peer]); }, "recv");
    int bytes = 0;
    MPI_Get_count(&st, MPI_BYTE, &bytes);
    std::vector<char> wrong;
    void *dst = buf;
    if ((size_t)bytes != n * es) {
      wrong.resize((size_t)bytes + 1);
      dst = wrong.data();
    }
    MPI_Request req;
    MPI_Imrecv(dst, bytes, MPI_BYTE, &msg, &req);
    wait_all({req}, {peer}, "recv");
    if ((size_t)bytes != n * es)
      fail(Status::comm_failure, "group '", name_, "': recv of ", n, " elements from rank ",
           members_[peer], " got a message of ", (size_t)bytes / es);
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
    std::vector<char> data;
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

  // Completes finished sends, keeping the message order of the rest.
  void progress() {
    for (auto it = pending_.begin(); it != pending_.end();) {
      int done = 0;
      MPI_Test(&it->req, &done, MPI_STATUS_IGNORE);
      it = done ? pending_.erase(it) : std::next(it);
    }
  }

  void wait_all(std::vector<MPI_Request> reqs, const std::vector<int> &peers, const char *op) {
    std::vector<char> done(reqs.size(), 0);
    size_t left = reqs.size();
    poll([&] {
      for (size_t i = 0; i < reqs.size(); i++) {
        if (done[i]) continue;
        int flag = 0;
        MPI_Test(&reqs[i], &flag, MPI_STATUS_IGNORE);
        if (flag) {
          done[i] = 1;
          left--;
        }
      }
      return left == 0;
    }, [&] {
      std::string missing;
      for (size_t i = 0; i < reqs.size(); i++)
        if (!done[i]) missing += " " + std::to_string(members_[peers[i]]);
      return missing;
    }, op);
  }

  // Polls done() (sleeping a little longer each time) until it holds; after
  // the timeout, aborts the job naming the ranks that missing() lists.
  template <class Done, class Missing>
  void poll(Done done, Missing missing, const char *op) {
    auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                       std::chrono::duration<double>(w_.timeout_s));
    int sleep_us = 0;
    while (!done()) {
      if (Clock::now() > deadline)
        mpi_.abort("communicator timeout after " + std::to_string(w_.timeout_s) + " s in group '" +
                   name_ + "' during " + op + " on rank " + std::to_string(members_[rank_]) +
                   ": ranks still missing:" + missing());
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
