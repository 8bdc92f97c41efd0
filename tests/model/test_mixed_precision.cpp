// Mixed precision (bf16, fp16 with loss scaling) held to the numerics contract
// of ARCHITECTURE §3 on the CPU: every layout equals the serial run of the same
// precision, the 16-bit run tracks fp32, an fp16 overflow skips exactly its
// step, and 16-bit checkpoints resume bit-exactly and load across precisions.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "engine/model/gpt.h"
#include "engine/train/trainer.h"
#include "tests/support/expect_error.h"
#include "tests/support/pipeline_config.h"
#include "tests/support/temp_dir.h"
#include "tests/support/trained_run.h"

using namespace ptdp;

namespace {

struct Layout {
  int t, p, d, v;
  bool recompute = false;
};

std::string name_of(const Layout &l) {
  return "t" + std::to_string(l.t) + "p" + std::to_string(l.p) + "d" + std::to_string(l.d) + "v" +
         std::to_string(l.v) + (l.recompute ? "_recompute" : "");
}

Config config(const Layout &l, const std::string &dtype) {
  Config c = pipeline_test_config(l.t, l.p, l.d, l.v);
  if (dtype != "f32") c.set(dtype == "bf16" ? "bf16" : "fp16", "1");
  // fp16: a scale that does not overflow this small model (checked below).
  if (dtype == "f16") c.set("initial_loss_scale", "1024");
  if (l.recompute) c.set("recompute_granularity", "full");
  return c;
}

TrainerOptions options(const Layout &l, const std::string &dtype) {
  return TrainerOptions::from_config(config(l, dtype));
}

constexpr int kSteps = 3;

// Every value of every parameter on every rank is a value of the 16-bit type.
void expect_params_in(Trainer &tr, DType t) {
  for (int r = 0; r < tr.local_ranks(); r++) {
    const float *p = tr.model(r).params();
    for (size_t i = 0; i < tr.model(r).num_params(); i++)
      ASSERT_EQ(float_bits(p[i]), float_bits(round_to(t, p[i]))) << "rank " << r << " element " << i;
  }
}

}  // namespace

// ---- the contract: every layout equals the serial run of its precision --------

class Bf16Equivalence : public ::testing::TestWithParam<Layout> {};

// bf16 keeps 8 significant bits. A layout sums in another order in fp32
// (~1e-7 relative), which now and then puts a value on the other side of a bf16
// rounding boundary: that element moves by one bf16 step (2^-7 of its
// magnitude at most). Such flips are rare and average out over the tokens, so
// the loss moves far less than a bf16 step: observed at most 1.8e-5 relative
// over 3 steps (t = 4); the bound is 1e-4. With t > 1 the row-parallel
// partial sums are also rounded to bf16 before the all-reduce (as on a GPU),
// a real difference from the serial run. Parameters (the bf16 model's, the
// rounding of the fp32 master weights): Adam divides by the gradient's RMS, so
// a near-zero gradient that rounds differently can flip its update's sign, and
// the two masters of such an element part by up to 2 lr a step (lr = 3e-3:
// 1.8e-2 over 3 steps); its bf16 value then differs by that and at most one
// bf16 step more (the masters start from the fp32 initialisation, off the bf16
// grid, so a small master difference can round either way). Observed worst
// 8.7e-3 (Release) and 1.1e-2 (the sanitizer build, whose float code rounds
// differently); bound 2e-2. On average they agree far better: observed 5.6e-5
// with t > 1, 2e-7 without; bound 2e-4, where a real bug moves most elements
// by O(lr).
TEST_P(Bf16Equivalence, MatchesSerialBf16) {
  static const TrainedRun serial = train_run(options({1, 1, 1, 1}, "bf16"), kSteps);
  const TrainedRun run = train_run(options(GetParam(), "bf16"), kSteps);
  ASSERT_EQ(run.losses.size(), serial.losses.size());
  for (size_t i = 0; i < run.losses.size(); i++)
    EXPECT_NEAR(run.losses[i], serial.losses[i], 1e-4 * serial.losses[i]) << "step " << i;
  double worst = 0, sum = 0;
  size_t total = 0;
  for (size_t k = 0; k < run.params.size(); k++)
    for (size_t i = 0; i < run.params[k].size(); i++) {
      const double d = std::abs((double)run.params[k][i] - serial.params[k][i]);
      worst = std::max(worst, d);
      sum += d;
      total++;
    }
  std::printf("%s: parameters differ from the serial run by %.3g at most, %.3g on average\n",
              name_of(GetParam()).c_str(), worst, sum / total);
  EXPECT_LT(worst, 2e-2);
  EXPECT_LT(sum / total, 2e-4);
}

INSTANTIATE_TEST_SUITE_P(Layouts, Bf16Equivalence,
                         ::testing::Values(Layout{2, 1, 1, 1}, Layout{1, 1, 2, 1},
                                           Layout{1, 2, 1, 1}, Layout{2, 2, 2, 2},
                                           Layout{1, 4, 1, 2}, Layout{2, 4, 1, 2},
                                           Layout{4, 1, 2, 1}, Layout{2, 2, 1, 1, true}),
                         [](const auto &info) { return name_of(info.param); });

// The serial bf16 and fp16 runs track the fp32 one: rounding every activation
// to 8 (bf16) or 11 (fp16) significant bits is noise of 2^-9 or 2^-12 relative
// per value, mean zero; observed after 3 steps: bf16 1.3e-4, fp16 2.7e-5
// relative. Bound 2e-3 (a 200-step run is in scripts/bench_precision.lua).
TEST(MixedPrecision, SixteenBitTracksFp32) {
  const TrainedRun f32 = train_run(options({1, 1, 1, 1}, "f32"), kSteps);
  for (const char *dt : {"bf16", "f16"}) {
    const TrainedRun r = train_run(options({1, 1, 1, 1}, dt), kSteps);
    for (size_t i = 0; i < r.losses.size(); i++)
      EXPECT_NEAR(r.losses[i], f32.losses[i], 2e-3 * f32.losses[i]) << dt << " step " << i;
  }
}

TEST(MixedPrecision, ParametersAreSixteenBitValues) {
  for (const char *dt : {"bf16", "f16"}) {
    Trainer tr(options({2, 2, 1, 1}, dt));
    const DType t = std::string(dt) == "bf16" ? DType::bf16 : DType::f16;
    expect_params_in(tr, t);
    tr.step();
    expect_params_in(tr, t);
    // The master weights are fp32 and are not all 16-bit values after an update.
    size_t off_grid = 0;
    const float *m = tr.optimizer(0).master();
    ASSERT_NE(m, nullptr);
    for (size_t i = 0; i < tr.model(0).num_params(); i++) off_grid += m[i] != round_to(t, m[i]);
    EXPECT_GT(off_grid, tr.model(0).num_params() / 2) << dt;
  }
  Trainer f32(options({1, 1, 1, 1}, "f32"));
  EXPECT_EQ(f32.optimizer(0).master(), nullptr);  // fp32 parameters are their own master
}

// The master weights start from the fp32 initial parameters, not from their
// 16-bit rounding (as PyTorch autocast and Megatron start): before any step a
// 16-bit trainer's master weights are, bit for bit, the fp32 trainer's
// parameters, on every rank of a layout, and its parameters their rounding.
TEST(MixedPrecision, MasterWeightsStartFromTheFp32Init) {
  Trainer f32(options({2, 2, 1, 1}, "f32"));
  for (const char *dt : {"bf16", "f16"}) {
    Trainer half(options({2, 2, 1, 1}, dt));
    const DType t = std::string(dt) == "bf16" ? DType::bf16 : DType::f16;
    for (int r = 0; r < half.world_size(); r++) {
      const size_t n = half.model(r).num_params();
      ASSERT_EQ(n, f32.model(r).num_params());
      const float *master = half.optimizer(r).master(), *init = f32.model(r).params(),
                  *params = half.model(r).params();
      ASSERT_NE(master, nullptr);
      EXPECT_EQ(0, std::memcmp(master, init, n * sizeof(float))) << dt << " rank " << r;
      size_t off = 0, unrounded = 0;
      for (size_t i = 0; i < n; i++) {
        off += params[i] != round_to(t, init[i]);
        unrounded += master[i] != round_to(t, master[i]);
      }
      EXPECT_EQ(off, 0u) << dt << " rank " << r;
      EXPECT_GT(unrounded, n / 2) << dt << " rank " << r;  // the init's own bits, not rounded ones
    }
  }
}

// ---- 16-bit activations ---------------------------------------------------------

// A 16-bit run holds its activations and their gradients in 2 bytes, as ptdp
// plan counts them: a training forward's stash is half the fp32 one but for
// the fp32 statistics (LayerNorm's mean and rstd, the loss's) and the tokens.
// Tensors between pipeline stages are in that type; another is refused.
TEST(MixedPrecision, ActivationsAreHeldInTwoBytes) {
  GptConfig cfg;
  cfg.num_layers = 2;
  cfg.hidden_size = 32;
  cfg.num_attention_heads = 4;
  cfg.vocab_size = 64;
  cfg.seq_length = 16;
  const int s = 16, b = 2, N = s * b;
  std::vector<int32_t> tokens(N), targets(N);
  for (int i = 0; i < N; i++) tokens[i] = (i * 7) % 64, targets[i] = (i * 5 + 1) % 64;
  const StepContext ctx{true, 1, 0};
  int64_t stash[2];
  for (int k = 0; k < 2; k++) {
    const DType dt = k ? DType::bf16 : DType::f32;
    GPT<float> m(cfg, 3, {}, {}, {}, Precision{dt});
    EXPECT_EQ(m.activation_type(), dt);
    m.forward(tokens.data(), targets.data(), s, b, ctx);
    stash[k] = m.peak_stashed_bytes();
  }
  // 4-byte values a row: 4 statistics per layer, 2 + 3 + 1 at the head (final
  // LayerNorm's, the loss's three, each token's loss), tokens and targets.
  const int64_t fixed = (int64_t)N * (4 * cfg.num_layers + 6 + 2) * 4;
  EXPECT_EQ(stash[1] - fixed, (stash[0] - fixed) / 2) << stash[0] << " vs " << stash[1];

  GPT<float> first(cfg, 3, {}, PipelineStage{0, 2, 1}, {}, Precision{DType::bf16});
  DeviceArray<float> out(first.device(), (size_t)N * cfg.hidden_size);
  expect_error([&] { first.forward_chunk(0, 0, tokens.data(), nullptr, nullptr, out.data(), s, b,
                                         ctx); },
               Status::invalid_argument, "holds f32 elements; this model's activations are bf16");
  ActArray ok;
  ok.resize(first.device(), (size_t)N * cfg.hidden_size, first.activation_type());
  EXPECT_EQ(first.forward_chunk(0, 0, tokens.data(), nullptr, nullptr, ok.data(), s, b, ctx), 0);
}

// ---- fp16: overflow and the dynamic loss scale ---------------------------------

// An overflow injected at step 4 (an inf gradient, as fp16 gives) skips exactly
// that step: parameters and moments stay, the skip is counted (not as NaN),
// the scale halves (hysteresis 1), and it doubles again after `window` clean steps.
TEST(MixedPrecision, Fp16OverflowSkipsExactlyThatStep) {
  Config c = config({1, 2, 2, 1}, "f16");
  c.set("loss_scale_window", "3");
  c.set("hysteresis", "1");
  TrainerOptions o = TrainerOptions::from_config(c);
  o.inject_overflow_iteration = 4;
  Trainer tr(o);
  std::vector<float> before;
  std::vector<double> scales;
  for (int it = 1; it <= 8; it++) {
    if (it == 4) before.assign(tr.optimizer(0).master(), tr.optimizer(0).master() + tr.model(0).num_params());
    const StepMetrics m = tr.step();
    scales.push_back(m.loss_scale);
    EXPECT_EQ(m.skipped_iters, it >= 4 ? 1 : 0) << "iteration " << it;
    EXPECT_EQ(m.nan_iters, 0) << "iteration " << it;
    EXPECT_TRUE(std::isfinite(m.lm_loss));
    if (it == 4) {
      const float *now = tr.optimizer(0).master();
      EXPECT_EQ(std::memcmp(before.data(), now, before.size() * sizeof(float)), 0)
          << "the skipped step changed the master weights";
    }
  }
  // 1024 -> x2 after 3 clean steps -> /2 at the overflow -> x2 after 3 more.
  const std::vector<double> want = {1024, 1024, 2048, 1024, 1024, 1024, 2048, 2048};
  EXPECT_EQ(scales, want);
}

// Megatron's hysteresis: with 2, the first overflow skips but keeps the scale;
// the second halves it. Adam's step count skips the skipped iterations.
TEST(MixedPrecision, Fp16HysteresisDelaysTheBackoff) {
  TrainerOptions o = options({1, 1, 1, 1}, "f16");  // hysteresis 2, window 1000
  o.inject_overflow_iteration = 2;
  Trainer tr(o);
  EXPECT_EQ(tr.step().loss_scale, 1024);
  EXPECT_EQ(tr.step().loss_scale, 1024);  // overflow 1 of 2
  EXPECT_EQ(tr.step().skipped_iters, 1);
}

// A natural overflow: fp16 at Megatron's initial scale 2^32 overflows the
// loss's gradient (2^32 / tokens > 65504), skipping steps and halving the
// scale (hysteresis 1) until it fits; training then goes on. The skipped
// steps do not move the LR schedule (Megatron steps it after an update only):
// the first update takes the schedule's first LR, still in its warm-up.
TEST(MixedPrecision, Fp16InitialScaleBacksOffUntilItFits) {
  Config c = config({1, 1, 1, 1}, "f16");
  c.set("initial_loss_scale", "4294967296");
  c.set("hysteresis", "1");
  c.set("lr_warmup_iters", "100");
  c.set("lr_decay_iters", "200");
  Trainer tr(TrainerOptions::from_config(c));
  StepMetrics m;
  int steps = 0;
  do {
    m = tr.step();
    steps++;
  } while (m.skipped_iters == steps && steps < 40);
  EXPECT_GT(steps, 1);        // at least one overflow
  EXPECT_LT(steps, 40);       // and it recovered
  EXPECT_EQ(m.skipped_iters, steps - 1);
  EXPECT_EQ(m.nan_iters, 0);
  EXPECT_EQ(m.loss_scale, std::ldexp(1.0, 32 - (steps - 1)));
  EXPECT_EQ(m.lr, TrainerOptions::from_config(c).lr.at(1));
}

// Gradients accumulated and all-reduced in the 16-bit type (Megatron's
// --accumulate-allreduce-grads-in-fp32 off) still train like the serial run.
TEST(MixedPrecision, SixteenBitGradientAccumulation) {
  Config serial = config({1, 1, 1, 1}, "bf16"), dp = config({1, 1, 2, 1}, "bf16");
  serial.set("accumulate_allreduce_grads_in_fp32", "0");
  dp.set("accumulate_allreduce_grads_in_fp32", "0");
  const TrainedRun a = train_run(TrainerOptions::from_config(serial), kSteps);
  const TrainedRun b = train_run(TrainerOptions::from_config(dp), kSteps);
  const TrainedRun fp32_grads = train_run(options({1, 1, 1, 1}, "bf16"), kSteps);
  for (int i = 0; i < kSteps; i++) {
    EXPECT_NEAR(b.losses[i], a.losses[i], 1e-4 * a.losses[i]) << "step " << i;
    EXPECT_NEAR(a.losses[i], fp32_grads.losses[i], 2e-3 * a.losses[i]) << "step " << i;
  }
}

// ---- checkpoints -------------------------------------------------------------

// 3 steps, save, 3 more in a new trainer == 6 uninterrupted steps, bit for bit.
TEST(MixedPrecision, CheckpointResumesBitExactly) {
  for (const char *dt : {"bf16", "f16"}) {
    Config c = config({1, 2, 2, 1}, dt);
    c.set("lr_warmup_iters", "2");
    if (std::string(dt) == "f16") c.set("loss_scale_window", "2");  // the scale moves meanwhile
    TempDir dir("ptdp_mp");
    std::vector<StepMetrics> straight;
    {
      Trainer tr(TrainerOptions::from_config(c));
      for (int i = 0; i < 6; i++) straight.push_back(tr.step());
    }
    {
      Trainer tr(TrainerOptions::from_config(c));
      for (int i = 0; i < 3; i++) tr.step();
      tr.save(dir.path);
    }
    c.set("load", dir.path);
    Trainer tr(TrainerOptions::from_config(c));
    for (int i = 3; i < 6; i++) {
      const StepMetrics m = tr.step();
      EXPECT_EQ(m.lm_loss, straight[(size_t)i].lm_loss) << dt << " step " << i;
      EXPECT_EQ(m.grad_norm, straight[(size_t)i].grad_norm) << dt << " step " << i;
      EXPECT_EQ(m.loss_scale, straight[(size_t)i].loss_scale) << dt << " step " << i;
    }
  }
}

// A bf16 checkpoint loads into an fp32 run (which takes the fp32 master
// weights) and an fp32 checkpoint into a bf16 run (master = the fp32 weights,
// the model = them rounded), in other layouts.
TEST(MixedPrecision, CheckpointsLoadAcrossPrecisions) {
  TempDir bf16_dir("ptdp_mp"), f32_dir("ptdp_mp");
  std::vector<float> bf16_master, f32_params;
  {
    Trainer tr(options({1, 1, 1, 1}, "bf16"));
    tr.step();
    tr.save(bf16_dir.path);
    bf16_master.assign(tr.optimizer(0).master(), tr.optimizer(0).master() + tr.model(0).num_params());
  }
  {
    Trainer tr(options({1, 1, 1, 1}, "f32"));
    tr.step();
    tr.save(f32_dir.path);
    f32_params.assign(tr.model(0).params(), tr.model(0).params() + tr.model(0).num_params());
  }
  {
    Config c = config({1, 1, 1, 1}, "f32");
    c.set("load", bf16_dir.path);
    Trainer tr(TrainerOptions::from_config(c));
    ASSERT_EQ(tr.model(0).num_params(), bf16_master.size());
    EXPECT_EQ(std::memcmp(tr.model(0).params(), bf16_master.data(), bf16_master.size() * 4), 0);
    EXPECT_TRUE(std::isfinite(tr.step().lm_loss));
  }
  {
    Config c = config({1, 1, 1, 1}, "bf16");
    c.set("load", f32_dir.path);
    Trainer tr(TrainerOptions::from_config(c));
    EXPECT_EQ(std::memcmp(tr.optimizer(0).master(), f32_params.data(), f32_params.size() * 4), 0);
    for (size_t i = 0; i < f32_params.size(); i++)
      ASSERT_EQ(tr.model(0).params()[i], round_to(DType::bf16, f32_params[i])) << i;
    EXPECT_TRUE(std::isfinite(tr.step().lm_loss));
  }
  {
    // Resharded: the bf16 checkpoint into (2, 2, 2, v2) bf16 equals loading it serially.
    Config serial = config({1, 1, 1, 1}, "bf16"), sharded = config({2, 2, 2, 2}, "bf16");
    serial.set("load", bf16_dir.path);
    sharded.set("load", bf16_dir.path);
    Trainer a(TrainerOptions::from_config(serial)), b(TrainerOptions::from_config(sharded));
    for (const ParamInfo &p : a.model(0).param_table())
      EXPECT_EQ(a.gather_parameter(p.name), b.gather_parameter(p.name)) << p.name;
    const double la = a.step().lm_loss, lb = b.step().lm_loss;
    EXPECT_NEAR(lb, la, 1e-4 * la);
  }
}

// ---- bad options ----------------------------------------------------------------

TEST(MixedPrecision, BadOptionsAreClearErrors) {
  Config c = config({1, 1, 1, 1}, "bf16");
  c.set("fp16", "1");
  expect_error([&] { TrainerOptions::from_config(c); }, Status::invalid_config,
               "bf16 and fp16 are both set");
  Config d;
  expect_error([&] { d.set("loss_scale", "0"); }, Status::bad_value, "loss_scale must be in");
  expect_error([&] { d.set("loss_scale", "-2"); }, Status::bad_value, "loss_scale must be in");
  expect_error([&] { d.set("hysteresis", "0"); }, Status::bad_value, "hysteresis must be in [1,");
  expect_error([&] { d.set("initial_loss_scale", "0"); }, Status::bad_value, "initial_loss_scale must be in");
  expect_error([&] { d.set("loss_scale_window", "0"); }, Status::bad_value, "loss_scale_window must be in [1,");
  Config f32 = config({1, 1, 1, 1}, "f32");
  f32.set("loss_scale", "128");
  expect_error([&] { TrainerOptions::from_config(f32); }, Status::invalid_config,
               "loss_scale is set but the run is fp32");
  Config low = config({1, 1, 1, 1}, "f16");
  low.set("min_loss_scale", "4096");
  expect_error([&] { TrainerOptions::from_config(low); }, Status::invalid_config,
               "min_loss_scale (4096) exceeds initial_loss_scale (1024)");
  // The dynamic scale's options where no scale is dynamic: bf16, and fp16 with
  // a static loss_scale (they were ignored, the run exiting 0).
  Config b16 = config({1, 1, 1, 1}, "bf16");
  b16.set("hysteresis", "5");
  expect_error([&] { TrainerOptions::from_config(b16); }, Status::invalid_config,
               "hysteresis is set but the run has no dynamic loss scale (bf16)");
  b16.set("loss_scale", "128");  // a static scale for bf16: still not dynamic
  expect_error([&] { TrainerOptions::from_config(b16); }, Status::invalid_config,
               "hysteresis is set but the run has no dynamic loss scale (bf16)");
  Config fixed = config({1, 1, 1, 1}, "f16");
  fixed.set("loss_scale", "128");
  fixed.set("loss_scale_window", "4");
  expect_error([&] { TrainerOptions::from_config(fixed); }, Status::invalid_config,
               "is set but the run has no dynamic loss scale (fp16 with a static loss_scale)");
}
