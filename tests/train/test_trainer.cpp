// The training loop: learning, determinism, gradient accumulation, schedule,
// configuration errors.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>

#include "engine/core/status.h"
#include "engine/core/utf8.h"
#include "tests/support/config_options.h"
#include "tests/support/expect_error.h"
#include "tests/support/temp_dir.h"
#include "tests/support/tiny_dataset.h"
#include "engine/core/output_file.h"
#include "engine/train/metrics.h"
#include "engine/data/corpus.h"
#include "engine/device/device.h"
#include "engine/train/trainer.h"

using namespace ptdp;

namespace {

Config tiny_config() {
  Config c;
  set_options(c, {{"num_layers", "2"}, {"hidden_size", "64"}, {"num_attention_heads", "4"},
                  {"seq_length", "32"}, {"micro_batch_size", "4"}, {"global_batch_size", "8"},
                  {"train_iters", "200"}, {"lr", "3e-3"}, {"min_lr", "3e-4"},
                  {"lr_warmup_iters", "5"}, {"split", "80,20"}, {"eval_iters", "2"},
                  {"data_path", tiny_dataset_path()}});
  return c;
}


}  // namespace

TEST(Trainer, LossFallsOnASmallCorpus) {
  Config c = tiny_config();
  set_options(c, {{"hidden_dropout", "0"}, {"attention_dropout", "0"}, {"lr", "1e-2"},
                  {"min_lr", "1e-3"}, {"train_iters", "200"}});
  Trainer t(TrainerOptions::from_config(c));
  double first = t.step().lm_loss;
  // Byte vocabulary of 257: an untrained model starts near ln(257) = 5.55.
  EXPECT_NEAR(first, std::log(257.0), 0.3);
  double last = 0;
  for (int i = 1; i < 200; i++) last = t.step().lm_loss;
  // 200 steps of 8 x 32 tokens on ~3 KB of English. Observed: 5.53 -> 2.74 with
  // a unigram entropy of 2.98. Asserted: a fall of at least 2.5 nats, and below
  // the unigram entropy by 0.1 (the model has learnt more than byte frequencies).
  EXPECT_LT(last, first - 2.5) << "first " << first;
  EXPECT_LT(last, t.unigram_entropy() - 0.1) << "entropy " << t.unigram_entropy();
  double val = t.evaluate(2);
  EXPECT_TRUE(std::isfinite(val));
  EXPECT_LT(val, first);
}

TEST(Trainer, SameSeedGivesBitIdenticalLosses) {
  Config c = tiny_config();
  c.set("hidden_dropout", "0.1");
  c.set("attention_dropout", "0.1");
  Trainer a(TrainerOptions::from_config(c)), b(TrainerOptions::from_config(c));
  for (int i = 0; i < 5; i++) {
    double la = a.step().lm_loss, lb = b.step().lm_loss;
    ASSERT_EQ(la, lb) << "step " << i;
  }
  c.set("seed", "99");
  Trainer d(TrainerOptions::from_config(c));
  EXPECT_NE(a.step().lm_loss, d.step().lm_loss);
  EXPECT_EQ(a.generate("The ", 20, 0.0, 0), b.generate("The ", 20, 0.0, 0));
  EXPECT_EQ(a.generate("The ", 20, 0.9, 7), a.generate("The ", 20, 0.9, 7));
  // The nucleus of a tiny top_p, or top_k 1, is the most likely token alone: greedy.
  const std::string greedy = a.generate("The ", 20, 0.0, 0);
  EXPECT_EQ(a.generate("The ", 20, 3.0, 7, 0, 1e-9), greedy);
  EXPECT_EQ(a.generate("The ", 20, 3.0, 7, 1, 1.0), greedy);
  EXPECT_EQ(a.generate("The ", 20, 0.9, 7, 0, 1.0), a.generate("The ", 20, 0.9, 7));
  EXPECT_THROW(a.generate("The ", 4, 1.0, 7, -1, 1.0), Error);
  EXPECT_THROW(a.generate("The ", 4, 1.0, 7, 0, 1.5), Error);
  // Greedy decoding samples nothing: a top_k or top_p with it would be ignored.
  expect_error([&] { a.generate("The ", 4, 0.0, 7, 5, 1.0); }, Status::invalid_argument,
               "top_k 5 limits the tokens sampled from, and temperature 0 samples none");
  expect_error([&] { a.generate("The ", 4, 0.0, 7, 0, 0.5); }, Status::invalid_argument,
               "top_p 0.5");
}

// Strict optimizer semantics (ARCHITECTURE §3): splitting the global batch into
// more micro-batches changes only the summation order, dropout included.
TEST(Trainer, MicroBatchSplitDoesNotChangeTheRun) {
  Config c = tiny_config();
  set_options(c, {{"hidden_dropout", "0.1"}, {"attention_dropout", "0.1"},
                  {"micro_batch_size", "8"}});
  Trainer one(TrainerOptions::from_config(c));
  c.set("micro_batch_size", "2");
  Trainer four(TrainerOptions::from_config(c));
  for (int i = 0; i < 5; i++) {
    StepMetrics a = one.step(), b = four.step();
    // fp32 sums in another order: agreement to ~1e-6 relative; 2e-5 after 5 steps.
    EXPECT_NEAR(a.lm_loss, b.lm_loss, 2e-5 * a.lm_loss) << "step " << i;
    EXPECT_NEAR(a.grad_norm, b.grad_norm, 1e-3 * a.grad_norm) << "step " << i;
  }
  GPT<float> &m1 = one.model(), &m4 = four.model();
  double max_diff = 0;
  for (size_t i = 0; i < m1.num_params(); i++)
    max_diff = std::max(max_diff, (double)std::abs(m1.params()[i] - m4.params()[i]));
  EXPECT_LT(max_diff, 1e-4);  // lr 3e-3 steps; differences stay far below one step
}

TEST(Trainer, LearningRateSchedule) {
  LrSchedule s{1.0, 0.1, 10, 110, "cosine"};
  EXPECT_DOUBLE_EQ(s.at(1), 0.1);
  EXPECT_DOUBLE_EQ(s.at(10), 1.0);
  EXPECT_NEAR(s.at(60), 0.55, 1e-12);  // halfway through the decay
  EXPECT_DOUBLE_EQ(s.at(110), 0.1);
  EXPECT_DOUBLE_EQ(s.at(500), 0.1);
  s.style = "linear";
  EXPECT_NEAR(s.at(35), 1.0 - 0.9 * 0.25, 1e-12);
  s.style = "constant";
  EXPECT_DOUBLE_EQ(s.at(100), 1.0);
}

TEST(Trainer, ConfigErrorsNameTheProblem) {
  Config c;
  expect_error([&] { c.set("num_layer", "2"); }, Status::unknown_option, "num_layers");
  expect_error([&] { c.set("num_layers", "two"); }, Status::bad_value, "must be an integer");
  expect_error([&] { c.set("num_layers", "0"); }, Status::bad_value, "must be in [1, 4096]");
  // An integer's bounds in the digits it takes ("[0, 1e+18]" beside a refused '1e9').
  expect_error([&] { c.set("exit_interval", "1e9"); }, Status::bad_value,
               "exit_interval must be an integer in [0, 1000000000000000000], got '1e9'");
  // A user's key or value quoted on one line (a newline broke the message in two).
  expect_error([&] { c.set("num_layers\n", "2"); }, Status::unknown_option, "unknown option 'num_layers\\x0A'");
  expect_error([&] { c.set("num_layers", "2\r\n"); }, Status::bad_value, "got '2\\x0D\\x0A'");
  expect_error([&] { c.set("lr_decay_style", "step"); }, Status::bad_value, "constant,linear,cosine");
  expect_error([&] { c.set("hidden_dropout", "1.5"); }, Status::bad_value, "hidden_dropout");
  // A text of white space alone is none (' ' was "not set" as data_path, a
  // directory named ' ' as save); '' leaves it unset.
  for (const char *key : {"data_path", "save", "load", "split", "device"})
    expect_error([&] { c.set(key, " \t"); }, Status::bad_value, std::string(key) + " is white space alone");
  c.set("save", "");

  Config heads = tiny_config();
  heads.set("num_attention_heads", "5");
  expect_error([&] { TrainerOptions::from_config(heads); }, Status::invalid_config,
               "num_attention_heads (5) must divide hidden_size (64)");
  Config seq = tiny_config();
  seq.set("max_position_embeddings", "16");
  expect_error([&] { TrainerOptions::from_config(seq); }, Status::invalid_config,
               "longer than max_position_embeddings");
  Config gb = tiny_config();
  gb.set("global_batch_size", "10");
  expect_error([&] { TrainerOptions::from_config(gb); }, Status::invalid_config,
               "divisible by micro_batch_size");
  Config nodata = tiny_config();
  nodata.set("data_path", "/nonexistent/x.ptdp");
  expect_error([&] { Trainer t(TrainerOptions::from_config(nodata)); }, Status::io_error,
               "cannot open dataset");
  Config long_seq = tiny_config();
  long_seq.set("seq_length", "4096");
  expect_error([&] { Trainer t(TrainerOptions::from_config(long_seq)); }, Status::invalid_config,
               "at least seq_length+1");
  // Per-step outputs onto a directory: refused before the first step.
  const std::string dir = testing::TempDir();
  for (const char *key : {"timeline", "profile_ops"}) {
    Config out = tiny_config();
    out.set(key, dir);
    expect_error([&] { Trainer t(TrainerOptions::from_config(out)); }, Status::invalid_argument,
                 "is a directory");
  }
}

// An output of a run is never one of its inputs (engine/core/output_file.h):
// a per-step output naming the dataset, under another spelling too, is
// refused before the first step and the dataset stays as it was; once a
// checkpoint is loaded its files are inputs as well.
// Valid options the layout leaves idle are said, not refused (a sweep over
// layouts gives each the same flags): they ran without a word.
TEST(Trainer, AConstantRateTheWarmupOutlastsIsRefused) {
  Config c = tiny_config();
  set_options(c, {{"lr_decay_style", "constant"}, {"lr_warmup_iters", "100"}, {"train_iters", "3"}});
  expect_error([&] { TrainerOptions::from_config(c); }, Status::invalid_config,
               "train_iters (3) must exceed lr_warmup_iters (100) with a constant learning rate");
  c.set("lr_warmup_iters", "2");
  EXPECT_NO_THROW(TrainerOptions::from_config(c));
}

TEST(Trainer, OptionsTheLayoutLeavesIdleAreNoted) {
  Config c = tiny_config();
  EXPECT_TRUE(idle_option_notes(TrainerOptions::from_config(c)).empty());
  set_options(c, {{"sequence_parallel", "1"}, {"use_distributed_optimizer", "1"},
                  {"scatter_gather_tensors_in_pipeline", "0"}, {"use_flash_attn", "1"},
                  {"recompute_granularity", "selective"}});
  const std::vector<std::string> notes = idle_option_notes(TrainerOptions::from_config(c));
  ASSERT_EQ(notes.size(), 4u);
  EXPECT_NE(notes[0].find("--sequence-parallel has no effect here"), std::string::npos) << notes[0];
  EXPECT_NE(notes[1].find("--use-distributed-optimizer has no effect here"), std::string::npos);
  EXPECT_NE(notes[2].find("--no-scatter-gather-tensors-in-pipeline has no effect"), std::string::npos);
  EXPECT_NE(notes[3].find("flash attention keeps no [s, s]"), std::string::npos) << notes[3];
  // Where they act, nothing is said.
  Config acts = tiny_config();
  set_options(acts, {{"tensor_model_parallel_size", "2"}, {"pipeline_model_parallel_size", "2"},
                     {"data_parallel_size", "2"}, {"num_layers", "4"}, {"sequence_parallel", "1"},
                     {"overlap_grad_reduce", "1"}, {"scatter_gather_tensors_in_pipeline", "0"}});
  EXPECT_TRUE(idle_option_notes(TrainerOptions::from_config(acts)).empty());
  c.set("use_distributed_optimizer", "0");
  c.set("overlap_grad_reduce", "1");
  EXPECT_NE(idle_option_notes(TrainerOptions::from_config(c))[1].find("--overlap-grad-reduce"),
            std::string::npos);
  Config bucket = tiny_config();
  bucket.set("ddp_bucket_size", "1000");
  const std::vector<std::string> bucket_notes = idle_option_notes(TrainerOptions::from_config(bucket));
  ASSERT_EQ(bucket_notes.size(), 1u);
  EXPECT_NE(bucket_notes[0].find("--ddp-bucket-size has no effect here"), std::string::npos);
  // A schedule at p = 1 (zbh1 ran with nothing said; gpipe holds more).
  for (const char *schedule : {"zbh1", "gpipe", "1f1b"}) {
    Config one = tiny_config();
    one.set("pipeline_schedule", schedule);
    const std::vector<std::string> said = idle_option_notes(TrainerOptions::from_config(one));
    if (std::string(schedule) == "1f1b") {
      EXPECT_TRUE(said.empty());
      continue;
    }
    ASSERT_EQ(said.size(), 1u) << schedule;
    EXPECT_NE(said[0].find(std::string("--pipeline-schedule ") + schedule), std::string::npos) << said[0];
  }
}

TEST(Trainer, OutputsNeverOverwriteTheRunsInputs) {
  TempDir dir;
  const std::string data = dir.path + "/data.ptdp", alias = dir.path + "/./data.ptdp";
  write_file(data, read_file(tiny_dataset_path()));  // its own copy: the shared one stays safe
  const std::string before = read_file(data);
  Config c = tiny_config();
  c.set("data_path", data);
  c.set("train_iters", "10");
  for (const char *key : {"timeline", "profile_ops"}) {
    Config out = c;
    out.set(key, alias);
    expect_error([&] { Trainer t(TrainerOptions::from_config(out)); }, Status::invalid_argument,
                 "is the dataset '" + data + "' this run reads");
  }
  EXPECT_EQ(read_file(data), before);
  Trainer a(TrainerOptions::from_config(c));
  expect_error([&] { append_json_line(data, "{}", false); }, Status::invalid_argument,
               "refusing to overwrite an input");
  a.step();
  const std::string ckpt = a.save(dir.path + "/ckpt");
  Trainer b(TrainerOptions::from_config(c));
  b.load(dir.path + "/ckpt");
  const std::string manifest = ckpt + "/manifest.json", saved = read_file(manifest);
  expect_error([&] { write_file_atomic(manifest, "x", "--log-json", ptdp::OutputKind::any); }, Status::invalid_argument,
               "is inside the checkpoint directory '" + ckpt + "'");
  // Outside the checkpoint, a hard link to its manifest is still the loaded
  // checkpoint's file (compared by identity).
  const std::string linked = dir.path + "/linked.json";
  ASSERT_EQ(::link(manifest.c_str(), linked.c_str()), 0);
  expect_error([&] { write_file_atomic(linked, "x", "--log-json", ptdp::OutputKind::any); }, Status::invalid_argument,
               "' this run reads");
  EXPECT_EQ(read_file(manifest), saved);
  EXPECT_EQ(read_file(data), before);
}

TEST(Trainer, DeviceChoiceErrorsNameTheChoices) {
  Config c = tiny_config();
  c.set("device", "tpu");
  expect_error([&] { Trainer t(TrainerOptions::from_config(c)); }, Status::bad_value,
               "device 'tpu' (allowed: auto, cpu, cuda, cuda:N)");
  if (cuda_device_count() == 0) {
    c.set("device", "cuda");
    expect_error([&] { Trainer t(TrainerOptions::from_config(c)); }, Status::invalid_config,
                 "device 'cuda:0' asked for");
  }
  c.set("device", "cpu");
  Trainer t(TrainerOptions::from_config(c));
  EXPECT_TRUE(std::isfinite(t.step().lm_loss));
}

// Megatron logs the lm loss as the mean over the log interval; skipped steps
// (an fp16 overflow) are left out unless the interval has nothing else. The
// time per iteration is the mean over every step of the interval.
TEST(LogInterval, MeansSincePreviousRead) {
  LogInterval w;
  auto loss = [&](int64_t it) { return w.mean_at(it, {-1.0, -1.0}).lm_loss; };
  EXPECT_EQ(loss(0), -1.0);  // no step yet
  w.add(1.0, false, 0.5);
  w.add(2.0, false, 1.0);
  w.add(6.0, false, 3.0);
  EXPECT_EQ(loss(3), 3.0);
  EXPECT_EQ(w.mean_at(3, {}).seconds, 1.5);  // the log line, then its JSON record
  w.add(10.0, false, 1.0);
  w.add(1e9, true, 2.0);  // skipped: its loss left out, its time counted
  EXPECT_EQ(loss(5), 10.0);
  EXPECT_EQ(w.mean_at(5, {}).seconds, 1.5);
  w.add(4.0, true, 1.0);
  w.add(8.0, true, 1.0);
  EXPECT_EQ(loss(7), 6.0);  // all skipped: their mean, not a made-up 0
}

// The log line and record at iteration 3 show the mean of steps 1-3, while
// the step's own metrics (and ptdp_trainer_get lm_loss) stay the last step's.
TEST(Trainer, LogLineShowsTheMeanOverTheLogInterval) {
  const TrainerOptions o = TrainerOptions::from_config(tiny_config());
  Trainer a(o), b(o);
  double l[3];
  for (double &x : l) {
    x = a.step().lm_loss;
    EXPECT_EQ(a.log_metrics().lm_loss, x);  // logged every step: the step's loss
  }
  double ms = 0, tokens = 0;  // the interval's time, and the tokens it trained on
  for (int i = 0; i < 3; i++) {
    const StepMetrics m = b.step();
    EXPECT_EQ(m.lm_loss, l[i]);
    ms += m.elapsed_ms;
    tokens += m.tokens_per_s * m.elapsed_ms * 1e-3;
  }
  // Time per iteration and throughput over the interval too, as Megatron's.
  EXPECT_NEAR(b.log_metrics().elapsed_ms, ms / 3, 1e-9 * ms);
  EXPECT_NEAR(b.log_metrics().tokens_per_s, tokens / (ms * 1e-3), 1e-9 * tokens / (ms * 1e-3));
  const double mean = (l[0] + l[1] + l[2]) / 3;
  EXPECT_NE(mean, l[2]);
  EXPECT_EQ(b.log_metrics().lm_loss, mean);
  EXPECT_EQ(b.last_metrics().lm_loss, l[2]);
  char want[32];
  std::snprintf(want, sizeof want, "lm loss: %.6E", mean);
  EXPECT_NE(format_log_line(b.log_metrics()).find(want), std::string::npos)
      << format_log_line(b.log_metrics());
  EXPECT_NE(format_log_json(b.log_metrics()).find("\"lm_loss\": " + json_number(mean)),
            std::string::npos);
  b.step();  // the next interval starts after the last read
  EXPECT_EQ(b.log_metrics().lm_loss, b.last_metrics().lm_loss);
}

// A NaN loss (0/0 has its sign bit set) is logged as "nan", as Megatron logs
// it: printf would write "-nan".
TEST(Trainer, ALogLineWritesNanWithoutASign) {
  StepMetrics m;
  m.lm_loss = -std::numeric_limits<double>::quiet_NaN();
  m.grad_norm = -std::numeric_limits<double>::quiet_NaN();
  const std::string line = format_log_line(m);
  EXPECT_NE(line.find("lm loss: NAN |"), std::string::npos) << line;  // (%E writes it in capitals)
  EXPECT_NE(line.find("grad norm: nan |"), std::string::npos) << line;
  EXPECT_EQ(line.find("-nan"), std::string::npos) << line;
  EXPECT_EQ(line.find("-NAN"), std::string::npos) << line;
}

// An untrained byte-level model samples arbitrary bytes: the text it returns
// is still valid UTF-8 (ill-formed parts replaced), and not empty.
TEST(Trainer, GeneratedTextIsValidUtf8) {
  Trainer t(TrainerOptions::from_config(tiny_config()));
  const std::string s = t.generate("", 200, 2.0, 7);
  EXPECT_FALSE(s.empty());
  EXPECT_EQ(valid_utf8(s), s);
}

// A trainer that fails to start removes the --save directories it made (a
// corrected run would find them in its way) and keeps every one that was there.
TEST(Trainer, ARefusedStartLeavesNoSaveDirectoryBehind) {
  TempDir dir;
  Config c = tiny_config();
  set_options(c, {{"save", dir.path + "/a/b/c"}, {"data_path", dir.path + "/no_such.ptdp"}});
  EXPECT_THROW(Trainer t(TrainerOptions::from_config(c)), Error);
  EXPECT_FALSE(std::filesystem::exists(dir.path + "/a"));
  std::filesystem::create_directories(dir.path + "/kept/empty");
  c.set("save", dir.path + "/kept/empty/new");
  EXPECT_THROW(Trainer t(TrainerOptions::from_config(c)), Error);
  EXPECT_TRUE(std::filesystem::is_directory(dir.path + "/kept/empty"));
  EXPECT_FALSE(std::filesystem::exists(dir.path + "/kept/empty/new"));
  c.set("save", dir.path + "/kept/empty/../started");  // a started run keeps its directory
  c.set("data_path", tiny_dataset_path());
  Trainer t(TrainerOptions::from_config(c));
  EXPECT_TRUE(std::filesystem::is_directory(dir.path + "/kept/started"));
}
