// The planner against ptdp itself: its prediction of ptdp's peak activation
// memory (engine/plan/ptdp_stash) and what the engine reports it stashed
// (RankReport::peak_activation_bytes), for every pipeline stage of layouts
// that mix t, p, v, the schedules (the zero-bubble ones with their W stash), recomputation, attention dropout and flash
// attention. Issue 13 asks for 5%; the two count the same tensors, so they
// agree exactly today, and a change to either shows here.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "engine/plan/machine.h"
#include "engine/plan/model.h"
#include "engine/plan/ptdp_stash.h"
#include "engine/train/trainer.h"
#include "tests/support/config_options.h"
#include "tests/support/tiny_dataset.h"

using namespace ptdp;

namespace {

struct Case {
  const char *name;
  int t, p, v;
  const char *schedule;  // 1f1b, gpipe, zbh1, interleaved or zbv (v > 1)
  bool recompute, dropout, flash;
  bool selective = false, sequence_parallel = false;
};

void check(const Case &c) {
  SCOPED_TRACE(c.name);
  Config cfg;
  const int64_t layers = 4, gbs = 8, b = 2;
  set_options(cfg, {{"num_layers", std::to_string(layers)}, {"hidden_size", "32"},
                    {"num_attention_heads", "4"}, {"seq_length", "16"},
                    {"micro_batch_size", std::to_string(b)}, {"global_batch_size", std::to_string(gbs)},
                    {"train_iters", "2"}, {"split", "80,20"}, {"data_path", tiny_dataset_path()},
                    {"tensor_model_parallel_size", std::to_string(c.t)},
                    {"pipeline_model_parallel_size", std::to_string(c.p)},
                    {"pipeline_schedule", c.schedule},
                    {"attention_dropout", c.dropout ? "0.1" : "0"},
                    {"use_flash_attn", c.flash ? "1" : "0"}});
  if (c.v > 1)
    cfg.set("num_layers_per_virtual_pipeline_stage", std::to_string(layers / (c.p * c.v)));
  if (c.selective) cfg.set("recompute_granularity", "selective");
  if (c.sequence_parallel) cfg.set("sequence_parallel", "1");
  if (c.recompute) {
    set_options(cfg, {{"recompute_granularity", "full"}, {"recompute_method", "uniform"},
                      {"recompute_num_layers", "1"}});
  }
  Trainer tr(TrainerOptions::from_config(cfg));
  tr.step();

  plan::ModelSpec m;
  m.layers = layers;
  m.hidden = 32;
  m.heads = 4;
  m.seq = 16;
  m.vocab = tr.options().model.vocab_size;
  plan::Layout L;
  L.t = c.t, L.p = c.p, L.v = c.v, L.b = (int)b;
  L.schedule = tr.options().schedule;
  L.recompute = c.recompute   ? plan::Recompute::full
                : c.selective ? plan::Recompute::selective
                              : plan::Recompute::none;
  const plan::PtdpStash o{c.dropout, c.flash, c.sequence_parallel};
  for (int r = 0; r < tr.local_ranks(); r++) {
    const Trainer::RankReport &rep = tr.rank_report(r);
    const double want = plan::ptdp_peak_stash_bytes(m, L, gbs / b, rep.coord.pp, o);
    EXPECT_NEAR((double)rep.peak_activation_bytes, want, 0.05 * want)
        << "rank " << r << " (pp " << rep.coord.pp << ")";
  }
}

}  // namespace

// The planner's parameter count is the engine's for every block shape: GPT-2's,
// LLaMA's without biases, with every linear bias (SwiGLU's gate and up biases
// included), with QKV's alone (Qwen2), grouped or not. Exact: both count
// integers (a vocabulary of 256 needs no padding).
TEST(PlanAgainstEngine, ParameterCountsOfEveryBlockShape) {
  for (int shape = 0; shape < 4; shape++) {
    GptConfig g;
    g.num_layers = 3, g.hidden_size = 64, g.num_attention_heads = 8, g.vocab_size = 256;
    g.seq_length = 32;
    plan::ModelSpec m;
    m.layers = 3, m.hidden = 64, m.heads = 8, m.vocab = 256, m.seq = 32;
    if (shape > 0) {
      g.normalization = GptConfig::RMSNorm, g.position_embedding_type = GptConfig::Rope;
      g.swiglu = 1, g.ffn_hidden_size = 96, g.untie_embeddings_and_output_weights = 1;
      g.num_query_groups = 2;
      g.disable_bias_linear = shape == 1 ? 0 : 1;
      g.add_qkv_bias = shape == 3 ? 1 : 0;
      m.rms_norm = m.rope = m.swiglu = m.untied = true;
      m.ffn = 96, m.kv_heads = 2;
      m.linear_bias = shape == 1;
      m.qkv_bias = shape == 3;
    }
    EXPECT_EQ(plan::params_total(m), (double)g.num_params()) << "shape " << shape;
  }
}

TEST(PlanAgainstEngine, PeakActivationMemory) {
  const Case cases[] = {
      {"serial", 1, 1, 1, "1f1b", false, true, false},
      {"t=2", 2, 1, 1, "1f1b", false, true, false},
      {"p=2 1f1b", 1, 2, 1, "1f1b", false, true, false},
      {"p=2 gpipe", 1, 2, 1, "gpipe", false, false, false},
      {"p=2 v=2 interleaved", 1, 2, 2, "interleaved", false, true, false},
      {"t=2 p=2 full recompute", 2, 2, 1, "1f1b", true, true, false},
      {"p=2 flash attention", 1, 2, 1, "1f1b", false, true, true},
      {"p=4 zbh1", 1, 4, 1, "zbh1", false, true, false},
      {"t=2 p=2 zbh1 full recompute", 2, 2, 1, "zbh1", true, true, false},
      {"p=2 v=2 zbv", 1, 2, 2, "zbv", false, true, false},
      {"t=2 p=2 selective", 2, 2, 1, "1f1b", false, true, false, true},
      {"p=2 selective flash", 1, 2, 1, "1f1b", false, true, true, true},
      {"t=2 p=2 sequence parallel selective", 2, 2, 1, "1f1b", false, true, false, true, true},
      {"t=2 p=2 sequence parallel full recompute", 2, 2, 1, "zbh1", true, true, false, false, true},
  };
  for (const Case &c : cases) check(c);
}

// The distributed optimizer's state per rank: the engine's moments and
// master weights of its range (bf16: three fp32 arrays) against the planner's
// parameters x 12 bytes / d. They differ by the engine's padding of each
// tensor to 16 elements and the last range's remainder: within 5%.
TEST(PlanAgainstEngine, DistributedOptimizerStatePerRank) {
  Config cfg;
  for (auto [k, val] : std::initializer_list<std::pair<const char *, std::string>>{
           {"num_layers", "4"}, {"hidden_size", "32"}, {"num_attention_heads", "4"},
           {"seq_length", "16"}, {"micro_batch_size", "2"}, {"global_batch_size", "8"},
           {"train_iters", "2"}, {"split", "80,20"}, {"data_path", tiny_dataset_path()},
           {"data_parallel_size", "4"}, {"bf16", "1"}, {"use_distributed_optimizer", "1"}})
    cfg.set(k, val);
  Trainer tr(TrainerOptions::from_config(cfg));
  plan::ModelSpec m;
  m.layers = 4;
  m.hidden = 32;
  m.heads = 4;
  m.seq = 16;
  m.vocab = tr.options().model.vocab_size;
  plan::TrainSpec ts;
  ts.global_batch = 8;
  ts.num_gpus = 4;
  ts.dtype = plan::DType::bf16;
  ts.distributed_optimizer = true;
  plan::Layout L;
  L.d = 4, L.b = 2;
  const plan::Prediction P = plan::predict(m, ts, plan::load_machine("selene"), L, false);
  for (int r = 0; r < 4; r++) {
    AdamW &a = tr.optimizer(r);
    const double engine = 3.0 * (double)(a.hi() - a.lo()) * sizeof(float);
    EXPECT_NEAR(engine, P.memory.optimizer, 0.05 * P.memory.optimizer) << "data rank " << r;
    if (r == 0)
      std::printf("optimizer state per data rank (d = 4, bf16): engine %.0f bytes, planner %.0f\n",
                  engine, P.memory.optimizer);
  }
}
