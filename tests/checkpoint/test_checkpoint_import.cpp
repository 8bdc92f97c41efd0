// `ptdp ckpt import-safetensors` against Hugging Face transformers: the
// fixture in tests/checkpoint/hf (made by make_hf_fixture.py: a small random
// GPT2LMHeadModel saved with save_pretrained, token sequences and the fp32
// logits transformers computes for them) is imported, loaded into several
// layouts and must give transformers' logits. Import then export must give
// back the same bytes; --finetune must start afresh from the weights.
// Variants of the fixture (16-bit, other names, damaged) are written by a
// small safetensors writer here, not by ptdp's code.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <chrono>
#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <tuple>
#include <vector>

#include "checkpoints/safetensors_export.h"
#include "checkpoints/safetensors_import.h"
#include "engine/core/dtype.h"
#include "engine/train/config.h"
#include "engine/train/trainer.h"
#include "tests/support/config_options.h"
#include "tests/support/expect_error.h"
#include "tests/support/file_size_limit.h"
#include "tests/support/hf_fixture.h"
#include "tests/support/temp_dir.h"
#include "tests/support/tiny_dataset.h"

using namespace ptdp;
namespace fs = std::filesystem;

namespace {

std::string fixture(const std::string &name) {
  return std::string(PTDP_HF_FIXTURE_DIR) + "/" + name;
}

// ---- safetensors, read and written from the format's description ----------

void write_safetensors(const std::string &path, const Safetensors &st) {
  nlohmann::json h = nlohmann::json::object();
  if (!st.metadata.empty()) h["__metadata__"] = st.metadata;
  std::string data;
  for (const auto &[name, t] : st.tensors) {
    h[name] = {{"dtype", t.dtype},
               {"shape", t.shape},
               {"data_offsets", {data.size(), data.size() + t.bytes.size()}}};
    data += t.bytes;
  }
  std::string text = h.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  std::string out(8, '\0');
  for (int i = 0; i < 8; i++) out[(size_t)i] = (char)((uint64_t)text.size() >> (8 * i));
  write_file(path, out + text + data);
}

std::vector<float> floats(const Tensor &t) {
  std::vector<float> v(t.bytes.size() / 4);
  std::memcpy(v.data(), t.bytes.data(), t.bytes.size());
  return v;
}

// The F32 tensor rounded to BF16 or F16.
Tensor to_16bit(const Tensor &t, const std::string &dtype) {
  const std::vector<float> v = floats(t);
  std::vector<uint16_t> h(v.size());
  for (size_t i = 0; i < v.size(); i++)
    h[i] = dtype == "BF16" ? float_to_bf16(v[i]) : float_to_f16(v[i]);
  return {dtype, t.shape, std::string(reinterpret_cast<const char *>(h.data()), h.size() * 2)};
}

// ---- trainers over the imported checkpoint -----------------------------------

constexpr int kVocab = 260;

Config config(const std::string &load, int t = 1, int p = 1, int per_chunk = 0) {
  Config c;
  set_options(c, {{"num_layers", "4"}, {"hidden_size", "32"}, {"num_attention_heads", "4"},
                  {"seq_length", "16"}, {"max_position_embeddings", "32"},
                  {"vocab_size", std::to_string(kVocab)}, {"micro_batch_size", "1"},
                  {"global_batch_size", "4"}, {"lr", "1e-3"}, {"split", "80,20"},
                  {"data_path", tiny_dataset_path()},
                  {"tensor_model_parallel_size", std::to_string(t)},
                  {"pipeline_model_parallel_size", std::to_string(p)}});
  if (per_chunk) c.set("num_layers_per_virtual_pipeline_stage", std::to_string(per_chunk));
  if (!load.empty()) c.set("load", load);
  return c;
}

std::unique_ptr<Trainer> trainer(const Config &c) {
  return std::make_unique<Trainer>(TrainerOptions::from_config(c));
}

// Every element of every tensor the export writes is equal, byte for byte, to
// the tensor `name_in_ref(name)` of ref.
void expect_same_tensors(const Safetensors &exported, const Safetensors &ref,
                         const std::string &prefix) {
  EXPECT_EQ(exported.tensors.size(), 4u * 12 + 4);
  for (const auto &[name, t] : exported.tensors) {
    ASSERT_TRUE(ref.tensors.count(prefix + name)) << name;
    const Tensor &r = ref.tensors.at(prefix + name);
    EXPECT_EQ(t.dtype, r.dtype) << name;
    EXPECT_EQ(t.shape, r.shape) << name;
    EXPECT_TRUE(t.bytes == r.bytes) << name << " differs";
  }
}

class CheckpointImport : public ::testing::Test {
 protected:
  void SetUp() override { import_safetensors(fixture("model.safetensors"), "", imported.path); }
  TempDir imported, work;
};

// ptdp's logits over the imported weights are transformers' in the serial
// layout and under tensor, pipeline and interleaved pipeline parallelism.
// Tolerance: both compute in fp32 from the same fp32 weights and differ only in
// summation order (BLAS blocking, the softmax and LayerNorm reductions, t = 2's
// row-parallel partial sums): about 1e-7 relative per op, a few 1e-7 after
// four layers. 1e-5 is far below what a wrong transpose, head order or missing
// bias gives (order 1: the fixture's weights make every tensor matter).
TEST_F(CheckpointImport, LogitsMatchTransformersInEveryLayout) {
  const std::vector<Sequence> seqs = read_logits(fixture("logits.bin"), kVocab);
  ASSERT_EQ(seqs.size(), 2u);
  const struct { int t, p, per_chunk; } layouts[] = {{1, 1, 0}, {2, 1, 0}, {1, 2, 0}, {2, 2, 1}};
  for (const auto &l : layouts) {
    SCOPED_TRACE("t=" + std::to_string(l.t) + " p=" + std::to_string(l.p) +
                 " layers per chunk=" + std::to_string(l.per_chunk));
    auto tr = trainer(config(imported.path, l.t, l.p, l.per_chunk));
    EXPECT_NE(tr->last_loaded().find("loaded " + imported.path), std::string::npos)
        << tr->last_loaded();
    for (const Sequence &s : seqs) {
      const std::vector<float> got = tr->logits(s.ids);
      ASSERT_EQ(got.size(), s.logits.size());
      const double rel = relative_l2(got, s.logits);
      EXPECT_LE(rel, 1e-5) << s.ids.size() << " tokens";
      char text[32];
      std::snprintf(text, sizeof text, "%.3g", rel);
      RecordProperty("rel_l2_t" + std::to_string(l.t) + "_p" + std::to_string(l.p) + "_n" +
                         std::to_string(s.ids.size()),
                     text);
    }
    // The vocabulary padding (to 384 for t = 1, 512 for t = 2) is zero rows.
    for (int r = 0; r < tr->world_size(); r++) {
      const GPT<float> &m = tr->model(r);
      const ParamInfo *wte = m.find_param("wte.weight");
      if (!wte) continue;
      const int64_t rows = wte->shape[0], h = wte->shape[1];
      size_t nonzero = 0;
      for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < h; j++)
          nonzero += m.vocab_start() + i >= kVocab && m.params()[wte->offset + i * h + j] != 0.f;
      EXPECT_EQ(nonzero, 0u) << "rank " << r;
    }
  }
}

TEST_F(CheckpointImport, ImportThenExportIsBitIdentical) {
  const Safetensors hf = read_safetensors(fixture("model.safetensors"));
  const std::string out = work.path + "/export.safetensors";
  export_safetensors(imported.path, out);
  expect_same_tensors(read_safetensors(out), hf, "transformer.");
  // To a directory, as save_pretrained writes one: the same weights, and the
  // config.json that transformers reads (the fixture's GPT2Config fields).
  const std::string dir = work.path + "/exported_model";
  export_safetensors(imported.path, dir);
  expect_same_tensors(read_safetensors(dir + "/model.safetensors"), hf, "transformer.");
  const nlohmann::json want = nlohmann::json::parse(read_file(fixture("config.json")));
  const nlohmann::json have = nlohmann::json::parse(read_file(dir + "/config.json"));
  for (const char *k : {"model_type", "vocab_size", "n_positions", "n_embd", "n_layer", "n_head",
                        "activation_function", "layer_norm_epsilon"})
    EXPECT_EQ(have[k], want[k]) << k;
  EXPECT_EQ(have["architectures"], nlohmann::json::array({"GPT2LMHeadModel"}));
  EXPECT_TRUE(fs::exists(dir + "/generation_config.json"));
  import_safetensors(dir, "", work.path + "/from_dir");  // and imports again

  // Through another layout: loaded at t = 2, p = 2 (the vocabulary padded for
  // t, the layers split over stages) and saved from there, the export is
  // the same bytes again.
  auto tr = trainer(config(imported.path, 2, 2));
  TempDir resaved;
  tr->save(resaved.path);
  const std::string again = work.path + "/again.safetensors";
  export_safetensors(resaved.path, again);
  expect_same_tensors(read_safetensors(again), hf, "transformer.");

  // 16-bit files widen exactly to float32, so their export in the same type
  // is the same bytes again.
  for (const std::string dtype : {"BF16", "F16"}) {
    SCOPED_TRACE(dtype);
    Safetensors half;
    for (const auto &[name, t] : hf.tensors) half.tensors[name] = to_16bit(t, dtype);
    const std::string file = work.path + "/" + dtype + ".safetensors";
    write_safetensors(file, half);
    TempDir dir;
    import_safetensors(file, fixture("config.json"), dir.path);
    const std::string back = work.path + "/" + dtype + "_export.safetensors";
    export_safetensors(dir.path, back, dtype == "BF16" ? "bf16" : "f16");
    expect_same_tensors(read_safetensors(back), half, "transformer.");
    // The model a checkpoint was imported from is never an export's output
    // (a fine-tuning exported over its base), nor is any model ptdp did not
    // write: it may be all there is of it.
    // (In this process the import holds `file` as an input; a later process's
    // export is refused by the manifest's imported_from: lua_ckpt_export_keeps_import_source.)
    const std::string before = read_file(file);
    expect_error([&] { export_safetensors(dir.path, file); }, Status::invalid_argument,
                 "refusing to overwrite an input");
    const std::string other = work.path + "/" + dtype + "_other.safetensors";
    write_safetensors(other, half);
    expect_error([&] { export_safetensors(imported.path, other); }, Status::invalid_argument,
                 "exists and is a safetensors file ptdp did not export");
    EXPECT_EQ(read_file(file), before);
    EXPECT_EQ(read_file(other), read_file(file));
  }
}

// GPT2Model's names (no "transformer." prefix), a tied lm_head.weight and the
// attn.bias / attn.masked_bias buffers of old files import the same model; a
// file exported by ptdp carries its config in its metadata.
TEST_F(CheckpointImport, OtherNamesBuffersAndTheExportsOwnConfig) {
  const Safetensors hf = read_safetensors(fixture("model.safetensors"));
  Safetensors plain;
  for (const auto &[name, t] : hf.tensors) plain.tensors[name.substr(12)] = t;
  plain.tensors["lm_head.weight"] = plain.tensors.at("wte.weight");
  const std::vector<float> mask(32 * 32, 1.f), masked{-1e4f};
  for (int i = 0; i < 4; i++) {
    const std::string pre = "h." + std::to_string(i) + ".attn.";
    plain.tensors[pre + "bias"] = {
        "F32",
        {1, 1, 32, 32},
        std::string(reinterpret_cast<const char *>(mask.data()), mask.size() * 4)};
    plain.tensors[pre + "masked_bias"] = {
        "F32", {}, std::string(reinterpret_cast<const char *>(masked.data()), 4)};
  }
  const std::string file = work.path + "/plain.safetensors";
  write_safetensors(file, plain);
  // No config.json beside it and no metadata: it must be given.
  expect_error([&] { import_safetensors(file, "", work.path + "/none"); }, Status::invalid_argument,
               "no config for '" + file + "': give its config.json");
  TempDir dir;
  import_safetensors(file, fixture("config.json"), dir.path);
  const std::string out = work.path + "/plain_export.safetensors";
  export_safetensors(dir.path, out);
  expect_same_tensors(read_safetensors(out), hf, "transformer.");

  // The export's metadata holds the GPT2Config: it imports with no config.json.
  TempDir again;
  import_safetensors(out, "", again.path);
  const std::string out2 = work.path + "/again.safetensors";
  export_safetensors(again.path, out2);
  expect_same_tensors(read_safetensors(out2), hf, "transformer.");
}

// A file with its own config (an export's metadata) and a config.json that
// describes another model: refused in the directory form and the file form
// alike (each read one of them, and the two imports were two models).
TEST_F(CheckpointImport, TheFilesOwnConfigAndConfigJsonMustAgree) {
  const std::string model = work.path + "/model";
  export_safetensors(imported.path, model);  // a directory: weights (with metadata) + config.json
  const std::string json_path = model + "/config.json";
  nlohmann::json config = nlohmann::json::parse(read_file(json_path));
  TempDir agree;
  EXPECT_NO_THROW(import_safetensors(model, "", agree.path));  // the export's own two agree
  config["layer_norm_epsilon"] = 1e-3;
  fs::remove(json_path);
  write_file(json_path, config.dump());
  for (const std::string &path : {model, model + "/model.safetensors"})
    expect_error([&] { import_safetensors(path, "", work.path + "/disagree"); },
                 Status::invalid_argument,
                 "describes another model (layernorm_epsilon: 1e-05 in the file's metadata, 0.001 in "
                 "config.json)");
  EXPECT_FALSE(fs::exists(work.path + "/disagree/latest"));
}

// An export's tokenizer record that no command takes is refused at the import
// (the checkpoint it made was refused by every later command, advising a
// tokenizer_type they refuse too).
TEST_F(CheckpointImport, AnUnknownTokenizerTypeInTheMetadataIsRefused) {
  const std::string file = work.path + "/exported.safetensors";
  export_safetensors(imported.path, file);
  Safetensors st = read_safetensors(file);
  st.metadata["tokenizer_type"] = "bogus";  // (where a ptdp export records its tokenizer's)
  const std::string edited = work.path + "/bogus.safetensors";
  write_safetensors(edited, st);
  expect_error([&] { import_safetensors(edited, "", work.path + "/bogus_ck"); }, Status::corrupt_data,
               "its metadata's tokenizer_type 'bogus' is none of byte, GPT2BPETokenizer, HuggingFaceTokenizer");
  EXPECT_FALSE(fs::exists(work.path + "/bogus_ck/latest"));
}

// An import that fails as it writes (past the file size limit, as a full
// disk) leaves no directory it made, and does not speak of a previous
// checkpoint that is not there.
TEST_F(CheckpointImport, AFailedImportLeavesNoDirectoryItMade) {
  const std::string out = work.path + "/failed_import";
  EXPECT_EQ(exit_code_under_file_size_limit(4096, [&] {
              try {
                import_safetensors(fixture("model.safetensors"), "", out);
              } catch (const Error &e) {
                const std::string what = e.what();
                return e.code() == Status::io_error && what.find("(there is no earlier one)") != std::string::npos ? 0 : 2;
              }
              return 1;  // (it should not fit)
            }),
            0);
  EXPECT_FALSE(fs::exists(out));
}

TEST_F(CheckpointImport, RefusesWhatItCannotImport) {
  const Safetensors hf = read_safetensors(fixture("model.safetensors"));
  const std::string cfg = fixture("config.json");
  auto variant = [&](const std::string &name, auto edit) {
    Safetensors st = hf;
    edit(st);
    const std::string file = work.path + "/" + name + ".safetensors";
    write_safetensors(file, st);
    return file;
  };
  const std::string target = work.path + "/target";
  // An lm_head that is not wte: ptdp's output layer is tied.
  std::string file = variant("untied", [](Safetensors &st) {
    Tensor head = st.tensors.at("transformer.wte.weight");
    head.bytes[5] ^= 1;
    st.tensors["lm_head.weight"] = head;
  });
  expect_error([&] { import_safetensors(file, cfg, target); }, Status::invalid_config,
               "'lm_head.weight' in '" + file + "' differs from wte");
  // A dtype ptdp does not read.
  file = variant("f64", [](Safetensors &st) {
    Tensor &t = st.tensors.at("transformer.ln_f.bias");
    t.dtype = "F64";
    t.bytes += t.bytes;
  });
  expect_error(
      [&] { import_safetensors(file, cfg, target); }, Status::bad_value,
      "tensor 'transformer.ln_f.bias' in '" + file + "' is F64: ptdp imports F32, F16 and BF16");
  // A dtype ptdp does not read still has the format's size: a buffer of I64
  // elements whose bytes do not match its shape is a damaged file.
  file = variant("i64_short", [](Safetensors &st) {
    Tensor t = st.tensors.at("transformer.ln_f.bias");  // 32 F32: 128 bytes
    t.dtype = "I64";  // 32 I64 need 256
    st.tensors["attn.bias_buffer"] = t;
  });
  expect_error([&] { import_safetensors(file, cfg, target); }, Status::corrupt_data,
               "tensor 'attn.bias_buffer' is I64 [32] (256 bytes) but its data_offsets hold 128 bytes");
  // A weight that is not a finite number.
  file = variant("nan", [](Safetensors &st) {
    Tensor &t = st.tensors.at("transformer.h.0.ln_1.weight");
    const float nan = std::nanf("");
    std::memcpy(t.bytes.data() + 4 * 3, &nan, 4);
  });
  expect_error([&] { import_safetensors(file, cfg, target); }, Status::bad_value,
               "tensor 'transformer.h.0.ln_1.weight' in '" + file + "' holds nan at element 3: a "
               "model's weights must be finite numbers");
  // A tensor that is no part of GPT-2's language model.
  file = variant("extra", [](Safetensors &st) {
    st.tensors["score.weight"] = st.tensors.at("transformer.ln_f.bias");
  });
  expect_error(
      [&] { import_safetensors(file, cfg, target); }, Status::invalid_config,
      "tensor 'score.weight' in '" + file + "' is not a parameter of a GPT-2 language model");
  // Damaged files.
  file = work.path + "/short.safetensors";
  write_file(file, "abc");
  expect_error([&] { import_safetensors(file, cfg, target); }, Status::corrupt_data,
               "is not a valid safetensors file: it has 3 bytes");
  file = variant("offsets", [](Safetensors &st) {
    st.tensors.at("transformer.wpe.weight").shape = {32, 33};
  });
  expect_error([&] { import_safetensors(file, cfg, target); }, Status::corrupt_data,
               "tensor 'transformer.wpe.weight' is F32 [32,33] (4224 bytes) but its data_offsets "
               "hold 4096 bytes");
  // The tensors' bytes tile the data (the format's rule, which Hugging Face's
  // reader enforces): no overlap, no gap, nothing after; and no name twice.
  const auto raw = [&](const std::string &name, const std::string &header, size_t data) {
    std::string h = header;
    h.append((8 - h.size() % 8) % 8, ' ');
    std::string out(8, '\0');
    for (int i = 0; i < 8; i++) out[(size_t)i] = (char)((uint64_t)h.size() >> (8 * i));
    const std::string path = work.path + "/" + name + ".safetensors";
    write_file(path, out + h + std::string(data, '\0'));
    return path;
  };
  const auto tensor = [](const char *name, int b, int e) {
    return std::string("\"") + name + "\":{\"dtype\":\"F32\",\"shape\":[" + std::to_string((e - b) / 4) +
           "],\"data_offsets\":[" + std::to_string(b) + "," + std::to_string(e) + "]}";
  };
  const std::pair<std::string, std::string> tiling[] = {
      {raw("overlap", "{" + tensor("a", 0, 8) + "," + tensor("b", 4, 12) + "}", 12),
       "tensor 'b' starts at byte 4 of the data, but the tensor before it ends at 8: they overlap"},
      {raw("gap", "{" + tensor("a", 0, 8) + "," + tensor("b", 12, 20) + "}", 20),
       "tensor 'b' starts at byte 12 of the data, but the bytes before it end at 8: a gap"},
      {raw("trailing", "{" + tensor("a", 0, 8) + "}", 12),
       "its tensors end at byte 8 of the data, which has 12 bytes"},
      {raw("twice", "{" + tensor("a", 0, 8) + "," + tensor("a", 0, 8) + "}", 8),
       "its header names 'a' twice"},
      {raw("nul_padded", "{" + tensor("a", 0, 8) + "}" + std::string(3, '\0'), 8),
       "its header is padded with something other than spaces"},
      {raw("number_metadata", "{\"__metadata__\":{\"step\":1}," + tensor("a", 0, 8) + "}", 8),
       "__metadata__ 'step' is number, not a string"},
      // (Both offsets inside the data: it read "outside the data".)
      {raw("reversed", "{\"r\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,0]}}", 8),
       "tensor 'r' has data_offsets [8, 0] that end before they begin"}};
  for (const auto &[path, why] : tiling)
    expect_error([&] { import_safetensors(path, cfg, target); }, Status::corrupt_data, why);
  // Config fields of the wrong kind or past their range are named with what is allowed.
  const nlohmann::json base = nlohmann::json::parse(read_file(cfg));
  const std::tuple<const char *, nlohmann::json, std::string> fields[] = {
      {"tie_word_embeddings", "yes", "tie_word_embeddings must be true or false, got \"yes\""},
      {"scale_attn_by_inverse_layer_idx", true, "which ptdp cannot import (ptdp does not scale by layer)"},
      {"n_positions", int64_t(1) << 40, "'n_positions' must be an integer in [1, 2147483647], got 1099511627776"}};
  for (const auto &[key, value, why] : fields) {
    nlohmann::json c = base;
    c[key] = value;
    const std::string edited = work.path + "/edited_config.json";
    write_file(edited, c.dump());
    expect_error([&] { import_safetensors(fixture("model.safetensors"), edited, target); },
                 Status::invalid_config, why);
  }
  EXPECT_FALSE(fs::exists(target));  // nothing was written
}

// The directory: another run's checkpoints (or a trained one) are not mixed
// with; the same import again replaces its iteration 0.
TEST_F(CheckpointImport, TargetDirectory) {
  import_safetensors(fixture("model.safetensors"), "", imported.path);  // the same again
  EXPECT_TRUE(fs::exists(imported.path + "/iter_0000000/manifest.json"));
  // Other weights under the same path (a later export there, say) are another
  // run's: told by the file's size and time, not by its path alone.
  {
    TempDir src;
    const std::string file = src.path + "/model.safetensors";
    fs::copy_file(fixture("model.safetensors"), file);
    TempDir into;
    import_safetensors(file, fixture("config.json"), into.path);
    fs::last_write_time(file, fs::last_write_time(file) + std::chrono::seconds(5));
    expect_error([&] { import_safetensors(file, fixture("config.json"), into.path); },
                 Status::invalid_config, "imported_file: checkpoint ");
  }
  Config c = config(imported.path);
  c.set("save", work.path);
  auto tr = trainer(c);
  tr->step();
  tr->save(work.path);  // iteration 1, same model
  expect_error([&] { import_safetensors(fixture("model.safetensors"), "", work.path); },
               Status::invalid_config,
               "'" + work.path + "' holds checkpoints of another run (newest: '");
  TempDir other;
  Config o = config("");
  o.set("hidden_size", "64");
  o.set("save", other.path);
  trainer(o)->save(other.path);
  expect_error([&] { import_safetensors(fixture("model.safetensors"), "", other.path); },
               Status::invalid_config, "hidden_size: checkpoint 64, this run 32");
}

// --load of the import is a plain resume at iteration 0; --finetune takes a
// trained checkpoint's weights and nothing else.
// An import is a run of its own (its lineage: "import:" and its file's
// digest): a run from scratch with --save its directory is refused at its
// start (its rotation deleted the import), and so is a fine-tuning of it; a
// resumption of the import saves there.
TEST_F(CheckpointImport, AnImportIsARunOfItsOwn) {
  Config scratch = config("");
  scratch.set("save", imported.path);
  expect_error([&] { trainer(scratch); }, Status::invalid_config,
               "lineage: checkpoint an import (source digest ");
  Config tune = config(imported.path);
  tune.set("finetune", "1");
  auto ft = trainer(tune);
  ft->step();
  expect_error([&] { ft->save(imported.path); }, Status::invalid_config,
               "lineage: checkpoint an import (source digest ");
  Config resume = config(imported.path);
  resume.set("save", imported.path);
  auto r = trainer(resume);
  r->step();
  EXPECT_NO_THROW(r->save(imported.path));
  EXPECT_TRUE(fs::exists(imported.path + "/iter_0000000/manifest.json"));
}

// Paths whose bytes are not UTF-8 (Latin-1 names): JSON holds only UTF-8, so
// a manifest, an export's header and config record them with U+FFFD. The
// import, a run's save and its resumption, and the export all work (they
// failed with nlohmann's "invalid UTF-8 byte", a run after all its steps),
// and the source stays an input of the export.
TEST_F(CheckpointImport, PathsThatAreNotUtf8) {
  const std::string source = work.path + "/caf\xe9" ".safetensors";
  fs::copy_file(fixture("model.safetensors"), source);
  const std::string dir = work.path + "/imported";
  import_safetensors(source, fixture("config.json"), dir);
  const std::string manifest = read_file(dir + "/iter_0000000/manifest.json");
  EXPECT_NE(manifest.find("caf\xef\xbf\xbd.safetensors"), std::string::npos) << manifest;
  const std::string data = work.path + "/donn\xe9" "es.ptdp";
  fs::copy_file(tiny_dataset_path(), data);
  Config c = config(dir);
  set_options(c, {{"data_path", data}, {"save", dir}});
  {
    auto tr = trainer(c);
    tr->step();
    tr->save(dir);
  }
  auto again = trainer(c);  // resumes the run it saved: the same run, by its data
  EXPECT_EQ(again->iteration(), 1);
  const std::string out = work.path + "/export\xe9" ".safetensors";
  export_safetensors(dir, out);
  EXPECT_EQ(read_safetensors(out).tensors.size(), 4u * 12 + 4);
  expect_error([&] { export_safetensors(dir, source); }, Status::invalid_argument,
               "refusing to overwrite an input");
}

TEST_F(CheckpointImport, FinetuneStartsAfresh) {
  auto pre = trainer(config(imported.path));
  EXPECT_EQ(pre->iteration(), 0);
  pre->step();
  pre->step();
  ASSERT_EQ(pre->iteration(), 2);
  TempDir trained;
  pre->save(trained.path);
  const std::vector<float> wte = pre->gather_parameter("wte.weight");

  // Another seed and learning rate: refused by a resume, taken by a fine-tuning run.
  Config c = config(trained.path, 2, 2);
  set_options(c, {{"seed", "7"}, {"lr", "5e-4"}, {"lr_warmup_iters", "3"}});
  expect_error([&] { trainer(c); }, Status::invalid_config,
               "was trained with other options (seed:");
  c.set("finetune", "1");
  auto ft = trainer(c);
  EXPECT_EQ(ft->iteration(), 0);
  EXPECT_EQ(ft->consumed_samples(), 0);
  EXPECT_NE(ft->last_loaded().find("to fine-tune: iteration 0"), std::string::npos)
      << ft->last_loaded();
  EXPECT_EQ(ft->gather_parameter("wte.weight"), wte);
  for (int r = 0; r < ft->world_size(); r++) {
    size_t nonzero = 0;
    for (size_t i = 0; i < ft->model(r).num_params(); i++)
      nonzero += ft->optimizer(r).exp_avg()[i] != 0.f || ft->optimizer(r).exp_avg_sq()[i] != 0.f;
    EXPECT_EQ(nonzero, 0u) << "rank " << r;
  }
  // The LR schedule starts over: the first step is warmup's first (lr / 3).
  const StepMetrics m = ft->step();
  EXPECT_EQ(m.iteration, 1);
  EXPECT_EQ(m.consumed_samples, 4);
  EXPECT_NEAR(m.lr, 5e-4 / 3, 1e-12);
  EXPECT_TRUE(std::isfinite(m.lm_loss));

  // Fine-tuning the imported model learns the corpus: ten steps lower the
  // validation loss of the imported (random) weights (5.21 -> 4.56 nats seen)
  // by far more than evaluation noise (the same batches both times).
  const double before = ft->evaluate(2);
  for (int i = 0; i < 10; i++) ft->step();
  const double after = ft->evaluate(2);
  EXPECT_LT(after, before - 0.3) << "validation loss " << before << " -> " << after;

  // finetune needs a checkpoint to take the weights of.
  Config none = config("");
  none.set("finetune", "1");
  expect_error([&] { TrainerOptions::from_config(none); }, Status::invalid_config,
               "finetune is set but load is not");
  Config empty = config(work.path + "/empty");
  empty.set("finetune", "1");
  expect_error([&] { trainer(empty); }, Status::io_error,
               "has no weights to take (finetune, as `ptdp generate` does too): ");
  // Saving the fine-tuning run among the trained run's checkpoints would mix
  // them, and replace (iteration numbers start again) or prune the one it loads.
  Config mix = c;
  mix.set("save", trained.path);
  expect_error([&] { trainer(mix); }, Status::invalid_config,
               "--finetune starts a new run at iteration 0, but --save '" + trained.path +
                   "' already holds checkpoints");
  // One iter_N of that directory, however spelled: the same.
  for (const std::string &spelled : {trained.path + "/iter_0000002", trained.path + "/iter_0000002/",
                                     trained.path + "/iter_0000002/.", trained.path + "//iter_0000002//"}) {
    mix.set("load", spelled);
    expect_error([&] { trainer(mix); }, Status::invalid_config, "--finetune starts a new run");
  }
  // Through a link elsewhere to the loaded checkpoint, or from a copy of the
  // directory (a sweep found both replaced the trained run's checkpoints):
  // --save holds checkpoints, so the run is refused before anything is written.
  const std::string links = work.path + "/links", copy = work.path + "/copy";
  std::filesystem::create_directories(links);
  std::filesystem::create_directory_symlink(trained.path + "/iter_0000002", links + "/iter_0000002");
  std::filesystem::copy(trained.path, copy, std::filesystem::copy_options::recursive);
  for (const std::string &from : {links, copy}) {
    mix.set("load", from);
    expect_error([&] { trainer(mix); }, Status::invalid_config, "already holds checkpoints");
  }
}

}  // namespace
