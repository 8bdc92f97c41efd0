// Trainer checkpoints (ARCHITECTURE §5): round trips for every pipeline
// layout, bit-exact resumption, resharding between layouts, retention, and
// every bad input and fault named by the issue, each asserting its message.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include <cmath>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <algorithm>
#include <functional>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "checkpoints/commit.h"
#include "checkpoints/inspect.h"
#include "checkpoints/safetensors_export.h"
#include "checkpoints/save_target.h"
#include "checkpoints/sharded_checkpoint.h"
#include "engine/data/corpus.h"
#include "engine/data/sampler.h"
#include "engine/train/config.h"
#include "engine/train/trainer.h"
#include "tests/support/config_options.h"
#include "tests/support/expect_error.h"
#include "tests/support/temp_dir.h"
#include "tests/support/pipeline_config.h"

using namespace ptdp;
namespace fs = std::filesystem;

namespace {

struct Layout {
  int t, p, d, v;
};

std::string name_of(const Layout &l) {
  return "t" + std::to_string(l.t) + "p" + std::to_string(l.p) + "d" + std::to_string(l.d) + "v" +
         std::to_string(l.v);
}

// lr_warmup_iters 2: the resumed steps are still in warmup (LR restored exactly).
Config config(const Layout &l) {
  Config c = pipeline_test_config(l.t, l.p, l.d, l.v);
  c.set("lr_warmup_iters", "2");
  return c;
}

TrainerOptions options(const Layout &l) { return TrainerOptions::from_config(config(l)); }

std::vector<std::string> param_names(const TrainerOptions &o) {
  std::vector<std::string> names;
  for (const ParamInfo &p : gpt_param_table(o.model, 1, {})) names.push_back(p.name);
  return names;
}

// Every rank's flat parameter and moment buffers, exactly.
void expect_same_state(Trainer &a, Trainer &b) {
  ASSERT_EQ(a.local_ranks(), b.local_ranks());
  for (int r = 0; r < a.local_ranks(); r++) {
    const size_t n = a.model(r).num_params();
    ASSERT_EQ(n, b.model(r).num_params());
    for (auto pick : {0, 1, 2}) {
      const float *x = pick == 0 ? a.model(r).params()
                       : pick == 1 ? a.optimizer(r).exp_avg()
                                   : a.optimizer(r).exp_avg_sq();
      const float *y = pick == 0 ? b.model(r).params()
                       : pick == 1 ? b.optimizer(r).exp_avg()
                                   : b.optimizer(r).exp_avg_sq();
      size_t bad = 0;
      for (size_t i = 0; i < n; i++) bad += x[i] != y[i];
      EXPECT_EQ(bad, 0u) << "rank " << r << " buffer " << pick;
    }
  }
  EXPECT_EQ(a.iteration(), b.iteration());
  EXPECT_EQ(a.consumed_samples(), b.consumed_samples());
}

const std::vector<Layout> kLayouts = {{1, 1, 1, 1}, {1, 2, 1, 1}, {1, 4, 1, 1}, {2, 2, 1, 1},
                                      {1, 2, 1, 2}, {1, 4, 1, 2}, {2, 2, 2, 2}, {2, 4, 1, 2},
                                      {4, 1, 2, 1}};

}  // namespace

// Save after two steps, load into a fresh trainer of the same layout: every
// parameter and moment of every rank comes back bit for bit, and so do the
// iteration and consumed samples.
class RoundTrip : public ::testing::TestWithParam<Layout> {};

TEST_P(RoundTrip, RestoresEveryRankExactly) {
  TempDir dir;
  Trainer a(options(GetParam()));
  a.step();
  a.step();
  const std::string saved = a.save(dir.path);
  EXPECT_EQ(saved, dir.path + "/iter_0000002");
  Trainer b(options(GetParam()));
  const std::string msg = b.load(dir.path);
  EXPECT_NE(msg.find("iter_0000002"), std::string::npos) << msg;
  EXPECT_NE(msg.find("from the tracker"), std::string::npos) << msg;
  expect_same_state(a, b);
  EXPECT_TRUE(checkpoint_faults(saved).empty());
}

INSTANTIATE_TEST_SUITE_P(Layouts, RoundTrip, ::testing::ValuesIn(kLayouts),
                         [](const auto &info) { return name_of(info.param); });

// Training 3 steps, saving, and resuming for 3 more in a new trainer gives
// bit-identical losses and grad norms to 6 uninterrupted steps (dropout on).
class Resume : public ::testing::TestWithParam<Layout> {};

TEST_P(Resume, IsBitExact) {
  TempDir dir;
  std::vector<StepMetrics> straight;
  {
    Trainer tr(options(GetParam()));
    for (int i = 0; i < 6; i++) straight.push_back(tr.step());
  }
  {
    Trainer first(options(GetParam()));
    for (int i = 0; i < 3; i++) first.step();
    first.save(dir.path);
  }
  TrainerOptions o = options(GetParam());
  o.load_path = dir.path;  // as --load does
  Trainer resumed(o);
  EXPECT_EQ(resumed.iteration(), 3);
  for (int i = 3; i < 6; i++) {
    StepMetrics m = resumed.step();
    EXPECT_EQ(m.lm_loss, straight[(size_t)i].lm_loss) << "step " << i + 1;
    EXPECT_EQ(m.grad_norm, straight[(size_t)i].grad_norm) << "step " << i + 1;
    EXPECT_EQ(m.lr, straight[(size_t)i].lr);
    EXPECT_EQ(m.consumed_samples, straight[(size_t)i].consumed_samples);
  }
}

INSTANTIATE_TEST_SUITE_P(Layouts, Resume,
                         ::testing::Values(Layout{1, 1, 1, 1}, Layout{2, 2, 2, 2}, Layout{1, 4, 1, 2}),
                         [](const auto &info) { return name_of(info.param); });

// Loading under another layout is resharding: right after the load every
// parameter, assembled from the new shards, equals the saved one bit for bit,
// and the next steps' losses equal those of continuing in the saved layout up
// to summation order (the tolerance of trained_run.h: 1e-5 relative).
struct Reshard {
  Layout from, to;
};
class Resharding : public ::testing::TestWithParam<Reshard> {};

TEST_P(Resharding, ContinuesLikeTheSavedLayout) {
  TempDir dir;
  const Reshard rs = GetParam();
  Trainer a(options(rs.from));
  a.step();
  a.step();
  a.save(dir.path);
  std::vector<std::vector<float>> saved;
  for (const std::string &n : param_names(a.options())) saved.push_back(a.gather_parameter(n));
  Trainer b(options(rs.to));
  const std::string msg = b.load(dir.path);
  EXPECT_NE(msg.find("saved with (t=" + std::to_string(rs.from.t)), std::string::npos) << msg;
  const std::vector<std::string> names = param_names(b.options());
  for (size_t k = 0; k < names.size(); k++)
    EXPECT_EQ(b.gather_parameter(names[k]), saved[k]) << names[k];
  for (int i = 0; i < 2; i++) {
    const double la = a.step().lm_loss, lb = b.step().lm_loss;
    EXPECT_NEAR(lb, la, 1e-5 * la) << "step " << i + 3;
  }
  EXPECT_EQ(b.iteration(), 4);
}

INSTANTIATE_TEST_SUITE_P(
    Pairs, Resharding,
    ::testing::Values(Reshard{{2, 2, 2, 2}, {1, 4, 1, 1}}, Reshard{{2, 2, 2, 2}, {4, 1, 2, 1}},
                      Reshard{{2, 2, 2, 2}, {1, 1, 1, 1}}, Reshard{{1, 1, 1, 1}, {2, 4, 1, 2}},
                      Reshard{{4, 1, 2, 1}, {1, 2, 2, 2}}, Reshard{{1, 4, 1, 2}, {2, 1, 4, 1}},
                      Reshard{{2, 4, 1, 2}, {4, 2, 1, 1}}),
    [](const auto &info) { return name_of(info.param.from) + "_to_" + name_of(info.param.to); });

// The LLaMA family's block (4 query heads over 2 key/value heads, RMSNorm,
// rope, SwiGLU, untied head, QKV bias only) reshards like GPT-2's: its query
// groups, gate, up and untied head split over the new tensor ranks.
Config llama_config(const Layout &l) {
  Config c = config(l);
  for (auto [k, v] : {std::pair<const char *, const char *>{"normalization", "RMSNorm"},
                      {"position_embedding_type", "rope"},
                      {"num_query_groups", "2"},
                      {"swiglu", "1"},
                      {"ffn_hidden_size", "88"},
                      {"untie_embeddings_and_output_weights", "1"},
                      {"disable_bias_linear", "1"},
                      {"add_qkv_bias", "1"}})
    c.set(k, v);
  return c;
}

TEST(LlamaCheckpoint, ReshardsToOtherLayouts) {
  TempDir dir;
  Trainer a(TrainerOptions::from_config(llama_config({2, 2, 2, 2})));
  a.step();
  a.step();
  a.save(dir.path);
  std::vector<std::string> names = param_names(a.options());
  EXPECT_NE(std::find(names.begin(), names.end(), "lm_head.weight"), names.end());
  for (const Layout &to : {Layout{1, 1, 1, 1}, Layout{1, 4, 1, 1}, Layout{2, 1, 2, 1}}) {
    Trainer b(TrainerOptions::from_config(llama_config(to)));
    b.load(dir.path);
    for (const std::string &n : names) EXPECT_EQ(b.gather_parameter(n), a.gather_parameter(n)) << n;
  }
  // A GPT-2 run refuses it, naming the fields that differ.
  Trainer gpt2(options({1, 1, 1, 1}));
  expect_error([&] { gpt2.load(dir.path); }, Status::invalid_config,
               "normalization: checkpoint RMSNorm, this run LayerNorm");
  // A model of the LLaMA family exports to a directory: a file is refused,
  // nothing written.
  const std::string out = dir.path + "/model.safetensors";
  expect_error([&] { export_safetensors(dir.path, out); }, Status::invalid_argument,
               "exports to a directory");
  EXPECT_FALSE(fs::exists(out));
}

// A manifest written before the LLaMA family's fields existed (no such keys)
// loads as GPT-2's block, which is what those runs trained.
TEST(LlamaCheckpoint, ManifestsWithoutTheNewFieldsAreGpt2) {
  TempDir dir;
  Trainer a(options({1, 1, 1, 1}));
  a.step();
  const std::string ckpt = a.save(dir.path);
  nlohmann::json j = nlohmann::json::parse(read_file(ckpt + "/manifest.json"));
  for (const GptConfigField &f : gpt_config_fields())
    if (f.optional_in_manifest) {
      EXPECT_EQ(j["model"].erase(f.name), 1u) << f.name;
    }
  j.erase("manifest_crc32c");  // as those manifests had none
  write_file(ckpt + "/manifest.json", j.dump(1));
  Trainer b(options({1, 1, 1, 1}));
  EXPECT_NO_THROW(b.load(dir.path));
  expect_same_state(a, b);
}

// The first run of `--save X --load X`: nothing to load yet, so it starts
// from iteration 0 and says so; the second run resumes.
TEST(CheckpointRetention, LoadFromAnEmptySaveDirectoryStartsFresh) {
  TempDir dir;
  TrainerOptions o = options({1, 2, 1, 1});
  o.save_path = o.load_path = dir.path;
  o.save_interval = 2;
  {
    Trainer first(o);
    EXPECT_EQ(first.iteration(), 0);
    EXPECT_NE(first.last_loaded().find("starting from iteration 0"), std::string::npos)
        << first.last_loaded();
    first.step();
    first.step();
  }
  Trainer second(o);
  EXPECT_EQ(second.iteration(), 2);
  EXPECT_NE(second.last_loaded().find("iter_0000002"), std::string::npos) << second.last_loaded();
}

// A rewind (loading an earlier checkpoint of the --save directory) replaces
// the newer ones as it saves: the trainer says so at its start.
TEST(CheckpointRetention, ARewindNamesTheNewerCheckpointsItsSavesReplace) {
  TempDir dir;
  TrainerOptions o = options({1, 1, 1, 1});
  o.save_path = dir.path;
  o.save_interval = 1;
  {
    Trainer first(o);
    for (int i = 0; i < 3; i++) first.step();
  }
  o.load_path = dir.path + "/iter_0000001";
  ::testing::internal::CaptureStderr();
  { Trainer rewound(o); }
  const std::string said = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(said.find("holds 2 checkpoints newer than the one loaded (iteration 1), the newest '" +
                      dir.path + "/iter_0000003'"),
            std::string::npos)
      << said;
  o.load_path = dir.path;  // the newest: nothing newer
  ::testing::internal::CaptureStderr();
  { Trainer resumed(o); }
  EXPECT_EQ(::testing::internal::GetCapturedStderr().find("newer than"), std::string::npos);
  // One of those it cannot replace (a user's file in it) stops the rewind
  // before its first step, and stays as it is (its save swapped it out under
  // the .tmp name, where every later save stopped).
  std::ofstream(dir.path + "/iter_0000003/notes.txt") << "mine";
  o.load_path = dir.path + "/iter_0000001";
  expect_error([&] { Trainer rewound(o); }, Status::io_error,
               "iter_0000003/notes.txt', which no save made: this run, resumed at iteration 1, would "
               "replace it as it saves");
  EXPECT_TRUE(fs::exists(dir.path + "/iter_0000003/notes.txt"));
  EXPECT_FALSE(fs::exists(dir.path + "/iter_0000003.tmp"));
  o.train_iters = 2;  // one this run never reaches is left alone
  EXPECT_NO_THROW(Trainer short_rewind(o));
}

// A resume with another batch size or optimizer option goes on with it (as
// Megatron's) and says which differ; the same options say nothing.
TEST(CheckpointRetention, AResumeWithOtherOptimizerOptionsNamesThem) {
  TempDir dir;
  TrainerOptions o = options({1, 1, 1, 1});
  o.save_path = dir.path;
  {
    Trainer first(o);
    first.step();
    first.save(dir.path);
  }
  o.load_path = dir.path;
  ::testing::internal::CaptureStderr();
  { Trainer same(o); }
  const std::string quiet = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(quiet.find("other options"), std::string::npos) << quiet;
  EXPECT_EQ(quiet.find("does not record"), std::string::npos) << quiet;
  TrainerOptions changed = o;
  changed.adam.weight_decay = o.adam.weight_decay + 0.25;
  changed.clip_grad = o.clip_grad + 1;
  changed.model.hidden_dropout = 0;
  ::testing::internal::CaptureStderr();
  { Trainer resumed(changed); }
  const std::string said = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(said.find("weight_decay: checkpoint " + number_text(o.adam.weight_decay) +
                      ", this run " + number_text(changed.adam.weight_decay) +
                      "; clip_grad: checkpoint " + number_text(o.clip_grad)),
            std::string::npos)
      << said;
  EXPECT_NE(said.find("hidden_dropout: checkpoint 0.1, this run 0"),
            std::string::npos)
      << said;
  // A manifest without a recorded option (an older one, without its own
  // checksum) cannot be compared on it: said, not passed in silence (a resume
  // with another seed went on without a word).
  const std::string manifest = dir.path + "/iter_0000001/manifest.json";
  nlohmann::json j = nlohmann::json::parse(read_file(manifest));
  j.erase("manifest_crc32c");
  EXPECT_EQ(j["training"].erase("seed"), 1u);
  EXPECT_EQ(j["training"].erase("clip_grad"), 1u);
  EXPECT_EQ(j["training"].erase("data_fingerprint"), 1u);
  write_file(manifest, j.dump(1));
  TrainerOptions reseeded = o;
  reseeded.seed = o.seed + 1;
  ::testing::internal::CaptureStderr();
  { Trainer unchecked(reseeded); }
  const std::string noted = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(noted.find("does not record seed, clip_grad, data_fingerprint: this run's values are used"),
            std::string::npos) << noted;
}

TEST(CheckpointRetention, SaveIntervalAndKeepLast) {
  TempDir dir;
  TrainerOptions o = options({1, 2, 1, 1});
  o.save_path = dir.path;
  o.save_interval = 1;
  o.keep_last_checkpoints = 2;
  Trainer tr(o);
  for (int i = 0; i < 4; i++) tr.step();
  std::vector<std::string> names;
  for (auto &e : fs::directory_iterator(dir.path)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"iter_0000003", "iter_0000004", "latest"}));
}

// ---- bad input and faults ----

class CheckpointFaults : public ::testing::Test {
 protected:
  void SetUp() override {
    Trainer tr(options({2, 2, 1, 1}));
    tr.step();
    ckpt = tr.save(dir.path);
    file = ckpt + "/model.h5";
  }
  std::string load_error(const TrainerOptions &o, const std::string &path) {
    try {
      Trainer tr(o);
      tr.load(path);
    } catch (const Error &e) {
      return e.what();
    }
    return "";
  }
  TempDir dir;
  std::string ckpt, file;
};

TEST_F(CheckpointFaults, NothingToLoad) {
  TempDir empty;
  Trainer tr(options({1, 1, 1, 1}));
  expect_error([&] { tr.load(empty.path); }, Status::io_error, "no checkpoint to open");
  expect_error([&] { tr.load(empty.path + "/absent"); }, Status::io_error, "no checkpoint to open");
}

TEST_F(CheckpointFaults, UnfinishedSaveIsNeverTaken) {
  // What a save killed before its commit leaves: a .tmp directory, no manifest.
  fs::rename(ckpt, ckpt + ".tmp");
  fs::remove(ckpt + ".tmp/manifest.json");
  fs::remove(dir.path + "/latest");
  Trainer tr(options({1, 1, 1, 1}));
  expect_error([&] { tr.load(dir.path); }, Status::io_error, "unfinished save");
  expect_error([&] { tr.load(ckpt + ".tmp"); }, Status::io_error, "no manifest.json");
}

TEST_F(CheckpointFaults, MissingFile) {
  fs::remove(file);
  Trainer tr(options({1, 1, 1, 1}));
  expect_error([&] { tr.load(dir.path); }, Status::corrupt_data, "model.h5' is missing");
}

TEST_F(CheckpointFaults, TruncatedFile) {
  const uintmax_t whole = fs::file_size(file);
  fs::resize_file(file, whole / 2);
  Trainer tr(options({1, 1, 1, 1}));
  expect_error([&] { tr.load(dir.path); }, Status::corrupt_data, "truncated");
  EXPECT_FALSE(checkpoint_faults(ckpt).empty());
  // inspect reads the manifest, and says the file disagrees with it.
  EXPECT_NE(inspect_checkpoint(ckpt).find("is " + std::to_string(whole / 2) +
                                          " bytes but the manifest says " + std::to_string(whole)),
            std::string::npos);
}

// The data file as a link to a file elsewhere (of the very bytes recorded):
// refused by the load and by verify (which export runs), not read through.
TEST_F(CheckpointFaults, LinkedDataFile) {
  const std::string elsewhere = dir.path + "/elsewhere.h5";
  fs::rename(file, elsewhere);
  fs::create_symlink(elsewhere, file);
  Trainer tr(options({1, 1, 1, 1}));
  expect_error([&] { tr.load(dir.path); }, Status::corrupt_data, "model.h5' is a symbolic link");
  // Refused before anything was read: the trainer is as it was, and trains.
  EXPECT_NO_THROW(tr.step());
  const std::vector<std::string> faults = checkpoint_faults(ckpt);
  ASSERT_EQ(faults.size(), 1u);
  EXPECT_NE(faults[0].find("is a symbolic link"), std::string::npos) << faults[0];
}

// One flipped bit inside a dataset's data: the load names the dataset and the
// block, and `verify` finds it; with verification off the load goes through.
TEST_F(CheckpointFaults, BitFlip) {
  std::string bytes = read_file(file);
  // The largest dataset fills most of the file: flip a bit in the middle of it.
  // Find its bytes by value: the first 16 bytes of the tensor as saved.
  Trainer src(options({1, 1, 1, 1}));
  src.load(dir.path);
  const std::vector<float> wte = src.gather_parameter("wte.weight");
  const std::string needle(reinterpret_cast<const char *>(wte.data() + 1000), 16);
  const size_t at = bytes.find(needle);
  ASSERT_NE(at, std::string::npos);
  bytes[at + 2] ^= 0x10;
  write_file(file, bytes);
  Trainer tr(options({1, 1, 1, 1}));
  expect_error([&] { tr.load(dir.path); }, Status::corrupt_data,
               "dataset '/model/wte.weight' block at [");
  // The trainer that failed part-way refuses to train on a mixed model.
  expect_error([&] { tr.step(); }, Status::wrong_state, "failed part-way");
  const std::vector<std::string> faults = checkpoint_faults(ckpt);
  ASSERT_EQ(faults.size(), 1u);
  EXPECT_NE(faults[0].find("checksum"), std::string::npos) << faults[0];
  TrainerOptions o = options({1, 1, 1, 1});
  o.verify_checkpoint = false;
  Trainer unchecked(o);
  EXPECT_NO_THROW(unchecked.load(dir.path));
}

// A manifest whose shape, or a checksum, disagrees with the file. The edits
// drop manifest_crc32c, as in a checkpoint saved before manifests had one
// (with it, the edit itself is the error: EditedManifestFieldIsDetected).
TEST_F(CheckpointFaults, ManifestDisagreesWithData) {
  const std::string original = read_file(ckpt + "/manifest.json");
  auto edit = [&](const std::function<void(nlohmann::json &)> &fn) {
    nlohmann::json j = nlohmann::json::parse(original);
    j.erase("manifest_crc32c");
    for (auto &d : j["datasets"])
      if (d["name"] == "/model/wpe.weight") fn(d);
    write_file(ckpt + "/manifest.json", j.dump(1));
  };
  edit([](nlohmann::json &d) {
    d["shape"][1] = 33;
    d["blocks"][0]["count"][1] = 33;
  });
  Trainer tr(options({1, 1, 1, 1}));
  expect_error([&] { tr.load(dir.path); }, Status::corrupt_data,
               "dataset '/model/wpe.weight' is [16, 32] but the manifest says [16, 33]");
  EXPECT_FALSE(checkpoint_faults(ckpt).empty());
  edit([](nlohmann::json &d) { d["blocks"][0]["crc32c"] = "00000000"; });
  Trainer tr2(options({1, 1, 1, 1}));
  expect_error([&] { tr2.load(dir.path); }, Status::corrupt_data, "the manifest says 00000000");
  // A dataset listed twice (verify counted it twice and passed).
  nlohmann::json twice = nlohmann::json::parse(original);
  twice.erase("manifest_crc32c");
  twice["datasets"].push_back(twice["datasets"][0]);
  write_file(ckpt + "/manifest.json", twice.dump(1));
  expect_error([&] { verify_checkpoint(ckpt, nullptr); }, Status::corrupt_data, "' is listed twice");
}

// The manifest's own fields are checksummed: an edited iteration (or any
// other field) is refused by load, verify and inspect, naming the manifest.
TEST_F(CheckpointFaults, EditedManifestFieldIsDetected) {
  const std::string path = ckpt + "/manifest.json", original = read_file(path);
  const std::string damage = "manifest.json': its fields do not match its checksum";
  auto edited = [&](const std::function<void(nlohmann::json &)> &fn) {
    nlohmann::json j = nlohmann::json::parse(original);
    ASSERT_TRUE(j.contains("manifest_crc32c")) << original;
    fn(j);
    write_file(path, j.dump(1));
  };
  edited([](nlohmann::json &j) { j["iteration"] = 3; });
  Trainer tr(options({1, 1, 1, 1}));
  expect_error([&] { tr.load(dir.path); }, Status::corrupt_data, damage);
  EXPECT_EQ(tr.iteration(), 0);
  expect_error([&] { verify_checkpoint(dir.path, nullptr); }, Status::corrupt_data, damage);
  expect_error([&] { inspect_checkpoint(ckpt); }, Status::corrupt_data, damage);
  ASSERT_EQ(checkpoint_faults(ckpt).size(), 1u);
  EXPECT_NE(checkpoint_faults(ckpt)[0].find(damage), std::string::npos) << checkpoint_faults(ckpt)[0];
  // Other fields: the training options, the file size, a block's checksum
  // together with the data it covers (the damage the block check alone misses).
  edited([](nlohmann::json &j) { j["training"]["seed"] = "7"; });
  expect_error([&] { Manifest::read(ckpt); }, Status::corrupt_data, damage);
  edited([](nlohmann::json &j) { j["file_bytes"] = j["file_bytes"].get<int64_t>() + 1; });
  expect_error([&] { Manifest::read(ckpt); }, Status::corrupt_data, damage);
  edited([](nlohmann::json &j) { j["manifest_crc32c"] = "0000000g"; });
  expect_error([&] { Manifest::read(ckpt); }, Status::corrupt_data, damage);
  // Layout is not content: the same fields re-indented still match.
  write_file(path, nlohmann::json::parse(original).dump(4));
  EXPECT_TRUE(Manifest::read(ckpt).checksummed);
  Trainer ok(options({1, 1, 1, 1}));
  EXPECT_NO_THROW(ok.load(dir.path));
  EXPECT_EQ(ok.iteration(), 1);
}

// Without the manifest's own checksum (an older checkpoint), the rules that do
// not need it still hold: its data file is a plain name inside its directory,
// its iteration is its directory's, and the stored state's.
TEST_F(CheckpointFaults, UncheckedManifestStillFollowsTheRules) {
  const std::string path = ckpt + "/manifest.json", original = read_file(path);
  auto unchecked = [&](const std::function<void(nlohmann::json &)> &fn) {
    nlohmann::json j = nlohmann::json::parse(original);
    j.erase("manifest_crc32c");
    fn(j);
    write_file(path, j.dump(1));
  };
  for (const char *file : {"../model.h5", "/etc/passwd", "sub/model.h5", "..", ""}) {
    unchecked([&](nlohmann::json &j) { j["file"] = file; });
    SCOPED_TRACE(file);
    expect_error([&] { Manifest::read(ckpt); }, Status::corrupt_data,
                 "' is not a plain file name inside the checkpoint's directory");
    Trainer tr(options({1, 1, 1, 1}));
    expect_error([&] { tr.load(ckpt); }, Status::corrupt_data, "is not a plain file name");
    expect_error([&] { inspect_checkpoint(ckpt); }, Status::corrupt_data, "is not a plain file name");
  }
  unchecked([](nlohmann::json &j) { j["iteration"] = 3; });
  for (const std::string &spelled : {ckpt, ckpt + "/", ckpt + "/."})
    expect_error([&] { Manifest::read(spelled); }, Status::corrupt_data,
                 "says iteration 3 but its directory is 'iter_0000001'");
  // The same manifest in a directory of its iteration: the stored state disagrees.
  const std::string moved = dir.path + "/iter_0000003";
  std::filesystem::rename(ckpt, moved);
  Trainer tr(options({1, 1, 1, 1}));
  expect_error([&] { tr.load(moved); }, Status::corrupt_data,
               "stores iteration 1 but its manifest says 3: the file belongs to another save");
  std::filesystem::rename(moved, ckpt);
  write_file(path, original);
}

// A checkpoint root's tracker is no output's, whether a load (or an export)
// read it or not: refused before the first step (the rule of
// engine/core/output_file.h, ahead of its "an input is no output" rule).
TEST_F(CheckpointFaults, TheTrackerReadIsAnInput) {
  const std::string tracker = dir.path + "/latest", before = read_file(tracker);
  TrainerOptions o = options({1, 1, 1, 1});
  o.load_path = dir.path;
  o.timeline_path = tracker;
  const std::string refused = "is the checkpoint tracker of '" + dir.path + "'";
  expect_error([&] { Trainer tr(o); }, Status::invalid_argument, refused);
  expect_error([&] { export_safetensors(dir.path, tracker, "f32"); }, Status::invalid_argument,
               refused);
  // Given the iter_N directory itself (the tracker not consulted): the same.
  expect_error([&] { export_safetensors(ckpt, tracker, "f32"); }, Status::invalid_argument, refused);
  // Nor a file inside a checkpoint (its manifest, say).
  o.timeline_path = ckpt + "/manifest.json";
  expect_error([&] { Trainer tr(o); }, Status::invalid_argument,
               "is inside the checkpoint directory '" + ckpt + "'");
  EXPECT_EQ(read_file(tracker), before);
}

// A checkpoint saved before manifests had their own checksum still loads,
// and load, inspect and verify say its manifest is unchecked.
TEST_F(CheckpointFaults, OlderManifestWithoutChecksumLoads) {
  nlohmann::json j = nlohmann::json::parse(read_file(ckpt + "/manifest.json"));
  j.erase("manifest_crc32c");
  write_file(ckpt + "/manifest.json", j.dump(1));
  EXPECT_FALSE(Manifest::read(ckpt).checksummed);
  Trainer tr(options({1, 1, 1, 1}));
  EXPECT_NO_THROW(tr.load(dir.path));
  EXPECT_EQ(tr.iteration(), 1);
  EXPECT_NE(tr.last_loaded().find("its manifest has no checksum of its own"), std::string::npos)
      << tr.last_loaded();
  bool ok = false;
  const std::string report = verify_checkpoint(ckpt, &ok);
  EXPECT_TRUE(ok) << report;
  EXPECT_NE(report.find("manifest checksum: none (an older checkpoint"), std::string::npos) << report;
  EXPECT_NE(inspect_checkpoint(ckpt).find("none (an older checkpoint"), std::string::npos);
  // A fresh save has one, and says it matches.
  EXPECT_NE(verify_checkpoint(tr.save(dir.path), &ok).find("manifest checksum: matches"),
            std::string::npos);
}

// --save into a directory holding another run's checkpoints stops the run
// before its first step, naming the directory and what differs; nothing
// there changes. The same run (another layout or micro-batch size, or a
// resume with --load of it) may save there.
TEST_F(CheckpointFaults, SaveAmongAnotherRunsCheckpointsIsRefused) {
  auto listing = [&] {
    std::vector<std::string> names;
    for (auto &e : fs::recursive_directory_iterator(dir.path))
      names.push_back(e.path().string() + " " +
                      std::to_string(fs::last_write_time(e).time_since_epoch().count()));
    std::sort(names.begin(), names.end());
    return names;
  };
  const std::vector<std::string> before = listing();
  const std::string head = "--save '" + dir.path + "' holds checkpoints of another run (newest: '" +
                           ckpt + "', iteration 1; ";
  Config c = config({1, 1, 1, 1});
  c.set("hidden_size", "64");
  TrainerOptions o = TrainerOptions::from_config(c);
  o.save_path = dir.path;
  expect_error([&] { Trainer tr(o); }, Status::invalid_config,
               head + "hidden_size: checkpoint 32, this run 64; ffn_hidden_size: checkpoint 128, "
                      "this run 256)");
  o = options({1, 1, 1, 1});
  o.save_path = dir.path;
  o.seed = 7;
  expect_error([&] { Trainer tr(o); }, Status::invalid_config, head + "seed: checkpoint 1234, this run 7)");
  o.seed = 1234;
  o.lr.max_lr = 1e-2;
  o.model.hidden_dropout = 0.2f;
  expect_error([&] { Trainer tr(o); }, Status::invalid_config,
               "hidden_dropout: checkpoint 0.1, this run 0.2; lr: checkpoint 0.003, this run 0.01)");
  expect_error([&] { Trainer tr(o); }, Status::invalid_config, "or resume that run with --load '");
  EXPECT_EQ(listing(), before);
  // Resuming it: the load checks the rest (here the LR schedule is overridden).
  o.model.hidden_dropout = 0.1f;
  o.override_opt_param_scheduler = true;
  o.load_path = dir.path + "/";
  EXPECT_NO_THROW(Trainer tr(o));
  o.load_path = ckpt;
  EXPECT_NO_THROW(Trainer tr(o));
  // The same run, in another layout and micro-batch size: resumed, not from
  // scratch (whose saves would replace its checkpoints and move 'latest' back).
  o = options({2, 1, 2, 1});
  o.micro_batch_size = 1;
  o.save_path = dir.path + "/";
  expect_error([&] { Trainer tr(o); }, Status::invalid_config,
               "holds this run's checkpoints (newest: '" + ckpt + "'), but this run loaded none");
  o.load_path = dir.path + "/no_such_checkpoint";  // a mistyped --load finds nothing
  expect_error([&] { Trainer tr(o); }, Status::invalid_config, "but this run loaded none");
  o.load_path = dir.path;
  EXPECT_NO_THROW(Trainer tr(o));
  EXPECT_EQ(listing(), before);
  // The directory of a manifest that cannot be read belongs to no one known.
  write_file(ckpt + "/manifest.json", "{");
  o.save_path = dir.path;
  o.load_path.clear();
  expect_error([&] { Trainer tr(o); }, Status::corrupt_data,
               "cannot be told whether they are this run's");
}

// --save through a link to nothing (the link itself, "link/", or below it)
// is refused naming the link, and the link stays: the cleanup of a refused
// run removes only directories it made, never what was there.
TEST(CheckpointSave, ADanglingLinkIsRefusedAndKept) {
  TempDir dir;
  const std::string link = dir.path + "/dang";
  ASSERT_EQ(::symlink("nowhere", link.c_str()), 0);
  for (const std::string &save : {link, link + "/", link + "/sub"}) {
    TrainerOptions o = options({1, 1, 1, 1});
    o.save_path = save;
    expect_error([&] { Trainer tr(o); }, Status::io_error,
                 "'" + link + "' is a symbolic link to nothing");
    EXPECT_TRUE(fs::is_symlink(fs::symlink_status(link))) << save;
  }
}

// The data is told by what it is, not by how data_path is spelled: a dataset
// rebuilt from another corpus under the same path is another run's data (its
// checkpoints stay), the same file through a link is the same run's.
TEST(CheckpointSave, AnotherRunIsToldByItsDataNotItsPathsSpelling) {
  TempDir dir;
  const std::string data = dir.path + "/d.ptdp", save = dir.path + "/s";
  ByteTokenizer tok;
  build_token_dataset({std::string(PTDP_TEST_DATA_DIR) + "/tiny_corpus.txt"}, "fortune", tok, data);
  TrainerOptions o = options({1, 1, 1, 1});
  o.data_path = data;
  o.save_path = save;
  {
    Trainer a(o);
    a.step();
    a.save(save);
  }
  const std::string link = dir.path + "/same.ptdp";
  ASSERT_EQ(::symlink(data.c_str(), link.c_str()), 0);
  TrainerOptions same = o;
  same.data_path = link;
  same.load_path = save;
  EXPECT_NO_THROW(Trainer b(same));
  fs::remove(data);
  build_token_dataset({std::string(PTDP_TEST_DATA_DIR) + "/capi_corpus.txt"}, "lines", tok, data);
  expect_error([&] { Trainer c(o); }, Status::invalid_config,
               "holds checkpoints of another run (newest: '" + save + "/iter_0000001', iteration 1; "
               "data_fingerprint: checkpoint 1:");
}

// A trainer that loaded no checkpoint saves (Trainer::save, the C ABI's and
// Lua's save) into a directory of its run only where nothing there is later
// than the save: a later one would be passed over by 'latest'.
TEST(CheckpointSave, ATrainerThatLoadedNoneDoesNotMoveLatestBack) {
  TempDir dir;
  const std::string save = dir.path + "/ck";
  TrainerOptions o = options({1, 1, 1, 1});
  {
    Trainer a(o);
    for (int i = 0; i < 3; i++) a.step();
    a.save(save);
  }
  Trainer b(o);
  b.step();
  expect_error([&] { b.save(save); }, Status::invalid_config,
               "holds this run's checkpoint of iteration 3 ('" + save + "/iter_0000003'), later than "
               "this save's iteration 1, and this trainer loaded none");
  EXPECT_EQ(find_latest_checkpoint(save), save + "/iter_0000003");
  for (int i = 0; i < 3; i++) b.step();
  EXPECT_NO_THROW(b.save(save));  // iteration 4: later than what is there
  EXPECT_EQ(find_latest_checkpoint(save), save + "/iter_0000004");
  Trainer c(o);  // one that loaded: its saves are its run's own to place
  c.load(save);
  EXPECT_NO_THROW(c.save(save));
  // The checkpoint it loaded, replaced by its new copy, is gone (kept, as a
  // file this run read, it stayed as iter_N.tmp in every later save's way).
  EXPECT_FALSE(fs::exists(save + "/iter_0000004.tmp"));
  EXPECT_NO_THROW(c.save(save));
}

// Every checkpoint there is looked at, not only the newest: rotation would
// remove the older ones, another run's among them. Here the newest (iteration
// 2) is this run's and iteration 1 another's (seed 1234).
TEST_F(CheckpointFaults, AnOlderCheckpointOfAnotherRunIsFound) {
  TrainerOptions mine = options({1, 1, 1, 1});
  mine.seed = 7;
  TempDir own;
  {
    Trainer b(mine);
    b.step();
    b.step();
    fs::copy(b.save(own.path), dir.path + "/iter_0000002", fs::copy_options::recursive);
  }
  mine.save_path = dir.path;
  expect_error([&] { Trainer tr(mine); }, Status::invalid_config,
               "holds checkpoints of another run (one of them: '" + ckpt +
                   "', iteration 1; seed: checkpoint 1234, this run 7)");
  EXPECT_TRUE(fs::exists(ckpt + "/manifest.json"));
}

// An explicit save (Trainer::save, the C ABI's and Lua's) keeps to the same
// rule: another run's directory is refused and left as it was; this run's own
// directory, and the one it resumed from, take its checkpoints.
TEST_F(CheckpointFaults, ExplicitSaveAmongAnotherRunsCheckpointsIsRefused) {
  TrainerOptions other = options({1, 1, 1, 1});
  other.seed = 7;
  Trainer b(other);
  b.step();
  const auto before = fs::last_write_time(ckpt + "/manifest.json");
  expect_error([&] { b.save(dir.path); }, Status::invalid_config,
               "holds checkpoints of another run (newest: '" + ckpt + "', iteration 1; seed: "
               "checkpoint 1234, this run 7)");
  EXPECT_EQ(fs::last_write_time(ckpt + "/manifest.json"), before);
  TempDir mine;
  EXPECT_NO_THROW(b.save(mine.path));
  b.step();
  EXPECT_NO_THROW(b.save(mine.path));  // its own checkpoints
  TrainerOptions same = options({1, 1, 1, 1});
  same.load_path = dir.path;
  Trainer a(same);
  a.step();
  EXPECT_NO_THROW(a.save(dir.path));  // the run it resumed
}

// Equal options do not make a fine-tuning the run it started from: resumed
// with --save naming that run, or saved there explicitly, it is refused by
// its lineage (the manifest's "lineage"), before it replaces or prunes a
// checkpoint; its own directory takes its checkpoints.
TEST_F(CheckpointFaults, AFineTunedRunIsAnotherRunWhateverItsOptions) {
  const std::string why = "lineage: checkpoint a run from scratch, this run fine-tuned from the "
                          "checkpoint of manifest digest ";
  const auto before = fs::last_write_time(ckpt + "/manifest.json");
  TrainerOptions ft = options({1, 1, 1, 1});
  ft.load_path = dir.path;
  ft.finetune = true;
  TempDir tuned;
  {
    Trainer f(ft);
    f.step();
    f.save(tuned.path);
    expect_error([&] { f.save(dir.path); }, Status::invalid_config, why);
  }
  TrainerOptions resumed = options({1, 1, 1, 1});
  resumed.load_path = tuned.path;
  resumed.save_path = dir.path;
  expect_error([&] { Trainer r(resumed); }, Status::invalid_config, why);
  EXPECT_EQ(fs::last_write_time(ckpt + "/manifest.json"), before);
  resumed.save_path = tuned.path;
  {
    Trainer r(resumed);
    r.step();
    EXPECT_NO_THROW(r.save(tuned.path));
  }
  // A run from scratch with --save the fine-tuning's directory: refused at its
  // start, not after its training.
  TrainerOptions scratch = options({1, 1, 1, 1});
  scratch.save_path = tuned.path;
  expect_error([&] { Trainer s(scratch); }, Status::invalid_config,
               "lineage: checkpoint fine-tuned from the checkpoint of manifest digest ");
  // A manifest saved before lineages (none recorded) counts as a run from
  // scratch: a fine-tuning of it is still another run.
  Manifest m = Manifest::read(ckpt);
  m.training.erase("lineage");
  write_file(ckpt + "/manifest.json", m.to_json());
  Trainer f(ft);
  f.step();
  expect_error([&] { f.save(dir.path); }, Status::invalid_config, why);
}

// A FIFO in place of the manifest or of the tracker is refused or passed over,
// never waited on (the regular-file rule of engine/core/mapped_file.h).
TEST_F(CheckpointFaults, FifoManifestOrTrackerIsNotWaitedOn) {
  const std::string tracker = dir.path + "/latest";
  fs::remove(tracker);
  ASSERT_EQ(mkfifo(tracker.c_str(), 0600), 0);
  Trainer tr(options({1, 1, 1, 1}));
  EXPECT_NO_THROW(tr.load(dir.path));  // the newest complete checkpoint, found without the tracker
  fs::remove(ckpt + "/manifest.json");
  ASSERT_EQ(mkfifo((ckpt + "/manifest.json").c_str(), 0600), 0);
  expect_error([&] { Manifest::read(ckpt); }, Status::io_error, "is not a regular file");
}

TEST_F(CheckpointFaults, ManifestNotJson) {
  write_file(ckpt + "/manifest.json", "{\"format\": \"ptdp-checkpoint\", ");
  Trainer tr(options({1, 1, 1, 1}));
  expect_error([&] { tr.load(ckpt); }, Status::corrupt_data, "is not valid JSON");
}

TEST_F(CheckpointFaults, DifferentModelNamesTheFields) {
  Config c = config({1, 1, 1, 1});
  set_options(c, {{"hidden_size", "64"}, {"num_layers", "4"},
                  {"num_layers_per_virtual_pipeline_stage", "4"}});
  Trainer tr(TrainerOptions::from_config(c));
  expect_error([&] { tr.load(dir.path); }, Status::invalid_config,
               "num_layers: checkpoint 8, this run 4; hidden_size: checkpoint 32, this run 64");
  EXPECT_NO_THROW(tr.step());  // refused before anything was read
}

TEST_F(CheckpointFaults, LayoutThatCannotHoldTheModel) {
  Config c = config({1, 1, 1, 1});
  c.set("tensor_model_parallel_size", "3");
  expect_error([&] { TrainerOptions::from_config(c); }, Status::invalid_config,
               "num_attention_heads");
  c = config({1, 1, 1, 1});
  c.set("pipeline_model_parallel_size", "16");
  c.set("num_layers_per_virtual_pipeline_stage", "0");
  expect_error([&] { TrainerOptions::from_config(c); }, Status::invalid_config,
               "16 pipeline stages but only 8 layers");
}

TEST_F(CheckpointFaults, OtherSeedOrSchedule) {
  TrainerOptions o = options({1, 1, 1, 1});
  o.seed = 7;
  EXPECT_NE(load_error(o, dir.path).find("seed: checkpoint 1234, this run 7"), std::string::npos)
      << load_error(o, dir.path);
  o = options({1, 1, 1, 1});
  o.lr.max_lr = 1e-2;
  EXPECT_NE(load_error(o, dir.path).find("lr: checkpoint 0.003, this run 0.01"),
            std::string::npos)
      << load_error(o, dir.path);
  o.override_opt_param_scheduler = true;
  EXPECT_EQ(load_error(o, dir.path), "");
}

TEST_F(CheckpointFaults, UnwritableDirectoryKeepsThePrevious) {
  write_file(dir.path + "/a_file", "x");
  Trainer tr(options({2, 2, 1, 1}));
  tr.step();
  tr.step();
  expect_error([&] { tr.save(dir.path + "/a_file/sub"); }, Status::io_error, "not saved");
  EXPECT_EQ(find_latest_checkpoint(dir.path), ckpt);
}

// A full disk during the save (the file-size limit makes every write past it
// fail with EFBIG): the error names the file, the unfinished directory is
// removed, the previous checkpoint stays the newest, and training goes on
// with the failure reported.
TEST_F(CheckpointFaults, FullDiskKeepsThePrevious) {
  TrainerOptions o = options({2, 2, 1, 1});
  o.save_path = dir.path;
  o.load_path = dir.path;  // resumes iteration 1
  o.save_interval = 2;
  Trainer tr(o);
  struct rlimit old;
  getrlimit(RLIMIT_FSIZE, &old);
  auto old_handler = std::signal(SIGXFSZ, SIG_IGN);
  struct rlimit small = old;
  small.rlim_cur = 64 * 1024;
  setrlimit(RLIMIT_FSIZE, &small);
  StepMetrics m = tr.step();  // iteration 2: its save fails
  setrlimit(RLIMIT_FSIZE, &old);
  std::signal(SIGXFSZ, old_handler);
  EXPECT_TRUE(std::isfinite(m.lm_loss));
  EXPECT_EQ(tr.failed_saves(), 1);
  EXPECT_NE(tr.last_save_error().find("checkpoint of iteration 2 not saved"), std::string::npos)
      << tr.last_save_error();
  EXPECT_NE(tr.last_save_error().find("model.h5"), std::string::npos) << tr.last_save_error();
  EXPECT_FALSE(fs::exists(dir.path + "/iter_0000002.tmp"));
  EXPECT_EQ(find_latest_checkpoint(dir.path), ckpt);
  EXPECT_TRUE(checkpoint_faults(ckpt).empty());
  tr.step();
  tr.step();  // iteration 4 saves again, now that there is room
  EXPECT_EQ(tr.last_save_error(), "");
  EXPECT_EQ(tr.failed_saves(), 1);  // still counted: the run reports it at the end
  EXPECT_EQ(find_latest_checkpoint(dir.path), dir.path + "/iter_0000004");
}

// An iter_N that is not there is said so (it was called an unfinished or
// damaged save); one that is there without its manifest is that.
TEST(CheckpointSave, AnIterationThatIsNotThereIsSaidSo) {
  TempDir dir;
  expect_error([&] { open_checkpoint(dir.path + "/iter_0000007"); }, Status::io_error,
               "iter_0000007' does not exist (No such file or directory)");
  expect_error([&] { open_checkpoint(dir.path + "/iter_0000007/"); }, Status::io_error,
               "iter_0000007/' does not exist (No such file or directory)");
  fs::create_directory_symlink(dir.path + "/nowhere", dir.path + "/iter_0000008");
  expect_error([&] { open_checkpoint(dir.path + "/iter_0000008"); }, Status::io_error,
               "iter_0000008' is a symbolic link to nothing; give a checkpoint directory");
  fs::create_directories(dir.path + "/iter_0000007");
  expect_error([&] { open_checkpoint(dir.path + "/iter_0000007"); }, Status::io_error,
               "has no manifest.json (an unfinished or damaged save)");
}

// A checkpoint a rotation removed after open_checkpoint found it: its data
// file's open says so (export, load and generate called it corrupt).
TEST(CheckpointSave, ACheckpointRemovedWhileReadIsSaidSo) {
  TempDir dir;
  Trainer a(options({1, 1, 1, 1}));
  a.step();
  a.save(dir.path);
  const CheckpointRef ref = open_checkpoint(dir.path);
  fs::rename(ref.dir, ref.dir + ".old");  // (rotation's first move)
  expect_error([&] { open_checkpoint_data(ref); }, Status::io_error, "was removed while it was read");
}

// A split is compared by the fractions it gives: written another way it is
// the same run (969,30,01 was "other options"); another split is not.
TEST(CheckpointRetention, ASplitWrittenAnotherWayIsTheSameSplit) {
  EXPECT_EQ(split_text("969,30,1"), split_text("1938, 60, 02"));
  EXPECT_EQ(split_text("98,2"), split_text("98,2,0"));
  EXPECT_NE(split_text("98,2"), split_text("97,3"));
  TempDir dir;
  TrainerOptions o = options({1, 1, 1, 1});
  o.split = "969,30,1";
  {
    Trainer first(o);
    first.step();
    first.save(dir.path);
  }
  o.load_path = o.save_path = dir.path;
  o.split = "1938,60,2";
  EXPECT_NO_THROW({ Trainer same(o); });
  o.split = "949,50,1";
  expect_error([&] { Trainer other(o); }, Status::invalid_config, "split: checkpoint 969,30,1, this run 949,50,1");
}
