// The `mpi` backend: see mpi_comm.h.
//
// Layout of the MPI objects:
//   - one communicator per group (MPI_Comm_split of a duplicate of MPI_COMM_WORLD),
//     so messages and collectives of different groups never match each other;
//   - `ctl`, a duplicate of MPI_COMM_WORLD, for group creation and the shutdown barrier;
//   - `diag`, another duplicate, for the timeout diagnostics: a rank that times out
//     asks the members it waits for what they are doing (query/reply messages),
//     and every rank answers such queries while it polls in any wait loop.
//
// Waiting: MPI_Test (or MPI_Improbe) in a loop that yields the core for the first
// millisecond, then sleeps 20 us, doubling up to 1 ms, so that short waits are
// answered quickly and long ones leave the cores to ranks that share them.
// OpenMPI has no asynchronous progress thread by default: a buffered send of a
// large message moves on only while the sender is inside some MPI call (any
// ptdp operation, or the communicator's destructor, which waits for delivery).
#include "engine/comm/mpi_comm.h"

// The C API only: no MPI C++ bindings (deprecated, and they need libmpi_cxx).
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <exception>
#include <functional>
#include <list>
#include <map>
#include <mutex>
#include <thread>

#include "engine/core/status.h"

namespace ptdp {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

constexpr int kTagP2P = 17;     // point to point, on the group's communicator
constexpr int kTagQuery = 101;  // diagnostics, on diag
constexpr int kTagReply = 102;
// MPI counts are int: longer buffers go in pieces of at most this many elements.
constexpr size_t kMaxCount = size_t(1) << 30;
// all_reduce below this size (or on 2 ranks) works in place; above it the input is
// copied to a scratch buffer in pieces of kScratchBytes, because with MPI_IN_PLACE
// OpenMPI's libnbc always picks its binomial (reduce + broadcast) algorithm, which
// moves log2(p) times more data than the reduce-scatter + all-gather one.
constexpr size_t kInPlaceBytes = size_t(64) << 10;
constexpr size_t kScratchBytes = size_t(64) << 20;
const char *const kControl = "(control)";  // activities on ctl (group creation, shutdown)
constexpr double kDiagnoseSeconds = 1.0;   // how long a timed-out rank waits for answers
// Waiting: poll (yielding the core) for kSpinMicros, then sleep between polls,
// kMinSleepMicros doubling up to kMaxSleepMicros.
constexpr int kSpinMicros = 1000, kMinSleepMicros = 20, kMaxSleepMicros = 1000;

std::string fmt_seconds(double s) {
  char b[32];
  std::snprintf(b, sizeof b, "%g", s);
  return b;
}

std::string fmt_ranks(const std::vector<int> &r) {
  std::string s;
  auto add = [&](int v) { s += (s.empty() ? "" : " ") + std::to_string(v); };
  if (r.size() <= 16) {
    for (int v : r) add(v);
  } else {
    for (size_t i = 0; i < 8; i++) add(r[i]);
    s += " ...";
    for (size_t i = r.size() - 4; i < r.size(); i++) add(r[i]);
    s += " (" + std::to_string(r.size()) + " ranks)";
  }
  return s;
}

std::string mpi_error_string(int rc) {
  char buf[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(rc, buf, &len) != MPI_SUCCESS) return "MPI error " + std::to_string(rc);
  return std::string(buf, (size_t)len);
}

uint64_t fnv1a(const void *p, size_t n, uint64_t h = 1469598103934665603ull) {
  auto *c = static_cast<const unsigned char *>(p);
  for (size_t i = 0; i < n; i++) h = (h ^ c[i]) * 1099511628211ull;
  return h;
}

// 16-bit floats travel as their bits: MPI only moves them, ptdp reduces them.
MPI_Datatype mpi_dtype(DType t) {
  switch (t) {
    case DType::f64: return MPI_DOUBLE;
    case DType::bf16:
    case DType::f16: return MPI_UINT16_T;
    default: return MPI_FLOAT;
  }
}

bool overlaps(const void *a, size_t abytes, const void *b, size_t bbytes) {
  auto pa = reinterpret_cast<uintptr_t>(a), pb = reinterpret_cast<uintptr_t>(b);
  return abytes && bbytes && pa < pb + bbytes && pb < pa + abytes;
}

const char *thread_level_name(int level) {
  switch (level) {
    case MPI_THREAD_SINGLE: return "MPI_THREAD_SINGLE";
    case MPI_THREAD_FUNNELED: return "MPI_THREAD_FUNNELED";
    case MPI_THREAD_SERIALIZED: return "MPI_THREAD_SERIALIZED";
    case MPI_THREAD_MULTIPLE: return "MPI_THREAD_MULTIPLE";
  }
  return "unknown MPI thread level";
}

// One operation some thread of this process is waiting in; answers to
// diagnostic queries are built from these.
struct Activity {
  std::string group;  // group name, or kControl
  std::string op;     // comm_op_name(...) or "group creation" / "shutdown"
  int64_t seq = 0;    // number of the operation (collectives per group, messages per peer)
  std::string what;   // for people: "all_reduce #3 of group 'tp'"
  Clock::time_point start = Clock::now();
};

class MpiComm;

}  // namespace

struct MpiWorld::Impl {
  double timeout_s = 0;
  int rank = 0, size = 1;
  int provided = MPI_THREAD_SINGLE;
  bool owns = false;       // this object initialised MPI
  bool serialize = false;  // provided < MPI_THREAD_MULTIPLE: one MPI call at a time
  std::recursive_mutex mpi_mu;
  MPI_Comm ctl = MPI_COMM_NULL;
  MPI_Comm diag = MPI_COMM_NULL;
  int64_t ctl_seq = 0;
  // ctl_seq when every process failed an agreement together (agree,
  // fail_together): their failing exits still meet in the shutdown barrier,
  // so none is ended by mpirun before it has cleaned up and said why.
  int64_t agreed_failure_seq = -1;

  std::mutex mu;  // activities, comms
  std::list<Activity> activities;
  std::vector<MpiComm *> comms;

  std::mutex serve_mu;  // one thread answers queries at a time
  std::list<std::pair<std::string, MPI_Request>> replies;

  // Holds the MPI lock for one MPI call when MPI is not MPI_THREAD_MULTIPLE.
  struct Call {
    std::unique_lock<std::recursive_mutex> lk;
    explicit Call(Impl *w) {
      if (w->serialize) lk = std::unique_lock<std::recursive_mutex>(w->mpi_mu);
    }
  };

  [[noreturn]] void abort(const std::string &why) {
    say("rank ", rank, ": ", why);
    MPI_Abort(MPI_COMM_WORLD, 1);
    std::_Exit(1);  // not reached
  }

  void check(int rc, const std::string &where) {
    if (rc != MPI_SUCCESS) abort("MPI error " + where + ": " + mpi_error_string(rc));
  }

  // Polls done() until it returns true. After the first quick polls the activity
  // is registered (so that queries see it), queries are answered, and the loop
  // sleeps between polls. on_timeout() must not return.
  template <class Done, class OnTimeout>
  void wait(const Activity &act, Done done, OnTimeout on_timeout) {
    auto deadline = act.start + std::chrono::duration_cast<Clock::duration>(
                                    std::chrono::duration<double>(timeout_s));
    auto spin_until = Clock::now() + std::chrono::microseconds(kSpinMicros);
    int polls = 0, sleep_us = 0;
    bool registered = false;
    std::list<Activity>::iterator it;
    while (!done()) {
      if (++polls < 16) continue;
      auto now = Clock::now();
      if (now < spin_until) {  // short waits: poll, letting ranks that share the core run
        std::this_thread::yield();
        continue;
      }
      if (!registered) {
        std::lock_guard<std::mutex> lk(mu);
        it = activities.insert(activities.end(), act);
        registered = true;
      }
      serve();
      if (now > deadline) on_timeout();
      sleep_us = sleep_us ? std::min(sleep_us * 2, kMaxSleepMicros) : kMinSleepMicros;
      std::this_thread::sleep_for(std::chrono::microseconds(sleep_us));
    }
    if (registered) {
      std::lock_guard<std::mutex> lk(mu);
      activities.erase(it);
    }
  }

  void wait_request(MPI_Request *req, const Activity &act, const std::string &where,
                    const std::function<void()> &on_timeout) {
    wait(act,
         [&] {
           int flag = 0;
           Call g(this);
           check(MPI_Test(req, &flag, MPI_STATUS_IGNORE), where);
           return flag != 0;
         },
         [&] {
           on_timeout();
           std::abort();  // on_timeout never returns
         });
  }

  // What this process tells a rank that timed out in `act_op` #seq of `group`:
  // '1' or '0' (whether it waits in that very operation) followed by text.
  std::string describe(int querier, const std::string &group, const std::string &op, int64_t seq);
  // Answers pending diagnostic queries; cheap when there are none.
  void serve();

  struct Answer {
    bool answered = false, present = false;
    std::string text;
  };
  // Asks the world ranks `who` what they are doing about `act`; waits at most
  // kDiagnoseSeconds for the answers (answering queries meanwhile).
  std::vector<Answer> ask(const std::vector<int> &who, const Activity &act);

  // "ranks still missing: 1 (...), 3 (...)" for a collective `act` over `others`.
  std::string missing_ranks(const std::vector<int> &others, const Activity &act) {
    auto ans = ask(others, act);
    std::string s;
    int listed = 0, missing = 0;
    for (size_t i = 0; i < others.size(); i++) {
      if (ans[i].present) continue;
      missing++;
      if (listed == 16) continue;
      listed++;
      s += (s.empty() ? "" : ", ") + std::to_string(others[i]) + " (" +
           (ans[i].answered ? ans[i].text : no_answer()) + ")";
    }
    if (missing > listed) s += ", and " + std::to_string(missing - listed) + " more";
    if (!missing)
      return "every other member is waiting in this operation too (arguments that differ "
             "between ranks, or MPI itself is stuck)";
    return "ranks still missing: " + s;
  }
  static std::string no_answer() {
    return "no answer: it is busy outside ptdp communication, hung or dead";
  }
};

namespace {

// A group's communicator. Used by one thread at a time, like every Communicator.
class MpiComm final : public Communicator {
 public:
  MpiComm(MpiWorld::Impl *w, MPI_Comm comm, std::string name, std::vector<int> members, int rank)
      : Communicator(std::move(name), std::move(members), rank),
        w_(w),
        comm_(comm),
        sent_(new std::atomic<int64_t>[size()]),
        received_(new std::atomic<int64_t>[size()]) {
    for (int r = 0; r < size(); r++) sent_[r] = received_[r] = 0;
    std::lock_guard<std::mutex> lk(w_->mu);
    w_->comms.push_back(this);
  }

  ~MpiComm() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) {
      if (!pending_.empty() && std::uncaught_exceptions() == 0) {
        Activity act{name_, comm_op_name(CommOp::send), (int64_t)pending_.size(),
                     "delivery of " + std::to_string(pending_.size()) +
                         " buffered sends while destroying group '" + name_ + "'"};
        w_->wait(act,
                 [&] {
                   reap_sends();
                   return pending_.empty();
                 },
                 [&] { timeout_sends(act); });
      }
      for (auto &p : pending_) {  // only while an exception propagates
        MPI_Request_free(&p.req);
        p.data.release();  // MPI may still read it: leak rather than free under its feet
      }
      MPI_Comm_free(&comm_);
    }
    std::lock_guard<std::mutex> lk(w_->mu);
    w_->comms.erase(std::find(w_->comms.begin(), w_->comms.end(), this));
  }

  void all_reduce(void *buf, size_t n, DType dt, ReduceOp op) override {
    const size_t es = elem_size(dt, CommOp::all_reduce);
    CommTimer timer(stats_);
    stats_.add(CommOp::all_reduce, (int64_t)(n * es));
    if (size() == 1) return;
    int64_t seq = ++coll_started_;
    if (dt == DType::f32 || dt == DType::f64)
      reduce_native(static_cast<char *>(buf), n, es, mpi_dtype(dt), op, seq);
    else
      reduce_16bit(static_cast<uint16_t *>(buf), n, dt, op, seq);
    coll_done_++;
  }

  void all_gather(const void *in, void *out, size_t n, DType dt) override {
    const size_t es = elem_size(dt, CommOp::all_gather);
    CommTimer timer(stats_);
    stats_.add(CommOp::all_gather, (int64_t)(n * es));
    check_count(n, CommOp::all_gather);
    const void *src = in;
    if (n && in == static_cast<char *>(out) + (size_t)rank_ * n * es) {
      src = MPI_IN_PLACE;
    } else if (overlaps(in, n * es, out, n * size() * es)) {
      scratch_.resize(n * es);
      std::memcpy(scratch_.data(), in, n * es);
      src = scratch_.data();
    }
    int64_t seq = ++coll_started_;
    run(CommOp::all_gather, seq, [&](MPI_Request *req) {
      return MPI_Iallgather(src, (int)n, mpi_dtype(dt), out, (int)n, mpi_dtype(dt), comm_, req);
    });
    coll_done_++;
  }

  void reduce_scatter(const void *in, void *out, size_t n, DType dt) override {
    const size_t es = elem_size(dt, CommOp::reduce_scatter);
    CommTimer timer(stats_);
    stats_.add(CommOp::reduce_scatter, (int64_t)(n * size() * es));
    check_count(n, CommOp::reduce_scatter);
    int64_t seq = ++coll_started_;
    if (dt == DType::bf16 || dt == DType::f16) {
      // MPI cannot add 16-bit floats: every member's block for this rank comes
      // here (all-to-all), and is summed in member order.
      scratch_.resize(n * size() * es);
      run(CommOp::reduce_scatter, seq, [&](MPI_Request *req) {
        return MPI_Ialltoall(in, (int)n, MPI_UINT16_T, scratch_.data(), (int)n, MPI_UINT16_T,
                             comm_, req);
      });
      std::vector<const void *> parts(size());
      for (int r = 0; r < size(); r++) parts[r] = scratch_.data() + (size_t)r * n * es;
      reduce_in_order(parts.data(), size(), out, n, dt, ReduceOp::sum);
      coll_done_++;
      return;
    }
    const void *src = in;
    if (n && in == out) {
      src = MPI_IN_PLACE;  // MPI: the input is in `out`, the result goes to its start
    } else if (overlaps(in, n * size() * es, out, n * es)) {
      scratch_.resize(n * size() * es);
      std::memcpy(scratch_.data(), in, n * size() * es);
      src = scratch_.data();
    }
    run(CommOp::reduce_scatter, seq, [&](MPI_Request *req) {
      return MPI_Ireduce_scatter_block(src, out, (int)n, mpi_dtype(dt), MPI_SUM, comm_, req);
    });
    coll_done_++;
  }

  void broadcast(void *buf, size_t n, DType dt, int root) override {
    const size_t es = elem_size(dt, CommOp::broadcast);
    check_peer(root, "broadcast root");
    CommTimer timer(stats_);
    stats_.add(CommOp::broadcast, (int64_t)(n * es));
    int64_t seq = ++coll_started_;
    size_t off = 0;
    do {
      size_t c = std::min(n - off, kMaxCount);
      run(CommOp::broadcast, seq, [&](MPI_Request *req) {
        return MPI_Ibcast(static_cast<char *>(buf) + off * es, (int)c, mpi_dtype(dt), root, comm_,
                          req);
      });
      off += c;
    } while (off < n);
    coll_done_++;
  }

  void send(const void *buf, size_t n, DType dt, int peer) override {
    const size_t es = elem_size(dt, CommOp::send);
    check_peer(peer, "send peer");
    CommTimer timer(stats_);
    stats_.add(CommOp::send, (int64_t)(n * es));
    reap_sends();
    size_t off = 0;
    do {  // a message of 0 elements is sent too
      size_t c = std::min(n - off, kMaxCount);
      Pending p;
      p.data.reset(new char[c ? c * es : 1]);
      if (c) std::memcpy(p.data.get(), static_cast<const char *>(buf) + off * es, c * es);
      p.peer = peer;
      {
        MpiWorld::Impl::Call g(w_);
        w_->check(MPI_Isend(p.data.get(), (int)c, mpi_dtype(dt), peer, kTagP2P, comm_, &p.req),
                  where(CommOp::send));
      }
      pending_.push_back(std::move(p));
      off += c;
    } while (off < n);
    sent_[peer]++;
    reap_sends();  // small (eager) messages are usually done already
  }

  void recv(void *buf, size_t n, DType dt, int peer) override {
    const size_t es = elem_size(dt, CommOp::recv);
    check_peer(peer, "recv peer");
    CommTimer timer(stats_);
    stats_.add(CommOp::recv, (int64_t)(n * es));
    reap_sends();
    int64_t seq = received_[peer] + 1;
    Activity act{name_, comm_op_name(CommOp::recv), seq,
                 "recv of message #" + std::to_string(seq) + " from world rank " +
                     std::to_string(members_[peer]) + " in group '" + name_ + "'"};
    auto on_timeout = [&] { timeout_recv(act, peer); };
    size_t off = 0;
    do {
      size_t c = std::min(n - off, kMaxCount);
      MPI_Message msg = MPI_MESSAGE_NULL;
      MPI_Status st;
      w_->wait(act,
               [&] {
                 int flag = 0;
                 MpiWorld::Impl::Call g(w_);
                 w_->check(MPI_Improbe(peer, kTagP2P, comm_, &flag, &msg, &st),
                           where(CommOp::recv));
                 return flag != 0;
               },
               on_timeout);
      int count = 0;
      MPI_Get_count(&st, mpi_dtype(dt), &count);
      std::vector<char> wrong;
      void *dst = static_cast<char *>(buf) + off * es;
      if ((size_t)count != c) {  // take the message off the queue, then fail
        wrong.resize((size_t)std::max(count, 1) * es);
        dst = wrong.data();
      }
      MPI_Request req;
      {
        MpiWorld::Impl::Call g(w_);
        w_->check(MPI_Imrecv(dst, count, mpi_dtype(dt), &msg, &req), where(CommOp::recv));
      }
      w_->wait_request(&req, act, where(CommOp::recv), on_timeout);
      if ((size_t)count != c) {
        received_[peer]++;
        fail(Status::comm_failure, "group '", name_, "': recv of ", n, " elements from rank ",
             members_[peer], " got a message of ", off + (size_t)count);
      }
      off += c;
    } while (off < n);
    received_[peer]++;
  }

  void barrier() override {
    CommTimer timer(stats_);
    stats_.add(CommOp::barrier, 0);
    int64_t seq = ++coll_started_;
    run(CommOp::barrier, seq, [&](MPI_Request *req) { return MPI_Ibarrier(comm_, req); });
    coll_done_++;
  }

  // For the answers to diagnostic queries (any thread).
  int64_t collectives_done() const { return coll_done_; }
  int64_t sent_to(int peer) const { return sent_[peer]; }
  int64_t received_from(int peer) const { return received_[peer]; }

 private:
  struct Pending {
    std::unique_ptr<char[]> data;
    MPI_Request req = MPI_REQUEST_NULL;
    int peer = 0;
  };

  // f32/f64: MPI's own all-reduce, whose algorithms give every rank the same bits.
  void reduce_native(char *buf, size_t n, size_t es, MPI_Datatype type, ReduceOp op,
                     int64_t seq) {
    MPI_Op mop = op == ReduceOp::sum ? MPI_SUM : MPI_MAX;
    bool in_place = n * es < kInPlaceBytes || size() <= 2;
    size_t piece = in_place ? kMaxCount : kScratchBytes / es;
    size_t off = 0;
    do {
      size_t c = std::min(n - off, piece);
      const void *src = MPI_IN_PLACE;
      if (!in_place) {
        scratch_.resize(c * es);
        std::memcpy(scratch_.data(), buf + off * es, c * es);
        src = scratch_.data();
      }
      run(CommOp::all_reduce, seq, [&](MPI_Request *req) {
        return MPI_Iallreduce(src, buf + off * es, (int)c, type, mop, comm_, req);
      });
      off += c;
    } while (off < n);
  }

  // bf16/f16: MPI cannot add 16-bit floats, and the sum must be the fixed-order
  // fp32 one. As in the threads backend, each member reduces one slice: an
  // all-to-all brings it every member's copy of its slice, it reduces them in
  // member order, and an all-gather hands the slices round (the traffic of a
  // reduce-scatter + all-gather).
  void reduce_16bit(uint16_t *buf, size_t n, DType dt, ReduceOp op, int64_t seq) {
    const int P = size();
    std::vector<int> count(P), displ(P), rcount(P), rdispl(P);
    std::vector<const void *> parts(P);
    const size_t piece = kScratchBytes / sizeof(uint16_t);  // elements: the counts fit an int
    for (size_t off = 0; off < n; off += piece) {
      const size_t c = std::min(n - off, piece);
      for (int r = 0; r < P; r++) {
        displ[r] = (int)(c * r / P);
        count[r] = (int)(c * (r + 1) / P) - displ[r];
      }
      const int mine = count[rank_];
      for (int r = 0; r < P; r++) rcount[r] = mine, rdispl[r] = r * mine;
      scratch_.resize((size_t)P * mine * sizeof(uint16_t));
      auto *parts16 = reinterpret_cast<uint16_t *>(scratch_.data());
      uint16_t *x = buf + off;
      run(CommOp::all_reduce, seq, [&](MPI_Request *req) {
        return MPI_Ialltoallv(x, count.data(), displ.data(), MPI_UINT16_T, parts16, rcount.data(),
                              rdispl.data(), MPI_UINT16_T, comm_, req);
      });
      for (int r = 0; r < P; r++) parts[r] = parts16 + (size_t)r * mine;
      reduce_in_order(parts.data(), P, x + displ[rank_], (size_t)mine, dt, op);
      run(CommOp::all_reduce, seq, [&](MPI_Request *req) {
        return MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, x, count.data(), displ.data(),
                               MPI_UINT16_T, comm_, req);
      });
    }
  }

  // Starts one nonblocking collective and waits for it.
  template <class Start>
  void run(CommOp op, int64_t seq, Start start) {
    reap_sends();
    Activity act{name_, comm_op_name(op), seq,
                 std::string(comm_op_name(op)) + " #" + std::to_string(seq) + " of group '" +
                     name_ + "'"};
    MPI_Request req;
    {
      MpiWorld::Impl::Call g(w_);
      w_->check(start(&req), where(op));
    }
    w_->wait_request(&req, act, where(op), [&] { timeout_collective(act); });
  }

  // Completes the buffered sends that are done; keeps the others.
  void reap_sends() {
    if (pending_.empty()) return;
    MpiWorld::Impl::Call g(w_);
    for (auto it = pending_.begin(); it != pending_.end();) {
      int flag = 0;
      w_->check(MPI_Test(&it->req, &flag, MPI_STATUS_IGNORE), where(CommOp::send));
      it = flag ? pending_.erase(it) : std::next(it);
    }
  }

  std::string where(CommOp op) const {
    return "in group '" + name_ + "' during " + comm_op_name(op) + " on rank " +
           std::to_string(members_[rank_]);
  }

  std::string timeout_head(const std::string &op) const {
    return "communicator timeout after " + fmt_seconds(w_->timeout_s) + " s in group '" + name_ +
           "' (world ranks " + fmt_ranks(members_) + ") during " + op + " on rank " +
           std::to_string(members_[rank_]);
  }

  [[noreturn]] void timeout_collective(const Activity &act) {
    std::vector<int> others;
    for (int r = 0; r < size(); r++)
      if (r != rank_) others.push_back(members_[r]);
    w_->abort(timeout_head(act.op) + " (" + act.what + "): " + w_->missing_ranks(others, act));
  }

  [[noreturn]] void timeout_recv(const Activity &act, int peer) {
    auto ans = w_->ask({members_[peer]}, act);
    w_->abort(timeout_head(act.op) + " (" + act.what + "): rank " +
              std::to_string(members_[peer]) + " has not sent (" +
              (ans[0].answered ? "rank " + std::to_string(members_[peer]) + ": " + ans[0].text
                               : MpiWorld::Impl::no_answer()) +
              ")");
  }

  [[noreturn]] void timeout_sends(const Activity &act) {
    std::vector<int> peers;
    for (auto &p : pending_)
      if (std::find(peers.begin(), peers.end(), members_[p.peer]) == peers.end())
        peers.push_back(members_[p.peer]);
    auto ans = w_->ask(peers, act);
    std::string s;
    for (size_t i = 0; i < peers.size(); i++)
      s += "; rank " + std::to_string(peers[i]) + ": " +
           (ans[i].answered ? ans[i].text : MpiWorld::Impl::no_answer());
    w_->abort(timeout_head(act.op) + ": " + std::to_string(pending_.size()) +
              " buffered messages to world rank(s) " + fmt_ranks(peers) +
              " were never received before the communicator was destroyed" + s);
  }

  void check_peer(int peer, const char *what) const {
    if (peer < 0 || peer >= size())
      fail(Status::invalid_argument, "group '", name_, "': ", what, " ", peer,
           " is outside [0, ", size(), ")");
  }

  void check_count(size_t n, CommOp op) const {
    if (n > (size_t)INT_MAX)
      fail(Status::invalid_argument, "group '", name_, "': ", comm_op_name(op), " of ", n,
           " elements per rank exceeds the MPI limit of ", INT_MAX);
  }

  MpiWorld::Impl *w_;
  MPI_Comm comm_;
  std::atomic<int64_t> coll_started_{0}, coll_done_{0};
  std::unique_ptr<std::atomic<int64_t>[]> sent_, received_;  // messages, per peer
  std::deque<Pending> pending_;
  std::vector<char> scratch_;
};

}  // namespace

// ---------------------------------------------------------------------------
// Diagnostics

std::string MpiWorld::Impl::describe(int querier, const std::string &group, const std::string &op,
                                     int64_t seq) {
  std::lock_guard<std::mutex> lk(mu);
  bool present = false;
  std::string s;
  for (auto &a : activities) {
    if (a.group == group && a.op == op && a.seq == seq) present = true;
    s += (s.empty() ? "" : "; ") + std::string("waiting in ") + a.what + " for " +
         fmt_seconds(std::round(seconds_since(a.start) * 10) / 10) + " s";
  }
  if (s.empty()) s = "not waiting in any ptdp communication";
  if (group != kControl) {
    for (auto *c : comms) {
      if (c->name() != group) continue;
      s += "; has completed " + std::to_string(c->collectives_done()) + " collectives in '" +
           group + "'";
      const auto &m = c->members();
      auto q = std::find(m.begin(), m.end(), querier);
      bool p2p = op == comm_op_name(CommOp::send) || op == comm_op_name(CommOp::recv);
      if (p2p && q != m.end()) {
        int peer = (int)(q - m.begin());
        s += ", sent " + std::to_string(c->sent_to(peer)) + " and received " +
             std::to_string(c->received_from(peer)) + " messages to/from rank " +
             std::to_string(querier);
      }
    }
  }
  return (present ? "1" : "0") + s;
}

void MpiWorld::Impl::serve() {
  if (diag == MPI_COMM_NULL) return;
  std::unique_lock<std::mutex> lk(serve_mu, std::try_to_lock);
  if (!lk.owns_lock()) return;
  for (;;) {
    int flag = 0, count = 0;
    MPI_Message msg;
    MPI_Status st;
    std::vector<char> q;
    {
      Call g(this);
      if (MPI_Improbe(MPI_ANY_SOURCE, kTagQuery, diag, &flag, &msg, &st) != MPI_SUCCESS || !flag)
        break;
      MPI_Get_count(&st, MPI_CHAR, &count);
      q.resize((size_t)count + 1);
      MPI_Mrecv(q.data(), count, MPI_CHAR, &msg, MPI_STATUS_IGNORE);  // small: eager
    }
    // query: group \n op \n seq
    std::string text(q.data(), (size_t)count);
    size_t a = text.find('\n'), b = text.find('\n', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    std::string reply = describe(st.MPI_SOURCE, text.substr(0, a), text.substr(a + 1, b - a - 1),
                                 std::atoll(text.c_str() + b + 1));
    replies.emplace_back(std::move(reply), MPI_REQUEST_NULL);
    Call g(this);
    auto &r = replies.back();
    MPI_Isend(r.first.data(), (int)r.first.size(), MPI_CHAR, st.MPI_SOURCE, kTagReply, diag,
              &r.second);
  }
  Call g(this);
  for (auto it = replies.begin(); it != replies.end();) {
    int flag = 0;
    MPI_Test(&it->second, &flag, MPI_STATUS_IGNORE);
    it = flag ? replies.erase(it) : std::next(it);
  }
}

std::vector<MpiWorld::Impl::Answer> MpiWorld::Impl::ask(const std::vector<int> &who,
                                                        const Activity &act) {
  std::vector<Answer> ans(who.size());
  if (diag == MPI_COMM_NULL || who.empty()) return ans;
  // Deliberately leaked: the caller aborts right after, and a query to a rank
  // that never picks it up may stay in flight until then.
  auto *query = new std::string(act.group + "\n" + act.op + "\n" + std::to_string(act.seq));
  std::vector<MPI_Request> reqs(who.size(), MPI_REQUEST_NULL);
  {
    Call g(this);
    for (size_t i = 0; i < who.size(); i++)
      MPI_Isend(query->data(), (int)query->size(), MPI_CHAR, who[i], kTagQuery, diag, &reqs[i]);
  }
  auto t0 = Clock::now();
  size_t left = who.size();
  while (left && seconds_since(t0) < kDiagnoseSeconds) {
    serve();  // ranks that timed out at the same time ask each other
    for (size_t i = 0; i < who.size(); i++) {
      if (ans[i].answered) continue;
      int flag = 0, count = 0;
      MPI_Message msg;
      MPI_Status st;
      Call g(this);
      if (MPI_Improbe(who[i], kTagReply, diag, &flag, &msg, &st) != MPI_SUCCESS || !flag) continue;
      MPI_Get_count(&st, MPI_CHAR, &count);
      std::vector<char> r((size_t)count + 1);
      MPI_Mrecv(r.data(), count, MPI_CHAR, &msg, MPI_STATUS_IGNORE);
      ans[i].answered = true;
      ans[i].present = count > 0 && r[0] == '1';
      ans[i].text = count > 1 ? std::string(r.data() + 1, (size_t)count - 1) : "";
      left--;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  Call g(this);
  for (auto &r : reqs)
    if (r != MPI_REQUEST_NULL) MPI_Request_free(&r);
  return ans;
}

// ---------------------------------------------------------------------------
// MpiWorld

void abort_mpi_job_if_running(const std::string &why) {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (!initialized || finalized) return;
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  say("rank ", rank, ": ", why);
  MPI_Abort(MPI_COMM_WORLD, 1);
}

bool MpiWorld::launched_by_mpirun() {
  return std::getenv("OMPI_COMM_WORLD_SIZE") || std::getenv("PMI_SIZE") ||
         std::getenv("PMIX_RANK");
}

MpiWorld::MpiWorld(double timeout_s) : impl_(std::make_unique<Impl>()) {
  if (!(timeout_s > 0))
    fail(Status::bad_value, "communicator timeout must be positive, got ", timeout_s);
  Impl &w = *impl_;
  w.timeout_s = timeout_s;
  int inited = 0, finalized = 0;
  MPI_Initialized(&inited);
  MPI_Finalized(&finalized);
  if (finalized) fail(Status::wrong_state, "MPI has already been finalised");
  if (!inited) {
    int rc = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &w.provided);
    if (rc != MPI_SUCCESS)
      fail(Status::comm_failure, "MPI_Init_thread failed: ", mpi_error_string(rc));
    w.owns = true;
  } else {
    MPI_Query_thread(&w.provided);
  }
  w.serialize = w.provided < MPI_THREAD_MULTIPLE;
  MPI_Comm_rank(MPI_COMM_WORLD, &w.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &w.size);
  // Two private duplicates of the world, made with the timeout (a process that
  // never constructs its MpiWorld makes the others fail instead of hang).
  for (MPI_Comm *dst : {&w.ctl, &w.diag}) {
    MPI_Request req;
    MPI_Comm c = MPI_COMM_NULL;  // usable once the request completes
    w.check(MPI_Comm_idup(MPI_COMM_WORLD, &c, &req), "in MPI_Comm_idup");
    Activity act{kControl, "startup", 0, "the startup of the MPI world (MpiWorld constructor)"};
    w.wait_request(&req, act, "in MPI_Comm_idup", [&] {
      w.abort("communicator timeout after " + fmt_seconds(timeout_s) +
              " s in the MPI world during startup on rank " + std::to_string(w.rank) +
              ": not every process constructed its MpiWorld");
    });
    MPI_Comm_set_errhandler(c, MPI_ERRORS_RETURN);
    *dst = c;
  }
}

namespace {
int exit_status = 0;  // what this process passed to exit(), once it exits
void note_exit_status(int status, void *) { exit_status = status; }
}  // namespace

MpiWorld &MpiWorld::of_this_process(double timeout_s) {
  static MpiWorld world(timeout_s);
  // Registered after the world's destructor, so run before it at exit.
  static const int watching = ::on_exit(note_exit_status, nullptr);
  (void)watching;
  return world;
}

MpiWorld::~MpiWorld() {
  Impl &w = *impl_;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  // A failing exit leaves without MPI_Finalize: mpirun ends the job. Not
  // after a failure all processes agreed on, as their last collective.
  if (std::uncaught_exceptions() > 0 || (exit_status != 0 && w.agreed_failure_seq != w.ctl_seq)) return;
  if (w.owns) {
    int64_t seq = ++w.ctl_seq;
    Activity act{kControl, "shutdown", seq, "the shutdown barrier (MpiWorld destructor)"};
    MPI_Request req;
    w.check(MPI_Ibarrier(w.ctl, &req), "in the shutdown barrier");
    w.wait_request(&req, act, "in the shutdown barrier", [&] {
      std::vector<int> others;
      for (int r = 0; r < w.size; r++)
        if (r != w.rank) others.push_back(r);
      w.abort("communicator timeout after " + fmt_seconds(w.timeout_s) +
              " s in the MPI world during shutdown on rank " + std::to_string(w.rank) + ": " +
              w.missing_ranks(others, act));
    });
  }
  {
    // Answers still in flight (to a rank that is aborting the job anyway): their
    // buffers are leaked, not freed under MPI's feet.
    std::lock_guard<std::mutex> lk(w.serve_mu);
    for (auto &r : w.replies) MPI_Request_free(&r.second);
    if (!w.replies.empty()) new std::list<std::pair<std::string, MPI_Request>>(std::move(w.replies));
  }
  MPI_Comm_free(&w.diag);
  MPI_Comm_free(&w.ctl);
  if (w.owns) MPI_Finalize();
}

int MpiWorld::rank() const { return impl_->rank; }
int MpiWorld::size() const { return impl_->size; }
double MpiWorld::timeout_s() const { return impl_->timeout_s; }
std::string MpiWorld::thread_level() const { return thread_level_name(impl_->provided); }
bool MpiWorld::thread_multiple() const { return impl_->provided >= MPI_THREAD_MULTIPLE; }
bool MpiWorld::initialised_mpi() const { return impl_->owns; }

void MpiWorld::abort(const std::string &why) { impl_->abort(why); }

// Every process's k values (k the same everywhere), on the control
// communicator, with the timeout. `what`, plural, names them in messages.
static std::vector<int64_t> gather_control(MpiWorld::Impl &w, const std::string &what,
                                           const std::vector<int64_t> &mine) {
  const int64_t seq = ++w.ctl_seq;
  Activity act{kControl, "agreement", seq, "the comparison of every process's " + what};
  const int k = (int)mine.size();
  std::vector<int64_t> all((size_t)w.size * k);
  MPI_Request req;
  w.check(MPI_Iallgather(mine.data(), k, MPI_INT64_T, all.data(), k, MPI_INT64_T, w.ctl, &req),
          "while comparing the processes' " + what);
  w.wait_request(&req, act, "while comparing the processes' " + what, [&] {
    std::vector<int> others;
    for (int r = 0; r < w.size; r++)
      if (r != w.rank) others.push_back(r);
    w.abort("communicator timeout after " + fmt_seconds(w.timeout_s) + " s comparing the processes' " +
            what + " on rank " + std::to_string(w.rank) + ": " + w.missing_ranks(others, act));
  });
  return all;
}

std::vector<int64_t> MpiWorld::gather_values(const std::string &what, int64_t mine) {
  return gather_control(*impl_, what, {mine});
}

void MpiWorld::agree(const std::string &what,
                     const std::vector<std::pair<std::string, std::string>> &items) {
  Impl &w = *impl_;
  // The counts first, then each item's hash (name and value), all gathered:
  // every process reaches the same verdict from the same table. (A caller's
  // own items, ptdp_trainer_agree's, may differ in number: gathered with
  // another count each, MPI would truncate.)
  const auto gather = [&](const std::vector<int64_t> &mine) { return gather_control(w, what + "s", mine); };
  const int n = (int)items.size();
  const std::vector<int64_t> counts = gather({(int64_t)n});
  for (int r = 0; r < w.size; r++)
    if (counts[(size_t)r] != counts[0]) {
      w.agreed_failure_seq = w.ctl_seq;  // (every process reaches this verdict)
      fail(Status::invalid_config, "the processes of this run compare different ", what, "s: world rank ",
           r, " has ", counts[(size_t)r], " ", what, "s to compare, world rank 0 ", counts[0],
           " (every process passes the same names, in the same order)");
    }
  if (n == 0) return;
  std::vector<int64_t> mine((size_t)n);
  for (int i = 0; i < n; i++) {
    const std::string text = items[(size_t)i].first + '=' + items[(size_t)i].second;
    mine[(size_t)i] = (int64_t)fnv1a(text.data(), text.size());
  }
  const std::vector<int64_t> all = gather(mine);
  for (int r = 1; r < w.size; r++) {
    for (int i = 0; i < n; i++)
      if (all[(size_t)r * n + i] != all[(size_t)i]) {
        w.agreed_failure_seq = w.ctl_seq;
        fail(Status::invalid_config, what, " '", items[(size_t)i].first, "' differs between the processes of ",
             "this run (world ranks 0 and ", r, "; on world rank ", w.rank, " it is '", items[(size_t)i].second,
             "'): every process of a run takes the same options (all ranks run together what they ",
             "shape: the model, the batch, the schedule, the data, the checkpoints, evaluations)");
      }
  }
}

void MpiWorld::fail_together(const std::string &what, std::exception_ptr mine) {
  const std::vector<int64_t> failed = gather_values(what, mine ? 1 : 0);
  for (size_t r = 0; r < failed.size(); r++)
    if (failed[r]) {
      impl_->agreed_failure_seq = impl_->ctl_seq;
      if (mine) std::rethrow_exception(mine);
      fail(Status::invalid_config, "the process of mpirun rank ", r, " refused ", what,
           " (its own message says why): every process of this run stops with it");
    }
}

std::unique_ptr<Communicator> MpiWorld::group(const std::string &name,
                                              const std::vector<int> &members, int me) {
  Impl &w = *impl_;
  // 1. What this process asks for, checked locally.
  std::string local_err;
  int key = -1;
  std::vector<char> seen((size_t)w.size, 0);
  for (size_t i = 0; i < members.size() && local_err.empty(); i++) {
    int m = members[i];
    if (m < 0 || m >= w.size)
      local_err = "names rank " + std::to_string(m) + " outside the world of " +
                  std::to_string(w.size);
    else if (seen[(size_t)m]++)
      local_err = "names rank " + std::to_string(m) + " twice";
    else if (m == me)
      key = (int)i;
  }
  if (local_err.empty() && me != w.rank)
    local_err = "was created with me = " + std::to_string(me) + " on the process of world rank " +
                std::to_string(w.rank);
  if (local_err.empty() && key < 0)
    local_err = "does not contain rank " + std::to_string(me);

  // 2. Everybody's request, gathered (with the timeout) so that every process
  // reaches the same verdict: either all create the group or all throw.
  enum { kColor, kKey, kCount, kMembersHash, kNameHash, kErr, kFields };
  int64_t mine[kFields] = {local_err.empty() ? members[0] : -1,
                           key,
                           (int64_t)members.size(),
                           (int64_t)fnv1a(members.data(), members.size() * sizeof(int)),
                           (int64_t)fnv1a(name.data(), name.size()),
                           local_err.empty() ? 0 : 1};
  std::vector<int64_t> all((size_t)w.size * kFields);
  int64_t seq = ++w.ctl_seq;
  Activity act{kControl, "group creation", seq,
               "the creation of group '" + name + "' (group call #" + std::to_string(seq) + ")"};
  MPI_Request req;
  w.check(MPI_Iallgather(mine, kFields, MPI_INT64_T, all.data(), kFields, MPI_INT64_T, w.ctl, &req),
          "while creating group '" + name + "'");
  w.wait_request(&req, act, "while creating group '" + name + "'", [&] {
    std::vector<int> others;
    for (int r = 0; r < w.size; r++)
      if (r != w.rank) others.push_back(r);
    w.abort("communicator timeout after " + fmt_seconds(w.timeout_s) + " s in group '" + name +
            "' (world ranks " + fmt_ranks(members) + ") during group creation on rank " +
            std::to_string(w.rank) + ": " + w.missing_ranks(others, act));
  });

  auto at = [&](int r, int f) { return all[(size_t)r * kFields + f]; };
  std::string err;
  for (int r = 0; r < w.size && err.empty(); r++) {
    if (at(r, kNameHash) != at(0, kNameHash))
      err = "group creation out of step: world ranks 0 and " + std::to_string(r) +
            " create groups of different names in the same call (every process must create "
            "its groups in the same order)";
    else if (at(r, kErr))
      err = "world rank " + std::to_string(r) + " passed an invalid member list" +
            (r == w.rank ? ": the group " + local_err : "");
  }
  std::map<int64_t, std::vector<int>> by_color;  // the processes of each group
  if (err.empty())
    for (int r = 0; r < w.size; r++) by_color[at(r, kColor)].push_back(r);
  for (auto &kv : by_color) {
    if (!err.empty()) break;
    int lead = kv.second[0];
    for (int q : kv.second)
      if (err.empty() &&
          (at(q, kMembersHash) != at(lead, kMembersHash) || at(q, kCount) != at(lead, kCount)))
        err = "world ranks " + std::to_string(lead) + " and " + std::to_string(q) +
              " passed different member lists for the group led by world rank " +
              std::to_string(kv.first);
    if (err.empty() && (int64_t)kv.second.size() != at(lead, kCount))
      err = "the group led by world rank " + std::to_string(kv.first) + " lists " +
            std::to_string(at(lead, kCount)) + " members but " +
            std::to_string(kv.second.size()) +
            " processes joined it (the groups of one call must partition the world)";
  }
  if (!err.empty()) fail(Status::invalid_argument, "group '", name, "': ", err);

  // 3. The communicator.
  MPI_Comm comm = MPI_COMM_NULL;
  w.check(MPI_Comm_split(w.ctl, members[0], key, &comm), "in MPI_Comm_split for '" + name + "'");
  int csize = 0, crank = -1;
  MPI_Comm_size(comm, &csize);
  MPI_Comm_rank(comm, &crank);
  if (csize != (int)members.size() || crank != key) {
    MPI_Comm_free(&comm);
    fail(Status::comm_failure, "group '", name, "': MPI_Comm_split made a communicator of ", csize,
         " ranks (rank ", crank, ") for a group of ", members.size(), " (rank ", key, ")");
  }
  MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
  MPI_Comm_set_name(comm, name.c_str());
  return std::make_unique<MpiComm>(impl_.get(), comm, name, members, key);
}

}  // namespace ptdp
