// The whole trainer on the GPU (--device cuda) against the CPU's serial run:
// the pipeline schedules, the threads communicators staged through the host
// (StagedComm), the gradient reductions, clipping, AdamW and the loss scaler,
// with every rank of a layout on the one GPU (each its own stream). Needs the
// full build (HDF5, the data path); scripts/pack_gpu_bundle.sh carries it to a
// GPU machine. Exits 77 (skipped) without a GPU.
//   PTDP_TEST_DATA_DIR overrides the compiled-in tests/fixtures (the GPU machine
//   runs the binary from another checkout); PTDP_TEST_GPU_DEVICE=cpu runs the
//   "GPU" side on the CPU, to check the test itself where there is no GPU.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "engine/data/corpus.h"
#include "engine/device/device.h"
#include "engine/train/trainer.h"
#include "tests/support/trained_run.h"

using namespace ptdp;

namespace {

std::string data_dir() {
  const char *env = std::getenv("PTDP_TEST_DATA_DIR");
  return env && *env ? env : PTDP_TEST_DATA_DIR;
}

// tests/fixtures/tiny_corpus.txt tokenized once per process.
const std::string &dataset() {
  static const std::string path = [] {
    namespace fs = std::filesystem;
    const fs::path dir = fs::temp_directory_path() / ("ptdp_gpu_test_" + std::to_string(getpid()));
    fs::create_directories(dir);
    const std::string out = (dir / "tiny.ptdp").string();
    ByteTokenizer tok;
    build_token_dataset({data_dir() + "/tiny_corpus.txt"}, "fortune", tok, out);
    return out;
  }();
  return path;
}

using Settings = std::initializer_list<std::pair<const char *, std::string>>;

// tests/parallel/test_parallel.cpp's run with 4 layers: dropout on, several buckets.
TrainerOptions options(const std::string &device, int t, int d, int p, int v = 1,
                       Settings extra = {}) {
  Config c;
  for (auto [k, val] : Settings{{"num_layers", "4"},
                                {"hidden_size", "48"},
                                {"num_attention_heads", "12"},
                                {"seq_length", "16"},
                                {"micro_batch_size", "2"},
                                {"global_batch_size", "8"},
                                {"train_iters", "10"},
                                {"lr", "3e-3"},
                                {"min_lr", "3e-4"},
                                {"lr_warmup_iters", "2"},
                                {"hidden_dropout", "0.1"},
                                {"attention_dropout", "0.1"},
                                {"split", "80,20"},
                                {"ddp_bucket_size", "5000"},
                                {"device", device},
                                {"tensor_model_parallel_size", std::to_string(t)},
                                {"data_parallel_size", std::to_string(d)},
                                {"pipeline_model_parallel_size", std::to_string(p)}})
    c.set(k, val);
  if (v > 1) c.set("num_layers_per_virtual_pipeline_stage", std::to_string(4 / (p * v)));
  // A deadlock on the GPU is an error naming the rank and op within
  // PTDP_TEST_COMM_TIMEOUT_S (scripts/gpu_check.sh: 20 s), not a killed test.
  if (const char *timeout = std::getenv("PTDP_TEST_COMM_TIMEOUT_S"); timeout && *timeout)
    c.set("comm_timeout", timeout);
  for (auto [k, val] : extra) c.set(k, val);
  c.set("data_path", dataset());
  return TrainerOptions::from_config(c);
}

// The device under test: cuda, or what PTDP_TEST_GPU_DEVICE says.
std::string device_under_test() {
  const char *env = std::getenv("PTDP_TEST_GPU_DEVICE");
  return env && *env ? env : "cuda";
}

const TrainedRun &cpu_serial() {
  static const TrainedRun r = train_run(options("cpu", 1, 1, 1), 10);
  return r;
}

// bf16 on the GPU (bf16 GEMMs on tensor cores) against the CPU's emulated bf16.
// A value summed in another order can round to the neighbouring bf16 number
// (2^-8 relative), so the runs part by rounding noise, not by a bug's O(1):
// the losses stay within 1% (a skipped or mis-scaled update moves the loss by
// more within ten steps at lr 3e-3), and all parameters together within 1%
// relative L2 (a few flipped bf16 roundings; the zero-gradient K bias, see
// kParamTol, weighs nothing there; a missed update is O(1)).
void expect_bf16_tracks(const TrainedRun &a, const TrainedRun &b) {
  for (size_t i = 0; i < a.losses.size(); i++)
    EXPECT_NEAR(a.losses[i], b.losses[i], 1e-2 * b.losses[i]) << "step " << i;
  double diff2 = 0, norm2 = 0;
  for (size_t k = 0; k < a.params.size(); k++)
    for (size_t i = 0; i < a.params[k].size(); i++) {
      diff2 += std::pow((double)a.params[k][i] - b.params[k][i], 2);
      norm2 += std::pow((double)b.params[k][i], 2);
    }
  EXPECT_LT(std::sqrt(diff2 / norm2), 1e-2);
}

}  // namespace

// cuBLASLt and the CUDA kernels sum in other orders than OpenBLAS and the CPU
// kernels, everywhere at once: losses are held to expect_matches_serial's
// 1e-5, parameters to a third of one lr step (3e-3) instead of its 3e-5. The
// K part of the QKV bias has an exactly zero true gradient (softmax ignores a
// shift), so its updates are Adam on rounding noise, which two backends draw
// differently: up to lr * noise / eps per step. A wrong gradient moves the
// parameters by lr-sized steps, and the losses at once.
constexpr double kParamTol = 1e-3;

// One rank on the GPU.
TEST(CudaTrainer, SerialMatchesCpu) {
  expect_matches_serial(train_run(options(device_under_test(), 1, 1, 1), 10), cpu_serial(),
                        kParamTol);
}

// The same run twice on the GPU gives the same bits: no kernel sums in an
// order that varies (the embedding backward sorts instead of using atomics),
// so runs are reproducible and resume bit-exactly.
TEST(CudaTrainer, RunsAreReproducible) {
  const TrainedRun a = train_run(options(device_under_test(), 1, 2, 1), 4),
                   b = train_run(options(device_under_test(), 1, 2, 1), 4);
  EXPECT_EQ(a.losses, b.losses);
  EXPECT_EQ(a.params, b.params);
}

struct Layout {
  int t, d, p, v;
};
class CudaLayouts : public ::testing::TestWithParam<Layout> {};

// Several ranks on the one GPU, each its own stream; the threads communicators
// stage device buffers through the host.
TEST_P(CudaLayouts, MatchCpuSerial) {
  const Layout l = GetParam();
  expect_matches_serial(train_run(options(device_under_test(), l.t, l.d, l.p, l.v), 10),
                        cpu_serial(), kParamTol);
}

INSTANTIATE_TEST_SUITE_P(Layouts, CudaLayouts,
                         ::testing::Values(Layout{2, 1, 1, 1}, Layout{1, 2, 1, 1},
                                           Layout{1, 1, 2, 1}, Layout{1, 1, 2, 2},
                                           Layout{2, 2, 2, 1}),
                         [](const auto &info) {
                           const Layout &l = info.param;
                           return "t" + std::to_string(l.t) + "d" + std::to_string(l.d) + "p" +
                                  std::to_string(l.p) + "v" + std::to_string(l.v);
                         });

// The zero-bubble schedules on GPU ranks: the split backward queues B and W
// (and their stash trimming) on each rank's stream. zbh1 equals 1f1b of the
// same layout bit for bit on the same device (as on the CPU: the same GEMMs on
// the same inputs, W's in micro-batch order); zbv (the V, a local turn on the
// last rank) matches the CPU serial run.
TEST(CudaTrainer, ZeroBubbleSchedules) {
  const std::string dev = device_under_test();
  const TrainedRun a = train_run(options(dev, 1, 1, 2, 1, {{"pipeline_schedule", "1f1b"}}), 4),
                   b = train_run(options(dev, 1, 1, 2, 1, {{"pipeline_schedule", "zbh1"}}), 4);
  EXPECT_EQ(a.losses, b.losses);
  EXPECT_EQ(a.params, b.params);
  expect_matches_serial(train_run(options(dev, 1, 1, 2, 2, {{"pipeline_schedule", "zbv"}}), 10),
                        cpu_serial(), kParamTol);
}

// --overlap-grad-reduce on GPU ranks: each rank's reduction thread stages its
// buckets through the host while the rank's thread queues the rest of the
// backward on the same stream. Held to the other GPU tests' tolerance: a bucket
// taken before its gradients were final would be off by whole gradients.
TEST(CudaTrainer, OverlappedGradReduceMatchesPlain) {
  TrainerOptions plain = options(device_under_test(), 1, 2, 2), overlapped = plain;
  overlapped.overlap_grad_reduce = true;
  expect_matches_serial(train_run(overlapped, 10), train_run(plain, 10), kParamTol);
}

// Sequence parallelism (t = 2: all-gathers and reduce-scatters of device
// buffers staged through the host, dropout keyed by global position),
// selective recomputation and the distributed optimizer (d = 2: each rank's
// AdamW over its range, the parameters all-gathered) on GPU ranks, against the
// CPU serial run; in bf16 (the sharded fp32 master weights) against the CPU's
// bf16 serial run, held as Bf16TracksCpuBf16.
TEST(CudaTrainer, MemoryOptionsMatchCpu) {
  const Settings memory = {{"sequence_parallel", "1"},
                           {"recompute_granularity", "selective"},
                           {"use_distributed_optimizer", "1"}};
  TrainerOptions gpu = options(device_under_test(), 2, 2, 1, 1, memory);
  expect_matches_serial(train_run(gpu, 10), cpu_serial(), kParamTol);
  TrainerOptions cpu = options("cpu", 1, 1, 1);
  cpu.precision.dtype = gpu.precision.dtype = DType::bf16;
  expect_bf16_tracks(train_run(gpu, 6), train_run(cpu, 6));
}

// The CUDA flash-attention kernel in a parallel layout against the CPU's fused twin.
TEST(CudaTrainer, FlashAttentionMatchesCpu) {
  TrainerOptions cpu = options("cpu", 1, 1, 1), gpu = options(device_under_test(), 2, 1, 2);
  cpu.use_flash_attn = gpu.use_flash_attn = true;
  expect_matches_serial(train_run(gpu, 10), train_run(cpu, 10), kParamTol);
}

TEST(CudaTrainer, Bf16TracksCpuBf16) {
  TrainerOptions cpu = options("cpu", 1, 1, 1), gpu = options(device_under_test(), 2, 1, 1);
  cpu.precision.dtype = gpu.precision.dtype = DType::bf16;
  expect_bf16_tracks(train_run(gpu, 10), train_run(cpu, 10));
}

// Grouped-query attention in the fused kernels: the LLaMA block with 4
// key/value groups for 12 heads (3 heads a group; 2 groups a tensor rank at t =
// 2) on the GPU against the CPU's fused twin: fp32 (the CUDA-core kernels) to
// kParamTol, bf16 (the tensor-core kernels) as Bf16TracksCpuBf16.
TEST(CudaTrainer, GroupedFlashAttentionMatchesCpu) {
  const Settings llama = {{"normalization", "RMSNorm"},
                          {"position_embedding_type", "rope"},
                          {"num_query_groups", "4"},
                          {"swiglu", "1"},
                          {"disable_bias_linear", "1"},
                          {"untie_embeddings_and_output_weights", "1"},
                          {"use_flash_attn", "1"}};
  TrainerOptions cpu = options("cpu", 1, 1, 1, 1, llama),
                 gpu = options(device_under_test(), 2, 1, 1, 1, llama);
  expect_matches_serial(train_run(gpu, 6), train_run(cpu, 6), kParamTol);
  cpu.precision.dtype = gpu.precision.dtype = DType::bf16;
  expect_bf16_tracks(train_run(gpu, 6), train_run(cpu, 6));
}

// fp16 with dynamic loss scaling on the GPU: an injected overflow (an inf
// written into a device gradient) skips exactly that step and halves the scale
// (hysteresis 1), as on the CPU (tests/model/test_mixed_precision.cpp).
TEST(CudaTrainer, Fp16OverflowSkipsTheStep) {
  TrainerOptions o = options(device_under_test(), 1, 2, 1, 1,
                             {{"fp16", "1"}, {"hysteresis", "1"}, {"initial_loss_scale", "1024"}});
  o.inject_overflow_iteration = 3;
  Trainer tr(o);
  double scale_before = 0;
  for (int it = 1; it <= 5; it++) {
    const StepMetrics m = tr.step();
    EXPECT_TRUE(std::isfinite(m.lm_loss)) << "iteration " << it;
    EXPECT_EQ(m.skipped_iters, it >= 3 ? 1 : 0) << "iteration " << it;
    if (it == 2) scale_before = m.loss_scale;
    if (it == 3) {
      EXPECT_EQ(m.loss_scale, scale_before / 2);
    }
  }
}

// On a GPU the host only queues the work: compute times, the timeline and the
// replayed bubble come from device events, and stay inside the step.
TEST(CudaTrainer, OpTimesComeFromTheDevice) {
  Trainer tr(options(device_under_test(), 1, 1, 2));
  tr.step();
  tr.step();
  for (int r = 0; r < tr.local_ranks(); r++) {
    const Trainer::RankReport &rep = tr.rank_report(r);
    ASSERT_FALSE(rep.timings.empty());
    for (const OpTiming &t : rep.timings) EXPECT_GT(t.device_ns, 0);
    EXPECT_GT(rep.compute_seconds, 0);
    EXPECT_LE(rep.compute_seconds, rep.step_seconds);
    EXPECT_GT(rep.device_peak_bytes, 0);
  }
  const double bubble = tr.replayed_bubble();
  EXPECT_TRUE(bubble >= 0 && bubble < 10) << bubble;
}

// A checkpoint saved by GPU ranks (staged through the host) loads into the CPU
// in another layout with the same parameters, bit for bit.
TEST(CudaTrainer, CheckpointMovesBetweenDevices) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("ptdp_gpu_ckpt_" + std::to_string(getpid()));
  fs::remove_all(dir);
  TrainerOptions o = options(device_under_test(), 2, 1, 2);
  Trainer gpu(o);
  for (int i = 0; i < 3; i++) gpu.step();
  gpu.save(dir.string());
  Trainer cpu(options("cpu", 1, 1, 1));
  cpu.load(dir.string());
  EXPECT_EQ(cpu.iteration(), 3);
  GPT<float> shape(o.model, 1);
  for (const ParamInfo &p : shape.param_table())
    EXPECT_EQ(gpu.gather_parameter(p.name), cpu.gather_parameter(p.name)) << p.name;
  fs::remove_all(dir);
}

// --async-save on GPU ranks: each save's state is copied from the devices into
// pinned host staging at its step, and written while the next steps change the
// device buffers. The checkpoint of iteration 2 (written beside steps 3 and 4)
// loads into the CPU with the same parameters, bit for bit, as the synchronous
// save of the same GPU run's iteration 2.
TEST(CudaTrainer, AsyncSaveHoldsItsStepsState) {
  namespace fs = std::filesystem;
  const fs::path root = fs::temp_directory_path() / ("ptdp_gpu_async_" + std::to_string(getpid()));
  fs::remove_all(root);
  std::vector<std::string> params[2];
  for (int async = 0; async < 2; async++) {
    const std::string dir = (root / (async ? "async" : "sync")).string();
    {
      Trainer gpu(options(device_under_test(), 2, 1, 2, 1,
                          {{"save", dir}, {"save_interval", "2"}, {"async_save", async ? "1" : "0"}}));
      for (int i = 0; i < 4; i++) gpu.step();
      gpu.wait_for_saves();
      ASSERT_EQ(gpu.failed_saves(), 0) << gpu.last_save_error();
    }
    Trainer cpu(options("cpu", 1, 1, 1));
    cpu.load(dir + "/iter_0000002");
    EXPECT_EQ(cpu.iteration(), 2);
    GPT<float> shape(options("cpu", 1, 1, 1).model, 1);
    for (const ParamInfo &p : shape.param_table()) {
      const std::vector<float> v = cpu.gather_parameter(p.name);
      params[async].emplace_back(reinterpret_cast<const char *>(v.data()), v.size() * sizeof(float));
    }
  }
  EXPECT_EQ(params[0], params[1]) << "the async save's iteration 2 differs from the synchronous save's";
  fs::remove_all(root);
}

int main(int argc, char **argv) {
  if (device_under_test() == "cuda" && cuda_device_count() == 0) {
    std::printf("no CUDA device: skipped\n");
    return 77;
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
