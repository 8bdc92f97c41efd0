// Zero-bubble schedules (zbh1, zbv) train the same model as 1F1B: the backward
// split into B and W changes when the weight gradients are computed, not what
// they sum to. On the small 8-layer model of the pipeline tests, 3 steps with
// dropout on thread ranks.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/core/status.h"
#include "engine/model/gpt.h"
#include "engine/train/config.h"
#include "engine/train/trainer.h"
#include "tests/support/expect_error.h"
#include "tests/support/pipeline_config.h"
#include "tests/support/temp_dir.h"
#include "tests/support/trained_run.h"

using namespace ptdp;

namespace {

constexpr int kSteps = 3;

struct ScheduleRun {
  std::vector<double> losses, grad_norms;
  std::vector<std::vector<float>> params;  // whole tensors, in the serial model's order
  std::vector<int64_t> peak_activations;   // per local rank, the last step's
};

Config zb_config(int t, int p, int d, int v, const std::string &schedule) {
  Config c = pipeline_test_config(t, p, d, v);
  c.set("pipeline_schedule", schedule);
  return c;
}

ScheduleRun run(const Config &c, int steps = kSteps) {
  Trainer tr(TrainerOptions::from_config(c));
  ScheduleRun r;
  for (int i = 0; i < steps; i++) {
    const StepMetrics m = tr.step();
    r.losses.push_back(m.lm_loss);
    r.grad_norms.push_back(m.grad_norm);
  }
  GPT<float> serial_shape(tr.options().model, 1);
  for (const ParamInfo &p : serial_shape.param_table())
    r.params.push_back(tr.gather_parameter(p.name));
  for (int k = 0; k < tr.local_ranks(); k++)
    r.peak_activations.push_back(tr.rank_report(k).peak_activation_bytes);
  return r;
}

void expect_same_bits(const ScheduleRun &a, const ScheduleRun &b, const std::string &what) {
  for (int i = 0; i < kSteps; i++) {
    EXPECT_EQ(a.losses[i], b.losses[i]) << what << " step " << i;
    EXPECT_EQ(a.grad_norms[i], b.grad_norms[i]) << what << " step " << i;
  }
  for (size_t k = 0; k < a.params.size(); k++)
    EXPECT_TRUE(same_bits(a.params[k], b.params[k])) << what << " parameter tensor " << k;
}

}  // namespace

// ZB-H1 runs every W of a chunk in micro-batch order, so each weight gradient
// sums the same terms in the same order as 1F1B's undivided backward: losses,
// gradient norms and parameters are bit-identical at the same layout, with
// tensor and data parallelism (its reduction overlapped: a bucket goes when
// its last W is done), recomputation and bf16.
TEST(ZeroBubble, Zbh1EqualsOneFOneBBitForBit) {
  struct Case {
    int t, p, d;
    bool recompute;
    const char *dtype;
    bool overlap;
  };
  for (const Case &k : {Case{1, 2, 1, false, "fp32", false}, Case{1, 4, 1, false, "fp32", false},
                        Case{2, 2, 2, true, "fp32", true}, Case{1, 4, 2, false, "bf16", true},
                        Case{2, 4, 1, true, "bf16", false}}) {
    const std::string what = "t" + std::to_string(k.t) + "p" + std::to_string(k.p) + "d" +
                             std::to_string(k.d) + (k.recompute ? " recompute " : " ") + k.dtype;
    Config a = zb_config(k.t, k.p, k.d, 1, "1f1b"), b = zb_config(k.t, k.p, k.d, 1, "zbh1");
    for (Config *c : {&a, &b}) {
      if (k.recompute) c->set("recompute_granularity", "full");
      if (std::string(k.dtype) == "bf16") c->set("bf16", "1");
      if (k.overlap) c->set("overlap_grad_reduce", "1");
    }
    expect_same_bits(run(a), run(b), what);
  }
}

// ZB-V places chunks in a V, so the first rank holds the embedding and the
// head: the tied embedding's two gradient halves add up in one buffer as the
// micro-batches come instead of in an all-reduce of two sums, and the gradient
// norm's squares add up per rank in another grouping. Everything else sums as
// the interleaved schedule of the same layout does, so the runs agree to fp32
// rounding (the serial tolerance of trained_run.h), and with an untied head
// the losses agree bit for bit (only the norm's grouping differs).
TEST(ZeroBubble, ZbvMatchesInterleavedAndSerial) {
  static const TrainedRun serial =
      train_run(TrainerOptions::from_config(pipeline_test_config(1, 1, 1, 1)), kSteps);
  struct Case {
    int t, p, d;
    bool recompute;
  };
  for (const Case &k : {Case{1, 2, 1, false}, Case{1, 4, 1, false}, Case{2, 2, 2, true}}) {
    const std::string what =
        "t" + std::to_string(k.t) + "p" + std::to_string(k.p) + "d" + std::to_string(k.d);
    Config a = zb_config(k.t, k.p, k.d, 2, "interleaved"), b = zb_config(k.t, k.p, k.d, 2, "zbv");
    if (k.recompute)
      for (Config *c : {&a, &b}) c->set("recompute_granularity", "full");
    const ScheduleRun ra = run(a), rb = run(b);
    for (int i = 0; i < kSteps; i++) {
      EXPECT_NEAR(rb.losses[i], ra.losses[i], 1e-6 * ra.losses[i]) << what << " step " << i;
      EXPECT_NEAR(rb.grad_norms[i], ra.grad_norms[i], 1e-5 * ra.grad_norms[i]) << what;
    }
    expect_matches_serial(TrainedRun{rb.losses, rb.params}, serial);
  }
  Config a = zb_config(1, 2, 1, 2, "interleaved"), b = zb_config(1, 2, 1, 2, "zbv");
  for (Config *c : {&a, &b}) c->set("untie_embeddings_and_output_weights", "1");
  const ScheduleRun ra = run(a), rb = run(b);
  for (int i = 0; i < kSteps; i++) EXPECT_EQ(rb.losses[i], ra.losses[i]) << "untied step " << i;
}

// Peak activation memory per rank. Rank i of ZB-H1 holds at most p - i
// micro-batches between F and B, as 1F1B does, and at most i more waiting for
// their W. One waiting for its W keeps the W stash only: per layer and token
// what the weight GEMMs read, ln1, the attention context, ln2 and the MLP
// activation (h + h/t + h + f/t values), and their output gradients, dy of the
// projection and of fc2, dQKV and dfc1 (2h + 3h/t + f/t); the rest of its
// activations (the attention probabilities, the head's logits) is freed at B.
// So rank i holds no more than 1F1B's rank i plus i W stashes.
TEST(ZeroBubble, Zbh1ActivationMemoryIsOneFOneBsPlusTheWStash) {
  const int p = 4;
  const ScheduleRun a = run(zb_config(1, p, 1, 1, "1f1b"), 1), b = run(zb_config(1, p, 1, 1, "zbh1"), 1);
  // t = 1, f = 4h, fp32, N = s*b = 32 tokens a micro-batch, 8/p layers a rank: 16h a token and layer.
  const int64_t N = 16 * 2, h = 32, layers = 8 / p, w_stash = 16 * h * 4 * N * layers;
  for (int i = 0; i < p; i++) {
    EXPECT_LE(b.peak_activations[i], a.peak_activations[i] + i * w_stash) << "rank " << i;
    EXPECT_GT(b.peak_activations[i], 0);
  }
  // The last rank holds p - i = 1 micro-batch in 1F1B, and p under ZB-H1 (its
  // W's wait): the memory ZB-H1 spends to fill the bubble.
  EXPECT_GT(b.peak_activations[p - 1], a.peak_activations[p - 1]);
}

// A checkpoint does not depend on the schedule: saved under zbh1 it resumes
// under 1f1b bit for bit (and the reverse), and saved under zbv it loads under
// 1f1b with every parameter exactly as saved.
TEST(ZeroBubble, CheckpointsMoveBetweenSchedules) {
  for (auto [from, to] : {std::pair<const char *, const char *>{"zbh1", "1f1b"}, {"1f1b", "zbh1"}}) {
    TempDir dir;
    Trainer a(TrainerOptions::from_config(zb_config(1, 2, 1, 1, from)));
    a.step();
    a.step();
    a.save(dir.path);
    Trainer b(TrainerOptions::from_config(zb_config(1, 2, 1, 1, to)));
    b.load(dir.path);
    for (int i = 0; i < 2; i++) {
      const StepMetrics ma = a.step(), mb = b.step();
      EXPECT_EQ(ma.lm_loss, mb.lm_loss) << from << " to " << to << " step " << i + 3;
      EXPECT_EQ(ma.grad_norm, mb.grad_norm) << from << " to " << to;
    }
  }
  TempDir dir;
  Trainer a(TrainerOptions::from_config(zb_config(1, 2, 1, 2, "zbv")));
  a.step();
  a.save(dir.path);
  Trainer b(TrainerOptions::from_config(zb_config(1, 4, 1, 1, "1f1b")));
  b.load(dir.path);
  GPT<float> serial_shape(a.options().model, 1);
  for (const ParamInfo &p : serial_shape.param_table())
    EXPECT_EQ(b.gather_parameter(p.name), a.gather_parameter(p.name)) << p.name;
  const double la = a.step().lm_loss, lb = b.step().lm_loss;
  EXPECT_NEAR(lb, la, 1e-5 * la);
}

// Evaluation, logits and generation run the forward-only schedule in the
// same V (the head is on the first rank): fresh zbv and interleaved trainers
// of one layout give the same logits, validation loss and text bit for bit.
// A zbv step's trace shows each chunk's W spans.
TEST(ZeroBubble, ForwardOnlyRunsAndTheTimelineFollowTheV) {
  Trainer a(TrainerOptions::from_config(zb_config(1, 2, 1, 2, "interleaved")));
  TempDir dir;
  Config cz = zb_config(1, 2, 1, 2, "zbv");
  cz.set("timeline", dir.path + "/trace.json");
  Trainer b(TrainerOptions::from_config(cz));
  const std::vector<int32_t> tokens = {1, 7, 42, 3, 99, 5};
  EXPECT_TRUE(same_bits(a.logits(tokens), b.logits(tokens)));
  EXPECT_EQ(a.evaluate(1), b.evaluate(1));
  EXPECT_EQ(a.generate("ab", 4, 0.0, 1), b.generate("ab", 4, 0.0, 1));
  b.step();
  std::ifstream in(dir.path + "/trace.json");
  const nlohmann::json trace = nlohmann::json::parse(in);
  int weights = 0, backwards = 0;
  for (const auto &e : trace["traceEvents"]) {
    if (!e.contains("cat")) continue;
    weights += e["cat"] == "backward_weight";
    backwards += e["cat"] == "backward";
  }
  const int m = 16 / 2, chunks = 2 * 2;  // micro-batches, chunks over both ranks
  EXPECT_EQ(weights, m * chunks);
  EXPECT_EQ(backwards, m * chunks);
}

// A schedule that cannot be built says why, when the options are read.
TEST(ZeroBubble, ImpossibleSchedulesAreClearErrors) {
  expect_error([] { TrainerOptions::from_config(zb_config(1, 2, 1, 1, "zbv")); },
               Status::invalid_config, "zbv places exactly 2 model chunks per rank");
  expect_error([] { TrainerOptions::from_config(zb_config(1, 2, 1, 2, "zbh1")); },
               Status::invalid_config, "zbh1 runs one model chunk per rank");
  Config few = zb_config(1, 4, 1, 2, "zbv");
  few.set("global_batch_size", "6");  // 3 micro-batches of 2 on 4 stages
  expect_error([&] { TrainerOptions::from_config(few); }, Status::invalid_config,
               "at least as many micro-batches (3) as pipeline stages (4)");
}
