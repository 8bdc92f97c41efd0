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
#include "engine/device/device.h"
#include "engine/device/act_array.h"
#include "engine/device/ops.h"

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

// n floats on the device, all `value`.
DeviceArray<float> filled(Device &dev, size_t n, float value) {
  DeviceArray<float> a(dev, n);
  a.copy_from_host(std::vector<float>(n, value));
  return a;
}

// The fastest of `reps` runs of f timed on the device's stream, after one
// untimed run.
template <class F>
double device_best_of(Device &dev, int reps, F f) {
  f();
  dev.synchronize();
  double best = 1e30;
  for (int r = 0; r < reps; r++) {
    auto timer = dev.make_timer();
    timer->start();
    f();
    timer->stop();
    best = std::min(best, timer->elapsed_ms() * 1e-3);
  }
  return best;
}

// n activations of the op table's type, all `value`.
ActArray filled_act(Ops<float> &ops, size_t n, float value) {
  ActArray a;
  a.resize(ops.device(), n, ops.act_type());
  ops.convert(a.data(), filled(ops.device(), n, value).data(), n);
  return a;
}

// Seconds of one m x n x k GEMM as ptdp's forward runs it (B transposed), in
// the op table's storage type: activations times a weight (whose 16-bit copy
// is made once, in the untimed run), an activation out.
double time_gemm(Ops<float> &ops, int m, int n, int k, int reps) {
  Device &dev = ops.device();
  ActArray a = filled_act(ops, (size_t)m * k, 0.01f), c = filled_act(ops, (size_t)m * n, 0.f);
  auto b = filled(dev, (size_t)n * k, 0.02f);
  ops.set_weights(b.data(), b.size());
  const double s = device_best_of(dev, reps, [&] {
    ops.gemm(false, true, m, n, k, 1.f, a.data(), k, b.data(), k, 0.f, c.data(), n);
  });
  ops.set_weights(nullptr, 0);
  return s;
}

// ptdp's GEMM (M x M x K) at two K: its time is linear in K, t = 2 M M (K +
// k_half) / peak, so the two fit both.
struct GemmFit {
  double peak, k_half;
};
GemmFit fit_gemm(Ops<float> &ops, int M, int K1, int K2, int reps1, int reps2) {
  const double t1 = time_gemm(ops, M, M, K1, reps1), t2 = time_gemm(ops, M, M, K2, reps2);
  const double slope = (t2 - t1) / (K2 - K1);
  GemmFit f{2.0 * M * M * K2 / t2, 0};
  if (slope > 0) {
    f.peak = std::max(f.peak, 2.0 * M * M / slope);
    f.k_half = std::max(0.0, t1 / slope - K1);
  }
  return f;
}

// Streaming bandwidth: bytes read + written per second by a large copy.
double copy_bandwidth(Device &dev, size_t n) {
  auto a = filled(dev, n, 1.f), b = filled(dev, n, 0.f);
  const double t = device_best_of(dev, 2, [&] { dev.copy(b.data(), a.data(), n * sizeof(float)); });
  return 2.0 * n * sizeof(float) / t;
}

// Seconds of the element-wise kernels of one transformer layer, forward and
// backward, for one sequence (what transformer_layer.cpp and attention.cpp
// run besides GEMMs; dropout on as in training).
double time_layer_elementwise(Ops<float> &ops, const CalibrationShape &sh) {
  Device &dev = ops.device();
  const int s = sh.seq, h = sh.hidden, a = sh.heads, f = sh.ffn, N = s;
  const size_t E = (size_t)N * h, F = (size_t)N * f, A = (size_t)a * s * s, Q = 3 * E;
  auto x = filled(dev, E, 0.5f), y = filled(dev, E, 0.25f), z = filled(dev, E, 0.f),
       dz = filled(dev, E, 0.f), w = filled(dev, h, 1.f);
  auto bias = filled(dev, f, 0.1f), dw = filled(dev, h, 0.f), db = filled(dev, f, 0.f),
       mean = filled(dev, N, 0.f), rstd = filled(dev, N, 0.f);
  auto qkv = filled(dev, Q, 0.1f), fz = filled(dev, F, 0.3f), fg = filled(dev, F, 0.f),
       df = filled(dev, F, 0.01f);
  auto scores = filled(dev, A, 0.2f), probs = filled(dev, A, 0.f), pdrop = filled(dev, A, 0.f),
       dp = filled(dev, A, 0.01f);
  auto dqkv = filled(dev, Q, 0.01f);
  DropoutSpec drop{{1234, 7, 1}, 0.1f, 0};
  return device_best_of(dev, 4, [&] {
    // forward
    ops.layernorm_forward(z.data(), mean.data(), rstd.data(), x.data(), w.data(), bias.data(), N, h,
                          1e-5f);
    ops.bias_dropout_add_forward(qkv.data(), nullptr, qkv.data(), bias.data(), s, 1, 3 * h,
                                 DropoutSpec{});
    ops.scale_mask_softmax_forward(probs.data(), scores.data(), a, s, s, 0.125f, true, nullptr);
    ops.dropout_attention(pdrop.data(), probs.data(), 1, a, s, s, 0, drop);
    ops.bias_dropout_add_forward(y.data(), x.data(), z.data(), bias.data(), s, 1, h, drop);
    ops.layernorm_forward(z.data(), mean.data(), rstd.data(), y.data(), w.data(), bias.data(), N, h,
                          1e-5f);
    ops.bias_gelu_forward(fz.data(), fg.data(), fz.data(), bias.data(), N, f);
    ops.bias_dropout_add_forward(y.data(), x.data(), z.data(), bias.data(), s, 1, h, drop);
    // backward
    ops.bias_dropout_add_backward(dz.data(), db.data(), y.data(), s, 1, h, drop);
    ops.bias_gelu_backward(df.data(), db.data(), df.data(), fz.data(), N, f);
    ops.layernorm_backward(dz.data(), dw.data(), db.data(), y.data(), x.data(), w.data(),
                           mean.data(), rstd.data(), N, h);
    ops.bias_dropout_add_backward(dz.data(), db.data(), y.data(), s, 1, h, drop);
    ops.dropout_backward_from_output(dp.data(), dp.data(), pdrop.data(), A, 0.1f);
    ops.scale_mask_softmax_backward(dp.data(), probs.data(), dp.data(), a, s, s, 0.125f);
    ops.colsum_accumulate(db.data(), dqkv.data(), N, 3 * h);
    ops.layernorm_backward(dz.data(), dw.data(), db.data(), y.data(), x.data(), w.data(),
                           mean.data(), rstd.data(), N, h);
  });
}

// Parameters per second of ptdp's optimizer step: gradient norm, AdamW.
double optimizer_rate(Ops<float> &ops, size_t n) {
  Device &dev = ops.device();
  auto p = filled(dev, n, 0.1f), g = filled(dev, n, 0.01f), m1 = filled(dev, n, 0.f),
       m2 = filled(dev, n, 0.f);
  const AdamWStep step{1e-4, 0.9, 0.95, 1e-8, 0.01, 1};
  const double t = device_best_of(dev, 3, [&] {
    volatile double sq = ops.sum_squares(g.data(), n);
    (void)sq;
    ops.adamw_update(p.data(), g.data(), m1.data(), m2.data(), n, step);
  });
  return (double)n / t;
}

// The bytes of one layer's element-wise kernels as the model counts them.
double layer_elementwise_bytes(const CalibrationShape &shape, DType dt) {
  ModelSpec one_layer;
  one_layer.layers = 1, one_layer.hidden = shape.hidden, one_layer.heads = shape.heads;
  one_layer.seq = shape.seq, one_layer.ffn = shape.ffn;
  double bytes = 0;
  for (const StreamOp &op : layer_elementwise_ops(one_layer, 1, 1, dt)) bytes += op.bytes;
  return bytes;
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
  auto cpu = make_cpu_device();
  auto ops = make_ops<float>(*cpu);
  Machine m;
  m.name = "this-cpu";
  const int cores = (int)std::max(1u, std::thread::hardware_concurrency());
  double all_cores_rate;
  {
    Threads th(cores);
    const int N = 1024;
    all_cores_rate = 2.0 * N * N * N / time_gemm(*ops, N, N, N, 3);
  }
  Threads one(1);
  const int M = 256, K1 = 64, K2 = 512;
  const GemmFit fit = fit_gemm(*ops, M, K1, K2, 9, 5);
  const double peak_core = fit.peak, k_half = fit.k_half;
  m.peak_fp32 = m.peak_bf16 = m.peak_fp16 = peak_core * cores;  // 16-bit types compute in fp32
  m.gemm_units = cores;
  m.gemm_tile_m = m.gemm_tile_n = 64;
  m.gemm_k_half = k_half;
  m.gemm_max_efficiency = 1.0;
  m.memory_bandwidth = copy_bandwidth(*cpu, (size_t)16 << 20);  // 64 MiB each way
  m.memory_efficiency = 1.0;
  // Element-wise kernels: the bytes the model counts for them per second.
  const double ew_core =
      layer_elementwise_bytes(shape, DType::fp32) / time_layer_elementwise(*ops, shape);
  m.elementwise_bandwidth = ew_core * cores;
  m.optimizer_params_per_s = optimizer_rate(*ops, (size_t)1 << 20) * cores;
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

Machine calibrate_gpu(Device &dev, DType dt, const Machine &base, std::string *log,
                      const CalibrationShape &shape, int gemm_size) {
  auto ops = make_ops<float>(dev);
  Machine m = base;
  m.name = "this-gpu";
  // In the run's type: 16-bit GEMMs read 16-bit copies, as a run's do.
  ops->set_storage_type(dt == DType::bf16   ? ptdp::DType::bf16
                        : dt == DType::fp16 ? ptdp::DType::f16
                                            : ptdp::DType::f32);
  const int M = gemm_size, K1 = gemm_size / 8, K2 = gemm_size;
  const GemmFit fit = fit_gemm(*ops, M, K1, K2, 5, 5);
  const double peak = fit.peak, k_half = fit.k_half;
  (dt == DType::bf16 ? m.peak_bf16 : dt == DType::fp16 ? m.peak_fp16 : m.peak_fp32) = peak;
  m.gemm_k_half = k_half;
  m.gemm_max_efficiency = 1.0;  // the measured peak is ptdp's own
  ops->set_storage_type(ptdp::DType::f32);
  // Streams of 4 M^2 floats: 256 MiB each way at M = 4096, far over any cache.
  const size_t stream = (size_t)4 * M * M;
  m.memory_bandwidth = copy_bandwidth(dev, stream);
  // Element-wise kernels are memory-bound here: their rate against the copy's.
  const double ew = layer_elementwise_bytes(shape, dt) / time_layer_elementwise(*ops, shape);
  m.elementwise_bandwidth = 0;
  m.memory_efficiency = ew / m.memory_bandwidth;
  m.optimizer_params_per_s = optimizer_rate(*ops, stream);
  auto one = filled(dev, 1, 1.f);
  m.op_overhead_s = device_best_of(dev, 20, [&] { ops->scale_inplace(one.data(), 1, 1.f); });
  m.description = dev.name() + ", measured with ptdp's ops (" + dtype_name(dt) +
                  " GEMM, copy, a layer's element-wise ops, AdamW, kernel cost); links, node, "
                  "memory and tiling from " +
                  base.name;
  if (log) {
    char buf[800];
    std::snprintf(buf, sizeof buf,
                  "  calibrated %s: %s GEMM %.1f TFLOP/s (%dx%d, K %d..%d: k_half %.0f); copy "
                  "bandwidth %.0f GB/s; element-wise kernels %.0f GB/s as counted = %.2f of it "
                  "(a layer at s=%d h=%d a=%d); optimizer %.2f G params/s; kernel %.1f us\n",
                  dev.name().c_str(), dtype_name(dt), peak / 1e12, M, M, K1, K2, k_half,
                  m.memory_bandwidth / 1e9, ew / 1e9, m.memory_efficiency, shape.seq, shape.hidden,
                  shape.heads, m.optimizer_params_per_s / 1e9, m.op_overhead_s * 1e6);
    *log = buf;
  }
  return m;
}

}  // namespace ptdp::plan
