// --calibrate: measure this machine's CPU so that the model predicts ptdp's own
// thread-rank runs. Everything that sets a rate runs ptdp's own CPU kernels on
// one core (best of a few repetitions: a core is what a rank gets on a quiet
// machine, and one thread is little disturbed by other processes); the rates
// are then scaled by the cores, which the model shares out among the ranks.
#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

#include "engine/plan/machine.h"
#include "engine/plan/model.h"
#include "kernels/cpu/ops.h"

extern "C" void openblas_set_num_threads(int);
extern "C" int openblas_get_num_threads(void);

namespace ptdp::plan {

namespace {

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// The fastest of `reps` runs of f, after one untimed run.
template <class F>
double best_of(int reps, F f) {
  f();
  double best = 1e30;
  for (int r = 0; r < reps; r++) {
    double t0 = now();
    f();
    best = std::min(best, now() - t0);
  }
  return best;
}

// OpenMP and OpenBLAS threads set to n for its lifetime, as a rank's are.
struct Threads {
  int omp = omp_get_max_threads(), blas = openblas_get_num_threads();
  explicit Threads(int n) {
    omp_set_num_threads(n);
    openblas_set_num_threads(n);
  }
  ~Threads() {
    omp_set_num_threads(omp);
    openblas_set_num_threads(blas);
  }
};

// Seconds of one m x n x k fp32 GEMM as ptdp's forward runs it (B transposed).
double time_gemm(int m, int n, int k, int reps) {
  std::vector<float> a((size_t)m * k, 0.01f), b((size_t)n * k, 0.02f), c((size_t)m * n);
  return best_of(reps, [&] {
    cpu::gemm<float>(false, true, m, n, k, 1.f, a.data(), k, b.data(), k, 0.f, c.data(), n);
  });
}

// Streaming bandwidth: bytes read + written per second by a large copy.
double copy_bandwidth() {
  const size_t n = (size_t)16 << 20;  // 64 MiB each way
  std::vector<float> a(n, 1.f), b(n, 0.f);
  double t = best_of(2, [&] { std::memcpy(b.data(), a.data(), n * sizeof(float)); });
  return 2.0 * n * sizeof(float) / t;
}

// Seconds of the element-wise kernels of one transformer layer, forward and
// backward, for one sequence (what transformer_layer.cpp and attention.cpp
// run besides GEMMs; dropout on as in training).
double time_layer_elementwise(const CalibrationShape &sh) {
  const int s = sh.seq, h = sh.hidden, a = sh.heads, f = sh.ffn, N = s;
  const size_t E = (size_t)N * h, F = (size_t)N * f, A = (size_t)a * s * s, Q = 3 * E;
  std::vector<float> x(E, 0.5f), y(E, 0.25f), z(E), dz(E), w(h, 1.f), bias(f, 0.1f), dw(h), db(f);
  std::vector<float> mean(N), rstd(N), qkv(Q, 0.1f), fz(F, 0.3f), fg(F), df(F, 0.01f);
  std::vector<float> scores(A, 0.2f), probs(A), pdrop(A), dp(A, 0.01f), dqkv(Q, 0.01f);
  DropoutSpec drop{{1234, 7, 1}, 0.1f, 0};
  return best_of(4, [&] {
    // forward
    cpu::layernorm_forward<float>(z.data(), mean.data(), rstd.data(), x.data(), w.data(),
                                  bias.data(), N, h, 1e-5f);
    cpu::bias_dropout_add_forward<float>(qkv.data(), nullptr, qkv.data(), bias.data(), s, 1, 3 * h,
                                         DropoutSpec{});
    cpu::scale_mask_softmax_forward<float>(probs.data(), scores.data(), a, s, s, 0.125f, true,
                                           nullptr);
    cpu::dropout_attention<float>(pdrop.data(), probs.data(), 1, a, s, s, 0, drop);
    cpu::bias_dropout_add_forward<float>(y.data(), x.data(), z.data(), bias.data(), s, 1, h, drop);
    cpu::layernorm_forward<float>(z.data(), mean.data(), rstd.data(), y.data(), w.data(),
                                  bias.data(), N, h, 1e-5f);
    cpu::bias_gelu_forward<float>(fz.data(), fg.data(), fz.data(), bias.data(), N, f);
    cpu::bias_dropout_add_forward<float>(y.data(), x.data(), z.data(), bias.data(), s, 1, h, drop);
    // backward
    cpu::bias_dropout_add_backward<float>(dz.data(), db.data(), y.data(), s, 1, h, drop);
    cpu::bias_gelu_backward<float>(df.data(), db.data(), df.data(), fz.data(), N, f);
    cpu::layernorm_backward<float>(dz.data(), dw.data(), db.data(), y.data(), x.data(), w.data(),
                                   mean.data(), rstd.data(), N, h);
    cpu::bias_dropout_add_backward<float>(dz.data(), db.data(), y.data(), s, 1, h, drop);
    cpu::dropout_backward_from_output<float>(dp.data(), dp.data(), pdrop.data(), A, 0.1f);
    cpu::scale_mask_softmax_backward<float>(dp.data(), probs.data(), dp.data(), a, s, s, 0.125f);
    cpu::colsum_accumulate<float>(db.data(), dqkv.data(), N, 3 * h);
    cpu::layernorm_backward<float>(dz.data(), dw.data(), db.data(), y.data(), x.data(), w.data(),
                                   mean.data(), rstd.data(), N, h);
  });
}

// Parameters per second of ptdp's optimizer step: gradient norm, AdamW.
double optimizer_rate() {
  const size_t n = (size_t)1 << 20;
  std::vector<float> p(n, 0.1f), g(n, 0.01f), m1(n), m2(n);
  cpu::AdamWParams ap{1e-4, 0.9, 0.95, 1e-8, 0.01, 1};
  double t = best_of(3, [&] {
    volatile double sq = cpu::sum_squares<float>(g.data(), n);
    (void)sq;
    cpu::adamw_update<float>(p.data(), g.data(), m1.data(), m2.data(), n, ap);
  });
  return (double)n / t;
}

// Two threads handing a buffer back and forth as ThreadComm's send/recv do
// (copy into a message, queue under a mutex, wake the peer, copy out).
// Returns seconds per one-way hand-over of `bytes`.
double thread_handover_seconds(size_t bytes, int round_trips) {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::vector<char>> box[2];  // box[i]: messages to thread i
  std::vector<char> buf0(bytes, 1), buf1(bytes, 2);
  auto send = [&](int to, const std::vector<char> &src) {
    std::vector<char> msg(src);
    std::lock_guard<std::mutex> lk(mu);
    box[to].push_back(std::move(msg));
    cv.notify_all();
  };
  auto recv = [&](int me, std::vector<char> &dst) {
    std::unique_lock<std::mutex> lk(mu);
    cv.wait(lk, [&] { return !box[me].empty(); });
    std::vector<char> msg = std::move(box[me].front());
    box[me].pop_front();
    lk.unlock();
    std::memcpy(dst.data(), msg.data(), bytes);
  };
  double best = 1e30;
  for (int rep = 0; rep < 3; rep++) {
    std::thread peer([&] {
      for (int i = 0; i < round_trips; i++) {
        recv(1, buf1);
        send(0, buf1);
      }
    });
    double t0 = now();
    for (int i = 0; i < round_trips; i++) {
      send(1, buf0);
      recv(0, buf0);
    }
    best = std::min(best, (now() - t0) / (2.0 * round_trips));
    peer.join();
  }
  return best;
}

// Seconds of an empty OpenMP region on n threads: the fixed cost of a kernel.
double omp_region_seconds(int n) {
  Threads th(n);
  const int reps = 200;
  return best_of(3,
                 [&] {
                   for (int i = 0; i < reps; i++) {
#pragma omp parallel
                     {
                       volatile int z = 0;
                       (void)z;
                     }
                   }
                 }) /
         reps;
}

}  // namespace

Machine calibrate_this_machine(std::string *log, const CalibrationShape &shape) {
  Machine m;
  m.name = "this-cpu";
  const int cores = (int)std::max(1u, std::thread::hardware_concurrency());
  double all_cores_rate;
  {
    Threads th(cores);
    const int N = 1024;
    all_cores_rate = 2.0 * N * N * N / time_gemm(N, N, N, 3);
  }
  Threads one(1);
  // GEMM time is linear in K: t = 2 M N (K + k_half) / peak. Two K fit both.
  const int M = 256, K1 = 64, K2 = 512;
  const double t1 = time_gemm(M, M, K1, 9), t2 = time_gemm(M, M, K2, 5);
  const double slope = (t2 - t1) / (K2 - K1);
  double peak_core = 2.0 * M * M * K2 / t2, k_half = 0;
  if (slope > 0) {
    peak_core = std::max(peak_core, 2.0 * M * M / slope);
    k_half = std::max(0.0, t1 / slope - K1);
  }
  m.peak_fp32 = m.peak_bf16 = m.peak_fp16 = peak_core * cores;  // 16-bit types compute in fp32
  m.gemm_units = cores;
  m.gemm_tile_m = m.gemm_tile_n = 64;
  m.gemm_k_half = k_half;
  m.gemm_max_efficiency = 1.0;
  m.memory_bandwidth = copy_bandwidth();
  m.memory_efficiency = 1.0;
  // Element-wise kernels: the bytes the model counts for them per second.
  ModelSpec one_layer;
  one_layer.layers = 1, one_layer.hidden = shape.hidden, one_layer.heads = shape.heads;
  one_layer.seq = shape.seq, one_layer.ffn = shape.ffn;
  double ew_bytes = 0;
  for (const StreamOp &op : layer_elementwise_ops(one_layer, 1, 1, DType::fp32))
    ew_bytes += op.bytes;
  const double ew_core = ew_bytes / time_layer_elementwise(shape);
  m.elementwise_bandwidth = ew_core * cores;
  m.optimizer_params_per_s = optimizer_rate() * cores;
  // A kernel's fixed cost: the OpenMP region a rank of all the cores forks.
  m.op_overhead_s = omp_region_seconds(cores);
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  m.memory_bytes = pages > 0 && page > 0 ? (double)pages * page : 8e9;
  m.memory_reserved_bytes = 0.5e9;
  // Thread ranks exchange data through shared memory: the thread
  // communicator's hand-over, latency from a tiny message and bandwidth from
  // a large one (both copies included).
  const size_t big = (size_t)1 << 20;
  const double lat = thread_handover_seconds(64, 200), t_big = thread_handover_seconds(big, 20);
  const double link_bw = t_big > lat ? big / (t_big - lat) : m.memory_bandwidth / 2;
  m.intra = {link_bw, 1.0, lat};
  m.inter = m.intra;
  m.devices_per_node = 1 << 16;
  m.shared_node = true;
  m.description = "this machine's CPU, measured: " + std::to_string(cores) +
                  " cores shared by the thread ranks (ptdp's kernels, per core x cores)";
  if (log) {
    char buf[800];
    std::snprintf(
        buf, sizeof buf,
        "  calibrated this CPU (%d cores): sgemm %.1f GFLOP/s per core (%dx%d, K %d..%d: "
        "k_half %.0f), %.1f GFLOP/s on all cores (1024^3); element-wise kernels %.2f GB/s "
        "per core (a layer at s=%d h=%d a=%d); optimizer %.0f M params/s per core; copy "
        "bandwidth %.1f GB/s; kernel overhead %.1f us; thread hand-over %.1f us + %.1f GB/s; "
        "memory %.1f GB\n",
        cores, peak_core / 1e9, M, M, K1, K2, k_half, all_cores_rate / 1e9, ew_core / 1e9,
        shape.seq, shape.hidden, shape.heads, m.optimizer_params_per_s / cores / 1e6,
        m.memory_bandwidth / 1e9, m.op_overhead_s * 1e6, lat * 1e6, link_bw / 1e9,
        m.memory_bytes / 1e9);
    *log = buf;
  }
  return m;
}

}  // namespace ptdp::plan
