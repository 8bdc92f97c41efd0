// The `mpi` communicator backend (engine/comm/mpi_comm.h), run under
//   mpirun --allow-run-as-root --oversubscribe -np N test_comm_mpi      (N = 2, 4, ...)
// Every process runs the same GoogleTest cases in the same order (the cases are
// collective); expected values are computed locally. Rank 0 prints the usual
// GoogleTest report, the other ranks print only their failures, prefixed
// "[rank R]". The exit code is non-zero on every rank if any rank failed.
//
// Groups (created once, in this order, by every process):
//   world     all ranks
//   half      ranks [0, N/2) and [N/2, N)                 (two groups)
//   strided   even ranks and odd ranks                    (two groups, N >= 2)
//   reversed  all ranks, group rank r = world rank N-1-r
//   stats     all ranks, used only by the counter test
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "engine/comm/communicator.h"
#include "engine/comm/mpi_comm.h"
#include "engine/core/status.h"

using namespace ptdp;

namespace {

// Generous: a test that works never waits for it; a broken one aborts instead of hanging.
constexpr double kTimeout = 60.0;
const std::vector<size_t> kSizes = {0, 1, 7, 1001, 3000001};

MpiWorld *g_world = nullptr;
int R = 0, N = 1;  // world rank and size
std::unique_ptr<Communicator> g_all, g_half, g_strided, g_reversed, g_stats;

// The large size runs on the world and half groups; the others get the small ones.
std::vector<size_t> sizes_for(const Communicator *c) {
  if (c == g_all.get() || c == g_half.get()) return kSizes;
  return {0, 1, 7, 1001};
}

std::vector<Communicator *> groups() { return {g_all.get(), g_half.get(), g_strided.get(), g_reversed.get()}; }

// Small quarters: any sum over a few ranks is exact in float and double, so
// results are compared bit for bit whatever the summation order.
template <class T = float>
T val(int r, size_t k) {
  uint64_t h = (uint64_t)(r + 1) * 0x9E3779B97F4A7C15ull ^ (uint64_t)k * 0xC2B2AE3D27D4EB4Full;
  h ^= h >> 29;
  h *= 0xBF58476D1CE4E5B9ull;
  h ^= h >> 32;
  return (T)((int)(h % 2001) - 1000) / (T)4;
}

// Values of many magnitudes whose sum depends on the order of summation.
template <class T>
T noisy(int r, size_t k) {
  uint64_t h = ((uint64_t)(r + 1) << 40) ^ (k * 0x9E3779B97F4A7C15ull);
  h ^= h >> 31;
  h *= 0xD6E8FEB86659FD93ull;
  h ^= h >> 32;
  static const double kScale[7] = {1e-3, 1e-2, 1e-1, 1, 1e1, 1e2, 1e3};
  double u = (double)(h >> 11) * 0x1p-53 * 2.0 - 1.0;
  return (T)(u * kScale[h % 7]);
}

template <class T>
std::string first_diff(const T *got, const T *want, size_t n) {
  for (size_t k = 0; k < n; k++)
    if (std::memcmp(&got[k], &want[k], sizeof(T)) != 0)
      return "at " + std::to_string(k) + " of " + std::to_string(n) + ": got " +
             std::to_string(got[k]) + ", want " + std::to_string(want[k]);
  return "";
}

#define EXPECT_SAME_BITS(got, want, n, what)                                       \
  EXPECT_EQ(first_diff((got), (want), (n)), "") << (what)

// Every member of `c` holds the same bytes in buf[0, n): a 64-bit hash of them
// is all-gathered as four exact 16-bit pieces and compared.
template <class T>
void expect_same_on_all_members(Communicator &c, const T *buf, size_t n, const std::string &what) {
  uint64_t h = 1469598103934665603ull;
  auto *p = reinterpret_cast<const unsigned char *>(buf);
  for (size_t i = 0; i < n * sizeof(T); i++) h = (h ^ p[i]) * 1099511628211ull;
  float mine[4], all[64 * 4];
  ASSERT_LE(c.size(), 64);
  for (int i = 0; i < 4; i++) mine[i] = (float)((h >> (16 * i)) & 0xFFFF);
  c.all_gather(mine, all, 4);
  for (int r = 0; r < c.size(); r++)
    EXPECT_EQ(0, std::memcmp(all, all + 4 * r, sizeof mine))
        << what << ": the result on group rank " << r << " (world rank " << c.members()[r]
        << ") differs from group rank 0's";
}

std::string label(const Communicator &c, size_t n) {
  return "group '" + c.name() + "' (" + std::to_string(c.size()) + " ranks), n=" + std::to_string(n);
}

template <class T>
void check_all_reduce(Communicator &c, size_t n, ReduceOp op) {
  std::vector<T> buf(n), want(n);
  for (size_t k = 0; k < n; k++) {
    buf[k] = val<T>(R, k);
    T acc = val<T>(c.members()[0], k);
    for (int r = 1; r < c.size(); r++) {
      T v = val<T>(c.members()[r], k);
      acc = op == ReduceOp::sum ? acc + v : std::max(acc, v);
    }
    want[k] = acc;
  }
  c.all_reduce(buf.data(), n, op);
  std::string what = label(c, n) + (op == ReduceOp::sum ? " sum" : " max");
  EXPECT_SAME_BITS(buf.data(), want.data(), n, what);
  expect_same_on_all_members(c, buf.data(), n, what);
}

// ---------------------------------------------------------------------------

TEST(MpiWorld, Basics) {
  EXPECT_TRUE(MpiWorld::launched_by_mpirun());
  EXPECT_EQ(g_all->size(), N);
  EXPECT_EQ(g_all->rank(), R);
  EXPECT_EQ(g_reversed->rank(), N - 1 - R);
  EXPECT_EQ(g_half->size(), R < N / 2 ? N / 2 : N - N / 2);
  EXPECT_EQ(g_world->timeout_s(), kTimeout);
  const CommWorld &as_comm_world = *g_world;  // the backend-neutral interface
  EXPECT_EQ(as_comm_world.abort_reason(), "");
  if (R == 0)
    std::printf("MPI world of %d processes, thread support provided: %s\n", N,
                g_world->thread_level().c_str());
}

TEST(Collectives, AllReduceFloatSum) {
  for (auto *c : groups())
    for (size_t n : sizes_for(c)) check_all_reduce<float>(*c, n, ReduceOp::sum);
}

TEST(Collectives, AllReduceFloatMax) {
  for (auto *c : groups())
    for (size_t n : sizes_for(c)) check_all_reduce<float>(*c, n, ReduceOp::max);
}

TEST(Collectives, AllReduceDoubleSumAndMax) {
  for (auto *c : {g_all.get(), g_half.get()})
    for (size_t n : kSizes) {
      check_all_reduce<double>(*c, n, ReduceOp::sum);
      check_all_reduce<double>(*c, n, ReduceOp::max);
    }
}

// Order-dependent sums: close to the exact sum, and the same bits on every member.
template <class T>
void check_noisy(Communicator &c, size_t n) {
  std::vector<T> buf(n);
  for (size_t k = 0; k < n; k++) buf[k] = noisy<T>(R, k);
  c.all_reduce(buf.data(), n, ReduceOp::sum);
  size_t bad = 0;
  for (size_t k = 0; k < n; k++) {
    double want = 0, mag = 0;
    for (int m : c.members()) {
      want += (double)noisy<T>(m, k);
      mag += std::fabs((double)noisy<T>(m, k));
    }
    double tol = (sizeof(T) == 4 ? 1e-6 : 1e-14) * mag * c.size();
    if (std::fabs((double)buf[k] - want) > tol && bad++ < 3)
      ADD_FAILURE() << label(c, n) << " at " << k << ": got " << buf[k] << ", want " << want;
  }
  expect_same_on_all_members(c, buf.data(), n, label(c, n) + " noisy sum");
  // The check means something: these sums do depend on the order (from 3 ranks on).
  if (c.size() >= 3 && n >= 1001) {
    size_t order_dependent = 0;
    for (size_t k = 0; k < n; k++) {
      T fwd = 0, bwd = 0;
      for (int r = 0; r < c.size(); r++) fwd += noisy<T>(c.members()[r], k);
      for (int r = c.size() - 1; r >= 0; r--) bwd += noisy<T>(c.members()[r], k);
      order_dependent += fwd != bwd;
    }
    EXPECT_GT(order_dependent, 0u) << label(c, n);
  }
}

TEST(Collectives, AllReduceBitIdenticalOnAllMembers) {
  for (auto *c : groups())
    for (size_t n : {size_t(7), size_t(1001), size_t(20000), size_t(3000001)}) {
      if (n > 20000 && c != g_all.get()) continue;
      check_noisy<float>(*c, n);
      check_noisy<double>(*c, n);
    }
}

TEST(Collectives, AllGather) {
  for (auto *c : groups())
    for (size_t n : sizes_for(c)) {
      std::vector<float> in(n), out(n * c->size(), -7.f), want(n * c->size());
      for (size_t k = 0; k < n; k++) in[k] = val(R, k);
      for (int r = 0; r < c->size(); r++)
        for (size_t k = 0; k < n; k++) want[r * n + k] = val(c->members()[r], k);
      c->all_gather(in.data(), out.data(), n);
      EXPECT_SAME_BITS(out.data(), want.data(), n * c->size(), label(*c, n));
      // in place: the input already sits in this rank's slot of the output
      std::vector<float> io(n * c->size(), -7.f);
      std::copy(in.begin(), in.end(), io.begin() + (size_t)c->rank() * n);
      c->all_gather(io.data() + (size_t)c->rank() * n, io.data(), n);
      EXPECT_SAME_BITS(io.data(), want.data(), n * c->size(), label(*c, n) + " in place");
    }
}

TEST(Collectives, ReduceScatter) {
  for (auto *c : groups()) {
    for (size_t n : sizes_for(c)) {
      if (n > 1001) n /= (size_t)c->size();  // the input is size() times larger
      size_t total = n * c->size();
      std::vector<float> in(total), out(n, -7.f), want(n);
      for (size_t j = 0; j < total; j++) in[j] = val(R, j);
      for (size_t k = 0; k < n; k++) {
        float acc = 0;
        for (int m : c->members()) acc += val(m, (size_t)c->rank() * n + k);
        want[k] = acc;
      }
      c->reduce_scatter(in.data(), out.data(), n);
      EXPECT_SAME_BITS(out.data(), want.data(), n, label(*c, n));
    }
  }
}

TEST(Collectives, Broadcast) {
  for (auto *c : groups())
    for (size_t n : sizes_for(c))
      for (int root = 0; root < c->size(); root++) {
        if (n > 1001 && root != 0 && root != c->size() - 1) continue;
        int src = c->members()[root];
        std::vector<float> buf(n, -7.f), want(n);
        for (size_t k = 0; k < n; k++) want[k] = val(100 + src, k);
        if (c->rank() == root) buf = want;
        c->broadcast(buf.data(), n, root);
        EXPECT_SAME_BITS(buf.data(), want.data(), n,
                         label(*c, n) + " root " + std::to_string(root));
      }
}

TEST(Collectives, Barrier) {
  for (int i = 0; i < 3; i++)
    for (auto *c : groups()) c->barrier();
  // a rank that arrives late is waited for (margin: ranks leave the first barrier
  // at slightly different times)
  g_all->barrier();
  auto t0 = std::chrono::steady_clock::now();
  if (R == N - 1) std::this_thread::sleep_for(std::chrono::milliseconds(400));
  g_all->barrier();
  double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_GE(waited, 0.2) << "the barrier did not wait for the last rank";
}

// ---------------------------------------------------------------------------
// Point to point

const std::vector<size_t> kMessageSizes = {0, 7, 1001, 3000001, 1, 0, 5};

TEST(PointToPoint, RingBothWays) {
  for (auto *c : groups()) {
    int next = (c->rank() + 1) % c->size(), prev = (c->rank() + c->size() - 1) % c->size();
    // Everything is sent before anything is received: send must not wait for recv.
    for (size_t i = 0; i < kMessageSizes.size(); i++) {
      std::vector<float> msg(kMessageSizes[i]);
      for (size_t k = 0; k < msg.size(); k++) msg[k] = val(1000 * R + (int)i, k);
      c->send(msg.data(), msg.size(), next);
      std::fill(msg.begin(), msg.end(), -1.f);  // the message was copied
      for (size_t k = 0; k < msg.size(); k++) msg[k] = val(2000 * R + (int)i, k);
      c->send(msg.data(), msg.size(), prev);
    }
    for (size_t i = 0; i < kMessageSizes.size(); i++) {
      size_t n = kMessageSizes[i];
      std::vector<float> got(n, -7.f), want(n);
      int from_prev = c->members()[prev], from_next = c->members()[next];
      for (size_t k = 0; k < n; k++) want[k] = val(1000 * from_prev + (int)i, k);
      c->recv(got.data(), n, prev);
      EXPECT_SAME_BITS(got.data(), want.data(), n, label(*c, n) + " message " + std::to_string(i) + " from prev");
      for (size_t k = 0; k < n; k++) want[k] = val(2000 * from_next + (int)i, k);
      c->recv(got.data(), n, next);
      EXPECT_SAME_BITS(got.data(), want.data(), n, label(*c, n) + " message " + std::to_string(i) + " from next");
    }
  }
}

TEST(PointToPoint, SendToSelfAndPipelinePairs) {
  std::vector<float> msg = {1, 2, 3}, got(3);
  g_all->send(msg.data(), 3, g_all->rank());
  g_all->recv(got.data(), 3, g_all->rank());
  EXPECT_EQ(got, msg);
  // Pipeline-style: rank r sends 4 micro-batches to r+1 and gets the gradients back.
  auto &c = *g_all;
  std::vector<float> buf(1000);
  for (int mb = 0; mb < 4; mb++) {
    if (c.rank() > 0) {
      c.recv(buf.data(), buf.size(), c.rank() - 1);
      for (size_t k = 0; k < buf.size(); k++) ASSERT_EQ(buf[k], val(c.rank() - 1, k) + mb);
    }
    if (c.rank() + 1 < c.size()) {
      for (size_t k = 0; k < buf.size(); k++) buf[k] = val(c.rank(), k) + mb;
      c.send(buf.data(), buf.size(), c.rank() + 1);
    }
  }
  for (int mb = 0; mb < 4; mb++) {
    if (c.rank() + 1 < c.size()) {
      c.recv(buf.data(), buf.size(), c.rank() + 1);
      for (size_t k = 0; k < buf.size(); k++) ASSERT_EQ(buf[k], -val(c.rank() + 1, k) - mb);
    }
    if (c.rank() > 0) {
      for (size_t k = 0; k < buf.size(); k++) buf[k] = -val(c.rank(), k) - mb;
      c.send(buf.data(), buf.size(), c.rank() - 1);
    }
  }
}

TEST(PointToPoint, Errors) {
  std::vector<float> buf(8);
  try {
    g_all->send(buf.data(), 1, N);
    ADD_FAILURE() << "no error for a peer outside the group";
  } catch (const Error &e) {
    EXPECT_EQ(e.code(), Status::invalid_argument);
    EXPECT_NE(std::string(e.what()).find("send peer " + std::to_string(N) + " is outside"), std::string::npos) << e.what();
  }
  try {
    g_all->broadcast(buf.data(), 1, -1);
    ADD_FAILURE() << "no error for a root outside the group";
  } catch (const Error &e) {
    EXPECT_EQ(e.code(), Status::invalid_argument);
  }
  // A message of the wrong length: comm_failure naming the sizes; the message is
  // consumed, and the next one arrives normally.
  if (R == 0) {
    g_all->send(buf.data(), 3, 1);
    g_all->send(buf.data(), 5, 1);
  } else if (R == 1) {
    try {
      g_all->recv(buf.data(), 5, 0);
      ADD_FAILURE() << "no error for a message of the wrong length";
    } catch (const Error &e) {
      EXPECT_EQ(e.code(), Status::comm_failure);
      EXPECT_NE(std::string(e.what()).find("recv of 5 elements from rank 0 got a message of 3"),
                std::string::npos) << e.what();
    }
    g_all->recv(buf.data(), 5, 0);
  }
  g_all->barrier();
}

// ---------------------------------------------------------------------------
// Several groups

TEST(Groups, InterleavedOperations) {
  for (int it = 0; it < 5; it++) {
    std::vector<float> h(1001), w(7), s(3 * g_strided->size()), ws(3);
    for (size_t k = 0; k < h.size(); k++) h[k] = val(R + it, k);
    g_half->all_reduce(h.data(), h.size());  // in flight on the half group...
    for (size_t k = 0; k < w.size(); k++) w[k] = val(R, k + it);
    g_all->all_reduce(w.data(), w.size());  // ...then the world
    std::vector<float> mine = {(float)R, (float)it, (float)(R * it)};
    g_strided->all_gather(mine.data(), s.data(), 3);
    g_reversed->broadcast(ws.data(), 3, 0);  // group rank 0 = world rank N-1: garbage is fine
    g_all->barrier();
    for (size_t k = 0; k < h.size(); k++) {
      float want = 0;
      for (int m : g_half->members()) want += val(m + it, k);
      ASSERT_EQ(h[k], want) << "half, iteration " << it << ", k=" << k;
    }
    for (size_t k = 0; k < w.size(); k++) {
      float want = 0;
      for (int m = 0; m < N; m++) want += val(m, k + it);
      ASSERT_EQ(w[k], want) << "world, iteration " << it;
    }
    for (int r = 0; r < g_strided->size(); r++) {
      int m = g_strided->members()[r];
      EXPECT_EQ(s[3 * r], m);
      EXPECT_EQ(s[3 * r + 1], it);
      EXPECT_EQ(s[3 * r + 2], m * it);
    }
  }
  // group ranks follow the member lists, not the world order
  std::vector<float> me = {(float)R}, order(N);
  g_reversed->all_gather(me.data(), order.data(), 1);
  for (int r = 0; r < N; r++) EXPECT_EQ(order[r], N - 1 - r);
}

TEST(Groups, ConcurrentThreads) {
  if (!g_world->thread_multiple()) GTEST_SKIP() << "MPI provided " << g_world->thread_level();
  // Two threads of every process use two different groups at the same time.
  bool ok_half = true, ok_world = true;
  std::thread t([&] {
    for (int it = 0; it < 40; it++) {
      std::vector<float> h(1001);
      for (size_t k = 0; k < h.size(); k++) h[k] = val(R, k + it);
      g_half->all_reduce(h.data(), h.size());
      for (size_t k = 0; k < h.size(); k++) {
        float want = 0;
        for (int m : g_half->members()) want += val(m, k + it);
        ok_half &= h[k] == want;
      }
    }
  });
  for (int it = 0; it < 40; it++) {
    std::vector<float> w(100);
    for (size_t k = 0; k < w.size(); k++) w[k] = val(R, k * 3 + it);
    g_all->all_reduce(w.data(), w.size(), ReduceOp::max);
    int next = (R + 1) % N, prev = (R + N - 1) % N;
    g_all->send(w.data(), w.size(), next);
    std::vector<float> got(100);
    g_all->recv(got.data(), got.size(), prev);
    for (size_t k = 0; k < w.size(); k++) {
      float want = val(0, k * 3 + it);
      for (int m = 1; m < N; m++) want = std::max(want, val(m, k * 3 + it));
      ok_world &= w[k] == want && got[k] == want;
    }
  }
  t.join();
  EXPECT_TRUE(ok_half);
  EXPECT_TRUE(ok_world);
}

// A communicator destroyed with a large message still in flight waits (with the
// timeout) until the receiver took it.
TEST(Groups, DestroyWithPendingSends) {
  std::vector<int> all(N);
  for (int r = 0; r < N; r++) all[r] = r;
  auto c = g_world->group("short_lived", all, R);
  std::vector<float> big(3000001);
  for (size_t k = 0; k < big.size(); k++) big[k] = val(0, k);
  if (R == 0) {
    c->send(big.data(), big.size(), 1);
    c->send(big.data(), 3, 1);
    c.reset();
  } else if (R == 1) {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    std::vector<float> got(big.size());
    c->recv(got.data(), got.size(), 0);
    EXPECT_SAME_BITS(got.data(), big.data(), big.size(), "large message");
    c->recv(got.data(), 3, 0);
    EXPECT_SAME_BITS(got.data(), big.data(), 3, "small message");
  }
  c.reset();
  g_all->barrier();
}

// Inconsistent group() calls throw on every process (none hangs in MPI_Comm_split),
// and group creation still works afterwards.
template <class F>
void expect_group_error(F f, const std::string &text) {
  try {
    f();
    ADD_FAILURE() << "no error; expected: " << text;
  } catch (const Error &e) {
    EXPECT_EQ(e.code(), Status::invalid_argument) << e.what();
    EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << e.what();
  }
}

TEST(Groups, InconsistentCreationFailsEverywhere) {
  std::vector<int> all(N), rotated(N);
  for (int r = 0; r < N; r++) all[r] = r, rotated[r] = (r + 1) % N;
  // rank 0 lists the world in order, the others rotated: rank 0 leads a group that
  // nobody else joins
  expect_group_error([&] { g_world->group("bad_lists", R == 0 ? all : rotated, R); },
                     "group 'bad_lists': ");
  expect_group_error([&] { g_world->group("not_member", {(R + 1) % N}, R); },
                     "world rank 0 passed an invalid member list");
  expect_group_error([&] { g_world->group(R == 0 ? "tp" : "dp", all, R); },
                     "group creation out of step");
  expect_group_error([&] { g_world->group("wrong_me", all, (R + 1) % N); },
                     "passed an invalid member list");
  auto ok = g_world->group("after_errors", all, R);
  float x = 1;
  ok->all_reduce(&x, 1);
  EXPECT_EQ(x, N);
}

// ---------------------------------------------------------------------------
// Counters: the same definitions as the threads backend.

TEST(Stats, CountsCallsAndBytes) {
  auto &c = *g_stats;
  const int64_t P = c.size();
  std::vector<float> f(64 * P);
  std::vector<double> d(16);
  c.all_reduce(f.data(), 10);
  c.all_reduce(f.data(), 0, ReduceOp::max);
  c.all_reduce(d.data(), 3, ReduceOp::max);
  c.all_gather(f.data(), f.data() + 32 * P, 5);
  c.reduce_scatter(f.data(), f.data() + 32 * P, 4);
  c.broadcast(f.data(), 6, P - 1);
  int next = (c.rank() + 1) % P, prev = (c.rank() + P - 1) % P;
  c.send(f.data(), 2, next);
  c.send(f.data(), 9, next);
  c.recv(f.data(), 2, prev);
  c.recv(f.data(), 9, prev);
  c.barrier();
  c.barrier();
  const CommStats &s = c.stats();
  auto calls = [&](CommOp op) { return s.calls[(int)op]; };
  auto bytes = [&](CommOp op) { return s.bytes[(int)op]; };
  EXPECT_EQ(calls(CommOp::all_reduce), 3);
  EXPECT_EQ(bytes(CommOp::all_reduce), 10 * 4 + 0 + 3 * 8);
  EXPECT_EQ(calls(CommOp::all_gather), 1);
  EXPECT_EQ(bytes(CommOp::all_gather), 5 * 4);
  EXPECT_EQ(calls(CommOp::reduce_scatter), 1);
  EXPECT_EQ(bytes(CommOp::reduce_scatter), 4 * P * 4);
  EXPECT_EQ(calls(CommOp::broadcast), 1);
  EXPECT_EQ(bytes(CommOp::broadcast), 6 * 4);
  EXPECT_EQ(calls(CommOp::send), 2);
  EXPECT_EQ(bytes(CommOp::send), (2 + 9) * 4);
  EXPECT_EQ(calls(CommOp::recv), 2);
  EXPECT_EQ(bytes(CommOp::recv), (2 + 9) * 4);
  EXPECT_EQ(calls(CommOp::barrier), 2);
  EXPECT_EQ(bytes(CommOp::barrier), 0);
  // nothing else touched this group's counters
  int64_t total = 0;
  for (int op = 0; op < (int)CommOp::count; op++) total += s.calls[op];
  EXPECT_EQ(total, 3 + 1 + 1 + 1 + 2 + 2 + 2);
}

// Failures of the other ranks, one line each, prefixed with the rank.
class RankFailurePrinter : public ::testing::EmptyTestEventListener {
  void OnTestPartResult(const ::testing::TestPartResult &r) override {
    if (r.failed())
      std::fprintf(stderr, "[rank %d] %s:%d: %s\n", R, r.file_name() ? r.file_name() : "?",
                   r.line_number(), r.summary());
  }
};

}  // namespace

int main(int argc, char **argv) {
  ::testing::InitGoogleTest(&argc, argv);
  int failed = 1;
  {
    MpiWorld world(kTimeout);
    g_world = &world;
    R = world.rank();
    N = world.size();
    std::vector<int> all(N), lo, hi, even, odd, rev(N);
    for (int r = 0; r < N; r++) {
      all[r] = r;
      rev[r] = N - 1 - r;
      (r < N / 2 ? lo : hi).push_back(r);
      (r % 2 ? odd : even).push_back(r);
    }
    g_all = world.group("world", all, R);
    g_half = world.group("half", R < N / 2 ? lo : hi, R);
    g_strided = world.group("strided", R % 2 ? odd : even, R);
    g_reversed = world.group("reversed", rev, R);
    g_stats = world.group("stats", all, R);
    if (R != 0) {
      auto &listeners = ::testing::UnitTest::GetInstance()->listeners();
      delete listeners.Release(listeners.default_result_printer());
      listeners.Append(new RankFailurePrinter);
    }
    float f = RUN_ALL_TESTS() != 0 ? 1.f : 0.f;
    g_all->all_reduce(&f, 1, ReduceOp::max);
    failed = f != 0;
    if (R == 0 && failed) std::fprintf(stderr, "FAILED on at least one rank\n");
    g_all.reset(), g_half.reset(), g_strided.reset(), g_reversed.reset(), g_stats.reset();
  }  // ~MpiWorld: shutdown barrier, MPI_Finalize
  return failed;
}
