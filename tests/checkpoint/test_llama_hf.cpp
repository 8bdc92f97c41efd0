// `ptdp ckpt import-safetensors` and `export-safetensors` of the LLaMA family
// against Hugging Face transformers: the fixtures in tests/checkpoint/hf/{llama,qwen2} (made by
// make_llama_fixtures.py with transformers 5.17: a sharded LlamaForCausalLM,
// 4 query heads over 2 key/value heads, rope_theta 500000, untied, vocabulary
// 103; a Qwen2ForCausalLM with QKV biases and a tied embedding) are imported
// from their model directories and loaded into several layouts, and must give
// transformers' logits; exported, they give back the fixture's tensors bit for
// bit and its config. Damaged copies must be refused by name.
#include <gtest/gtest.h>

#include <sys/stat.h>

#include <cstring>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "checkpoints/safetensors_export.h"
#include "checkpoints/safetensors_import.h"
#include "engine/train/config.h"
#include "engine/train/trainer.h"
#include "tests/support/config_options.h"
#include "tests/support/expect_error.h"
#include "tests/support/hf_fixture.h"
#include "tests/support/temp_dir.h"

using namespace ptdp;
namespace fs = std::filesystem;

namespace {

std::string fixture(const std::string &name) {
  return std::string(PTDP_HF_FIXTURE_DIR) + "/" + name;
}

struct Model {
  const char *dir;
  int layers, groups, vocab;
  const char *theta, *eps;
  bool tied, qkv_bias;
};
const Model kLlama{"llama", 4, 2, 103, "500000", "1e-5", false, false};
const Model kQwen2{"qwen2", 2, 2, 103, "1000000", "1e-6", true, true};

// A run of the imported model's shape in layout (t, p) with `per_chunk`
// layers per virtual stage (0: one chunk).
Config config(const Model &m, const std::string &load, int t, int p, int per_chunk = 0) {
  Config c;
  set_options(c, {{"num_layers", std::to_string(m.layers)}, {"hidden_size", "32"},
                  {"num_attention_heads", "4"}, {"num_query_groups", std::to_string(m.groups)},
                  {"ffn_hidden_size", "48"}, {"normalization", "RMSNorm"},
                  {"layernorm_epsilon", m.eps}, {"position_embedding_type", "rope"},
                  {"rotary_base", m.theta}, {"swiglu", "1"}, {"disable_bias_linear", "1"},
                  {"add_qkv_bias", m.qkv_bias ? "1" : "0"},
                  {"untie_embeddings_and_output_weights", m.tied ? "0" : "1"}, {"seq_length", "32"},
                  {"max_position_embeddings", "64"}, {"vocab_size", std::to_string(m.vocab)},
                  {"micro_batch_size", "1"}, {"global_batch_size", "4"}});
  // No data_path: the byte tokenizer's 257 ids would not fit the fixture's 103.
  c.set("tensor_model_parallel_size", std::to_string(t));
  c.set("pipeline_model_parallel_size", std::to_string(p));
  if (per_chunk) c.set("num_layers_per_virtual_pipeline_stage", std::to_string(per_chunk));
  if (!load.empty()) c.set("load", load);
  return c;
}

// ptdp's logits over the imported weights against transformers'. Tolerance as
// the GPT-2 import's (test_checkpoint_import.cpp): both fp32 from the same
// weights, differing in summation order only, a few 1e-7 after the layers;
// a wrong head order, rotation or group mapping gives order 1.
void expect_logits(const Model &m, const std::string &imported, int t, int p, int per_chunk) {
  SCOPED_TRACE(std::string(m.dir) + " t=" + std::to_string(t) + " p=" + std::to_string(p) +
               " layers per chunk=" + std::to_string(per_chunk));
  Trainer tr(TrainerOptions::from_config(config(m, imported, t, p, per_chunk)));
  for (const Sequence &s : read_logits(fixture(std::string(m.dir) + "/logits.bin"), m.vocab)) {
    const std::vector<float> got = tr.logits(s.ids);
    ASSERT_EQ(got.size(), s.logits.size());
    const double rel = relative_l2(got, s.logits);
    EXPECT_LE(rel, 1e-5) << s.ids.size() << " tokens";
    ::testing::Test::RecordProperty(std::string("rel_l2_") + m.dir + "_t" + std::to_string(t) + "_p" +
                                        std::to_string(p) + "_n" + std::to_string(s.ids.size()),
                                    ::testing::PrintToString((float)rel));
  }
}

}  // namespace

TEST(LlamaImport, LogitsMatchTransformersInEveryLayout) {
  TempDir imported;
  import_safetensors(fixture("llama"), "", imported.path);  // the sharded model directory
  expect_logits(kLlama, imported.path, 1, 1, 0);
  expect_logits(kLlama, imported.path, 2, 1, 0);  // t = G: one query group a rank
  expect_logits(kLlama, imported.path, 2, 2, 1);  // and an interleaved pipeline, v = 2
  // The index given instead of the directory (config.json beside it).
  TempDir again;
  import_safetensors(fixture("llama/model.safetensors.index.json"), "", again.path);
  expect_logits(kLlama, again.path, 1, 1, 0);
}

TEST(LlamaImport, Qwen2LogitsMatchTransformers) {
  TempDir imported;
  import_safetensors(fixture("qwen2/model.safetensors"), "", imported.path);
  expect_logits(kQwen2, imported.path, 1, 1, 0);
  expect_logits(kQwen2, imported.path, 2, 2, 0);
}

// Each bad input is refused by name, and no checkpoint is written.
// The checkpoint tree goes beside the model, never into its directory (a
// fine-tuning recipe's import had written iter_0000000 and latest among the
// model's files), under any spelling.
TEST(LlamaImport, NeverWritesIntoTheModelsDirectory) {
  TempDir work;
  const std::string model = work.path + "/model";
  fs::copy(fixture("llama"), model, fs::copy_options::recursive);
  for (const std::string &out : {model, model + "/sub", work.path + "/./model/", model + "/../model/ck"}) {
    SCOPED_TRACE(out);
    expect_error([&] { import_safetensors(model, "", out); }, Status::invalid_argument,
                 "is the model's directory");
  }
  EXPECT_FALSE(fs::exists(model + "/iter_0000000"));
  EXPECT_FALSE(fs::exists(model + "/latest"));
  EXPECT_FALSE(fs::exists(model + "/sub"));
  // A one-file model named by its file (its config.json beside it) is the same
  // model (its import went among its files); a lone file's folder holds a
  // checkpoint in a folder of its own.
  const std::string one = work.path + "/one";
  fs::copy(fixture("qwen2"), one, fs::copy_options::recursive);
  for (const std::string &out : {one, one + "/", one + "/sub"}) {
    SCOPED_TRACE(out);
    expect_error([&] { import_safetensors(one + "/model.safetensors", one + "/config.json", out); },
                 Status::invalid_argument, "is the model's directory");
  }
  EXPECT_FALSE(fs::exists(one + "/latest"));
  fs::remove(one + "/generation_config.json");
  fs::rename(one + "/config.json", work.path + "/qwen2_config.json");
  expect_error([&] { import_safetensors(one + "/model.safetensors", work.path + "/qwen2_config.json", one); },
               Status::invalid_argument, "is the model's directory");
  // Nor into the directory of the config.json given apart (another model's).
  const std::string other = work.path + "/other";
  fs::copy(fixture("qwen2"), other, fs::copy_options::recursive);
  for (const std::string &out : {other, other + "/sub"}) {
    SCOPED_TRACE(out);
    expect_error([&] { import_safetensors(one + "/model.safetensors", other + "/config.json", out); },
                 Status::invalid_argument, "is the model's directory '" + other);
  }
  EXPECT_NO_THROW(import_safetensors(one + "/model.safetensors", work.path + "/qwen2_config.json", one + "/ck"));
  EXPECT_NO_THROW(import_safetensors(model, "", work.path + "/model_ck"));  // (a name beside it)
}

TEST(LlamaImport, RefusesWhatItCannotImport) {
  TempDir work;
  auto copy_model = [&](const std::string &name) {
    const std::string to = work.path + "/" + name;
    fs::copy(fixture("llama"), to, fs::copy_options::recursive);
    return to;
  };
  auto edit_config = [&](const std::string &dir, const char *key, const nlohmann::json &value) {
    nlohmann::json c = nlohmann::json::parse(read_file(dir + "/config.json"));
    if (value.is_null())
      c.erase(key);
    else
      c[key] = value;
    write_file(dir + "/config.json", c.dump(1));
  };
  auto refused = [&](const std::string &dir, Status code, const std::string &what) {
    const std::string out = work.path + "/out_" + fs::path(dir).filename().string();
    expect_error([&] { import_safetensors(dir, "", out); }, code, what);
    EXPECT_FALSE(fs::exists(out + "/iter_0000000")) << what;
  };

  const std::string missing = copy_model("missing_shard");
  fs::remove(missing + "/model-00002-of-00003.safetensors");
  refused(missing, Status::io_error, "model-00002-of-00003.safetensors' listed in");

  const std::string scaled = copy_model("scaled_rope");
  edit_config(scaled, "rope_parameters", {{"rope_type", "linear"}, {"rope_theta", 500000.0}, {"factor", 2.0}});
  refused(scaled, Status::invalid_config, "rope_parameters of type \"linear\" is not supported");

  const std::string gelu = copy_model("gelu");
  edit_config(gelu, "hidden_act", "gelu");
  refused(gelu, Status::invalid_config, "hidden_act \"gelu\" is not supported");

  const std::string window = copy_model("window");
  edit_config(window, "model_type", "mistral");
  edit_config(window, "sliding_window", 16);
  refused(window, Status::invalid_config, "sliding-window attention is not supported");

  const std::string partial = copy_model("partial_rotary");  // (it was imported as full rotary)
  edit_config(partial, "partial_rotary_factor", 0.5);
  refused(partial, Status::invalid_config, "partial_rotary_factor 0.5 is not supported");
  const std::string one_type = copy_model("one_layer_type");
  edit_config(one_type, "layer_types", {"full_attention"});
  refused(one_type, Status::invalid_config, "'layer_types' lists 1 layers, but num_hidden_layers is");

  const std::string heads = copy_model("kv_heads");
  edit_config(heads, "num_key_value_heads", 3);
  refused(heads, Status::invalid_config, "num_query_groups (3) must divide num_attention_heads (4)");

  const std::string bias = copy_model("o_bias");
  edit_config(bias, "attention_bias", true);
  refused(bias, Status::invalid_config, "attention_bias true without mlp_bias is not supported");
  edit_config(bias, "attention_bias", false);
  edit_config(bias, "mlp_bias", true);
  refused(bias, Status::invalid_config, "mlp_bias true without attention_bias is not supported");
  edit_config(bias, "attention_bias", true);  // both: the config is taken, the tensors are missing
  refused(bias, Status::invalid_config, "self_attn.q_proj.bias' is missing");

  const std::string tied = copy_model("tied");  // says tied, but lm_head differs from the embedding
  edit_config(tied, "tie_word_embeddings", true);
  refused(tied, Status::invalid_config, "'lm_head.weight' in");

  const std::string shape = copy_model("shape");
  edit_config(shape, "intermediate_size", 64);
  refused(shape, Status::invalid_config, "mlp.gate_proj.weight' in");

  const std::string index = copy_model("escaping_index");
  nlohmann::json ix = nlohmann::json::parse(read_file(index + "/model.safetensors.index.json"));
  ix["weight_map"]["lm_head.weight"] = "../model-00003-of-00003.safetensors";
  write_file(index + "/model.safetensors.index.json", ix.dump());
  refused(index, Status::corrupt_data, "not a file name beside the index");

  // Values the engine does not take, types it cannot read, a config that does
  // not fit the weights: refused before anything is allocated or written.
  const std::string eps = copy_model("eps");
  edit_config(eps, "rms_norm_eps", 1e300);
  refused(eps, Status::invalid_config, "layernorm_epsilon inf is outside [1e-12, 1]");
  const std::string positions = copy_model("positions");
  edit_config(positions, "max_position_embeddings", 16777216);
  refused(positions, Status::invalid_config, "16777216 is outside [1, 1048576]");
  const std::string both = copy_model("both_types");
  edit_config(both, "rope_parameters", {{"rope_type", "linear"}, {"type", "default"}, {"factor", 2.0}});
  refused(both, Status::invalid_config, "rope_parameters of type \"linear\" is not supported");
  const std::string hd = copy_model("head_dim");
  edit_config(hd, "head_dim", 4611686018427387912LL);
  refused(hd, Status::invalid_config, "head_dim 4611686018427387912 is not supported");
  // Heads that do not divide the width: named first (a head_dim beside them
  // was compared with a truncated quotient).
  const std::string five_heads = copy_model("five_heads");
  edit_config(five_heads, "num_attention_heads", 5);
  refused(five_heads, Status::invalid_config, "num_attention_heads (5) must divide hidden_size (32)");
  const std::string no_type = copy_model("no_type");
  {
    nlohmann::json c = nlohmann::json::parse(read_file(no_type + "/config.json"));
    c.erase("model_type");
    write_file(no_type + "/config.json", c.dump());
  }
  refused(no_type, Status::invalid_config, "model_type is missing (allowed: ");
  const std::string types = copy_model("layer_types");
  edit_config(types, "layer_types", {{"0", "full_attention"}});
  refused(types, Status::invalid_config, "'layer_types' must be a list");
  const std::string bos = copy_model("bos");
  edit_config(bos, "bos_token_id", "one");
  refused(bos, Status::invalid_config, "'bos_token_id' must be a token id");
  const std::string big = copy_model("big");  // LLaMA 3 8B's config over the tiny weights
  edit_config(big, "hidden_size", 4096);
  edit_config(big, "num_hidden_layers", 32);
  edit_config(big, "intermediate_size", 14336);
  edit_config(big, "vocab_size", 128256);
  edit_config(big, "head_dim", nullptr);
  refused(big, Status::invalid_config, "is [32] but config");
  const std::string fifo = work.path + "/fifo_model";
  fs::create_directory(fifo);
  ASSERT_EQ(mkfifo((fifo + "/config.json").c_str(), 0600), 0);
  refused(fifo, Status::io_error, "is not a regular file");

  // The checkpoint loads only into a layout whose tensor ranks hold whole groups.
  TempDir imported;
  import_safetensors(fixture("llama"), "", imported.path);
  expect_error([&] { Trainer tr(TrainerOptions::from_config(config(kLlama, imported.path, 4, 1))); },
               Status::invalid_config, "must divide num_query_groups (2)");
}

namespace {

// Import then export gives back the fixture's tensors, every byte, and a
// config.json that says the same model; the export imports again.
void expect_round_trip(const Model &m, const std::vector<std::string> &files) {
  SCOPED_TRACE(m.dir);
  TempDir work;
  import_safetensors(fixture(m.dir), "", work.path + "/ckpt");
  const std::string out = work.path + "/exported";
  export_safetensors(work.path + "/ckpt", out);
  const Safetensors got = read_safetensors(out + "/model.safetensors");
  size_t want_count = 0;
  for (const std::string &f : files)
    for (const auto &[name, t] : read_safetensors(fixture(std::string(m.dir) + "/" + f)).tensors) {
      want_count++;
      ASSERT_TRUE(got.tensors.count(name)) << name;
      EXPECT_EQ(got.tensors.at(name).shape, t.shape) << name;
      EXPECT_TRUE(got.tensors.at(name).bytes == t.bytes) << name << " differs";
    }
  EXPECT_EQ(got.tensors.size(), want_count);
  const nlohmann::json want = nlohmann::json::parse(read_file(fixture(std::string(m.dir) + "/config.json")));
  const nlohmann::json have = nlohmann::json::parse(read_file(out + "/config.json"));
  for (const char *k : {"model_type", "vocab_size", "hidden_size", "intermediate_size",
                        "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
                        "max_position_embeddings", "rms_norm_eps", "tie_word_embeddings",
                        "hidden_act", "bos_token_id", "eos_token_id", "architectures"})
    EXPECT_EQ(have[k], want[k]) << k;
  EXPECT_EQ(have["rope_theta"], want["rope_parameters"]["rope_theta"]);
  const nlohmann::json gen = nlohmann::json::parse(read_file(out + "/generation_config.json"));
  EXPECT_EQ(gen["bos_token_id"], 1);
  EXPECT_EQ(gen["eos_token_id"], 2);
  // The exported directory imports again and gives transformers' logits.
  import_safetensors(out, "", work.path + "/again");
  expect_logits(m, work.path + "/again", 1, 1, 0);
}

}  // namespace

TEST(LlamaExport, ImportThenExportGivesTheFixtureBack) {
  expect_round_trip(kLlama, {"model-00001-of-00003.safetensors", "model-00002-of-00003.safetensors",
                             "model-00003-of-00003.safetensors"});
  expect_round_trip(kQwen2, {"model.safetensors"});
}

// A LLaMA-family model's config goes beside its weights: a file path alone is
// refused before anything is written.
TEST(LlamaExport, NeedsADirectory) {
  TempDir work;
  import_safetensors(fixture("llama"), "", work.path + "/ckpt");
  expect_error([&] { export_safetensors(work.path + "/ckpt", work.path + "/m.safetensors"); },
               Status::invalid_argument, "exports to a directory");
  EXPECT_FALSE(fs::exists(work.path + "/m.safetensors"));
  write_file(work.path + "/plain", "x");
  expect_error([&] { export_safetensors(work.path + "/ckpt", work.path + "/plain"); },
               Status::invalid_argument, "plain' exists and is not a safetensors file");
  EXPECT_EQ(read_file(work.path + "/plain"), "x");
}

// A load must give the checkpoint's function, not only its shapes: another
// rotary base or norm epsilon is refused by name (plain load and fine-tuning).
TEST(LlamaImport, LoadNeedsTheSameRotaryBaseAndEpsilon) {
  TempDir imported;
  import_safetensors(fixture("llama"), "", imported.path);
  Config other = config(kLlama, imported.path, 1, 1);
  other.set("rotary_base", "10000");
  expect_error([&] { Trainer tr(TrainerOptions::from_config(other)); }, Status::invalid_config,
               "rotary_base: checkpoint 500000, this run 10000");
  other = config(kLlama, imported.path, 1, 1);
  other.set("layernorm_epsilon", "1e-6");
  other.set("finetune", "1");
  expect_error([&] { Trainer tr(TrainerOptions::from_config(other)); }, Status::invalid_config,
               "layernorm_epsilon: checkpoint 9.99999975e-06, this run 9.99999997e-07");
}

// A model fine-tuned from an import keeps the import's record (where it came
// from, the tokenizer's bos and eos ids) in every checkpoint it saves, so its
// export writes them as the import's export does; a run that was not imported
// writes none.
TEST(LlamaExport, FineTunedModelKeepsItsBosAndEos) {
  TempDir work;
  import_safetensors(fixture("llama"), "", work.path + "/ckpt");
  Config c = config(kLlama, work.path + "/ckpt", 1, 1);
  c.set("finetune", "1");
  Trainer tr(TrainerOptions::from_config(c));
  std::vector<int32_t> ids(tr.step_tokens_count());
  for (size_t i = 0; i < ids.size(); i++) ids[i] = (int32_t)(i * 7 % kLlama.vocab);
  tr.step_tokens(ids.data(), ids.size());
  tr.save(work.path + "/ft");
  export_safetensors(work.path + "/ft", work.path + "/out");
  for (const char *file : {"/out/config.json", "/out/generation_config.json"}) {
    const nlohmann::json j = nlohmann::json::parse(read_file(work.path + file));
    EXPECT_EQ(j["bos_token_id"], 1) << file;
    EXPECT_EQ(j["eos_token_id"], 2) << file;
  }
  // Resumed (not fine-tuned) from the fine-tuned checkpoint: still there.
  Config again = config(kLlama, work.path + "/ft", 1, 1);
  Trainer tr2(TrainerOptions::from_config(again));
  tr2.step_tokens(ids.data(), ids.size());
  tr2.save(work.path + "/ft");
  export_safetensors(work.path + "/ft", work.path + "/out2");
  EXPECT_EQ(nlohmann::json::parse(read_file(work.path + "/out2/generation_config.json"))["eos_token_id"], 2);
  // A model trained from scratch: no ids to write.
  Trainer fresh(TrainerOptions::from_config(config(kLlama, "", 1, 1)));
  fresh.save(work.path + "/scratch");
  export_safetensors(work.path + "/scratch", work.path + "/out3");
  EXPECT_FALSE(nlohmann::json::parse(read_file(work.path + "/out3/generation_config.json")).contains("eos_token_id"));
}

// Every linear layer with its bias (disable_bias_linear 0) is LLaMA with
// attention_bias and mlp_bias: trained at (t, p) = (2, 2), exported, it names
// q/k/v/o, gate/up/down biases as transformers does (gate and up: the two rows
// of ptdp's one [2, f] tensor), and imports again to the same function in
// another layout. Tolerance: fp32 in two layouts, summation order only.
TEST(LlamaExport, LinearBiasesAreLlamaAttentionAndMlpBias) {
  TempDir work;
  Config c = config(kLlama, "", 2, 2);
  c.set("disable_bias_linear", "0");
  c.set("lr", "1e-2");
  Trainer tr(TrainerOptions::from_config(c));
  std::vector<int32_t> ids(tr.step_tokens_count());
  for (size_t i = 0; i < ids.size(); i++) ids[i] = (int32_t)(i * 7 % kLlama.vocab);
  for (int step = 0; step < 2; step++) tr.step_tokens(ids.data(), ids.size());  // biases move off 0
  const std::vector<int32_t> prompt = {5, 17, 42, 3, 99, 64, 8};
  const std::vector<float> want = tr.logits(prompt);
  const std::vector<float> gate_up = tr.gather_parameter("h.1.mlp.gate_up_proj.bias");
  tr.save(work.path + "/ckpt");
  export_safetensors(work.path + "/ckpt", work.path + "/out");

  const nlohmann::json cfg = nlohmann::json::parse(read_file(work.path + "/out/config.json"));
  EXPECT_EQ(cfg["architectures"][0], "LlamaForCausalLM");
  EXPECT_EQ(cfg["attention_bias"], true);
  EXPECT_EQ(cfg["mlp_bias"], true);
  const Safetensors st = read_safetensors(work.path + "/out/model.safetensors");
  for (const char *b : {"self_attn.q_proj.bias", "self_attn.k_proj.bias", "self_attn.v_proj.bias",
                        "self_attn.o_proj.bias", "mlp.gate_proj.bias", "mlp.up_proj.bias",
                        "mlp.down_proj.bias"})
    EXPECT_TRUE(st.tensors.count(std::string("model.layers.1.") + b)) << b;
  const int64_t f = 48;
  ASSERT_EQ(gate_up.size(), (size_t)(2 * f));
  for (int k = 0; k < 2; k++) {
    const auto &t = st.tensors.at(k == 0 ? "model.layers.1.mlp.gate_proj.bias" : "model.layers.1.mlp.up_proj.bias");
    ASSERT_EQ(t.shape, (std::vector<int64_t>{f}));
    ASSERT_EQ(t.bytes.size(), (size_t)f * 4);
    std::vector<float> v((size_t)f);
    std::memcpy(v.data(), t.bytes.data(), t.bytes.size());
    bool moved = false;
    for (int64_t i = 0; i < f; i++) {
      EXPECT_EQ(v[(size_t)i], gate_up[(size_t)(k * f + i)]) << k << " " << i;
      moved |= v[(size_t)i] != 0.f;
    }
    EXPECT_TRUE(moved) << "the biases trained";
  }

  import_safetensors(work.path + "/out", "", work.path + "/again");
  Config back = config(kLlama, work.path + "/again", 1, 1);
  back.set("disable_bias_linear", "0");
  Trainer serial(TrainerOptions::from_config(back));
  EXPECT_LE(relative_l2(serial.logits(prompt), want), 1e-5);
}

// An import records the tokenizer its model directory holds (tokenizer.json:
// HuggingFaceTokenizer), so generating with another is refused by name; a
// directory without one records none.
TEST(LlamaImport, RecordsTheModelsTokenizer) {
  TempDir work;
  const std::string model = work.path + "/model";
  fs::copy(fixture("llama"), model);
  fs::copy_file(std::string(PTDP_TEST_DATA_DIR) + "/llama_tok/llama3.json", model + "/tokenizer.json");
  import_safetensors(model, "", work.path + "/ckpt");
  Trainer tr(TrainerOptions::from_config(config(kLlama, work.path + "/ckpt", 1, 1)));
  expect_error([&] { tr.generate("The ", 4, 0.0, 0); }, Status::invalid_config,
               "trained with tokenizer_type HuggingFaceTokenizer, this run has byte");
  import_safetensors(fixture("llama"), "", work.path + "/plain");
  Trainer plain(TrainerOptions::from_config(config(kLlama, work.path + "/plain", 1, 1)));
  EXPECT_EQ(plain.generate("The ", 0, 0.0, 0), "The ");
  // Without a record, a tokenizer that cannot decode every id of the model is
  // refused: the same model with a vocabulary of 300 and the byte tokenizer's 257.
  TempDir wide;
  const ConfigOptions shape = {{"num_layers", "1"}, {"hidden_size", "32"}, {"num_attention_heads", "4"},
                               {"vocab_size", "300"}, {"seq_length", "16"}, {"micro_batch_size", "1"},
                               {"global_batch_size", "1"}};
  {
    Config c;
    Trainer t(TrainerOptions::from_config(set_options(c, shape)));
    t.save(wide.path + "/trained");
  }
  export_safetensors(wide.path + "/trained", wide.path + "/hf");  // GPT-2's layout
  import_safetensors(wide.path + "/hf", "", wide.path + "/imported");
  {
    // The export carried its tokenizer's record into the import: taken out
    // here (with the manifest's own checksum: an older manifest's form), as a
    // model from elsewhere has none.
    const std::string manifest = wide.path + "/imported/iter_0000000/manifest.json";
    nlohmann::json j = nlohmann::json::parse(read_file(manifest));
    EXPECT_EQ(j["training"]["tokenizer_type"], "byte");
    for (const char *key : {"tokenizer_type", "tokenizer_vocabulary"}) j["training"].erase(key);
    j.erase("manifest_crc32c");
    write_file(manifest, j.dump(1));
  }
  Config c;
  set_options(c, shape).set("load", wide.path + "/imported");
  Trainer back(TrainerOptions::from_config(c));
  expect_error([&] { back.generate("The ", 4, 0.0, 0); }, Status::invalid_config,
               "its vocabulary has 300 tokens, more than tokenizer_type byte's 257");
}
