// --use-distributed-optimizer (ZeRO-1): the fp32 master weights and Adam's
// moments sharded over the data-parallel ranks. The same run as the plain
// optimizer bit for bit, 1/d of its state per rank, and checkpoints that move
// between layouts with and without it. The 8-layer model of the pipeline
// tests, dropout on, thread ranks.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "engine/core/status.h"
#include "engine/model/gpt.h"
#include "engine/train/config.h"
#include "engine/train/trainer.h"
#include "tests/support/expect_error.h"
#include "tests/support/pipeline_config.h"
#include "tests/support/step_figures.h"
#include "tests/support/temp_dir.h"
#include "tests/support/trained_run.h"

using namespace ptdp;

namespace {

Config dist_config(int t, int p, int d, int v, bool distributed) {
  Config c = pipeline_test_config(t, p, d, v);
  c.set("use_distributed_optimizer", distributed ? "1" : "0");
  return c;
}

// Every parameter of the whole model, gathered from the shards.
std::vector<std::vector<float>> params_of(const Trainer &tr) {
  std::vector<std::vector<float>> out;
  GPT<float> serial_shape(tr.options().model, 1);
  for (const ParamInfo &p : serial_shape.param_table()) out.push_back(tr.gather_parameter(p.name));
  return out;
}

// Rank 0's whole optimizer state (a plain optimizer's, laid out like its parameters).
std::vector<float> state_of(Trainer &tr) {
  AdamW &a = tr.optimizer(0);
  const size_t n = tr.model(0).num_params();
  EXPECT_EQ(a.hi() - a.lo(), n) << "a plain optimizer holds the whole state";
  std::vector<float> s(a.exp_avg(), a.exp_avg() + n);
  s.insert(s.end(), a.exp_avg_sq(), a.exp_avg_sq() + n);
  if (a.master()) s.insert(s.end(), a.master(), a.master() + n);
  return s;
}

}  // namespace

// The reduce-scatter sums each element in the same member order as the
// all-reduce, each shard's update is the same element-wise AdamW, and the
// gradient norm adds the same d range sums in the same order: losses,
// gradient norms and parameters equal the plain optimizer's bit for bit, in
// fp32 and bf16 (master weights sharded too), with pipelining and the
// zero-bubble split.
TEST(DistributedOptimizer, EqualsThePlainOptimizerBitForBit) {
  struct Case {
    int t, p, d, v;
    const char *schedule, *dtype;
  };
  for (const Case &k : {Case{1, 1, 2, 1, "1f1b", "fp32"}, Case{2, 2, 2, 2, "interleaved", "fp32"},
                        Case{1, 2, 4, 1, "zbh1", "bf16"}, Case{1, 1, 8, 1, "1f1b", "bf16"}}) {
    const std::string what = "t" + std::to_string(k.t) + "p" + std::to_string(k.p) + "d" +
                             std::to_string(k.d) + " " + k.schedule + " " + k.dtype;
    Config a = dist_config(k.t, k.p, k.d, k.v, false), b = dist_config(k.t, k.p, k.d, k.v, true);
    for (Config *c : {&a, &b}) {
      c->set("pipeline_schedule", k.schedule);
      if (std::string(k.dtype) == "bf16") c->set("bf16", "1");
    }
    Trainer plain(TrainerOptions::from_config(a)), dist(TrainerOptions::from_config(b));
    const StepFigures sa = step_figures(plain, 3), sb = step_figures(dist, 3);
    for (int i = 0; i < 3; i++) {
      EXPECT_EQ(sa.losses[i], sb.losses[i]) << what << " step " << i;
      EXPECT_EQ(sa.grad_norms[i], sb.grad_norms[i]) << what << " step " << i;
    }
    const auto pa = params_of(plain), pb = params_of(dist);
    for (size_t i = 0; i < pa.size(); i++)
      EXPECT_TRUE(same_bits(pa[i], pb[i])) << what << " parameter tensor " << i;
  }
}

// Each data rank holds ceil(n/d) elements of the moments (and master
// weights), the ranges cover the buffer once, in data-rank order.
TEST(DistributedOptimizer, StatePerRankIsOneDth) {
  Trainer tr(TrainerOptions::from_config(dist_config(1, 1, 4, 1, true)));
  const size_t n = tr.model(0).num_params(), S = (n + 3) / 4;
  size_t covered = 0;
  for (int r = 0; r < 4; r++) {
    AdamW &a = tr.optimizer(r);
    EXPECT_EQ(a.lo(), covered) << "rank " << r;
    EXPECT_LE(a.hi() - a.lo(), S);
    covered = a.hi();
  }
  EXPECT_EQ(covered, n);
}

// A checkpoint holds the whole optimizer state whatever the optimizer: saved
// at (2,2,2) with the distributed optimizer it is the plain optimizer's
// checkpoint of the same run, loads at (1,1,8) without it and at (1,2,4) with
// it (whose own checkpoint then loads like the first), moments and parameters
// bit for bit; the next step matches the uninterrupted run to the layouts'
// summation order (trained_run.h's 1e-5).
TEST(DistributedOptimizer, CheckpointsMoveBetweenLayoutsAndOptimizers) {
  TempDir dist_dir, plain_dir, again_dir;
  Trainer a(TrainerOptions::from_config(dist_config(2, 2, 2, 1, true)));
  Trainer c(TrainerOptions::from_config(dist_config(2, 2, 2, 1, false)));
  step_figures(a, 2);
  step_figures(c, 2);
  a.save(dist_dir.path);
  c.save(plain_dir.path);

  auto load = [](const std::string &dir, Config cfg) {
    auto tr = std::make_unique<Trainer>(TrainerOptions::from_config(cfg));
    tr->load(dir);
    return tr;
  };
  // Serial-sized (1,1,8) ranks each hold the whole model and optimizer.
  auto from_dist = load(dist_dir.path, dist_config(1, 1, 8, 1, false));
  auto from_plain = load(plain_dir.path, dist_config(1, 1, 8, 1, false));
  EXPECT_TRUE(same_bits(state_of(*from_dist), state_of(*from_plain)));
  EXPECT_EQ(params_of(*from_dist), params_of(*from_plain));

  // Into another distributed layout and out again.
  auto d4 = load(dist_dir.path, dist_config(1, 2, 4, 1, true));
  EXPECT_EQ(params_of(*d4), params_of(a));
  d4->save(again_dir.path);
  auto again = load(again_dir.path, dist_config(1, 1, 8, 1, false));
  EXPECT_TRUE(same_bits(state_of(*again), state_of(*from_plain)));

  const double la = a.step().lm_loss;
  for (Trainer *t : {from_dist.get(), d4.get()}) {
    const double l = t->step().lm_loss;
    EXPECT_NEAR(l, la, 1e-5 * la);
  }
}

// bf16: the sharded fp32 master weights go through the checkpoint too; a
// reload into the same layout restores every rank's shard bit for bit and
// continues bit for bit.
TEST(DistributedOptimizer, Bf16MasterWeightsSurviveACheckpoint) {
  TempDir dir;
  Config c = dist_config(1, 1, 2, 1, true);
  c.set("bf16", "1");
  Trainer a(TrainerOptions::from_config(c));
  step_figures(a, 2);
  a.save(dir.path);
  Trainer b(TrainerOptions::from_config(c));
  b.load(dir.path);
  for (int r = 0; r < 2; r++) {
    AdamW &x = a.optimizer(r), &y = b.optimizer(r);
    const size_t k = (x.hi() - x.lo()) * sizeof(float);
    EXPECT_EQ(std::memcmp(x.exp_avg(), y.exp_avg(), k), 0) << "rank " << r;
    EXPECT_EQ(std::memcmp(x.exp_avg_sq(), y.exp_avg_sq(), k), 0) << "rank " << r;
    EXPECT_EQ(std::memcmp(x.master(), y.master(), k), 0) << "rank " << r;
    EXPECT_EQ(std::memcmp(a.model(r).params(), b.model(r).params(),
                          a.model(r).num_params() * sizeof(float)), 0) << "rank " << r;
  }
  EXPECT_EQ(a.step().lm_loss, b.step().lm_loss);
}

TEST(DistributedOptimizer, OverlappedReductionIsRefused) {
  Config c = dist_config(1, 1, 2, 1, true);
  c.set("overlap_grad_reduce", "1");
  expect_error([&] { TrainerOptions::from_config(c); }, Status::invalid_config,
               "overlap_grad_reduce with it is not supported yet");
}
