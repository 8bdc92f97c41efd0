// `ptdp ckpt inspect | verify | export-safetensors` on a checkpoint a trainer
// saved at (t=2, p=2, d=2): tensors split by rows and by columns, each shard's
// rows split again over the replicas, so datasets have several blocks.
// The safetensors file is read back by a parser written here from the format's
// description (8-byte little-endian header size, JSON header, raw data), not
// by the exporter's code, and compared with the trained model: Hugging Face
// GPT-2 names, Conv1D [in, out] weights, c_attn's outputs as [q | k | v].
// The 16-bit exports hold exactly float_to_bf16 / float_to_f16 of the float32
// export's values.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "checkpoints/inspect.h"
#include "checkpoints/safetensors_export.h"
#include "engine/core/dtype.h"
#include "engine/core/text.h"
#include "engine/train/config.h"
#include "engine/train/trainer.h"
#include "tests/support/config_options.h"
#include "tests/support/expect_error.h"
#include "tests/support/file_size_limit.h"
#include "tests/support/temp_dir.h"
#include "tests/support/tiny_dataset.h"

using namespace ptdp;
namespace fs = std::filesystem;

namespace {

struct SafeTensor {
  std::vector<int64_t> shape;
  std::vector<float> data;     // F32
  std::vector<uint16_t> bits;  // BF16, F16
};

struct SafeTensors {
  nlohmann::json metadata;
  std::map<std::string, SafeTensor> tensors;
  uint64_t data_bytes = 0;  // after the header
};

// Parses a whole .safetensors file whose tensors are all of `dtype` (F32,
// BF16 or F16); fails the test on any violation of the format.
SafeTensors parse_safetensors(const std::string &path, const std::string &dtype = "F32") {
  const uint64_t elem = dtype == "F32" ? 4 : 2;
  const std::string bytes = read_file(path);
  SafeTensors out;
  if (bytes.size() < 8) {
    ADD_FAILURE() << path << " has " << bytes.size() << " bytes";
    return out;
  }
  uint64_t n = 0;
  for (int i = 7; i >= 0; i--) n = n << 8 | (unsigned char)bytes[(size_t)i];
  if (8 + n > bytes.size()) {
    ADD_FAILURE() << "header of " << n << " bytes does not fit in " << bytes.size();
    return out;
  }
  EXPECT_EQ((8 + n) % 8, 0u) << "data should start 8-byte aligned";
  const std::string text = bytes.substr(8, n);
  EXPECT_EQ(text[0], '{');
  const nlohmann::json header = nlohmann::json::parse(text);  // trailing spaces are allowed
  EXPECT_TRUE(header.is_object());
  const size_t data_size = bytes.size() - 8 - n;
  out.data_bytes = data_size;
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") {
      out.metadata = it.value();
      for (auto m = it.value().begin(); m != it.value().end(); ++m)
        EXPECT_TRUE(m.value().is_string()) << "metadata values are strings: " << m.key();
      continue;
    }
    EXPECT_EQ(it.value()["dtype"], dtype) << it.key();
    SafeTensor t;
    t.shape = it.value()["shape"].get<std::vector<int64_t>>();
    const uint64_t b = it.value()["data_offsets"][0], e = it.value()["data_offsets"][1];
    uint64_t numel = 1;
    for (int64_t d : t.shape) numel *= (uint64_t)d;
    EXPECT_EQ(e - b, numel * elem) << it.key();
    if (b > e || e > data_size) {
      ADD_FAILURE() << it.key() << ": bytes [" << b << ", " << e << ") outside the data";
      continue;
    }
    if (e - b != numel * elem) continue;
    ranges.push_back({b, e});
    void *to = elem == 4 ? (t.data.resize(numel), (void *)t.data.data())
                         : (t.bits.resize(numel), (void *)t.bits.data());
    std::memcpy(to, bytes.data() + 8 + n + b, numel * elem);
    out.tensors[it.key()] = std::move(t);
  }
  // The ranges tile the data exactly: no gap, no overlap.
  std::sort(ranges.begin(), ranges.end());
  uint64_t at = 0;
  for (auto &r : ranges) {
    EXPECT_EQ(r.first, at);
    at = r.second;
  }
  EXPECT_EQ(at, data_size);
  return out;
}

Config config() {
  Config c;
  set_options(c, {{"num_layers", "4"}, {"hidden_size", "32"}, {"num_attention_heads", "4"},
                  {"seq_length", "16"}, {"micro_batch_size", "2"}, {"global_batch_size", "8"},
                  {"lr", "3e-3"}, {"split", "80,20"}, {"data_path", tiny_dataset_path()},
                  {"tensor_model_parallel_size", "2"}, {"pipeline_model_parallel_size", "2"},
                  {"data_parallel_size", "2"}});
  return c;
}

// A trainer after one step, saved under dir: the checkpoint to look at.
class CheckpointExport : public ::testing::Test {
 protected:
  void SetUp() override {
    tr = std::make_unique<Trainer>(TrainerOptions::from_config(config()));
    tr->step();
    ckpt = tr->save(dir.path);
    file = ckpt + "/model.h5";
  }
  // Flips one bit inside the data of wte (found by its values), as a disk might.
  void flip_bit_in_wte() {
    std::string bytes = read_file(file);
    const std::vector<float> wte = tr->gather_parameter("wte.weight");
    const std::string needle(reinterpret_cast<const char *>(wte.data() + 1000), 16);
    const size_t at = bytes.find(needle);
    ASSERT_NE(at, std::string::npos);
    bytes[at + 5] ^= 0x04;
    write_file(file, bytes);
  }
  // out and its temporary file are both absent.
  static void expect_no_output(const std::string &out) {
    EXPECT_FALSE(fs::exists(out)) << out;
    EXPECT_FALSE(temp_left_beside(out)) << out;
  }
  TempDir dir;
  std::unique_ptr<Trainer> tr;
  std::string ckpt, file;
};

TEST_F(CheckpointExport, GPT2NamesAndLayouts) {
  const std::string out = dir.path + "/gpt2.safetensors";
  export_safetensors(dir.path, out);  // the save root: its newest checkpoint
  const SafeTensors st = parse_safetensors(out);
  const GptConfig &m = tr->options().model;
  const int64_t h = m.hidden_size, heads = m.num_attention_heads, hd = h / heads, f = m.ffn();
  std::set<std::string> expected;
  for (int i = 0; i < m.num_layers; i++)
    for (const char *k :
         {"ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias",
          "attn.c_proj.weight", "attn.c_proj.bias", "ln_2.weight", "ln_2.bias", "mlp.c_fc.weight",
          "mlp.c_fc.bias", "mlp.c_proj.weight", "mlp.c_proj.bias"})
      expected.insert("h." + std::to_string(i) + "." + k);
  for (const char *k : {"ln_f.weight", "ln_f.bias", "wte.weight", "wpe.weight"}) expected.insert(k);
  std::set<std::string> got;
  for (const auto &kv : st.tensors) got.insert(kv.first);
  EXPECT_EQ(got, expected);

  for (const std::string &name : expected) {
    ASSERT_TRUE(st.tensors.count(name)) << name;
    const SafeTensor &t = st.tensors.at(name);
    const std::vector<float> ours =
        tr->gather_parameter(name);  // [out, in], c_attn heads [a, 3, hd]
    ASSERT_EQ(t.data.size(), ours.size()) << name;
    size_t bad = 0;
    if (ends_with(name, "c_attn.weight")) {
      ASSERT_EQ(t.shape, (std::vector<int64_t>{h, 3 * h}));
      // GPT-2 column q*h + a*hd + e of input row j is our row a*3*hd + q*hd + e, column j.
      for (int64_t j = 0; j < h; j++)
        for (int64_t q = 0; q < 3; q++)
          for (int64_t a = 0; a < heads; a++)
            for (int64_t e = 0; e < hd; e++)
              bad += t.data[(size_t)(j * 3 * h + q * h + a * hd + e)] !=
                     ours[(size_t)((a * 3 * hd + q * hd + e) * h + j)];
    } else if (ends_with(name, "c_attn.bias")) {
      ASSERT_EQ(t.shape, (std::vector<int64_t>{3 * h}));
      for (int64_t q = 0; q < 3; q++)
        for (int64_t a = 0; a < heads; a++)
          for (int64_t e = 0; e < hd; e++)
            bad += t.data[(size_t)(q * h + a * hd + e)] != ours[(size_t)(a * 3 * hd + q * hd + e)];
    } else if (ends_with(name, "c_proj.weight") || ends_with(name, "c_fc.weight")) {
      // Ours [out, in]; GPT-2's Conv1D [in, out]: element (i, o) is our (o, i).
      const int64_t out_dim = ends_with(name, "c_fc.weight") ? f : h;
      const int64_t in_dim = ends_with(name, "mlp.c_proj.weight") ? f : h;
      ASSERT_EQ(t.shape, (std::vector<int64_t>{in_dim, out_dim})) << name;
      for (int64_t i = 0; i < in_dim; i++)
        for (int64_t o = 0; o < out_dim; o++)
          bad += t.data[(size_t)(i * out_dim + o)] != ours[(size_t)(o * in_dim + i)];
    } else {
      for (size_t i = 0; i < ours.size(); i++) bad += t.data[i] != ours[i];
    }
    EXPECT_EQ(bad, 0u) << name;
  }
  EXPECT_EQ(st.tensors.at("wte.weight").shape,
            (std::vector<int64_t>{m.vocab_size, h}));  // unpadded
  EXPECT_EQ(st.tensors.at("wpe.weight").shape, (std::vector<int64_t>{m.max_positions(), h}));
  EXPECT_EQ(st.tensors.at("h.0.ln_1.weight").shape, (std::vector<int64_t>{h}));

  // The metadata: "format": "pt" (what transformers checks) and the GPT2Config.
  EXPECT_EQ(st.metadata.value("format", ""), "pt");
  EXPECT_EQ(st.metadata.value("iteration", ""), "1");
  const nlohmann::json cfg = nlohmann::json::parse(st.metadata.value("gpt2_config", "{}"));
  EXPECT_EQ(cfg.value("n_layer", 0), m.num_layers);
  EXPECT_EQ(cfg.value("n_embd", 0), h);
  EXPECT_EQ(cfg.value("n_head", 0), heads);
  EXPECT_EQ(cfg.value("n_inner", 0), f);
  EXPECT_EQ(cfg.value("vocab_size", 0), m.vocab_size);
  EXPECT_EQ(cfg.value("n_positions", 0), m.max_positions());
  EXPECT_EQ(cfg.value("activation_function", ""), "gelu_new");
  EXPECT_EQ(cfg.value("layer_norm_epsilon", 0.0), 1e-5);

  // Exporting again over an earlier export replaces it whole, and from the
  // checkpoint directory itself gives the same bytes.
  const std::string first = read_file(out);
  write_file(out, std::string("\x02\0\0\0\0\0\0\0{}", 10));  // a stale (empty) safetensors file
  export_safetensors(ckpt, out);
  EXPECT_EQ(read_file(out), first);
  EXPECT_FALSE(temp_left_beside(out));
  // A file that is no safetensors file (a user's notes) is never replaced.
  const std::string notes = dir.path + "/notes.txt";
  write_file(notes, "my notes");
  expect_error([&] { export_safetensors(ckpt, notes); }, Status::invalid_argument,
               "exists and is not a safetensors file");
  EXPECT_EQ(read_file(notes), "my notes");
}

// bf16 and f16: the same tensors, shapes and metadata as the float32 export,
// each element float_to_bf16 / float_to_f16 of its float32 value.
TEST_F(CheckpointExport, SixteenBitExportsRoundEveryValue) {
  const std::string f32 = dir.path + "/f32.safetensors";
  export_safetensors(dir.path, f32);
  const SafeTensors ref = parse_safetensors(f32);
  ASSERT_FALSE(ref.tensors.empty());
  for (const std::string dt : {"bf16", "f16"}) {
    SCOPED_TRACE(dt);
    const std::string out = dir.path + "/" + dt + ".safetensors";
    export_safetensors(dir.path, out, dt);
    const SafeTensors st = parse_safetensors(out, dt == "bf16" ? "BF16" : "F16");
    EXPECT_EQ(st.metadata, ref.metadata);
    EXPECT_EQ(st.tensors.size(), ref.tensors.size());
    // Half the data of float32 (the parser checked that the tensors tile it).
    EXPECT_EQ(st.data_bytes * 2, ref.data_bytes);
    for (const auto &[name, r] : ref.tensors) {
      ASSERT_TRUE(st.tensors.count(name)) << name;
      const SafeTensor &t = st.tensors.at(name);
      EXPECT_EQ(t.shape, r.shape) << name;
      ASSERT_EQ(t.bits.size(), r.data.size()) << name;
      size_t bad = 0;
      for (size_t i = 0; i < r.data.size(); i++)
        bad += t.bits[i] != (dt == "bf16" ? float_to_bf16(r.data[i]) : float_to_f16(r.data[i]));
      EXPECT_EQ(bad, 0u) << name;
    }
  }
  // "f32" asked for by name is the default export, byte for byte.
  const std::string named = dir.path + "/named.safetensors";
  export_safetensors(dir.path, named, "f32");
  EXPECT_EQ(read_file(named), read_file(f32));
}

TEST_F(CheckpointExport, UnknownDtype) {
  const std::string out = dir.path + "/x.safetensors";
  for (const char *dt : {"int8", "f64", "BF16", ""})
    expect_error([&] { export_safetensors(dir.path, out, dt); }, Status::bad_value,
                 "unknown dtype '" + std::string(dt) + "'; allowed: f32, bf16, f16");
  expect_no_output(out);
}

// f16's largest value, 65504, is exported as it is; a larger one is refused
// (it would be written as inf), naming the tensor and the value. bf16, with
// float32's range, takes it.
TEST_F(CheckpointExport, F16RefusesValuesBeyondItsRange) {
  // Sets element 0 of a LayerNorm parameter (whole on every rank holding it,
  // so element 0 is the global element 0) on every rank, and saves.
  auto save_with = [&](const std::string &name, float v, const TempDir &root) {
    for (int r = 0; r < tr->world_size(); r++)
      if (const ParamInfo *p = tr->model(r).find_param(name)) tr->model(r).params()[p->offset] = v;
    tr->save(root.path);
  };
  TempDir edge, beyond;
  save_with("ln_f.bias", -65504.f, edge);
  const std::string ok = edge.path + "/f16.safetensors";
  export_safetensors(edge.path, ok, "f16");
  const SafeTensors st = parse_safetensors(ok, "F16");
  EXPECT_EQ(st.tensors.at("ln_f.bias").bits[0], 0xfbff);  // -65504

  save_with("ln_f.weight", 70000.f, beyond);
  const std::string out = beyond.path + "/f16.safetensors";
  expect_error([&] { export_safetensors(beyond.path, out, "f16"); }, Status::bad_value,
               "'ln_f.weight' element 0 is 70000, beyond f16's largest value 65504");
  expect_no_output(out);
  const std::string bf = beyond.path + "/bf16.safetensors";
  export_safetensors(beyond.path, bf, "bf16");
  EXPECT_EQ(parse_safetensors(bf, "BF16").tensors.at("ln_f.weight").bits[0],
            float_to_bf16(70000.f));
}

// The value of a "  key   value" line of a report ("" when there is none).
std::string value_of(const std::string &report, const std::string &key) {
  const size_t at = report.find("\n  " + key + " ");
  if (at == std::string::npos) return "";
  const size_t end = report.find('\n', at + 1);
  const std::string rest = report.substr(at + 3 + key.size(), end - at - 3 - key.size());
  return rest.substr(rest.find_first_not_of(' '));
}

TEST_F(CheckpointExport, Inspect) {
  const std::string report = inspect_checkpoint(dir.path);
  EXPECT_EQ(value_of(report, "directory"), ckpt) << report;
  EXPECT_EQ(value_of(report, "chosen"), "from the tracker 'latest'") << report;
  EXPECT_EQ(value_of(report, "iteration"), "1") << report;
  EXPECT_EQ(value_of(report, "format"), "ptdp-checkpoint version 1") << report;
  EXPECT_EQ(value_of(report, "file"),
            "model.h5, " + std::to_string(fs::file_size(file)) + " bytes");
  EXPECT_EQ(value_of(report, "saved with"), "(t=2, p=2, d=2, v=1)") << report;
  EXPECT_EQ(value_of(report, "hidden_size"), "32") << report;
  EXPECT_EQ(value_of(report, "ffn_hidden_size"), "128") << report;
  EXPECT_EQ(value_of(report, "layernorm_epsilon"), "1e-05") << report;
  EXPECT_EQ(value_of(report, "seed"), "1234") << report;  // a training option
  EXPECT_EQ(value_of(report, "lr"), "0.003") << report;
  // Every key/value line has its value in the same column.
  EXPECT_EQ(
      report.find("  1\n", report.find("\n  iteration ")) - report.find("\n  iteration "),
      report.find("  32\n", report.find("\n  hidden_size ")) - report.find("\n  hidden_size "));
  // The parameter count: every element of /model/*, the vocabulary unpadded.
  int64_t params = 0, datasets = 4;  // /state/*
  for (const ParamInfo &p : gpt_param_table(tr->options().model, 1, {})) {
    int64_t n = 1;
    for (int64_t d : p.global_shape) n *= d;
    if (p.name == "wte.weight") n = n / p.global_shape[0] * tr->options().model.vocab_size;
    params += n;
    datasets += 3;
  }
  EXPECT_EQ(value_of(report, "parameters"), std::to_string(params) + " (elements of /model/*)");
  EXPECT_EQ(value_of(report, "datasets"), std::to_string(datasets));
  // One line per dataset; wte's: name, dtype, shape, bytes, MB, blocks. It has
  // 3: tensor rank 0's 256 rows split over the 2 replicas, and rank 1's only
  // real row (the other 255 are padding) written by one.
  const std::string wte = "/model/wte.weight";
  const size_t at = report.find("  " + wte + " ");
  ASSERT_NE(at, std::string::npos) << report;
  std::istringstream line(report.substr(at, report.find('\n', at) - at));
  std::string name, dtype, shape, shape2, bytes, mb, blocks;
  line >> name >> dtype >> shape >> shape2 >> bytes >> mb >> blocks;
  EXPECT_EQ(name, wte);
  EXPECT_EQ(dtype, "float32");
  EXPECT_EQ(shape + " " + shape2, "[257, 32]");
  EXPECT_EQ(bytes, std::to_string(257 * 32 * 4));
  EXPECT_EQ(mb, "0.033");
  EXPECT_EQ(blocks, "3");
  EXPECT_NE(report.find("/optim/exp_avg_sq/h.3.mlp.c_proj.weight"), std::string::npos) << report;
  EXPECT_NE(report.find("/state/consumed_samples"), std::string::npos) << report;
  // Every dataset line has its columns at the same places: "float32"/"int64" start together.
  const size_t col = report.find("float32", at) - at;
  const size_t state = report.find("  /state/iteration ");
  ASSERT_NE(state, std::string::npos);
  EXPECT_EQ(report.find("int64", state) - state, col) << report;
}

TEST_F(CheckpointExport, VerifyFindsAFlippedBit) {
  bool ok = false;
  const std::string good = verify_checkpoint(dir.path, &ok);
  EXPECT_TRUE(ok) << good;
  EXPECT_EQ(good.rfind("OK: " + ckpt + ": ", 0), 0u) << good;
  EXPECT_NE(good.find(" blocks, "), std::string::npos) << good;
  flip_bit_in_wte();
  const std::string bad = verify_checkpoint(ckpt, &ok);
  EXPECT_FALSE(ok);
  EXPECT_EQ(bad.rfind("FAULTY: " + ckpt, 0), 0u) << bad;
  EXPECT_NE(bad.find("dataset '/model/wte.weight' block at ["), std::string::npos) << bad;
  EXPECT_NE(bad.find("checksum"), std::string::npos) << bad;
  EXPECT_NE(bad.find("\n1 fault\n"), std::string::npos) << bad;
  // Never exported, and nothing is left behind.
  const std::string out = dir.path + "/damaged.safetensors";
  expect_error([&] { export_safetensors(dir.path, out); }, Status::corrupt_data,
               "is damaged, not exported: '" + file + "' dataset '/model/wte.weight' block at [");
  expect_no_output(out);
}

// Damage outside the parameters (Adam's first moment) still stops the export:
// the checkpoint as a whole is not to be trusted.
TEST_F(CheckpointExport, DamagedOptimizerStateIsNotExported) {
  const ParamInfo *fc = nullptr;
  for (const ParamInfo &p : tr->model(0).param_table())
    if (ends_with(p.name, "mlp.c_fc.weight")) fc = fc ? fc : &p;
  ASSERT_NE(fc, nullptr);
  std::string bytes = read_file(file);
  const std::string needle(
      reinterpret_cast<const char *>(tr->optimizer(0).exp_avg() + fc->offset), 16);
  const size_t at = bytes.find(needle);
  ASSERT_NE(at, std::string::npos);
  bytes[at + 9] ^= 0x01;
  write_file(file, bytes);
  bool ok = true;
  const std::string report = verify_checkpoint(dir.path, &ok);
  EXPECT_FALSE(ok);
  EXPECT_NE(report.find("dataset '/optim/exp_avg/" + fc->name + "' block at ["), std::string::npos)
      << report;
  const std::string out = dir.path + "/damaged.safetensors";
  expect_error([&] { export_safetensors(dir.path, out); }, Status::corrupt_data,
               "is damaged, not exported: '" + file + "' dataset '/optim/exp_avg/" + fc->name);
  expect_no_output(out);
}

// A save directory whose tracker names a damaged checkpoint: verify checks
// the newest complete one and says which it took and what it passed over.
TEST_F(CheckpointExport, VerifySaysWhatItPassedOver) {
  const std::string newer = dir.path + "/iter_0000099";
  fs::create_directories(newer);
  write_file(dir.path + "/latest", "iter_0000099\n");
  bool ok = false;
  const std::string report = verify_checkpoint(dir.path, &ok);
  EXPECT_TRUE(ok) << report;
  EXPECT_EQ(report.rfind("OK: " + ckpt + " (newest complete directory; the tracker was stale: it "
                         "names 'iter_0000099', which has no manifest.json",
                         0),
            0u)
      << report;
  EXPECT_NE(report.find("skipped: iter_0000099 has no manifest.json (damaged)"), std::string::npos)
      << report;
}

TEST_F(CheckpointExport, VerifyFindsATruncatedFile) {
  fs::resize_file(file, fs::file_size(file) - 4096);
  bool ok = true;
  const std::string faults = verify_checkpoint(ckpt, &ok);
  EXPECT_FALSE(ok);
  EXPECT_NE(faults.find("truncated"), std::string::npos) << faults;
  const std::string out = dir.path + "/damaged.safetensors";
  expect_error([&] { export_safetensors(ckpt, out); }, Status::corrupt_data, "truncated");
  expect_no_output(out);
  fs::remove(file);
  EXPECT_NE(verify_checkpoint(ckpt, &ok).find("model.h5' is missing"), std::string::npos);
  EXPECT_FALSE(ok);
  expect_error([&] { export_safetensors(ckpt, out); }, Status::corrupt_data, "is missing");
  expect_no_output(out);
  // A FIFO in the file's place is refused by kind, never opened (an open
  // would wait for a writer that never comes).
  ASSERT_EQ(::mkfifo(file.c_str(), 0644), 0);
  EXPECT_NE(verify_checkpoint(ckpt, &ok).find("is not a regular file"), std::string::npos);
  EXPECT_FALSE(ok);
  expect_error([&] { export_safetensors(ckpt, out); }, Status::corrupt_data, "damaged");
  expect_no_output(out);
}

TEST_F(CheckpointExport, ManifestDisagreesWithItsModel) {
  // A manifest whose model config no longer matches its datasets (without
  // manifest_crc32c, as an older checkpoint's: with it, the edit is the error).
  nlohmann::json j = nlohmann::json::parse(read_file(ckpt + "/manifest.json"));
  j.erase("manifest_crc32c");
  j["model"]["max_position_embeddings"] = 32;
  write_file(ckpt + "/manifest.json", j.dump(1));
  const std::string out = dir.path + "/x.safetensors";
  expect_error([&] { export_safetensors(ckpt, out); }, Status::corrupt_data,
               "the manifest says '/model/wpe.weight' is [16, 32] but its model makes it [32, 32]");
  expect_no_output(out);
  bool ok = true;
  const std::string report = verify_checkpoint(ckpt, &ok);
  EXPECT_FALSE(ok);
  EXPECT_NE(report.find("/optim/exp_avg_sq/wpe.weight' is [16, 32]"), std::string::npos) << report;
}

// Too many open files is this process's limit, not a damaged checkpoint nor
// an earlier output of another kind: an I/O error naming it (the messages
// had invited the user to remove good files).
TEST_F(CheckpointExport, TooManyOpenFilesIsNamedAsSuch) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  // (The sanitizers' runtime needs descriptors of its own, a pipe to test
  // memory before it reads a vptr: with none left it reports false errors.)
  GTEST_SKIP() << "not under the sanitizers: they need file descriptors of their own";
#endif
  const std::string out = dir.path + "/../limit_export.safetensors";
  export_safetensors(ckpt, out);  // an earlier export, to be replaced
  for (const int spare : {0, 1, 2, 3, 4, 6}) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      std::vector<int> held;  // every descriptor taken but `spare`
      for (int fd; (fd = ::dup(0)) >= 0;) held.push_back(fd);
      for (int i = 0; i < spare && !held.empty(); i++, held.pop_back()) ::close(held.back());
      try {
        export_safetensors(ckpt, out);
        ::_exit(0);  // (enough descriptors for this one)
      } catch (const ptdp::Error &e) {
        const std::string what = e.what();
        const bool named = e.code() == Status::io_error && what.find(std::strerror(EMFILE)) != std::string::npos;
        if (!named) std::fprintf(stderr, "spare %d: %s\n", spare, what.c_str());
        ::_exit(named ? 0 : 1);
      }
    }
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "spare descriptors " << spare;
  }
  fs::remove(out);
}

// An export into a new directory that fails as it writes (here past the file
// size limit, as a full disk) removes the directory it made.
TEST_F(CheckpointExport, AFailedExportRemovesTheDirectoryItMade) {
  const std::string out = dir.path + "/../failed_export_dir";
  EXPECT_EQ(exit_code_under_file_size_limit(4096, [&] {
              try {
                export_safetensors(ckpt, out);
              } catch (const ptdp::Error &e) {
                return e.code() == Status::io_error ? 0 : 2;
              }
              return 1;  // (it should not fit)
            }),
            0);
  EXPECT_FALSE(fs::exists(out));
}

// A checkpoint removed while it is read (another process's rotation renames
// it iter_N.old, then removes its files) is not called damaged: an I/O error
// says what happened (export and verify said "corrupt", "FAULTY").
TEST_F(CheckpointExport, ACheckpointRemovedWhileReadIsNotDamaged) {
  EXPECT_TRUE(checkpoint_faults(ckpt).empty());
  fs::rename(ckpt, ckpt + ".old");
  expect_error([&] { checkpoint_faults(ckpt); }, Status::io_error, "was removed while it was read");
  fs::rename(ckpt + ".old", ckpt);
  fs::remove(ckpt + "/manifest.json");  // still there without its manifest: damaged
  EXPECT_FALSE(checkpoint_faults(ckpt).empty());
}

TEST_F(CheckpointExport, UnwritableDestination) {
  write_file(dir.path + "/a_file", "x");
  const std::string under_file = dir.path + "/a_file/out.safetensors";
  expect_error([&] { export_safetensors(dir.path, under_file); }, Status::io_error,
               "a_file/out.safetensors");
  EXPECT_EQ(read_file(dir.path + "/a_file"), "x");
  // A directory is a model directory to write into, once: a second export
  // there would replace the first's files, and is refused.
  fs::create_directory(dir.path + "/a_dir");
  write_file(dir.path + "/a_dir/tokenizer.json", "{}");
  export_safetensors(dir.path, dir.path + "/a_dir");
  const std::string first = read_file(dir.path + "/a_dir/model.safetensors");
  expect_error([&] { export_safetensors(dir.path, dir.path + "/a_dir"); }, Status::invalid_argument,
               "a_dir' already holds 'model.safetensors'");
  EXPECT_EQ(read_file(dir.path + "/a_dir/model.safetensors"), first);
  EXPECT_EQ(read_file(dir.path + "/a_dir/tokenizer.json"), "{}");  // other files stay
  EXPECT_FALSE(temp_left_beside(dir.path + "/a_dir/model.safetensors"));
  // An export killed between its renames (the configs in place, not the
  // weights) is finished by the same export: its configs are kept, byte for
  // byte theirs; a config of another model there is a model's, not replaced.
  const std::string config = read_file(dir.path + "/a_dir/config.json");
  fs::remove(dir.path + "/a_dir/model.safetensors");
  export_safetensors(dir.path, dir.path + "/a_dir");
  EXPECT_EQ(read_file(dir.path + "/a_dir/model.safetensors"), first);
  EXPECT_EQ(read_file(dir.path + "/a_dir/config.json"), config);
  fs::remove(dir.path + "/a_dir/model.safetensors");
  write_file(dir.path + "/a_dir/config.json", config + " ");
  expect_error([&] { export_safetensors(dir.path, dir.path + "/a_dir"); }, Status::invalid_argument,
               "a_dir' already holds 'config.json'");
  EXPECT_EQ(read_file(dir.path + "/a_dir/config.json"), config + " ");
  EXPECT_FALSE(fs::exists(dir.path + "/a_dir/model.safetensors"));
  write_file(dir.path + "/a_dir/config.json", config);
  export_safetensors(dir.path, dir.path + "/a_dir");  // (as it was, for the checks below)
  // Nor a save directory (its own or another): a model's files never go
  // among checkpoints, a rotation's and a resume's.
  expect_error([&] { export_safetensors(dir.path, dir.path); }, Status::invalid_argument,
               "is a save directory (it holds '");
  EXPECT_FALSE(fs::exists(dir.path + "/model.safetensors"));
  EXPECT_FALSE(fs::exists(dir.path + "/config.json"));
  // A directory in the way of a weights file: refused (output_file.h).
  fs::create_directories(dir.path + "/b_dir/x.safetensors");
  expect_error([&] { export_safetensors(dir.path, dir.path + "/b_dir/x.safetensors"); },
               Status::invalid_argument, "exists and is a directory: refusing to replace it");
  // A directory named as a checkpoint's is no export's: refused before it is made.
  expect_error([&] { export_safetensors(dir.path, dir.path + "/iter_0000015"); },
               Status::invalid_argument, "is inside the checkpoint directory");
  EXPECT_FALSE(fs::exists(dir.path + "/iter_0000015"));
  // Never over the checkpoint's own file, nor anywhere inside its directory.
  expect_error([&] { export_safetensors(dir.path, file); }, Status::invalid_argument,
               "is inside the checkpoint directory '" + ckpt + "'");
  bool ok = false;
  verify_checkpoint(ckpt, &ok);
  EXPECT_TRUE(ok);
}

TEST_F(CheckpointExport, NoCheckpoint) {
  TempDir empty;
  expect_error([&] { export_safetensors(empty.path, empty.path + "/x.safetensors"); },
               Status::io_error, "no checkpoint to open");
  bool ok = true;
  expect_error([&] { verify_checkpoint(empty.path, &ok); }, Status::io_error,
               "no checkpoint to open");
  expect_error([&] { inspect_checkpoint(empty.path); }, Status::io_error, "no checkpoint to open");
}

}  // namespace
