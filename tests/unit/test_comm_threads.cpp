// The `threads` communicator backend (engine/comm/thread_comm.h): every
// collective and point-to-point transfer across world sizes and buffer sizes,
// concurrent groups from the rank grid, byte/call counters, timeouts, abort
// and argument errors. Each rank is a std::thread; a rank that throws aborts
// the world so the others fail fast instead of waiting for the timeout.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "engine/comm/communicator.h"
#include "engine/comm/grid.h"
#include "engine/comm/thread_comm.h"
#include "engine/core/status.h"
#include "tests/unit/expect_error.h"

using namespace ptdp;

namespace {

// Generous: a test that works never waits for it; a broken one fails instead of hanging.
constexpr double kTimeout = 60.0;

const std::vector<int> kWorlds = {1, 2, 3, 4, 8};
const std::vector<size_t> kSizes = {0, 7, 1001, 1000003};

struct RankResult {
  bool threw = false;
  Status code = Status::ok;
  std::string what;
  double seconds = 0;  // from the start of the rank's function to its return or throw
};

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Runs fn(rank) on one thread per world rank. A rank that throws aborts the world.
template <class F>
std::vector<RankResult> run_ranks(ThreadWorld &world, F fn) {
  std::vector<RankResult> res(world.size());
  std::vector<std::thread> threads;
  for (int r = 0; r < world.size(); r++)
    threads.emplace_back([&, r] {
      auto t0 = Clock::now();
      try {
        fn(r);
      } catch (const Error &e) {
        res[r].threw = true;
        res[r].code = e.code();
        res[r].what = e.what();
        world.abort("rank " + std::to_string(r) + " failed: " + e.what());
      } catch (const std::exception &e) {
        res[r].threw = true;
        res[r].code = Status::internal;
        res[r].what = e.what();
        world.abort("rank " + std::to_string(r) + " failed: " + e.what());
      }
      res[r].seconds = since(t0);
    });
  for (auto &t : threads) t.join();
  return res;
}

// Runs fn(world, rank) on every rank of a fresh world and expects no rank to throw.
template <class F>
void run_ok(int size, F fn, double timeout = kTimeout) {
  ThreadWorld world(size, timeout);
  auto res = run_ranks(world, [&](int r) { fn(world, r); });
  for (int r = 0; r < size; r++) EXPECT_FALSE(res[r].threw) << "rank " << r << ": " << res[r].what;
}

std::vector<int> iota_ranks(int n) {
  std::vector<int> v(n);
  for (int i = 0; i < n; i++) v[i] = i;
  return v;
}

// Small integers: any sum over at most 8 ranks is exact in float and double, so
// results are compared bit for bit whatever the summation order.
template <class T = float>
T val(int r, size_t k) {
  uint64_t h = (uint64_t)(r + 1) * 0x9E3779B97F4A7C15ull ^ (uint64_t)k * 0xC2B2AE3D27D4EB4Full;
  h ^= h >> 29;
  h *= 0xBF58476D1CE4E5B9ull;
  h ^= h >> 32;
  return (T)((int)(h % 2001) - 1000) / (T)4;  // quarters: exact, and not all integers
}

// Noisy values whose sum depends on the order of summation.
template <class T>
T noisy(int r, size_t k) {
  uint64_t h = ((uint64_t)r << 40) ^ (k * 0x9E3779B97F4A7C15ull);
  h ^= h >> 31;
  h *= 0xD6E8FEB86659FD93ull;
  h ^= h >> 32;
  return (T)((double)(h >> 11) * 0x1p-53 * 2.0 - 1.0) * (T)(1 + r);
}

template <class T>
bool same_bits(const T *a, const T *b, size_t n) {
  return n == 0 || std::memcmp(a, b, n * sizeof(T)) == 0;
}

// First index where the buffers differ, for failure messages.
template <class T>
std::string first_diff(const T *got, const T *want, size_t n) {
  for (size_t k = 0; k < n; k++)
    if (std::memcmp(&got[k], &want[k], sizeof(T)) != 0)
      return "at " + std::to_string(k) + ": got " + std::to_string(got[k]) + ", want " +
             std::to_string(want[k]);
  return "no difference";
}

// ---------------------------------------------------------------------------
// Collectives, parameterised by (world size, elements).

class Collectives : public ::testing::TestWithParam<std::tuple<int, size_t>> {
 protected:
  int world() const { return std::get<0>(GetParam()); }
  size_t n() const { return std::get<1>(GetParam()); }
};

template <class T>
void check_all_reduce(int w, size_t n, ReduceOp op) {
  std::vector<T> want(n);
  for (size_t k = 0; k < n; k++) {
    T acc = val<T>(0, k);
    for (int r = 1; r < w; r++)
      acc = op == ReduceOp::sum ? acc + val<T>(r, k) : std::max(acc, val<T>(r, k));
    want[k] = acc;
  }
  run_ok(w, [&](ThreadWorld &world, int r) {
    auto c = world.group("world", iota_ranks(w), r);
    ASSERT_EQ(c->rank(), r);
    ASSERT_EQ(c->size(), w);
    std::vector<T> buf(n);
    for (size_t k = 0; k < n; k++) buf[k] = val<T>(r, k);
    c->all_reduce(buf.data(), n, op);
    EXPECT_TRUE(same_bits(buf.data(), want.data(), n))
        << "rank " << r << " " << first_diff(buf.data(), want.data(), n);
    // The group is reusable: a second call on the result (sum doubles, max is idempotent).
    c->all_reduce(buf.data(), n, op);
    size_t bad = 0;
    for (size_t k = 0; k < n; k++) {
      T expect = op == ReduceOp::sum ? want[k] * (T)w : want[k];
      bad += std::memcmp(&buf[k], &expect, sizeof(T)) != 0;
    }
    EXPECT_EQ(bad, 0u) << "rank " << r << ", second all_reduce";
  });
}

// want[i] = sum over ranks r of val(r, i), summed in rank order.
std::vector<float> sums_over_ranks(int w, size_t total) {
  std::vector<float> want(total);
  for (size_t i = 0; i < total; i++) {
    float acc = 0;
    for (int r = 0; r < w; r++) acc += val(r, i);
    want[i] = acc;
  }
  return want;
}

TEST_P(Collectives, AllReduceFloatSum) { check_all_reduce<float>(world(), n(), ReduceOp::sum); }
TEST_P(Collectives, AllReduceFloatMax) { check_all_reduce<float>(world(), n(), ReduceOp::max); }
TEST_P(Collectives, AllReduceDoubleSum) { check_all_reduce<double>(world(), n(), ReduceOp::sum); }
TEST_P(Collectives, AllReduceDoubleMax) { check_all_reduce<double>(world(), n(), ReduceOp::max); }

TEST_P(Collectives, AllGather) {
  const int w = world();
  const size_t n = this->n();
  std::vector<float> want((size_t)w * n);
  for (int r = 0; r < w; r++)
    for (size_t k = 0; k < n; k++) want[(size_t)r * n + k] = val(r, k);
  run_ok(w, [&](ThreadWorld &world, int r) {
    auto c = world.group("world", iota_ranks(w), r);
    std::vector<float> in(want.begin() + (ptrdiff_t)(r * n), want.begin() + (ptrdiff_t)((r + 1) * n));
    std::vector<float> out((size_t)w * n, -12345.0f);
    c->all_gather(in.data(), out.data(), n);
    EXPECT_TRUE(same_bits(out.data(), want.data(), out.size()))
        << "rank " << r << " " << first_diff(out.data(), want.data(), out.size());
  });
}

// In place: `in` is this rank's own slice of `out` (a received shard gathered
// into the full tensor, as the scatter/gather optimization does).
TEST_P(Collectives, AllGatherInPlace) {
  const int w = world();
  const size_t n = this->n();
  std::vector<float> want((size_t)w * n);
  for (int r = 0; r < w; r++)
    for (size_t k = 0; k < n; k++) want[(size_t)r * n + k] = val(r, k);
  run_ok(w, [&](ThreadWorld &world, int r) {
    auto c = world.group("world", iota_ranks(w), r);
    std::vector<float> out((size_t)w * n, -12345.0f);
    std::copy(want.begin() + (ptrdiff_t)(r * n), want.begin() + (ptrdiff_t)((r + 1) * n),
              out.begin() + (ptrdiff_t)(r * n));
    c->all_gather(out.data() + (size_t)r * n, out.data(), n);
    EXPECT_TRUE(same_bits(out.data(), want.data(), out.size()))
        << "rank " << r << " " << first_diff(out.data(), want.data(), out.size());
  });
}

TEST_P(Collectives, ReduceScatter) {
  const int w = world();
  const size_t n = this->n();
  const size_t total = (size_t)w * n;
  std::vector<float> want(total);  // the full sum; rank r keeps slice r
  for (size_t i = 0; i < total; i++) {
    float acc = 0;
    for (int r = 0; r < w; r++) acc += val(r, i);
    want[i] = acc;
  }
  run_ok(w, [&](ThreadWorld &world, int r) {
    auto c = world.group("world", iota_ranks(w), r);
    std::vector<float> in(total);
    for (size_t i = 0; i < total; i++) in[i] = val(r, i);
    std::vector<float> out(n, -12345.0f);
    c->reduce_scatter(in.data(), out.data(), n);
    const float *mine = want.data() + (size_t)r * n;
    EXPECT_TRUE(same_bits(out.data(), mine, n)) << "rank " << r << " " << first_diff(out.data(), mine, n);
  });
}

// In place: `out` is this rank's own slice of `in`.
TEST_P(Collectives, ReduceScatterInPlace) {
  const int w = world();
  const size_t n = this->n();
  const size_t total = (size_t)w * n;
  const std::vector<float> want = sums_over_ranks(w, total);
  run_ok(w, [&](ThreadWorld &world, int r) {
    auto c = world.group("world", iota_ranks(w), r);
    std::vector<float> in(total);
    for (size_t i = 0; i < total; i++) in[i] = val(r, i);
    float *out = in.data() + (size_t)r * n;
    c->reduce_scatter(in.data(), out, n);
    const float *mine = want.data() + (size_t)r * n;
    EXPECT_TRUE(same_bits(out, mine, n)) << "rank " << r << " " << first_diff(out, mine, n);
  });
}

// The result written over the start of the input, which the others still read.
TEST_P(Collectives, ReduceScatterOverTheInputStart) {
  const int w = world();
  const size_t n = this->n();
  const size_t total = (size_t)w * n;
  const std::vector<float> want = sums_over_ranks(w, total);
  run_ok(w, [&](ThreadWorld &world, int r) {
    auto c = world.group("world", iota_ranks(w), r);
    std::vector<float> in(total);
    for (size_t i = 0; i < total; i++) in[i] = val(r, i);
    c->reduce_scatter(in.data(), in.data(), n);
    const float *mine = want.data() + (size_t)r * n;
    EXPECT_TRUE(same_bits(in.data(), mine, n)) << "rank " << r << " " << first_diff(in.data(), mine, n);
  });
}

TEST_P(Collectives, BroadcastFromEachRoot) {
  const int w = world();
  const size_t n = this->n();
  std::vector<std::vector<float>> want(w, std::vector<float>(n));
  for (int root = 0; root < w; root++)
    for (size_t k = 0; k < n; k++) want[root][k] = val(root + 100, k);
  run_ok(w, [&](ThreadWorld &world, int r) {
    auto c = world.group("world", iota_ranks(w), r);
    std::vector<float> buf(n);
    for (int root = 0; root < w; root++) {
      if (r == root)
        buf = want[root];
      else
        std::fill(buf.begin(), buf.end(), -12345.0f);
      c->broadcast(buf.data(), n, root);
      EXPECT_TRUE(same_bits(buf.data(), want[root].data(), n))
          << "rank " << r << ", root " << root << " " << first_diff(buf.data(), want[root].data(), n);
    }
  });
}

// Every rank sends two messages around the ring in each direction before it
// receives any: sends never wait for the receiver, so this cannot deadlock.
TEST_P(Collectives, SendRecvRing) {
  const int w = world();
  const size_t n = this->n();
  auto tagged = [n](int src, int tag) {
    std::vector<float> v(n);
    for (size_t k = 0; k < n; k++) v[k] = val(src * 4 + tag, k);
    return v;
  };
  run_ok(w, [&](ThreadWorld &world, int r) {
    auto c = world.group("ring", iota_ranks(w), r);
    const int next = (r + 1) % w, prev = (r + w - 1) % w;
    for (int tag : {0, 1}) c->send(tagged(r, tag).data(), n, next);
    c->send(tagged(r, 2).data(), n, prev);
    // From prev: its tags 0 and 1 (sent to its next, me), in order.
    for (int tag : {0, 1}) {
      std::vector<float> got(n, -12345.0f), want = tagged(prev, tag);
      c->recv(got.data(), n, prev);
      EXPECT_TRUE(same_bits(got.data(), want.data(), n)) << "rank " << r << " tag " << tag;
    }
    // From next: its tag 2 (sent to its prev, me). With w <= 2 next == prev, and
    // the queue from that peer holds tag 2 after tags 0 and 1.
    std::vector<float> got(n, -12345.0f), want = tagged(next, 2);
    c->recv(got.data(), n, next);
    EXPECT_TRUE(same_bits(got.data(), want.data(), n)) << "rank " << r << " tag 2";
  });
}

TEST_P(Collectives, BarrierRounds) {
  const int w = world();
  std::atomic<int> arrived{0};
  run_ok(w, [&](ThreadWorld &world, int r) {
    auto c = world.group("world", iota_ranks(w), r);
    for (int round = 0; round < 5; round++) {
      if ((r + round) % 3 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(2));
      arrived.fetch_add(1);
      c->barrier();
      // Everyone has arrived at this round's barrier; nobody can be past the next one.
      int seen = arrived.load();
      EXPECT_GE(seen, w * (round + 1)) << "rank " << r << " round " << round;
      EXPECT_LT(seen, w * (round + 2)) << "rank " << r << " round " << round;
      c->barrier();  // keep the count of the next round out of this round's check
    }
  });
}

std::string collective_name(const ::testing::TestParamInfo<std::tuple<int, size_t>> &info) {
  return "w" + std::to_string(std::get<0>(info.param)) + "_n" + std::to_string(std::get<1>(info.param));
}

INSTANTIATE_TEST_SUITE_P(ThreadComm, Collectives,
                         ::testing::Combine(::testing::ValuesIn(kWorlds), ::testing::ValuesIn(kSizes)),
                         collective_name);

// ---------------------------------------------------------------------------
// Bit-identical all_reduce results when the sum depends on summation order.

template <class T>
void check_bit_identical(int w, size_t n) {
  std::vector<std::vector<T>> got(w);
  run_ok(w, [&](ThreadWorld &world, int r) {
    auto c = world.group("world", iota_ranks(w), r);
    std::vector<T> buf(n);
    for (size_t k = 0; k < n; k++) buf[k] = noisy<T>(r, k);
    c->all_reduce(buf.data(), n, ReduceOp::sum);
    got[r] = std::move(buf);  // each rank writes only its own slot
  });
  for (int r = 1; r < w; r++)
    EXPECT_TRUE(same_bits(got[r].data(), got[0].data(), n))
        << "rank " << r << " differs from rank 0 " << first_diff(got[r].data(), got[0].data(), n);
  size_t bad = 0;
  for (size_t k = 0; k < n; k++) {
    double ref = 0, mag = 0;
    for (int r = 0; r < w; r++) ref += (double)noisy<T>(r, k), mag += std::fabs((double)noisy<T>(r, k));
    double tol = (sizeof(T) == 4 ? 1e-6 : 1e-14) * mag * w;
    bad += std::fabs((double)got[0][k] - ref) > tol;
  }
  EXPECT_EQ(bad, 0u);
}

TEST(ThreadComm, AllReduceBitIdenticalOnEveryRank) {
  for (int w : {2, 3, 4, 8})
    for (size_t n : {size_t(7), size_t(1001), size_t(100003)}) {
      SCOPED_TRACE("world " + std::to_string(w) + ", n " + std::to_string(n));
      check_bit_identical<float>(w, n);
      check_bit_identical<double>(w, n);
    }
}

// ---------------------------------------------------------------------------
// Point to point.

// Several messages of different sizes in flight between one pair, in both
// directions at once; each side sends everything before receiving anything.
TEST(ThreadComm, SendRecvManyInFlightBetweenAPair) {
  const std::vector<size_t> sizes = {0, 7, 1001, 1000003, 1, 7};
  for (int w : {2, 3}) {
    run_ok(w, [&](ThreadWorld &world, int r) {
      auto c = world.group("pair", iota_ranks(w), r);
      if (r > 1) return;  // a third member stays out of the conversation
      const int peer = 1 - r;
      for (size_t i = 0; i < sizes.size(); i++) {
        std::vector<float> msg(sizes[i]);
        for (size_t k = 0; k < sizes[i]; k++) msg[k] = val(r * 10 + (int)i, k);
        c->send(msg.data(), msg.size(), peer);
      }  // the sender's buffer is gone: send copies
      for (size_t i = 0; i < sizes.size(); i++) {
        std::vector<float> got(sizes[i], -12345.0f);
        c->recv(got.data(), got.size(), peer);
        size_t bad = 0;
        for (size_t k = 0; k < sizes[i]; k++) bad += got[k] != val(peer * 10 + (int)i, k);
        EXPECT_EQ(bad, 0u) << "rank " << r << " message " << i;
      }
    });
  }
}

// A receiver that arrives first waits for the sender.
TEST(ThreadComm, RecvWaitsForALateSend) {
  run_ok(2, [&](ThreadWorld &world, int r) {
    auto c = world.group("pair", {0, 1}, r);
    float x[3] = {0, 0, 0};
    if (r == 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      float y[3] = {1, 2, 3};
      c->send(y, 3, 1);
      c->recv(x, 3, 1);
      EXPECT_EQ(x[2], 6.0f);
    } else {
      c->recv(x, 3, 0);
      EXPECT_EQ(x[0], 1.0f);
      for (float &v : x) v *= 2;
      c->send(x, 3, 0);
    }
  });
}

TEST(ThreadComm, SendToSelf) {
  run_ok(1, [&](ThreadWorld &world, int r) {
    auto c = world.group("self", {0}, r);
    float a[2] = {1, 2}, b[2] = {3, 4}, got[2] = {};
    c->send(a, 2, 0);
    c->send(b, 2, 0);
    c->recv(got, 2, 0);
    EXPECT_EQ(got[1], 2.0f);
    c->recv(got, 2, 0);
    EXPECT_EQ(got[1], 4.0f);
  });
}

// ---------------------------------------------------------------------------
// Concurrent groups from the rank grid: t=2, p=1, d=4 over a world of 8.

TEST(ThreadComm, TensorAndDataGroupsConcurrently) {
  const RankGrid grid(ParallelDims{2, 1, 4});
  ASSERT_EQ(grid.dims().world(), 8);
  const size_t n = 1001;
  run_ok(8, [&](ThreadWorld &world, int r) {
    auto tp = world.group("tp", grid.tp_group(r), r);
    auto dp = world.group("dp", grid.dp_group(r), r);
    const RankCoord me = grid.coord_of(r);
    ASSERT_EQ(tp->size(), 2);
    ASSERT_EQ(dp->size(), 4);
    ASSERT_EQ(tp->rank(), me.tp);
    ASSERT_EQ(dp->rank(), me.dp);
    // Even tensor ranks start with the tp group and odd ones with dp, so the dp
    // groups {1,3,5,7} run while {0,1}, {2,3}, ... wait on their odd member.
    for (int iter = 0; iter < 20; iter++) {
      auto do_tp = [&] {
        std::vector<float> buf(n);
        for (size_t k = 0; k < n; k++) buf[k] = val(r + iter, k);
        tp->all_reduce(buf.data(), n);
        size_t bad = 0;
        for (size_t k = 0; k < n; k++) {
          float want = 0;
          for (const int q : grid.tp_group(r)) want += val(q + iter, k);
          bad += buf[k] != want;
        }
        EXPECT_EQ(bad, 0u) << "tp all_reduce, rank " << r << " iter " << iter;
        float b[4] = {(float)r, (float)iter, 0, 0};
        tp->broadcast(b, 4, iter % 2);
        EXPECT_EQ(b[0], (float)grid.tp_group(r)[iter % 2]);
      };
      auto do_dp = [&] {
        std::vector<double> g(n);
        for (size_t k = 0; k < n; k++) g[k] = val<double>(r * 3 + iter, k);
        dp->all_reduce(g.data(), n, ReduceOp::max);
        size_t bad = 0;
        for (size_t k = 0; k < n; k++) {
          double want = -1e300;
          for (const int q : grid.dp_group(r)) want = std::max(want, val<double>(q * 3 + iter, k));
          bad += g[k] != want;
        }
        EXPECT_EQ(bad, 0u) << "dp all_reduce, rank " << r << " iter " << iter;
        float mine[2] = {(float)r, (float)iter};
        float all[8] = {};
        dp->all_gather(mine, all, 2);
        for (int i = 0; i < 4; i++) EXPECT_EQ(all[2 * i], (float)grid.dp_group(r)[i]);
      };
      if (me.tp % 2 == 0) {
        do_tp();
        do_dp();
      } else {
        do_dp();
        do_tp();
      }
    }
    EXPECT_EQ(tp->stats().calls[(int)CommOp::all_reduce], 20);
    EXPECT_EQ(dp->stats().calls[(int)CommOp::all_reduce], 20);
    EXPECT_EQ(dp->stats().calls[(int)CommOp::broadcast], 0);
  });
}

// ---------------------------------------------------------------------------
// Counters.

TEST(ThreadComm, StatsCountCallsAndBytes) {
  const int w = 3;
  std::vector<CommStats> seen(w), other(w);
  run_ok(w, [&](ThreadWorld &world, int r) {
    auto c = world.group("world", iota_ranks(w), r);
    auto o = world.group("other", iota_ranks(w), r);
    std::vector<float> f(64, 1.0f), out(64);
    std::vector<double> d(10, 1.0);
    c->all_reduce(f.data(), 10);                        // 40 bytes
    c->all_reduce(f.data(), 6, ReduceOp::max);          // 24
    c->all_reduce(d.data(), 10);                        // 80
    c->all_gather(f.data(), out.data(), 5);             // 20
    c->reduce_scatter(f.data(), out.data(), 4);         // 4 * 3 members * 4 = 48
    c->broadcast(f.data(), 6, 1);                       // 24
    c->broadcast(f.data(), 0, 2);                       // 0
    c->send(f.data(), 3, (r + 1) % w);                  // 12
    c->recv(out.data(), 3, (r + w - 1) % w);            // 12
    c->barrier();
    EXPECT_EQ(o->stats().seconds, 0.0);
    c->barrier();
    if (r == 0) std::this_thread::sleep_for(std::chrono::milliseconds(150));
    o->barrier();  // ranks 1 and 2 wait here for rank 0's nap
    seen[r] = c->stats();
    other[r] = o->stats();
  });
  for (int r = 0; r < w; r++) {
    const CommStats &s = seen[r];
    auto calls = [&](CommOp op) { return s.calls[(int)op]; };
    auto bytes = [&](CommOp op) { return s.bytes[(int)op]; };
    EXPECT_EQ(calls(CommOp::all_reduce), 3);
    EXPECT_EQ(bytes(CommOp::all_reduce), 40 + 24 + 80);
    EXPECT_EQ(calls(CommOp::all_gather), 1);
    EXPECT_EQ(bytes(CommOp::all_gather), 20);
    EXPECT_EQ(calls(CommOp::reduce_scatter), 1);
    EXPECT_EQ(bytes(CommOp::reduce_scatter), 48);
    EXPECT_EQ(calls(CommOp::broadcast), 2);
    EXPECT_EQ(bytes(CommOp::broadcast), 24);
    EXPECT_EQ(calls(CommOp::send), 1);
    EXPECT_EQ(bytes(CommOp::send), 12);
    EXPECT_EQ(calls(CommOp::recv), 1);
    EXPECT_EQ(bytes(CommOp::recv), 12);
    EXPECT_EQ(calls(CommOp::barrier), 2);
    EXPECT_EQ(bytes(CommOp::barrier), 0);
    EXPECT_GT(s.seconds, 0.0);
    // Groups count separately; the time inside operations includes waiting.
    if (r != 0) {
      EXPECT_GE(other[r].seconds, 0.05) << "rank " << r;
    }
    for (int op = 0; op < (int)CommOp::count; op++) {
      EXPECT_EQ(other[r].calls[op], op == (int)CommOp::barrier ? 1 : 0) << comm_op_name((CommOp)op);
      EXPECT_EQ(other[r].bytes[op], 0) << comm_op_name((CommOp)op);
    }
  }
}

TEST(ThreadComm, CommOpNames) {
  EXPECT_STREQ(comm_op_name(CommOp::all_reduce), "all_reduce");
  EXPECT_STREQ(comm_op_name(CommOp::all_gather), "all_gather");
  EXPECT_STREQ(comm_op_name(CommOp::reduce_scatter), "reduce_scatter");
  EXPECT_STREQ(comm_op_name(CommOp::broadcast), "broadcast");
  EXPECT_STREQ(comm_op_name(CommOp::send), "send");
  EXPECT_STREQ(comm_op_name(CommOp::recv), "recv");
  EXPECT_STREQ(comm_op_name(CommOp::barrier), "barrier");
}

// ---------------------------------------------------------------------------
// Timeout and abort.

// One rank never joins an all_reduce: the others give up after the world's
// timeout with a message naming the group and the missing rank.
void check_timeout(int w, const std::string &group, int skipper) {
  ThreadWorld world(w, 0.5);
  auto res = run_ranks(world, [&](int r) {
    auto c = world.group(group, iota_ranks(w), r);
    if (r == skipper) return;
    std::vector<float> buf(7, 1.0f);
    c->all_reduce(buf.data(), buf.size());
  });
  for (int r = 0; r < w; r++) {
    SCOPED_TRACE("rank " + std::to_string(r));
    if (r == skipper) {
      EXPECT_FALSE(res[r].threw) << res[r].what;
      continue;
    }
    ASSERT_TRUE(res[r].threw);
    EXPECT_EQ((int)res[r].code, (int)Status::comm_failure) << res[r].what;
    EXPECT_NE(res[r].what.find("communicator timeout"), std::string::npos) << res[r].what;
    EXPECT_NE(res[r].what.find("'" + group + "'"), std::string::npos) << res[r].what;
    EXPECT_NE(res[r].what.find("all_reduce"), std::string::npos) << res[r].what;
    EXPECT_NE(res[r].what.find("ranks still missing: " + std::to_string(skipper)), std::string::npos)
        << res[r].what;
    EXPECT_GE(res[r].seconds, 0.3);
    EXPECT_LT(res[r].seconds, 2.0);
  }
  EXPECT_TRUE(world.aborted());
}

TEST(ThreadComm, TimeoutNamesGroupAndMissingRank) {
  check_timeout(4, "world", 3);
  check_timeout(3, "dp", 0);
  check_timeout(2, "tp", 1);
}

TEST(ThreadComm, RecvTimesOut) {
  ThreadWorld world(2, 0.3);
  auto res = run_ranks(world, [&](int r) {
    auto c = world.group("pp", {0, 1}, r);
    if (r == 1) return;
    float x[4];
    c->recv(x, 4, 1);
  });
  ASSERT_TRUE(res[0].threw);
  EXPECT_EQ((int)res[0].code, (int)Status::comm_failure);
  EXPECT_NE(res[0].what.find("communicator timeout"), std::string::npos) << res[0].what;
  EXPECT_NE(res[0].what.find("'pp'"), std::string::npos) << res[0].what;
  EXPECT_NE(res[0].what.find("recv"), std::string::npos) << res[0].what;
  EXPECT_LT(res[0].seconds, 2.0);
  EXPECT_FALSE(res[1].threw);
}

// world.abort wakes ranks blocked in a collective and in a recv, long before the timeout.
TEST(ThreadComm, AbortWakesBlockedRanks) {
  ThreadWorld world(4, 30.0);
  auto res = run_ranks(world, [&](int r) {
    switch (r) {
      case 0:  // never joins anything; aborts once the others are blocked
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        world.abort("boom");
        return;
      case 1: {
        auto c = world.group("a", {0, 1, 3}, r);
        std::vector<double> buf(1001, 1.0);
        c->all_reduce(buf.data(), buf.size());
        return;
      }
      case 2: {
        auto c = world.group("p", {0, 2}, r);
        float x[3];
        c->recv(x, 3, 0);
        return;
      }
      case 3: {
        auto c = world.group("a", {0, 1, 3}, r);
        std::vector<double> buf(1001, 1.0);
        c->all_reduce(buf.data(), buf.size());
        return;
      }
    }
  });
  EXPECT_FALSE(res[0].threw) << res[0].what;
  for (int r = 1; r < 4; r++) {
    ASSERT_TRUE(res[r].threw) << "rank " << r;
    EXPECT_EQ((int)res[r].code, (int)Status::comm_failure) << res[r].what;
    EXPECT_NE(res[r].what.find("boom"), std::string::npos) << res[r].what;
    EXPECT_LT(res[r].seconds, 2.0) << "rank " << r;
  }
  EXPECT_TRUE(world.aborted());
  EXPECT_EQ(world.abort_reason(), "boom");
}

TEST(ThreadComm, AbortedWorldFailsLaterCollectives) {
  ThreadWorld world(2, 30.0);
  world.abort("earlier failure");
  world.abort("second reason is ignored");
  EXPECT_EQ(world.abort_reason(), "earlier failure");
  auto res = run_ranks(world, [&](int r) {
    auto c = world.group("g", {0, 1}, r);
    if (r == 0) c->barrier();  // rank 1 never comes: the abort, not the timeout, ends it
  });
  ASSERT_TRUE(res[0].threw);
  EXPECT_NE(res[0].what.find("earlier failure"), std::string::npos) << res[0].what;
  EXPECT_LT(res[0].seconds, 2.0);
}

// ---------------------------------------------------------------------------
// Argument errors.

TEST(ThreadComm, RecvOfTheWrongSizeIsAnError) {
  ThreadWorld world(2, kTimeout);
  auto res = run_ranks(world, [&](int r) {
    auto c = world.group("pair", {0, 1}, r);
    std::vector<float> buf(5, 1.0f);
    if (r == 0) {
      c->send(buf.data(), 5, 1);
      c->send(buf.data(), 3, 1);
    } else {
      expect_error([&] { c->recv(buf.data(), 4, 0); }, Status::comm_failure, "got a message of 5");
      c->recv(buf.data(), 3, 0);  // the next message is still in order
    }
  });
  EXPECT_FALSE(res[0].threw) << res[0].what;
  EXPECT_FALSE(res[1].threw) << res[1].what;
}

TEST(ThreadComm, InvalidPeerOrRootIsAnError) {
  run_ok(3, [&](ThreadWorld &world, int r) {
    auto c = world.group("g", {0, 1, 2}, r);
    float x[4] = {};
    for (int bad : {-1, 3, 100}) {
      expect_error([&] { c->send(x, 4, bad); }, Status::invalid_argument, "send peer");
      expect_error([&] { c->recv(x, 4, bad); }, Status::invalid_argument, "recv peer");
      expect_error([&] { c->broadcast(x, 4, bad); }, Status::invalid_argument, "broadcast root");
    }
    c->barrier();  // the group still works
    EXPECT_EQ(c->stats().calls[(int)CommOp::send], 0);
  });
}

TEST(ThreadComm, GroupMembershipErrors) {
  ThreadWorld world(4, kTimeout);
  EXPECT_EQ(world.size(), 4);
  EXPECT_EQ(world.timeout_s(), kTimeout);
  EXPECT_FALSE(world.aborted());
  expect_error([&] { world.group("tp", {0, 1}, 2); }, Status::invalid_argument, "not a member");
  expect_error([&] { world.group("tp", {0, 1}, -1); }, Status::invalid_argument, "not a member");
  expect_error([&] { world.group("tp", {}, 0); }, Status::invalid_argument, "not a member");
  expect_error([&] { world.group("tp", {0, 4}, 0); }, Status::invalid_argument, "outside the world");
  expect_error([&] { world.group("tp", {-1, 0}, 0); }, Status::invalid_argument, "outside the world");
  auto c = world.group("tp", {3, 1}, 1);  // group rank follows the list order
  EXPECT_EQ(c->rank(), 1);
  EXPECT_EQ(c->size(), 2);
  EXPECT_EQ(c->name(), "tp");
  EXPECT_EQ(c->members(), (std::vector<int>{3, 1}));
}

}  // namespace
