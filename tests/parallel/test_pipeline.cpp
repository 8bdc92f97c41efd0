// Pipeline parallelism against the serial run (ARCHITECTURE §3, §4): model
// chunks, every schedule with and without scatter/gather and recomputation on
// 8 thread ranks, the transfers each layout must make, the activation memory
// recomputation saves, and the errors for layouts that cannot work.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <nlohmann/json.hpp>

#include "engine/core/status.h"
#include "engine/train/trainer.h"
#include "tests/support/config_options.h"
#include "tests/support/expect_error.h"
#include "tests/support/pipeline_config.h"
#include "tests/support/tiny_dataset.h"
#include "tests/support/tiny_model.h"
#include "tests/support/trained_run.h"

using namespace ptdp;

namespace {

GptConfig chunk_model() { return tiny_gpt(8, 24, 4, 40, 5); }

struct Batch {
  int s, b;
  std::vector<int32_t> tokens, targets;
};

Batch make_batch(const GptConfig &c, int b) {
  Batch bt{c.seq_length, b, {}, {}};
  for (int i = 0; i < bt.s * b; i++) {
    bt.tokens.push_back((i * 7 + 3) % c.vocab_size);
    bt.targets.push_back((i * 11 + 5) % c.vocab_size);
  }
  return bt;
}

double max_rel_diff(const double *a, const double *b, size_t n) {
  double scale = 1e-30, diff = 0;
  for (size_t i = 0; i < n; i++) {
    scale = std::max(scale, std::abs(a[i]));
    diff = std::max(diff, std::abs(a[i] - b[i]));
  }
  return diff / scale;
}

}  // namespace

// The model split into p*v chunks, run chunk by chunk in virtual-stage order
// (no communication needed at t = 1), in double: the loss and every gradient
// equal the serial model's. The tied embedding's gradient is the sum of the
// first and last stages' parts.
TEST(PipelineModel, ChunksMatchSerialInDouble) {
  const GptConfig cfg = chunk_model();
  const Batch bt = make_batch(cfg, 3);
  const int N = bt.s * bt.b, h = cfg.hidden_size;
  const StepContext ctx{true, 2, 17};
  GPT<double> serial(cfg, 8);
  const double serial_loss = serial.forward(bt.tokens.data(), bt.targets.data(), bt.s, bt.b, ctx);
  serial.backward(1.0 / N);

  for (auto [p, v] : {std::pair{2, 1}, {4, 1}, {2, 2}, {4, 2}, {8, 1}}) {
    std::vector<std::unique_ptr<GPT<double>>> st;
    for (int r = 0; r < p; r++)
      st.push_back(std::make_unique<GPT<double>>(cfg, 8, TensorParallel{}, PipelineStage{r, p, v}));
    std::vector<double> x((size_t)N * h), y((size_t)N * h);
    double loss = 0;
    for (int vs = 0; vs < p * v; vs++) {  // virtual stage vs = chunk * p + rank
      GPT<double> &m = *st[(size_t)(vs % p)];
      loss = m.forward_chunk(vs / p, 0, bt.tokens.data(), bt.targets.data(), x.data(), y.data(),
                             bt.s, bt.b, ctx);
      std::swap(x, y);
    }
    EXPECT_NEAR(loss, serial_loss, 1e-13 * serial_loss) << "p=" << p << " v=" << v;
    for (int vs = p * v - 1; vs >= 0; vs--) {
      GPT<double> &m = *st[(size_t)(vs % p)];
      m.backward_chunk(vs / p, 0, x.data(), y.data(), 1.0 / N);
      std::swap(x, y);
    }
    for (const ParamInfo &sp : serial.param_table()) {
      std::vector<double> g(sp.numel, 0.0);
      int holders = 0;
      for (auto &m : st)
        if (const ParamInfo *q = m->find_param(sp.name)) {
          holders++;
          for (size_t i = 0; i < q->numel; i++) g[i] += m->grads()[q->offset + i];
        }
      EXPECT_EQ(holders, sp.name == "wte.weight" ? 2 : 1) << sp.name;
      // Same operations in the same order except the tied embedding's final sum.
      EXPECT_LT(max_rel_diff(serial.grads() + sp.offset, g.data(), sp.numel), 1e-13)
          << "p=" << p << " v=" << v << " " << sp.name;
    }
    for (auto &m : st) EXPECT_EQ(m->stashed_bytes(), 0) << "every stash released";
  }
}

// Full recomputation replays the same forward: gradients are bit-identical,
// and only the recomputed units' inputs stay stashed.
TEST(PipelineModel, RecomputationGivesIdenticalGradients) {
  GptConfig cfg = chunk_model();
  const Batch bt = make_batch(cfg, 2);
  const int N = bt.s * bt.b;
  const StepContext ctx{true, 5, 3};
  GPT<double> plain(cfg, 4);
  plain.forward(bt.tokens.data(), bt.targets.data(), bt.s, bt.b, ctx);
  const int64_t full = plain.stashed_bytes();
  plain.backward(1.0 / N);
  for (Recompute rc : {Recompute{true, RecomputeMethod::uniform, 1},
                       Recompute{true, RecomputeMethod::uniform, 3},
                       Recompute{true, RecomputeMethod::uniform, 8},
                       Recompute{true, RecomputeMethod::block, 2}}) {
    GPT<double> m(cfg, 4, TensorParallel{}, PipelineStage{}, rc);
    m.forward(bt.tokens.data(), bt.targets.data(), bt.s, bt.b, ctx);
    EXPECT_LT(m.stashed_bytes(), full);
    m.backward(1.0 / N);
    for (size_t i = 0; i < m.num_params(); i++)
      ASSERT_EQ(m.grads()[i], plain.grads()[i]) << "element " << i << " method "
                                                << (int)rc.method << " k=" << rc.num_layers;
  }
}

// ---- training on 8 thread ranks ----

namespace {

struct Layout {
  int t, p, d, v;
  std::string schedule;
  bool scatter_gather, recompute;
};

std::string layout_name(const Layout &l) {
  std::string s = "t" + std::to_string(l.t) + "p" + std::to_string(l.p) + "d" +
                  std::to_string(l.d) + "v" + std::to_string(l.v) + "_" + l.schedule;
  if (l.t > 1) s += l.scatter_gather ? "_sg" : "_nosg";
  if (l.recompute) s += "_recompute";
  return s;
}

Config run_config(const Layout &l) {
  Config c = pipeline_test_config(l.t, l.p, l.d, l.v);
  c.set("pipeline_schedule", l.schedule);
  c.set("scatter_gather_tensors_in_pipeline", l.scatter_gather ? "1" : "0");
  if (l.recompute) {
    c.set("recompute_granularity", "full");
    c.set("recompute_num_layers", "1");
  }
  return c;
}

constexpr int kSteps = 3;

TrainedRun train(const Layout &l) {
  return train_run(TrainerOptions::from_config(run_config(l)), kSteps);
}

std::vector<Layout> matrix() {
  std::vector<Layout> out;
  const int base[][4] = {{1, 2, 1, 1}, {1, 4, 1, 1}, {2, 2, 1, 1}, {1, 2, 1, 2},
                         {1, 4, 1, 2}, {2, 2, 2, 2}, {2, 4, 1, 2}};
  for (auto &b : base)
    for (std::string sched : {"gpipe", "1f1b", "interleaved"}) {
      // GPipe runs any v; 1F1B needs v = 1 and interleaving v > 1.
      if (sched == (b[3] > 1 ? "1f1b" : "interleaved")) continue;
      for (bool sg : {true, false}) {
        if (b[0] == 1 && !sg) continue;  // scatter/gather needs t > 1
        for (bool rc : {false, true})
          out.push_back({b[0], b[1], b[2], b[3], sched, sg, rc});
      }
    }
  return out;
}

}  // namespace

class PipelineEquivalence : public ::testing::TestWithParam<Layout> {};

// Training steps with dropout give the serial losses and parameters.
TEST_P(PipelineEquivalence, MatchesSerial) {
  static const TrainedRun serial = train({1, 1, 1, 1, "1f1b", true, false});
  expect_matches_serial(train(GetParam()), serial);
}

INSTANTIATE_TEST_SUITE_P(Matrix, PipelineEquivalence, ::testing::ValuesIn(matrix()),
                         [](const auto &info) { return layout_name(info.param); });

// Recomputation changes memory, not numbers: the same layout's losses are
// bit-identical with and without it, full or selective (the probabilities
// computed again from the same QKV with the same dropout bits).
TEST(Pipeline, RecomputationLeavesLossesIdentical) {
  for (const char *sched : {"1f1b", "gpipe"}) {
    TrainedRun a = train({2, 2, 1, 1, sched, true, false});
    TrainedRun b = train({2, 2, 1, 1, sched, true, true});
    for (int i = 0; i < kSteps; i++) EXPECT_EQ(a.losses[i], b.losses[i]) << sched << " step " << i;
    Config sel = run_config({2, 2, 1, 1, sched, true, false});
    sel.set("recompute_granularity", "selective");
    TrainedRun c = train_run(TrainerOptions::from_config(sel), kSteps);
    for (int i = 0; i < kSteps; i++) EXPECT_EQ(a.losses[i], c.losses[i]) << sched << " step " << i;
    for (size_t k = 0; k < a.params.size(); k++)
      EXPECT_TRUE(same_bits(a.params[k], c.params[k])) << sched << " selective, tensor " << k;
  }
}

namespace {
int64_t pp_send_bytes(const Trainer &tr, int local) {
  return tr.comm_stats(local, "pp").bytes[(int)CommOp::send];
}
}  // namespace

// Bytes between stages per boundary per micro-batch: b*s*h/t floats with
// scatter/gather and b*s*h without (forward activations and backward
// gradients alike); the receiver's all-gather restores the full tensor.
TEST(Pipeline, BoundaryBytesFollowScatterGather) {
  const int64_t bsh = 2 * 16 * 32, m = 8, f = sizeof(float);
  for (bool sg : {true, false}) {
    Trainer tr(TrainerOptions::from_config(run_config({2, 2, 1, 1, "1f1b", sg, false})));
    tr.step();
    for (int r = 0; r < 4; r++) {
      // p = 2: stage 0 sends m activations, stage 1 m gradients.
      EXPECT_EQ(pp_send_bytes(tr, r), m * f * (sg ? bsh / 2 : bsh)) << "rank " << r;
      EXPECT_EQ(tr.comm_stats(r, "pp").calls[(int)CommOp::send], m);
    }
    // Tensor group traffic from the receivers' all-gathers only with scatter/gather.
    const int ag = (int)CommOp::all_gather;
    EXPECT_EQ(tr.comm_stats(0, "tp").bytes[ag], sg ? m * f * bsh / 2 : 0);
  }
}

// Interleaving sends each rank's boundary tensors once per model chunk: v
// times the sends of the non-interleaved schedule on every rank but the last
// stage's, which has no successor after its last chunk.
TEST(Pipeline, InterleavingSendsPerChunk) {
  const int64_t bsh = 2 * 16 * 32, m = 8, f = sizeof(float);
  Trainer plain(TrainerOptions::from_config(run_config({1, 4, 1, 1, "1f1b", true, false})));
  Trainer inter(TrainerOptions::from_config(run_config({1, 4, 1, 2, "interleaved", true, false})));
  plain.step();
  inter.step();
  int64_t total_plain = 0, total_inter = 0;
  for (int st = 0; st < 4; st++) {
    total_plain += pp_send_bytes(plain, st);
    total_inter += pp_send_bytes(inter, st);
    if (st > 0 && st < 3) {
      EXPECT_EQ(pp_send_bytes(inter, st), 2 * pp_send_bytes(plain, st)) << "stage " << st;
    }
  }
  // p*v - 1 boundaries each way against p - 1.
  EXPECT_EQ(total_plain, 2 * 3 * m * bsh * f);
  EXPECT_EQ(total_inter, 2 * 7 * m * bsh * f);
  // The tied embedding's gradient goes between the first and the last stage.
  const int64_t wte = (int64_t)plain.model(0).param("wte.weight").numel * f;
  EXPECT_EQ(plain.comm_stats(0, "embedding").bytes[(int)CommOp::all_reduce], wte);
  EXPECT_EQ(plain.comm_stats(3, "embedding").bytes[(int)CommOp::all_reduce], wte);
}

// The activations a stage keeps for backward, from the shapes: 1F1B keeps
// p - stage micro-batches in flight on a stage; full recomputation keeps only
// each unit's input; selective recomputation all but the probabilities.
TEST(Pipeline, RecomputationStashesWhatIsPredicted) {
  const int64_t s = 16, b = 2, N = s * b, h = 32, a = 4, f4 = 4 * h, Lc = 4, fl = sizeof(float);
  // Per layer: x, ln1, ln2, mid [N,h]; LN statistics 2 x 2N; qkv [N,3h];
  // context [N,h]; fc1 pre/post GeLU 2 x [N,4h]; probabilities and their
  // dropped copy 2 x [b,a,s,s].
  const int64_t layer = fl * (4 * N * h + 4 * N + 3 * N * h + N * h + 2 * N * f4 + 2 * b * a * s * s);
  const int64_t tokens = 4 * N, input = fl * N * h;
  struct Case {
    const char *method;
    int k;
    int64_t per_microbatch;  // stage 0 of p = 2: embedding chunk of 4 layers
  } cases[] = {{"none", 0, tokens + Lc * layer},
               {"uniform", 1, tokens + Lc * input},
               {"uniform", 2, tokens + 2 * input},
               {"uniform", 4, tokens + input},
               {"block", 1, tokens + input + 3 * layer},
               {"block", 3, tokens + 3 * input + layer},
               {"selective", 0, tokens + Lc * (layer - fl * 2 * b * a * s * s)}};
  for (const Case &c : cases) {
    Config cfg = run_config({1, 2, 1, 1, "1f1b", true, false});
    if (std::string(c.method) == "selective") {
      cfg.set("recompute_granularity", "selective");
    } else if (std::string(c.method) != "none") {
      set_options(cfg, {{"recompute_granularity", "full"}, {"recompute_method", c.method},
                        {"recompute_num_layers", std::to_string(c.k)}});
    }
    Trainer tr(TrainerOptions::from_config(cfg));
    tr.step();
    EXPECT_EQ(tr.rank_report(0).peak_activation_bytes, 2 * c.per_microbatch)
        << c.method << " " << c.k;  // 2 micro-batches in flight on stage 0
    EXPECT_EQ(tr.model(0).stashed_bytes(), 0);
  }
  // GPipe keeps all m = 8 micro-batches.
  Trainer gp(TrainerOptions::from_config(run_config({1, 2, 1, 1, "gpipe", true, false})));
  gp.step();
  EXPECT_EQ(gp.rank_report(0).peak_activation_bytes, 8 * (tokens + Lc * layer));
  // The device's own count holds the parameters, gradients, Adam's two moments
  // and the stash at its peak; GPipe's larger stash shows there too.
  const Trainer::RankReport &g = gp.rank_report(0);
  const int64_t state = 4 * (int64_t)gp.model(0).num_params() * (int64_t)sizeof(float);
  EXPECT_GE(g.device_peak_bytes, state + g.peak_activation_bytes);
  EXPECT_GE(g.device_peak_bytes, g.device_in_use_bytes);
  Trainer f(TrainerOptions::from_config(run_config({1, 2, 1, 1, "1f1b", true, false})));
  f.step();
  EXPECT_GT(g.device_peak_bytes - f.rank_report(0).device_peak_bytes,
            g.peak_activation_bytes - f.rank_report(0).peak_activation_bytes - 1);
}

// Validation loss and greedy samples do not depend on the layout.
TEST(Pipeline, EvaluateAndGenerateMatchSerial) {
  Trainer serial(TrainerOptions::from_config(run_config({1, 1, 1, 1, "1f1b", true, false})));
  Trainer pipe(TrainerOptions::from_config(run_config({2, 2, 2, 2, "interleaved", true, false})));
  serial.step();
  pipe.step();
  EXPECT_NEAR(pipe.evaluate(2), serial.evaluate(2), 1e-5);
  EXPECT_EQ(pipe.generate("Th", 12, 0.0, 1), serial.generate("Th", 12, 0.0, 1));
  EXPECT_EQ(pipe.generate("", 8, 0.8, 3), serial.generate("", 8, 0.8, 3));
  // Past the model's positions: the KV cache's steps, then the last window
  // again each step (max_position_embeddings is seq_length here).
  const int window = serial.options().model.max_positions();
  const std::string long_serial = serial.generate("Th", 3 * window, 0.7, 5);
  EXPECT_EQ(pipe.generate("Th", 3 * window, 0.7, 5), long_serial);
  EXPECT_GT(long_serial.size(), (size_t)window + 2) << "the text ended before the window did";
}

// The timeline: one track per rank, each with its F and B spans labelled by
// micro-batch and chunk, the stage transfers and the collectives.
TEST(Pipeline, TimelineHasEveryRanksSpans) {
  namespace fs = std::filesystem;
  const std::string path = (fs::path(tiny_dataset_path()).parent_path() / "trace.json").string();
  Config cfg = run_config({2, 2, 2, 2, "interleaved", true, false});
  cfg.set("timeline", path);
  Trainer tr(TrainerOptions::from_config(cfg));
  tr.step();
  tr.step();
  std::ifstream in(path);
  nlohmann::json j = nlohmann::json::parse(in);
  std::map<int, int> fb, p2p, all_reduce;
  std::set<std::pair<int, int>> seen;  // (microbatch, chunk) of rank 0's forwards
  for (auto &e : j["traceEvents"]) {
    if (e["ph"] != "X") continue;
    int tid = e["tid"];
    std::string cat = e["cat"];
    if (cat == "forward" || cat == "backward") fb[tid]++;
    if (cat == "send" || cat == "recv") p2p[tid]++;
    if (e["name"] == "all_reduce") all_reduce[tid]++;
    if (tid == 0 && cat == "forward") seen.insert({e["args"]["microbatch"].get<int>(), e["args"]["chunk"].get<int>()});
  }
  ASSERT_EQ(fb.size(), 8u);
  for (auto [tid, n] : fb) EXPECT_EQ(n, 2 * 4 * 2) << "rank " << tid << ": m=4, v=2, F and B";
  for (int r = 0; r < 8; r++) {
    EXPECT_GT(p2p[r], 0) << r;
    EXPECT_GT(all_reduce[r], 0) << r;
  }
  EXPECT_EQ(seen.size(), 8u);
  // Where the time went: compute plus idle is the step.
  for (int r = 0; r < 8; r++) {
    Trainer::RankReport rep = tr.rank_report(r);
    EXPECT_GT(rep.compute_seconds, 0);
    EXPECT_LE(rep.compute_seconds, rep.step_seconds);
  }
  EXPECT_GT(tr.replayed_bubble(), 0);
}

// --profile-ops: each rank's time per op for the step just taken, and the run
// is the one without it, bit for bit.
TEST(Pipeline, OpProfileHasEveryRanksTable) {
  namespace fs = std::filesystem;
  const std::string path = (fs::path(tiny_dataset_path()).parent_path() / "ops.txt").string();
  Config cfg = run_config({2, 2, 2, 2, "interleaved", true, false});
  Trainer plain(TrainerOptions::from_config(cfg));
  cfg.set("profile_ops", path);
  Trainer tr(TrainerOptions::from_config(cfg));
  for (int i = 0; i < 2; i++) EXPECT_EQ(tr.step().lm_loss, plain.step().lm_loss) << "step " << i;
  // The tables, each starting with its "rank N (tp, pp, dp) on DEVICE" line.
  std::ifstream in(path);
  std::vector<std::string> tables;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("rank ", 0) == 0) tables.emplace_back();
    ASSERT_FALSE(tables.empty()) << "the file starts with: " << line;
    tables.back() += line + "\n";
  }
  ASSERT_EQ(tables.size(), 8u);
  for (const std::string &table : tables) {
    EXPECT_NE(table.find("iteration 2"), std::string::npos) << table;
    // Every rank runs layers, their backward and the optimizer.
    for (const char *op : {"gemm ", "layernorm_forward", "layernorm_backward", "adamw_update", "total"})
      EXPECT_NE(table.find(op), std::string::npos) << op << " in\n" << table;
  }
}

// With one stage the replayed schedule has no bubble.
TEST(Pipeline, NoBubbleWithoutPipeline) {
  Trainer tr(TrainerOptions::from_config(run_config({2, 1, 2, 1, "1f1b", true, false})));
  tr.step();
  EXPECT_NEAR(tr.replayed_bubble(), 0.0, 1e-12);
}

TEST(Pipeline, BadLayoutsAreClearErrors) {
  auto cfg = [](int p, int layers, int per_chunk, const char *sched) {
    Config c = run_config({1, 1, 1, 1, "1f1b", true, false});
    set_options(c, {{"pipeline_model_parallel_size", std::to_string(p)},
                    {"num_layers", std::to_string(layers)},
                    {"num_layers_per_virtual_pipeline_stage", std::to_string(per_chunk)},
                    {"pipeline_schedule", sched}});
    return c;
  };
  auto opts = [](const Config &c) { TrainerOptions::from_config(c); };
  expect_error([&] { opts(cfg(3, 8, 0, "1f1b")); }, Status::invalid_config,
               "num_layers (8) must be divisible by pipeline_model_parallel_size x virtual stages "
               "(3 x 1 = 3)");
  expect_error([&] { opts(cfg(2, 8, 3, "auto")); }, Status::invalid_config,
               "must be divisible by pipeline_model_parallel_size x "
               "num_layers_per_virtual_pipeline_stage (2 x 3 = 6)");
  expect_error([&] { opts(cfg(1, 8, 2, "auto")); }, Status::invalid_config,
               "virtual pipeline stages (v = 4) need pipeline_model_parallel_size > 1");
  expect_error([&] { opts(cfg(16, 8, 0, "1f1b")); }, Status::invalid_config,
               "16 pipeline stages but only 8 layers");
  // m = 16 / 2 = 8 micro-batches; interleaving over p = 4... is fine, over 3 not.
  Config c = cfg(2, 8, 2, "interleaved");
  c.set("global_batch_size", "6");
  expect_error([&] { opts(c); }, Status::invalid_config,
               "the interleaved schedule needs the number of micro-batches (3) to be a multiple "
               "of pipeline_model_parallel_size (2)");
  expect_error([&] { opts(cfg(2, 8, 2, "1f1b")); }, Status::invalid_config,
               "1f1b runs one model chunk per rank; v=2 needs the interleaved or zbv schedule");
  expect_error([&] { opts(cfg(2, 8, 4, "interleaved")); }, Status::invalid_config,
               "the interleaved schedule needs v >= 2");
  Config bad;
  expect_error([&] { bad.set("pipeline_schedule", "zero-bubble"); }, Status::bad_value,
               "{auto,gpipe,1f1b,interleaved,zbh1,zbv}");
  Config r = cfg(2, 8, 0, "1f1b");
  r.set("recompute_granularity", "full");
  r.set("recompute_num_layers", "5");
  expect_error([&] { opts(r); }, Status::invalid_config,
               "recompute_num_layers (5) exceeds the layers per model chunk (4");
  // Which layers to recompute means full recomputation (Megatron's rule), not silence.
  for (const char *granularity : {"none", "selective"}) {
    Config s = cfg(2, 8, 0, "1f1b");
    s.set("recompute_granularity", granularity);
    s.set("recompute_method", "block");
    expect_error([&] { opts(s); }, Status::invalid_config,
                 std::string("recompute_method chooses the layers of full recomputation, but "
                             "recompute_granularity is '") + granularity + "'");
  }
}
