// The communicator conformance suite: the cases every backend must pass, in
// every dtype. A test file includes this header once, defines a CommBackend
// for its backend, and instantiates the suite with the world sizes to run:
//
//   INSTANTIATE_TEST_SUITE_P(Threads, CommConformance,
//                            ::testing::Values(CommSetup{&backend, 4}, ...), setup_name);
//
// A case's body runs once per rank, SPMD: each rank makes its own groups, fills
// its buffers from its world rank, computes the expected values of the whole
// group locally, and checks its own result; agreement across members is
// checked through the group itself (expect_same_on_all_members). So the same
// body runs on threads of one process (threads), one rank per process (mpi),
// or both (mpi-threads). A GPU backend (nccl) is one more CommBackend: its
// alloc() hands out memory the host can read (managed memory) and its
// communicators complete each operation before returning.
//
// Groups are partitions of the world named world, tp, dp, pp or embedding: the
// mpi backend creates groups collectively (every process in one group of each
// call) and the mpi-threads backend tags messages by these names.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "engine/comm/communicator.h"
#include "engine/comm/grid.h"
#include "engine/core/dtype.h"
#include "engine/core/status.h"
#include "tests/support/expect_error.h"

namespace comm_conformance {

using namespace ptdp;

// ---------------------------------------------------------------------------
// The backend interface

class CommBackend {
 public:
  using Body = std::function<void(CommWorld &world, int me)>;
  virtual ~CommBackend() = default;
  virtual std::string name() const = 0;
  // Why this backend cannot run here ("" when it can); its cases are skipped.
  virtual std::string unavailable() const { return ""; }
  // Runs body(world, me) for every world rank `me` that this process hosts,
  // concurrently (one thread each when there are several), and returns when
  // all are done. A body that throws must not leave the other ranks waiting:
  // the backend aborts the job (it reports the failure first).
  virtual void run(int world_size, const Body &body) = 0;
  // Whether two threads of one rank may use two of its groups at once.
  virtual bool threads_per_rank() const { return true; }
  // Buffers for the operations: memory the backend reads and the host can check.
  virtual void *alloc(size_t bytes) { return ::operator new(bytes ? bytes : 1); }
  virtual void release(void *p) { ::operator delete(p); }
};

struct CommSetup {
  CommBackend *backend;
  int world;  // ranks in the job
};

// How gtest prints a parameter ("threads, 4 ranks"), and names an instance.
inline void PrintTo(const CommSetup &s, std::ostream *os) {
  *os << s.backend->name() << ", " << s.world << " ranks";
}
inline std::string setup_name(const ::testing::TestParamInfo<CommSetup> &info) {
  return info.param.backend->name() + "_w" + std::to_string(info.param.world);
}

// Ranks 0 .. n-1.
inline std::vector<int> iota_ranks(int n) {
  std::vector<int> v(n);
  for (int i = 0; i < n; i++) v[i] = i;
  return v;
}

// Runs body(me) on one thread per rank in `ranks`; on_error(me, what) is called
// on the thread of a rank whose body threw.
inline void run_on_threads(const std::vector<int> &ranks, const std::function<void(int)> &body,
                           const std::function<void(int, const std::string &)> &on_error) {
  std::vector<std::thread> threads;
  for (int me : ranks)
    threads.emplace_back([&, me] {
      try {
        body(me);
      } catch (const std::exception &e) {
        on_error(me, e.what());
      }
    });
  for (auto &t : threads) t.join();
}

// A buffer from the backend's allocator.
template <class T>
class Buf {
 public:
  Buf(CommBackend &b, size_t n, T fill = T()) : b_(b), n_(n) {
    p_ = static_cast<T *>(b_.alloc(n * sizeof(T)));
    std::fill(p_, p_ + n, fill);
  }
  Buf(CommBackend &b, const std::vector<T> &v) : Buf(b, v.size()) {
    std::copy(v.begin(), v.end(), p_);
  }
  ~Buf() { b_.release(p_); }
  Buf(const Buf &) = delete;
  Buf &operator=(const Buf &) = delete;
  T *data() { return p_; }
  const T *data() const { return p_; }
  size_t size() const { return n_; }
  T &operator[](size_t i) { return p_[i]; }
  T *begin() { return p_; }
  T *end() { return p_ + n_; }

 private:
  CommBackend &b_;
  T *p_;
  size_t n_;
};

// ---------------------------------------------------------------------------
// Groups

enum class Layout { world, halves, strided, reversed };
const Layout kLayouts[] = {Layout::world, Layout::halves, Layout::strided, Layout::reversed};

inline const char *group_name(Layout l) {
  switch (l) {
    case Layout::halves: return "tp";
    case Layout::strided: return "dp";
    case Layout::reversed: return "pp";
    default: return "world";
  }
}

// The members of me's group: all ranks; [0, N/2) or [N/2, N); even or odd
// ranks; all ranks with group rank r = world rank N-1-r.
inline std::vector<int> members_of(Layout l, int me, int n) {
  std::vector<int> m;
  for (int r = 0; r < n; r++) {
    bool in = l == Layout::halves    ? (r < n / 2) == (me < n / 2)
              : l == Layout::strided ? r % 2 == me % 2
                                     : true;
    if (in) m.push_back(l == Layout::reversed ? n - 1 - r : r);
  }
  return m;
}

// What a case's body has on one rank.
struct Rank {
  CommBackend &backend;
  CommWorld &world;
  int me, size;  // world rank, world size

  std::unique_ptr<Communicator> group(Layout l) const {
    return world.group(group_name(l), members_of(l, me, size), me);
  }
  std::unique_ptr<Communicator> all(const char *name) const {
    return world.group(name, members_of(Layout::world, me, size), me);
  }
};

class CommConformance : public ::testing::TestWithParam<CommSetup> {
 protected:
  void SetUp() override {
    std::string why = GetParam().backend->unavailable();
    if (!why.empty()) GTEST_SKIP() << why;
  }
  int world() const { return GetParam().world; }
  // Runs body(rank) on every rank of a fresh job.
  void run(const std::function<void(Rank &)> &body) {
    CommBackend &b = *GetParam().backend;
    b.run(world(), [&](CommWorld &w, int me) {
      Rank r{b, w, me, world()};
      body(r);
    });
  }
};

// ---------------------------------------------------------------------------
// Values

constexpr size_t kBig = 1000003;  // above the mpi backend's in-place limit of 64 KiB
const std::vector<size_t> kSizes = {0, 1, 7, 1001, kBig};

// The large size runs on the world and halves groups only.
inline std::vector<size_t> sizes_for(Layout l) {
  if (l == Layout::world || l == Layout::halves) return kSizes;
  return {0, 1, 7, 1001};
}

inline uint64_t mix(uint64_t h) {
  h ^= h >> 29;
  h *= 0xBF58476D1CE4E5B9ull;
  h ^= h >> 32;
  return h;
}

// Small quarters: any sum over a few ranks is exact in float and double, so
// results are compared bit for bit whatever the summation order.
template <class T = float>
T val(int r, size_t k) {
  uint64_t h = mix((uint64_t)(r + 1) * 0x9E3779B97F4A7C15ull ^ (uint64_t)k * 0xC2B2AE3D27D4EB4Full);
  return (T)((int)(h % 2001) - 1000) / (T)4;
}

// Values of many magnitudes whose sum depends on the order of summation.
template <class T>
T noisy(int r, size_t k) {
  uint64_t h = mix(((uint64_t)(r + 1) << 40) ^ (k * 0x9E3779B97F4A7C15ull));
  static const double kScale[7] = {1e-3, 1e-2, 1e-1, 1, 1e1, 1e2, 1e3};
  double u = (double)(h >> 11) * 0x1p-53 * 2.0 - 1.0;
  return (T)(u * kScale[h % 7]);
}

inline uint16_t to16(DType dt, float x) {
  return dt == DType::bf16 ? float_to_bf16(x) : float_to_f16(x);
}
inline float from16(DType dt, uint16_t h) {
  return dt == DType::bf16 ? bf16_to_float(h) : f16_to_float(h);
}

// T is the buffer type: float (f32), double (f64) or uint16_t (bf16, f16).
template <class T>
DType natural_dtype() {
  return std::is_same_v<T, double> ? DType::f64 : DType::f32;
}

// Element k of rank r's data: val() in the buffer's format.
template <class T>
T value(DType dt, int r, size_t k, bool noisy_values = false) {
  if constexpr (std::is_same_v<T, uint16_t>)
    return to16(dt, noisy_values ? noisy<float>(r, k) : val<float>(r, k));
  else
    return noisy_values ? noisy<T>(r, k) : val<T>(r, k);
}

// Any bits at all (NaNs and infinities included, for 16-bit data): for the
// operations that only move data.
template <class T>
T pattern(int r, size_t k) {
  if constexpr (std::is_same_v<T, uint16_t>)
    return (uint16_t)mix((uint64_t)(r + 7) << 32 ^ k);
  else
    return val<T>(r + 500, k);
}

// The reduction of xs in member order, as the backends must compute it
// (16-bit: fp32 accumulation, rounded once).
template <class T>
T reduce_ref(DType dt, ReduceOp op, const std::vector<T> &xs) {
  if constexpr (std::is_same_v<T, uint16_t>) {
    float acc = from16(dt, xs[0]);
    for (size_t i = 1; i < xs.size(); i++) {
      float v = from16(dt, xs[i]);
      acc = op == ReduceOp::sum ? acc + v : (v > acc ? v : acc);
    }
    return to16(dt, acc);
  } else {
    T acc = xs[0];
    for (size_t i = 1; i < xs.size(); i++)
      acc = op == ReduceOp::sum ? acc + xs[i] : (xs[i] > acc ? xs[i] : acc);
    return acc;
  }
}

template <class T>
std::string first_diff(const T *got, const T *want, size_t n) {
  for (size_t k = 0; k < n; k++)
    if (std::memcmp(&got[k], &want[k], sizeof(T)) != 0)
      return "at " + std::to_string(k) + " of " + std::to_string(n) + ": got " +
             std::to_string(got[k]) + ", want " + std::to_string(want[k]);
  return "";
}

#define EXPECT_SAME_BITS(got, want, n, what) \
  EXPECT_EQ(comm_conformance::first_diff((got), (want), (n)), "") << (what)

inline std::string label(const Communicator &c, size_t n, DType dt = DType::f32) {
  return "group '" + c.name() + "' (" + std::to_string(c.size()) + " ranks, rank " +
         std::to_string(c.rank()) + "), n=" + std::to_string(n) + " " + dtype_name(dt);
}

// Every member of `c` holds the same bytes in buf[0, n): a 64-bit hash of them
// is all-gathered as four exact 16-bit pieces and compared.
template <class T>
void expect_same_on_all_members(Rank &rk, Communicator &c, const T *buf, size_t n,
                                const std::string &what) {
  uint64_t h = 1469598103934665603ull;
  auto *p = reinterpret_cast<const unsigned char *>(buf);
  for (size_t i = 0; i < n * sizeof(T); i++) h = (h ^ p[i]) * 1099511628211ull;
  Buf<float> mine(rk.backend, 4), all(rk.backend, 4 * (size_t)c.size());
  for (int i = 0; i < 4; i++) mine[i] = (float)((h >> (16 * i)) & 0xFFFF);
  c.all_gather(mine.data(), all.data(), 4);
  for (int r = 0; r < c.size(); r++)
    EXPECT_EQ(0, std::memcmp(all.data(), all.data() + 4 * r, 4 * sizeof(float)))
        << what << ": the result on group rank " << r << " (world rank " << c.members()[r]
        << ") differs from group rank 0's";
}

// ---------------------------------------------------------------------------
// all_reduce

template <class T>
void check_all_reduce(Rank &rk, Communicator &c, size_t n, DType dt, ReduceOp op,
                      bool noisy_values) {
  const int me = c.members()[c.rank()];
  Buf<T> buf(rk.backend, n);
  std::vector<T> want(n), xs(c.size());
  for (size_t k = 0; k < n; k++) {
    buf[k] = value<T>(dt, me, k, noisy_values);
    for (int r = 0; r < c.size(); r++) xs[r] = value<T>(dt, c.members()[r], k, noisy_values);
    want[k] = reduce_ref(dt, op, xs);
  }
  c.all_reduce(buf.data(), n, dt, op);
  std::string what = label(c, n, dt) + (op == ReduceOp::sum ? " sum" : " max") +
                     (noisy_values ? " (noisy)" : "");
  EXPECT_SAME_BITS(buf.data(), want.data(), n, what);
  expect_same_on_all_members(rk, c, buf.data(), n, what);
  // The group is reusable: again on the result (every member holds `want`).
  c.all_reduce(buf.data(), n, dt, op);
  for (size_t k = 0; k < n; k++) {
    std::fill(xs.begin(), xs.end(), want[k]);
    want[k] = reduce_ref(dt, op, xs);
  }
  EXPECT_SAME_BITS(buf.data(), want.data(), n, what + ", second all_reduce");
}

// Through the typed shorthands of float and double buffers.
template <class T>
void check_all_reduce_typed(Rank &rk, Communicator &c, size_t n, ReduceOp op) {
  const int me = c.members()[c.rank()];
  Buf<T> buf(rk.backend, n);
  std::vector<T> want(n), xs(c.size());
  for (size_t k = 0; k < n; k++) {
    buf[k] = val<T>(me, k);
    for (int r = 0; r < c.size(); r++) xs[r] = val<T>(c.members()[r], k);
    want[k] = reduce_ref(natural_dtype<T>(), op, xs);
  }
  c.all_reduce(buf.data(), n, op);
  std::string what = label(c, n, natural_dtype<T>()) + (op == ReduceOp::sum ? " sum" : " max");
  EXPECT_SAME_BITS(buf.data(), want.data(), n, what);
  expect_same_on_all_members(rk, c, buf.data(), n, what);
  c.all_reduce(buf.data(), n, op);  // sum doubles, max is idempotent
  size_t bad = 0;
  for (size_t k = 0; k < n; k++) {
    T expect = op == ReduceOp::sum ? want[k] * (T)c.size() : want[k];
    bad += std::memcmp(&buf[k], &expect, sizeof(T)) != 0;
  }
  EXPECT_EQ(bad, 0u) << what << ", second all_reduce";
}

TEST_P(CommConformance, AllReduceF32Sum) {
  run([](Rank &rk) {
    for (Layout l : kLayouts) {
      auto c = rk.group(l);
      for (size_t n : sizes_for(l)) check_all_reduce_typed<float>(rk, *c, n, ReduceOp::sum);
    }
  });
}

TEST_P(CommConformance, AllReduceF32Max) {
  run([](Rank &rk) {
    for (Layout l : kLayouts) {
      auto c = rk.group(l);
      for (size_t n : sizes_for(l)) check_all_reduce_typed<float>(rk, *c, n, ReduceOp::max);
    }
  });
}

TEST_P(CommConformance, AllReduceF64SumAndMax) {
  run([](Rank &rk) {
    for (Layout l : {Layout::world, Layout::halves}) {
      auto c = rk.group(l);
      for (size_t n : sizes_for(l)) {
        check_all_reduce_typed<double>(rk, *c, n, ReduceOp::sum);
        check_all_reduce_typed<double>(rk, *c, n, ReduceOp::max);
      }
    }
  });
}

// 16-bit: bit for bit the fp32 member-order sum, rounded once.
TEST_P(CommConformance, AllReduce16BitSumAndMax) {
  run([](Rank &rk) {
    for (DType dt : {DType::bf16, DType::f16})
      for (Layout l : kLayouts) {
        auto c = rk.group(l);
        for (size_t n : sizes_for(l))
          for (bool noisy_values : {false, true}) {
            check_all_reduce<uint16_t>(rk, *c, n, dt, ReduceOp::sum, noisy_values);
            check_all_reduce<uint16_t>(rk, *c, n, dt, ReduceOp::max, noisy_values);
          }
      }
  });
}

// The untyped interface in f32 and f64 with order-dependent (noisy) values:
// backends may sum f32/f64 in their own order, so this checks closeness and
// agreement, not bits.
template <class T>
void check_noisy(Rank &rk, Communicator &c, size_t n) {
  const int me = c.members()[c.rank()];
  Buf<T> buf(rk.backend, n);
  for (size_t k = 0; k < n; k++) buf[k] = noisy<T>(me, k);
  c.all_reduce(buf.data(), n, natural_dtype<T>(), ReduceOp::sum);
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
  expect_same_on_all_members(rk, c, buf.data(), n, label(c, n) + " noisy sum");
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

TEST_P(CommConformance, AllReduceBitIdenticalOnAllMembers) {
  run([](Rank &rk) {
    for (Layout l : kLayouts) {
      auto c = rk.group(l);
      for (size_t n : {size_t(7), size_t(1001), size_t(20000), kBig}) {
        if (n > 20000 && l != Layout::world) continue;
        check_noisy<float>(rk, *c, n);
        check_noisy<double>(rk, *c, n);
      }
    }
  });
}

// Rounding happens once, at the end: member 0 holds 1 and the others half an
// ulp of 1 each. Rounding after every addition would stay at 1 (ties to even);
// the fp32 sum rounded once moves up from 3 members on. And f16 overflows to inf.
TEST_P(CommConformance, AllReduce16BitRoundsOnce) {
  run([](Rank &rk) {
    for (DType dt : {DType::bf16, DType::f16}) {
      auto c = rk.group(Layout::world);
      const float half_ulp = dt == DType::bf16 ? 0x1p-8f : 0x1p-11f;
      Buf<uint16_t> buf(rk.backend, 3);
      buf[0] = to16(dt, c->rank() == 0 ? 1.0f : half_ulp);
      const float big = from16(dt, to16(dt, 40000.0f));  // f16: 2 * 40000 > 65504
      buf[1] = to16(dt, big);
      buf[2] = to16(dt, -0.0f);
      c->all_reduce(buf.data(), 3, dt);
      const int w = c->size();
      const uint16_t want0 = to16(dt, 1.0f + (float)(w - 1) * half_ulp);
      EXPECT_EQ(buf[0], want0) << dtype_name(dt) << " on " << w << " ranks";
      if (w >= 3) {
        EXPECT_NE(buf[0], to16(dt, 1.0f)) << "the test needs 3 members to mean anything";
      }
      EXPECT_EQ(buf[1], to16(dt, big * (float)w)) << dtype_name(dt);
      if (dt == DType::f16 && w >= 2) {
        EXPECT_TRUE(std::isinf(f16_to_float(buf[1])));
      }
      EXPECT_EQ(buf[2], to16(dt, -0.0f)) << "-0 + -0 + ... stays -0";
    }
  });
}

// ---------------------------------------------------------------------------
// all_gather, reduce_scatter, broadcast: every dtype

template <class T>
void check_all_gather(Rank &rk, Communicator &c, size_t n, DType dt) {
  const size_t P = (size_t)c.size();
  Buf<T> in(rk.backend, n), out(rk.backend, n * P, pattern<T>(-1, 0));
  std::vector<T> want(n * P);
  for (size_t k = 0; k < n; k++) in[k] = pattern<T>(c.members()[c.rank()], k);
  for (size_t r = 0; r < P; r++)
    for (size_t k = 0; k < n; k++) want[r * n + k] = pattern<T>(c.members()[r], k);
  c.all_gather(in.data(), out.data(), n, dt);
  EXPECT_SAME_BITS(out.data(), want.data(), n * P, label(c, n, dt));
  // In place: the input already sits in this rank's slot of the output (a
  // received shard gathered into the full tensor).
  Buf<T> io(rk.backend, n * P, pattern<T>(-1, 0));
  std::copy(in.begin(), in.end(), io.begin() + (size_t)c.rank() * n);
  c.all_gather(io.data() + (size_t)c.rank() * n, io.data(), n, dt);
  EXPECT_SAME_BITS(io.data(), want.data(), n * P, label(c, n, dt) + " in place");
}

TEST_P(CommConformance, AllGather) {
  run([](Rank &rk) {
    for (Layout l : kLayouts) {
      auto c = rk.group(l);
      for (size_t n : sizes_for(l)) {
        check_all_gather<float>(rk, *c, n, DType::f32);
        if (n > 1001) continue;
        check_all_gather<double>(rk, *c, n, DType::f64);
        check_all_gather<uint16_t>(rk, *c, n, DType::bf16);
        check_all_gather<uint16_t>(rk, *c, n, DType::f16);
      }
    }
  });
}

// Where the result goes: its own buffer, this rank's slice of the input, or
// the start of the input (which the others may still be reading).
enum class Out { separate, own_slice, input_start };

template <class T>
void check_reduce_scatter(Rank &rk, Communicator &c, size_t n, DType dt, Out where) {
  const size_t P = (size_t)c.size(), total = n * P;
  const int me = c.members()[c.rank()];
  Buf<T> in(rk.backend, total), sep(rk.backend, n, pattern<T>(-1, 0));
  std::vector<T> want(n), xs(P);
  for (size_t j = 0; j < total; j++) in[j] = value<T>(dt, me, j);
  for (size_t k = 0; k < n; k++) {
    for (size_t r = 0; r < P; r++) xs[r] = value<T>(dt, c.members()[r], (size_t)c.rank() * n + k);
    want[k] = reduce_ref(dt, ReduceOp::sum, xs);
  }
  T *out = where == Out::separate    ? sep.data()
           : where == Out::own_slice ? in.data() + (size_t)c.rank() * n
                                     : in.data();
  c.reduce_scatter(in.data(), out, n, dt);
  const char *how[] = {"", " into its own slice", " over the input start"};
  EXPECT_SAME_BITS(out, want.data(), n, label(c, n, dt) + how[(int)where]);
}

TEST_P(CommConformance, ReduceScatter) {
  run([](Rank &rk) {
    for (Layout l : kLayouts) {
      auto c = rk.group(l);
      for (size_t n : sizes_for(l)) {
        if (n > 1001) n /= (size_t)c->size();  // the input is size() times larger
        for (Out where : {Out::separate, Out::own_slice, Out::input_start}) {
          check_reduce_scatter<float>(rk, *c, n, DType::f32, where);
          check_reduce_scatter<double>(rk, *c, n, DType::f64, where);
          check_reduce_scatter<uint16_t>(rk, *c, n, DType::bf16, where);
          check_reduce_scatter<uint16_t>(rk, *c, n, DType::f16, where);
        }
      }
    }
  });
}

// Through the float shorthand, as the pipeline and the trainer call it.
TEST_P(CommConformance, ReduceScatterFloatShorthand) {
  run([](Rank &rk) {
    auto c = rk.group(Layout::world);
    const size_t n = 1001, P = (size_t)c->size();
    Buf<float> in(rk.backend, n * P), out(rk.backend, n);
    for (size_t j = 0; j < n * P; j++) in[j] = val(rk.me, j);
    c->reduce_scatter(in.data(), out.data(), n);
    for (size_t k = 0; k < n; k++) {
      float want = 0;
      for (int m : c->members()) want += val(m, (size_t)c->rank() * n + k);
      ASSERT_EQ(out[k], want) << k;
    }
  });
}

template <class T>
void check_broadcast(Rank &rk, Communicator &c, size_t n, DType dt, int root) {
  const int src = c.members()[root];
  Buf<T> buf(rk.backend, n, pattern<T>(-1, 0));
  std::vector<T> want(n);
  for (size_t k = 0; k < n; k++) want[k] = pattern<T>(100 + src, k);
  if (c.rank() == root) std::copy(want.begin(), want.end(), buf.begin());
  c.broadcast(buf.data(), n, dt, root);
  EXPECT_SAME_BITS(buf.data(), want.data(), n, label(c, n, dt) + " root " + std::to_string(root));
}

TEST_P(CommConformance, BroadcastFromEachRoot) {
  run([](Rank &rk) {
    for (Layout l : kLayouts) {
      auto c = rk.group(l);
      for (size_t n : sizes_for(l))
        for (int root = 0; root < c->size(); root++) {
          if (n > 1001 && root != 0 && root != c->size() - 1) continue;
          check_broadcast<float>(rk, *c, n, DType::f32, root);
          if (n > 1001) continue;
          check_broadcast<double>(rk, *c, n, DType::f64, root);
          check_broadcast<uint16_t>(rk, *c, n, DType::bf16, root);
          check_broadcast<uint16_t>(rk, *c, n, DType::f16, root);
        }
    }
  });
}

// A late rank is waited for (margin: ranks leave the first barrier at
// slightly different times); barriers of every group in turn.
TEST_P(CommConformance, Barrier) {
  run([](Rank &rk) {
    for (int i = 0; i < 3; i++)
      for (Layout l : kLayouts) rk.group(l)->barrier();
    auto c = rk.group(Layout::world);
    c->barrier();
    auto t0 = std::chrono::steady_clock::now();
    if (rk.me == rk.size - 1) std::this_thread::sleep_for(std::chrono::milliseconds(400));
    c->barrier();
    double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (rk.size > 1) {
      EXPECT_GE(waited, 0.2) << "the barrier did not wait for the last rank";
    }
  });
}

// ---------------------------------------------------------------------------
// Point to point

// Everything is sent before anything is received, in both directions round
// the ring: send must not wait for recv. With 2 ranks next == prev and the
// messages from that peer arrive in the order sent; with 1, both are me.
template <class T>
void check_ring(Rank &rk, Communicator &c, DType dt, const std::vector<size_t> &sizes) {
  const int P = c.size(), me = c.members()[c.rank()];
  const int next = (c.rank() + 1) % P, prev = (c.rank() + P - 1) % P;
  for (size_t i = 0; i < sizes.size(); i++) {
    Buf<T> msg(rk.backend, sizes[i]);
    for (size_t k = 0; k < msg.size(); k++) msg[k] = pattern<T>(1000 * me + (int)i, k);
    c.send(msg.data(), msg.size(), dt, next);
    for (size_t k = 0; k < msg.size(); k++) msg[k] = pattern<T>(2000 * me + (int)i, k);  // copied
    c.send(msg.data(), msg.size(), dt, prev);
  }
  for (size_t i = 0; i < sizes.size(); i++) {
    const size_t n = sizes[i];
    Buf<T> got(rk.backend, n, pattern<T>(-1, 0));
    std::vector<T> want(n);
    for (size_t k = 0; k < n; k++) want[k] = pattern<T>(1000 * c.members()[prev] + (int)i, k);
    c.recv(got.data(), n, dt, prev);
    EXPECT_SAME_BITS(got.data(), want.data(), n, label(c, n, dt) + " message " + std::to_string(i) + " from prev");
    for (size_t k = 0; k < n; k++) want[k] = pattern<T>(2000 * c.members()[next] + (int)i, k);
    c.recv(got.data(), n, dt, next);
    EXPECT_SAME_BITS(got.data(), want.data(), n, label(c, n, dt) + " message " + std::to_string(i) + " from next");
  }
}

TEST_P(CommConformance, SendRecvRingBothWays) {
  const std::vector<size_t> sizes = {0, 7, 1001, kBig, 1, 0, 5}, small = {0, 7, 1001, 1, 5};
  run([&](Rank &rk) {
    for (Layout l : kLayouts) {
      auto c = rk.group(l);
      check_ring<float>(rk, *c, DType::f32, sizes);
      check_ring<double>(rk, *c, DType::f64, small);
      check_ring<uint16_t>(rk, *c, DType::bf16, small);
      check_ring<uint16_t>(rk, *c, DType::f16, small);
    }
  });
}

// Two messages to the next rank, then one to the previous, before any recv;
// through the float shorthands.
TEST_P(CommConformance, SendRecvRing) {
  run([](Rank &rk) {
    auto c = rk.all("pp");
    const int w = c->size(), r = c->rank(), n = 1001;
    auto tagged = [&](int src, int tag) {
      std::vector<float> v(n);
      for (int k = 0; k < n; k++) v[k] = val(src * 4 + tag, k);
      return v;
    };
    const int next = (r + 1) % w, prev = (r + w - 1) % w;
    for (int tag : {0, 1}) c->send(tagged(r, tag).data(), n, next);
    c->send(tagged(r, 2).data(), n, prev);
    for (int tag : {0, 1}) {  // from prev: its tags 0 and 1, in order
      std::vector<float> got(n, -12345.0f), want = tagged(prev, tag);
      c->recv(got.data(), n, prev);
      EXPECT_SAME_BITS(got.data(), want.data(), (size_t)n, "tag " + std::to_string(tag));
    }
    std::vector<float> got(n, -12345.0f), want = tagged(next, 2);
    c->recv(got.data(), n, next);
    EXPECT_SAME_BITS(got.data(), want.data(), (size_t)n, "tag 2");
  });
}

// Several messages of different sizes in flight between one pair, in both
// directions at once; each side sends everything before receiving anything.
// The other members stay out of the conversation.
TEST_P(CommConformance, SendRecvManyInFlightBetweenAPair) {
  if (world() < 2) GTEST_SKIP() << "needs 2 ranks";
  const std::vector<size_t> sizes = {0, 7, 1001, kBig, 1, 7};
  run([&](Rank &rk) {
    auto c = rk.all("pp");
    if (c->rank() > 1) return;
    const int peer = 1 - c->rank();
    for (size_t i = 0; i < sizes.size(); i++) {
      std::vector<float> msg(sizes[i]);
      for (size_t k = 0; k < sizes[i]; k++) msg[k] = val(c->rank() * 10 + (int)i, k);
      c->send(msg.data(), msg.size(), peer);
    }  // the sender's buffer is gone: send copies
    for (size_t i = 0; i < sizes.size(); i++) {
      Buf<float> got(rk.backend, sizes[i], -12345.0f);
      c->recv(got.data(), got.size(), peer);
      size_t bad = 0;
      for (size_t k = 0; k < sizes[i]; k++) bad += got[k] != val(peer * 10 + (int)i, k);
      EXPECT_EQ(bad, 0u) << "rank " << c->rank() << " message " << i;
    }
  });
}

// A receiver that arrives first waits for the sender.
TEST_P(CommConformance, RecvWaitsForALateSend) {
  if (world() < 2) GTEST_SKIP() << "needs 2 ranks";
  run([](Rank &rk) {
    auto c = rk.all("pp");
    float x[3] = {0, 0, 0};
    if (c->rank() == 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      float y[3] = {1, 2, 3};
      c->send(y, 3, 1);
      c->recv(x, 3, 1);
      EXPECT_EQ(x[2], 6.0f);
    } else if (c->rank() == 1) {
      c->recv(x, 3, 0);
      EXPECT_EQ(x[0], 1.0f);
      for (float &v : x) v *= 2;
      c->send(x, 3, 0);
    }
  });
}

// To oneself, and pipeline-style: rank r sends 4 micro-batches to r+1 and gets
// the gradients back.
TEST_P(CommConformance, SendToSelfAndPipelinePairs) {
  run([](Rank &rk) {
    auto c = rk.all("pp");
    float a[2] = {1, 2}, b[2] = {3, 4}, got[2] = {};
    c->send(a, 2, c->rank());
    c->send(b, 2, c->rank());
    c->recv(got, 2, c->rank());
    EXPECT_EQ(got[1], 2.0f);
    c->recv(got, 2, c->rank());
    EXPECT_EQ(got[1], 4.0f);
    Buf<float> buf(rk.backend, 1000);
    const int r = c->rank();
    for (int mb = 0; mb < 4; mb++) {
      if (r > 0) {
        c->recv(buf.data(), buf.size(), r - 1);
        for (size_t k = 0; k < buf.size(); k++) ASSERT_EQ(buf[k], val(r - 1, k) + mb);
      }
      if (r + 1 < c->size()) {
        for (size_t k = 0; k < buf.size(); k++) buf[k] = val(r, k) + mb;
        c->send(buf.data(), buf.size(), r + 1);
      }
    }
    for (int mb = 0; mb < 4; mb++) {
      if (r + 1 < c->size()) {
        c->recv(buf.data(), buf.size(), r + 1);
        for (size_t k = 0; k < buf.size(); k++) ASSERT_EQ(buf[k], -val(r + 1, k) - mb);
      }
      if (r > 0) {
        for (size_t k = 0; k < buf.size(); k++) buf[k] = -val(r, k) - mb;
        c->send(buf.data(), buf.size(), r - 1);
      }
    }
  });
}

// A communicator destroyed with a large message still in flight: the message
// arrives all the same.
TEST_P(CommConformance, DestroyWithPendingSends) {
  if (world() < 2) GTEST_SKIP() << "needs 2 ranks";
  run([](Rank &rk) {
    auto c = rk.all("pp");
    std::vector<float> big(kBig);
    for (size_t k = 0; k < big.size(); k++) big[k] = val(0, k);
    if (c->rank() == 0) {
      c->send(big.data(), big.size(), 1);
      c->send(big.data(), 3, 1);
      c.reset();
    } else if (c->rank() == 1) {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      Buf<float> got(rk.backend, big.size());
      c->recv(got.data(), got.size(), 0);
      EXPECT_SAME_BITS(got.data(), big.data(), big.size(), "large message");
      c->recv(got.data(), 3, 0);
      EXPECT_SAME_BITS(got.data(), big.data(), 3, "small message");
    }
    c.reset();
    rk.group(Layout::world)->barrier();
  });
}

// ---------------------------------------------------------------------------
// Errors

// A message of the wrong length: comm_failure naming the sizes; the message is
// consumed, and the next one arrives normally. In f32 and bf16.
TEST_P(CommConformance, RecvOfTheWrongSizeIsAnError) {
  if (world() < 2) GTEST_SKIP() << "needs 2 ranks";
  run([](Rank &rk) {
    auto c = rk.group(Layout::world);
    std::vector<float> f(8, 1.0f);
    std::vector<uint16_t> h(8, to16(DType::bf16, 1.0f));
    if (c->rank() == 0) {
      c->send(f.data(), 3, 1);
      c->send(f.data(), 5, 1);
      c->send(h.data(), 3, DType::bf16, 1);
      c->send(h.data(), 4, DType::bf16, 1);
    } else if (c->rank() == 1) {
      expect_error([&] { c->recv(f.data(), 5, 0); }, Status::comm_failure,
                   "recv of 5 elements from rank 0 got a message of 3");
      c->recv(f.data(), 5, 0);
      expect_error([&] { c->recv(h.data(), 4, DType::bf16, 0); }, Status::comm_failure,
                   "recv of 4 elements from rank 0 got a message of 3");
      c->recv(h.data(), 4, DType::bf16, 0);
      EXPECT_EQ(h[3], to16(DType::bf16, 1.0f));
    }
    c->barrier();
  });
}

// Argument errors are found before any communication, on the rank that made
// them: nothing is counted and the group still works.
TEST_P(CommConformance, InvalidArgumentsAreErrors) {
  run([](Rank &rk) {
    auto c = rk.group(Layout::world);
    float x[4] = {};
    uint16_t h[4] = {};
    const int P = c->size();
    for (int bad : {-1, P, 100}) {
      expect_error([&] { c->send(x, 4, bad); }, Status::invalid_argument,
                   "send peer " + std::to_string(bad) + " is outside");
      expect_error([&] { c->recv(x, 4, bad); }, Status::invalid_argument, "recv peer");
      expect_error([&] { c->broadcast(x, 4, bad); }, Status::invalid_argument, "broadcast root");
      expect_error([&] { c->send(h, 4, DType::bf16, bad); }, Status::invalid_argument, "send peer");
    }
    // a uint16_t buffer holds bf16 or f16, nothing else
    for (DType dt : {DType::f32, DType::f64}) {
      const std::string want = "of a uint16_t buffer needs dtype bf16 or f16, got " +
                               std::string(dtype_name(dt));
      expect_error([&] { c->all_reduce(h, 4, dt); }, Status::invalid_argument, "all_reduce " + want);
      expect_error([&] { c->all_gather(h, h, 1, dt); }, Status::invalid_argument, want);
      expect_error([&] { c->reduce_scatter(h, h, 1, dt); }, Status::invalid_argument, want);
      expect_error([&] { c->broadcast(h, 4, dt, 0); }, Status::invalid_argument, want);
      expect_error([&] { c->send(h, 4, dt, 0); }, Status::invalid_argument, want);
      expect_error([&] { c->recv(h, 4, dt, 0); }, Status::invalid_argument, want);
    }
    // a value that is no DType
    const DType junk = static_cast<DType>(9);
    expect_error([&] { c->all_reduce(x, 4, junk); }, Status::invalid_argument,
                 "all_reduce with dtype 9");
    expect_error([&] { c->all_gather(x, x, 1, junk); }, Status::invalid_argument, "dtype 9");
    expect_error([&] { c->reduce_scatter(x, x, 1, junk); }, Status::invalid_argument, "dtype 9");
    expect_error([&] { c->broadcast(x, 4, junk, 0); }, Status::invalid_argument, "dtype 9");
    expect_error([&] { c->send(x, 4, junk, 0); }, Status::invalid_argument, "dtype 9");
    expect_error([&] { c->recv(x, 4, junk, 0); }, Status::invalid_argument, "dtype 9");
    c->barrier();  // the group still works
    EXPECT_EQ(c->stats().total_calls(), 1);
    EXPECT_EQ(c->stats().total_bytes(), 0);
  });
}

// ---------------------------------------------------------------------------
// Several groups

// Concurrent groups from the rank grid: t = 2, d = world / 2. Even tensor
// ranks start with the tp group and odd ones with dp, so a dp group runs while
// the tp groups wait on their other member.
TEST_P(CommConformance, TensorAndDataGroupsConcurrently) {
  if (world() % 2) GTEST_SKIP() << "needs an even world";
  const RankGrid grid(ParallelDims{2, 1, world() / 2});
  const size_t n = 1001;
  run([&](Rank &rk) {
    const int r = rk.me;
    auto tp = rk.world.group("tp", grid.tp_group(r), r);
    auto dp = rk.world.group("dp", grid.dp_group(r), r);
    const RankCoord me = grid.coord_of(r);
    ASSERT_EQ(tp->size(), 2);
    ASSERT_EQ(dp->size(), world() / 2);
    ASSERT_EQ(tp->rank(), me.tp);
    ASSERT_EQ(dp->rank(), me.dp);
    for (int iter = 0; iter < 20; iter++) {
      auto do_tp = [&] {
        Buf<float> buf(rk.backend, n);
        for (size_t k = 0; k < n; k++) buf[k] = val(r + iter, k);
        tp->all_reduce(buf.data(), n);
        size_t bad = 0;
        for (size_t k = 0; k < n; k++) {
          float want = 0;
          for (const int q : grid.tp_group(r)) want += val(q + iter, k);
          bad += buf[k] != want;
        }
        EXPECT_EQ(bad, 0u) << "tp all_reduce, rank " << r << " iter " << iter;
        Buf<float> b(rk.backend, 4);
        b[0] = (float)r, b[1] = (float)iter;
        tp->broadcast(b.data(), 4, iter % 2);
        EXPECT_EQ(b[0], (float)grid.tp_group(r)[iter % 2]);
      };
      auto do_dp = [&] {
        Buf<double> g(rk.backend, n);
        for (size_t k = 0; k < n; k++) g[k] = val<double>(r * 3 + iter, k);
        dp->all_reduce(g.data(), n, ReduceOp::max);
        size_t bad = 0;
        for (size_t k = 0; k < n; k++) {
          double want = -1e300;
          for (const int q : grid.dp_group(r)) want = std::max(want, val<double>(q * 3 + iter, k));
          bad += g[k] != want;
        }
        EXPECT_EQ(bad, 0u) << "dp all_reduce, rank " << r << " iter " << iter;
        Buf<float> mine(rk.backend, 2), all(rk.backend, 2 * (size_t)dp->size());
        mine[0] = (float)r, mine[1] = (float)iter;
        dp->all_gather(mine.data(), all.data(), 2);
        for (int i = 0; i < dp->size(); i++) EXPECT_EQ(all[2 * i], (float)grid.dp_group(r)[i]);
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

// Operations of four groups interleaved on every rank.
TEST_P(CommConformance, InterleavedOperations) {
  run([](Rank &rk) {
    auto all = rk.group(Layout::world), half = rk.group(Layout::halves);
    auto strided = rk.group(Layout::strided), reversed = rk.group(Layout::reversed);
    const int R = rk.me, N = rk.size;
    for (int it = 0; it < 5; it++) {
      Buf<float> h(rk.backend, 1001), w(rk.backend, 7), s(rk.backend, 3 * (size_t)strided->size());
      Buf<float> ws(rk.backend, 3), mine(rk.backend, 3);
      for (size_t k = 0; k < h.size(); k++) h[k] = val(R + it, k);
      half->all_reduce(h.data(), h.size());  // in flight on the half group...
      for (size_t k = 0; k < w.size(); k++) w[k] = val(R, k + it);
      all->all_reduce(w.data(), w.size());  // ...then the world
      mine[0] = (float)R, mine[1] = (float)it, mine[2] = (float)(R * it);
      strided->all_gather(mine.data(), s.data(), 3);
      reversed->broadcast(ws.data(), 3, 0);  // group rank 0 = world rank N-1: any values
      all->barrier();
      for (size_t k = 0; k < h.size(); k++) {
        float want = 0;
        for (int m : half->members()) want += val(m + it, k);
        ASSERT_EQ(h[k], want) << "half, iteration " << it << ", k=" << k;
      }
      for (size_t k = 0; k < w.size(); k++) {
        float want = 0;
        for (int m = 0; m < N; m++) want += val(m, k + it);
        ASSERT_EQ(w[k], want) << "world, iteration " << it;
      }
      for (int r = 0; r < strided->size(); r++) {
        int m = strided->members()[r];
        EXPECT_EQ(s[3 * r], m);
        EXPECT_EQ(s[3 * r + 1], it);
        EXPECT_EQ(s[3 * r + 2], m * it);
      }
    }
    // group ranks follow the member lists, not the world order
    Buf<float> me(rk.backend, 1, (float)R), order(rk.backend, (size_t)N);
    reversed->all_gather(me.data(), order.data(), 1);
    for (int r = 0; r < N; r++) EXPECT_EQ(order[r], N - 1 - r);
  });
}

// Two threads of every rank use two different groups at the same time.
TEST_P(CommConformance, ConcurrentThreadsOfARank) {
  if (!GetParam().backend->threads_per_rank()) GTEST_SKIP() << "not with this MPI's thread level";
  run([](Rank &rk) {
    auto half = rk.group(Layout::halves), all = rk.group(Layout::world);
    const int R = rk.me, N = rk.size;
    bool ok_half = true, ok_world = true;
    std::thread t([&] {
      for (int it = 0; it < 40; it++) {
        Buf<float> h(rk.backend, 1001);
        for (size_t k = 0; k < h.size(); k++) h[k] = val(R, k + it);
        half->all_reduce(h.data(), h.size());
        for (size_t k = 0; k < h.size(); k++) {
          float want = 0;
          for (int m : half->members()) want += val(m, k + it);
          ok_half &= h[k] == want;
        }
      }
    });
    for (int it = 0; it < 40; it++) {
      Buf<float> w(rk.backend, 100), got(rk.backend, 100);
      for (size_t k = 0; k < w.size(); k++) w[k] = val(R, k * 3 + it);
      all->all_reduce(w.data(), w.size(), ReduceOp::max);
      all->send(w.data(), w.size(), (R + 1) % N);
      all->recv(got.data(), got.size(), (R + N - 1) % N);
      for (size_t k = 0; k < w.size(); k++) {
        float want = val(0, k * 3 + it);
        for (int m = 1; m < N; m++) want = std::max(want, val(m, k * 3 + it));
        ok_world &= w[k] == want && got[k] == want;
      }
    }
    t.join();
    EXPECT_TRUE(ok_half);
    EXPECT_TRUE(ok_world);
  });
}

// ---------------------------------------------------------------------------
// Counters: calls, and payload bytes of the dtype (n * dtype_size) that this
// rank contributed; groups count separately; time includes waiting.

TEST_P(CommConformance, StatsCountCallsAndBytesPerDtype) {
  run([](Rank &rk) {
    auto c = rk.all("world");
    auto other = rk.all("embedding");
    const int64_t P = c->size();
    Buf<float> f(rk.backend, 64 * (size_t)P, 1.0f);
    Buf<double> d(rk.backend, 16, 1.0);
    Buf<uint16_t> h(rk.backend, 64 * (size_t)P, to16(DType::bf16, 1.0f));
    const int next = (c->rank() + 1) % (int)P, prev = (c->rank() + (int)P - 1) % (int)P;
    EXPECT_EQ(other->stats().seconds, 0.0);
    c->all_reduce(f.data(), 10);                                   // 40 bytes
    c->all_reduce(f.data(), 0, ReduceOp::max);                     // 0
    c->all_reduce(d.data(), 3, ReduceOp::max);                     // 24
    c->all_reduce(h.data(), 10, DType::bf16);                      // 20
    c->all_reduce(h.data(), 7, DType::f16, ReduceOp::max);         // 14
    c->all_gather(f.data(), f.data() + 32 * P, 5);                 // 20
    c->all_gather(h.data(), h.data() + 32 * P, 5, DType::f16);     // 10
    c->reduce_scatter(f.data(), f.data() + 32 * P, 4);             // 4 * P * 4
    c->reduce_scatter(h.data(), h.data() + 32 * P, 4, DType::bf16);  // 4 * P * 2
    c->reduce_scatter(d.data(), d.data() + 8, 8 / P, DType::f64);  // (8 / P) * P * 8
    c->broadcast(f.data(), 6, (int)P - 1);                         // 24
    c->broadcast(h.data(), 6, DType::bf16, 0);                     // 12
    c->broadcast(d.data(), 0, 0);                                  // 0
    c->send(f.data(), 2, next);                                    // 8
    c->send(h.data(), 9, DType::f16, next);                        // 18
    c->send(d.data(), 1, next);                                    // 8
    c->recv(f.data(), 2, prev);
    c->recv(h.data(), 9, DType::f16, prev);
    c->recv(d.data(), 1, prev);
    c->barrier();
    c->barrier();
    if (rk.me == 0) std::this_thread::sleep_for(std::chrono::milliseconds(150));
    other->barrier();  // the others wait here for rank 0's nap
    const CommStats &s = c->stats();
    auto calls = [&](CommOp op) { return s.calls[(int)op]; };
    auto bytes = [&](CommOp op) { return s.bytes[(int)op]; };
    EXPECT_EQ(calls(CommOp::all_reduce), 5);
    EXPECT_EQ(bytes(CommOp::all_reduce), 40 + 0 + 24 + 20 + 14);
    EXPECT_EQ(calls(CommOp::all_gather), 2);
    EXPECT_EQ(bytes(CommOp::all_gather), 20 + 10);
    EXPECT_EQ(calls(CommOp::reduce_scatter), 3);
    EXPECT_EQ(bytes(CommOp::reduce_scatter), 4 * P * 4 + 4 * P * 2 + (8 / P) * P * 8);
    EXPECT_EQ(calls(CommOp::broadcast), 3);
    EXPECT_EQ(bytes(CommOp::broadcast), 24 + 12);
    EXPECT_EQ(calls(CommOp::send), 3);
    EXPECT_EQ(bytes(CommOp::send), 8 + 18 + 8);
    EXPECT_EQ(calls(CommOp::recv), 3);
    EXPECT_EQ(bytes(CommOp::recv), 8 + 18 + 8);
    EXPECT_EQ(calls(CommOp::barrier), 2);
    EXPECT_EQ(bytes(CommOp::barrier), 0);
    EXPECT_EQ(s.total_calls(), 5 + 2 + 3 + 3 + 3 + 3 + 2);
    EXPECT_GT(s.seconds, 0.0);
    const CommStats &o = other->stats();
    if (rk.me != 0 && P > 1) {
      EXPECT_GE(o.seconds, 0.05) << "rank " << rk.me;
    }
    for (int op = 0; op < (int)CommOp::count; op++) {
      EXPECT_EQ(o.calls[op], op == (int)CommOp::barrier ? 1 : 0) << comm_op_name((CommOp)op);
      EXPECT_EQ(o.bytes[op], 0) << comm_op_name((CommOp)op);
    }
  });
}

}  // namespace comm_conformance
