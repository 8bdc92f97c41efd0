// --sequence-parallel (Korthikanti et al.): the norms, dropout and residual
// on s/t positions per tensor rank, all-gathered before the column-parallel
// GEMMs and reduce-scattered after the row-parallel ones. The serial run in
// every layout, alone and with everything else; the same forward as plain
// tensor parallelism; its activation memory against the paper's formulas.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "engine/core/status.h"
#include "engine/train/config.h"
#include "engine/train/trainer.h"
#include "tests/support/config_options.h"
#include "tests/support/expect_error.h"
#include "tests/support/pipeline_config.h"
#include "tests/support/trained_run.h"

using namespace ptdp;

namespace {

constexpr int kSteps = 3;

Config sp_config(int t, int p, int d, int v, bool sp = true) {
  Config c = pipeline_test_config(t, p, d, v);
  c.set("sequence_parallel", sp ? "1" : "0");
  return c;
}

TrainedRun train(const Config &c) { return train_run(TrainerOptions::from_config(c), kSteps); }

}  // namespace

// Alone and composed with pipelining (interleaved and zero-bubble),
// data parallelism, selective and full recomputation and the distributed
// optimizer — all together at (2,2,2) v=2: the serial run to trained_run.h's
// tolerance (the norms' and biases' gradients are summed over the ranks'
// positions in another order).
TEST(SequenceParallel, MatchesSerial) {
  static const TrainedRun serial = train(pipeline_test_config(1, 1, 1, 1));
  struct Case {
    int t, p, d, v;
    const char *schedule, *recompute;
    bool dist_opt;
  };
  for (const Case &k : {Case{2, 1, 1, 1, "1f1b", "none", false},
                        Case{4, 1, 1, 1, "1f1b", "none", false},
                        Case{2, 2, 1, 1, "zbh1", "full", false},
                        Case{2, 2, 1, 2, "zbv", "none", false},
                        Case{2, 2, 2, 2, "interleaved", "selective", true}}) {
    SCOPED_TRACE("t" + std::to_string(k.t) + "p" + std::to_string(k.p) + "d" +
                 std::to_string(k.d) + "v" + std::to_string(k.v) + " " + k.schedule + " " +
                 k.recompute + (k.dist_opt ? " distributed optimizer" : ""));
    Config c = sp_config(k.t, k.p, k.d, k.v);
    set_options(c, {{"pipeline_schedule", k.schedule}, {"recompute_granularity", k.recompute},
                    {"use_distributed_optimizer", k.dist_opt ? "1" : "0"}});
    expect_matches_serial(train(c), serial);
  }
}

// The forward is plain tensor parallelism's, element by element: the norms
// and dropout per row (the slice draws the full sequence's bits), the
// all-gather exact, the reduce-scatter summing as the all-reduce does. So the
// first step's loss is bit-identical, in fp32 and bf16.
TEST(SequenceParallel, ForwardEqualsPlainTensorParallelism) {
  for (const char *dtype : {"fp32", "bf16"}) {
    Config a = sp_config(2, 2, 1, 1, false), b = sp_config(2, 2, 1, 1, true);
    if (std::string(dtype) == "bf16")
      for (Config *c : {&a, &b}) c->set("bf16", "1");
    Trainer ta(TrainerOptions::from_config(a)), tb(TrainerOptions::from_config(b));
    EXPECT_EQ(ta.step().lm_loss, tb.step().lm_loss) << dtype;
  }
}

// Activations kept per layer and micro-batch, t = 4, bf16, selective
// recomputation, as the engine reports them (peak stash / micro-batches in
// flight / layers): Korthikanti et al.'s Table 2 gives s b h 34 / t bytes with
// sequence parallelism and selective recomputation, and s b h (10 + 24/t +
// 5 a s / (h t)) with tensor parallelism alone. ptdp keeps beyond the first:
// ln1 and ln2 gathered over all s positions (2 x 2 s b h bytes, which the
// paper's Megatron gathers again in backward), the norms' statistics in
// fp32, and no dropout masks (it draws them again; the paper counts s b h/t
// of them). The test holds the engine to that count exactly and prints the
// three figures.
TEST(SequenceParallel, ActivationMemoryAgainstThePaper) {
  const int64_t t = 4, s = 16, b = 2, h = 32, a = 4, L = 8, e = 2;  // bf16
  // Per layer: the peaks of 8 and 4 layers apart, over 4 (the embedding's
  // and head's shares cancel).
  auto per_layer = [&](bool sp, const char *recompute) {
    int64_t peak[2];
    for (int k = 0; k < 2; k++) {
      Config c = sp_config((int)t, 1, 1, 1, sp);
      set_options(c, {{"num_layers", k ? "4" : "8"}, {"num_layers_per_virtual_pipeline_stage", "0"},
                      {"bf16", "1"}, {"recompute_granularity", recompute}});
      c.set("global_batch_size", "2");  // one micro-batch: the peak is one stash
      Trainer tr(TrainerOptions::from_config(c));
      tr.step();
      peak[k] = tr.rank_report(0).peak_activation_bytes;
    }
    return (peak[0] - peak[1]) / (L - L / 2);
  };
  const int64_t sbh = s * b * h;
  const int64_t sp_sel = per_layer(true, "selective"), tp_only = per_layer(false, "none");
  // ptdp's count with sequence parallelism and selective recomputation:
  // x, mid (s b h / t each), ln1, ln2 (s b h each), qkv (3 s b h / t), the
  // context (s b h / t), fc1 before and after GeLU (4 s b h / t each), in
  // bf16; the two norms' mean and rstd over s b / t rows in fp32.
  const int64_t want = e * (2 * sbh / t + 2 * sbh + 3 * sbh / t + sbh / t + 8 * sbh / t) +
                       4 * 4 * (s * b / t);
  EXPECT_EQ(sp_sel, want);
  const double paper_sp_sel = 34.0 * sbh / t;
  const double paper_tp = sbh * (10.0 + 24.0 / t + 5.0 * a * s / (h * t));
  std::printf("activations per layer (t = %lld): sequence parallel + selective %lld bytes "
              "(paper 34 s b h / t = %.0f; ptdp keeps ln1 and ln2 whole: + %lld); tensor "
              "parallel alone %lld bytes (paper s b h (10 + 24/t + 5 a s / (h t)) = %.0f)\n",
              (long long)t, (long long)sp_sel, paper_sp_sel,
              (long long)(2 * e * sbh - 2 * e * sbh / t), (long long)tp_only, paper_tp);
  EXPECT_LT(sp_sel, tp_only);
}

TEST(SequenceParallel, SequenceNotDivisibleByTIsRefused) {
  Config c = sp_config(4, 1, 1, 1);
  c.set("seq_length", "18");
  expect_error([&] { TrainerOptions::from_config(c); }, Status::invalid_config,
               "seq_length must be a multiple of tensor_model_parallel_size (4)");
}
