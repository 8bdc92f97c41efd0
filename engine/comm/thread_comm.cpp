#include "engine/comm/thread_comm.h"

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <vector>

#include "engine/core/status.h"

namespace ptdp {

// memcpy that accepts empty ranges with null pointers (an n = 0 operation).
static void copy_bytes(void *dst, const void *src, size_t n) {
  if (n) std::memcpy(dst, src, n);
}

namespace {
// A sent message, copied.
struct Message {
  DType dt;
  size_t n;  // elements
  std::vector<char> bytes;
};
}  // namespace

// State shared by the members of one group.
struct ThreadWorld::Group {
  std::mutex mu;
  std::condition_variable cv;
  int size = 0;
  uint64_t generation = 0;
  int arrived = 0;
  std::vector<char> present;          // who has reached the current rendezvous
  std::vector<const void *> posted;   // each member's buffer for the current operation
  std::vector<char> scratch;          // reduction result, shared
  std::map<std::pair<int, int>, std::deque<Message>> mailbox;  // (src, dst) -> messages
};

namespace {

class ThreadComm final : public Communicator {
 public:
  ThreadComm(ThreadWorld *world, std::shared_ptr<ThreadWorld::Group> g, std::string name,
             std::vector<int> members, int rank)
      : Communicator(std::move(name), std::move(members), rank), world_(world), g_(std::move(g)) {}

  void all_reduce(void *buf, size_t n, DType dt, ReduceOp op) override {
    const size_t es = elem_size(dt, CommOp::all_reduce);
    CommTimer timer(stats_);
    stats_.add(CommOp::all_reduce, (int64_t)(n * es));
    if (size() == 1) return;  // already the result, also for 16-bit (no rounding to do)
    g_->posted[rank_] = buf;
    rendezvous(CommOp::all_reduce, [&] { g_->scratch.resize(n * es); });
    // Each member reduces one slice, in member order: every rank gets the same bits.
    const size_t lo = n * rank_ / size(), hi = n * (rank_ + 1) / size();
    std::vector<const void *> in(size());
    for (int r = 0; r < size(); r++) in[r] = static_cast<const char *>(g_->posted[r]) + lo * es;
    reduce_in_order(in.data(), size(), g_->scratch.data() + lo * es, hi - lo, dt, op);
    rendezvous(CommOp::all_reduce);
    // No rendezvous after the copy: the next operation writes the scratch only
    // once every member has arrived there, i.e. finished copying.
    copy_bytes(buf, g_->scratch.data(), n * es);
  }

  void all_gather(const void *in, void *out, size_t n, DType dt) override {
    const size_t es = elem_size(dt, CommOp::all_gather);
    CommTimer timer(stats_);
    stats_.add(CommOp::all_gather, (int64_t)(n * es));
    g_->posted[rank_] = in;
    rendezvous(CommOp::all_gather);
    for (int r = 0; r < size(); r++) {
      char *dst = static_cast<char *>(out) + (size_t)r * n * es;
      // In place (in == out + rank*n): no self-copy, which would overlap and
      // write the bytes that the other members are reading.
      if (dst != g_->posted[r]) copy_bytes(dst, g_->posted[r], n * es);
    }
    rendezvous(CommOp::all_gather);  // nobody reuses `in` while others still read it
  }

  void reduce_scatter(const void *in, void *out, size_t n, DType dt) override {
    const size_t es = elem_size(dt, CommOp::reduce_scatter);
    CommTimer timer(stats_);
    stats_.add(CommOp::reduce_scatter, (int64_t)(n * size() * es));
    g_->posted[rank_] = in;
    rendezvous(CommOp::reduce_scatter);
    // Into a private buffer first: `out` may overlap `in`, which others still read.
    std::vector<const void *> parts(size());
    for (int r = 0; r < size(); r++)
      parts[r] = static_cast<const char *>(g_->posted[r]) + (size_t)rank_ * n * es;
    std::vector<char> sum(n * es);
    reduce_in_order(parts.data(), size(), sum.data(), n, dt, ReduceOp::sum);
    rendezvous(CommOp::reduce_scatter);
    copy_bytes(out, sum.data(), n * es);
  }

  void broadcast(void *buf, size_t n, DType dt, int root) override {
    const size_t es = elem_size(dt, CommOp::broadcast);
    check_peer(root, "broadcast root");
    CommTimer timer(stats_);
    stats_.add(CommOp::broadcast, (int64_t)(n * es));
    g_->posted[rank_] = buf;
    rendezvous(CommOp::broadcast);
    if (rank_ != root) copy_bytes(buf, g_->posted[root], n * es);
    rendezvous(CommOp::broadcast);
  }

  void send(const void *buf, size_t n, DType dt, int peer) override {
    const size_t es = elem_size(dt, CommOp::send);
    check_peer(peer, "send peer");
    CommTimer timer(stats_);
    stats_.add(CommOp::send, (int64_t)(n * es));
    Message m{dt, n, std::vector<char>(n * es)};  // the copy: send returns at once
    copy_bytes(m.bytes.data(), buf, n * es);
    std::lock_guard<std::mutex> lk(g_->mu);
    g_->mailbox[{rank_, peer}].push_back(std::move(m));
    g_->cv.notify_all();
  }

  void recv(void *buf, size_t n, DType dt, int peer) override {
    const size_t es = elem_size(dt, CommOp::recv);
    check_peer(peer, "recv peer");
    CommTimer timer(stats_);
    stats_.add(CommOp::recv, (int64_t)(n * es));
    std::unique_lock<std::mutex> lk(g_->mu);
    auto &q = g_->mailbox[{peer, rank_}];
    wait(lk, [&] { return !q.empty(); }, CommOp::recv,
         [&] { return "rank " + std::to_string(members_[peer]) + " has not sent"; });
    Message msg = std::move(q.front());
    q.pop_front();
    lk.unlock();
    if (msg.dt != dt)
      fail(Status::comm_failure, "group '", name_, "': recv of ", n, " ", dtype_name(dt),
           " elements from rank ", members_[peer], " got a message of ", msg.n, " ",
           dtype_name(msg.dt), " elements");
    if (msg.n != n)
      fail(Status::comm_failure, "group '", name_, "': recv of ", n, " elements from rank ",
           members_[peer], " got a message of ", msg.n);
    copy_bytes(buf, msg.bytes.data(), n * es);
  }

  void barrier() override {
    CommTimer timer(stats_);
    stats_.add(CommOp::barrier, 0);
    rendezvous(CommOp::barrier);
  }

 private:
  void check_peer(int peer, const char *what) const {
    if (peer < 0 || peer >= size())
      fail(Status::invalid_argument, "group '", name_, "': ", what, " ", peer,
           " is outside [0, ", size(), ")");
  }

  // Waits until pred() holds, polling the world's abort flag; on timeout names the missing.
  template <class Pred, class Missing>
  void wait(std::unique_lock<std::mutex> &lk, Pred pred, CommOp op, Missing missing) {
    auto deadline = std::chrono::steady_clock::now() +
                    std::chrono::duration<double>(world_->timeout_s());
    while (!pred()) {
      if (world_->aborted())
        fail(Status::comm_failure, "group '", name_, "' ", comm_op_name(op), " on rank ",
             members_[rank_], " stopped: ", world_->abort_reason());
      if (std::chrono::steady_clock::now() > deadline) {
        std::string msg = "communicator timeout after " + std::to_string(world_->timeout_s()) +
                          " s in group '" + name_ + "' during " + comm_op_name(op) +
                          " on rank " + std::to_string(members_[rank_]) + ": " + missing();
        lk.unlock();
        world_->abort(msg);
        throw Error(Status::comm_failure, msg);
      }
      g_->cv.wait_for(lk, std::chrono::milliseconds(50));
    }
  }

  // All members meet; the last to arrive runs `last` before anyone leaves.
  void rendezvous(CommOp op, const std::function<void()> &last = {}) {
    std::unique_lock<std::mutex> lk(g_->mu);
    uint64_t gen = g_->generation;
    g_->present[rank_] = 1;
    if (++g_->arrived == g_->size) {
      if (last) last();
      g_->arrived = 0;
      std::fill(g_->present.begin(), g_->present.end(), 0);
      g_->generation++;
      g_->cv.notify_all();
      return;
    }
    wait(lk, [&] { return g_->generation != gen; }, op, [&] {
      std::string s = "ranks still missing:";
      for (int r = 0; r < g_->size; r++)
        if (!g_->present[r]) s += " " + std::to_string(members_[r]);
      return s;
    });
  }

  ThreadWorld *world_;
  std::shared_ptr<ThreadWorld::Group> g_;
};

}  // namespace

ThreadWorld::ThreadWorld(int size, double timeout_s) : size_(size), timeout_s_(timeout_s) {}
ThreadWorld::~ThreadWorld() = default;

std::unique_ptr<Communicator> ThreadWorld::group(const std::string &name,
                                                 const std::vector<int> &members, int me) {
  int rank = -1;
  std::string key = name + ":";
  for (size_t i = 0; i < members.size(); i++) {
    if (members[i] < 0 || members[i] >= size_)
      fail(Status::invalid_argument, "group '", name, "' names rank ", members[i],
           " outside the world of ", size_);
    if (members[i] == me) rank = (int)i;
    key += std::to_string(members[i]) + ",";
  }
  if (rank < 0) fail(Status::invalid_argument, "rank ", me, " is not a member of group '", name, "'");
  std::shared_ptr<Group> g;
  {
    std::lock_guard<std::mutex> lk(mu_);
    auto &slot = groups_[key];
    if (!slot) {
      slot = std::make_shared<Group>();
      slot->size = (int)members.size();
      slot->present.assign(members.size(), 0);
      slot->posted.assign(members.size(), nullptr);
    }
    g = slot;
  }
  return std::make_unique<ThreadComm>(this, g, name, members, rank);
}

void ThreadWorld::abort(const std::string &why) {
  std::vector<std::shared_ptr<Group>> all;
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (!aborted_) {
      aborted_ = true;
      abort_reason_ = why;
    }
    for (auto &kv : groups_) all.push_back(kv.second);
  }
  for (auto &g : all) {
    std::lock_guard<std::mutex> lk(g->mu);
    g->cv.notify_all();
  }
}

bool ThreadWorld::aborted() const {
  std::lock_guard<std::mutex> lk(mu_);
  return aborted_;
}

std::string ThreadWorld::abort_reason() const {
  std::lock_guard<std::mutex> lk(mu_);
  return abort_reason_;
}

}  // namespace ptdp
