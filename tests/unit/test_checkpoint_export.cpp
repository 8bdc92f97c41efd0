// The safetensors export read back by a parser written here from the format's
// description (8-byte little-endian header size, JSON header, raw data), not
// by the exporter's code, and compared with the trained model: Hugging Face
// GPT-2 names, Conv1D [in, out] weights, c_attn's outputs as [q | k | v].
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "checkpoints/inspect.h"
#include "checkpoints/safetensors_export.h"
#include "engine/train/config.h"
#include "engine/train/trainer.h"
#include "expect_error.h"
#include "temp_dir.h"
#include "tiny_dataset.h"

using namespace ptdp;

namespace {

struct SafeTensor {
  std::vector<int64_t> shape;
  std::vector<float> data;
};

// Parses a whole .safetensors file; fails the test on any violation of the format.
std::map<std::string, SafeTensor> parse_safetensors(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string bytes = ss.str();
  std::map<std::string, SafeTensor> out;
  EXPECT_GE(bytes.size(), 8u);
  uint64_t n = 0;
  for (int i = 7; i >= 0; i--) n = n << 8 | (unsigned char)bytes[(size_t)i];
  EXPECT_LE(8 + n, bytes.size());
  EXPECT_EQ((8 + n) % 8, 0u) << "data should start 8-byte aligned";
  const nlohmann::json header = nlohmann::json::parse(bytes.substr(8, n));
  const size_t data_size = bytes.size() - 8 - n;
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") continue;
    EXPECT_EQ(it.value()["dtype"], "F32") << it.key();
    SafeTensor t;
    t.shape = it.value()["shape"].get<std::vector<int64_t>>();
    const uint64_t b = it.value()["data_offsets"][0], e = it.value()["data_offsets"][1];
    uint64_t numel = 1;
    for (int64_t d : t.shape) numel *= (uint64_t)d;
    EXPECT_EQ(e - b, numel * 4) << it.key();
    EXPECT_LE(e, data_size) << it.key();
    ranges.push_back({b, e});
    t.data.resize(numel);
    std::memcpy(t.data.data(), bytes.data() + 8 + n + b, numel * 4);
    out[it.key()] = std::move(t);
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
  c.set("num_layers", "4");
  c.set("hidden_size", "32");
  c.set("num_attention_heads", "4");
  c.set("seq_length", "16");
  c.set("micro_batch_size", "2");
  c.set("global_batch_size", "8");
  c.set("lr", "3e-3");
  c.set("split", "80,20");
  c.set("data_path", tiny_dataset_path());
  c.set("tensor_model_parallel_size", "2");
  c.set("pipeline_model_parallel_size", "2");
  return c;
}

bool ends_with(const std::string &s, const std::string &tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

}  // namespace

TEST(CheckpointExport, GPT2NamesAndLayouts) {
  TempDir dir;
  Trainer tr(TrainerOptions::from_config(config()));
  tr.step();
  const std::string ckpt = tr.save(dir.path);
  const std::string out = dir.path + "/gpt2.safetensors";
  export_safetensors(dir.path, out);
  const auto st = parse_safetensors(out);
  const GptConfig &m = tr.options().model;
  const int64_t h = m.hidden_size, heads = m.num_attention_heads, hd = h / heads, f = m.ffn();
  EXPECT_EQ(st.size(), (size_t)(12 * m.num_layers + 4));
  for (const ParamInfo &p : gpt_param_table(m, 1, {})) {
    ASSERT_TRUE(st.count(p.name)) << p.name;
    const SafeTensor &t = st.at(p.name);
    const std::vector<float> ours = tr.gather_parameter(p.name);  // [out, in], heads [a, 3, hd]
    ASSERT_EQ(t.data.size(), ours.size()) << p.name;
    size_t bad = 0;
    if (ends_with(p.name, "c_attn.weight")) {
      ASSERT_EQ(t.shape, (std::vector<int64_t>{h, 3 * h}));
      // GPT-2 column q*h + a*hd + e of input row j is our row a*3*hd + q*hd + e, column j.
      for (int64_t j = 0; j < h; j++)
        for (int64_t q = 0; q < 3; q++)
          for (int64_t a = 0; a < heads; a++)
            for (int64_t e = 0; e < hd; e++)
              bad += t.data[(size_t)(j * 3 * h + q * h + a * hd + e)] !=
                     ours[(size_t)((a * 3 * hd + q * hd + e) * h + j)];
    } else if (ends_with(p.name, "c_attn.bias")) {
      for (int64_t q = 0; q < 3; q++)
        for (int64_t a = 0; a < heads; a++)
          for (int64_t e = 0; e < hd; e++)
            bad += t.data[(size_t)(q * h + a * hd + e)] != ours[(size_t)(a * 3 * hd + q * hd + e)];
    } else if (ends_with(p.name, "c_proj.weight") || ends_with(p.name, "c_fc.weight")) {
      const int64_t rows = p.global_shape[0], cols = p.global_shape[1];  // ours: [out, in]
      ASSERT_EQ(t.shape, (std::vector<int64_t>{cols, rows})) << p.name;
      for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++)
          bad += t.data[(size_t)(c * rows + r)] != ours[(size_t)(r * cols + c)];
    } else {
      for (size_t i = 0; i < ours.size(); i++) bad += t.data[i] != ours[i];
    }
    EXPECT_EQ(bad, 0u) << p.name;
  }
  EXPECT_EQ(st.at("wte.weight").shape, (std::vector<int64_t>{m.vocab_size, h}));  // unpadded
  EXPECT_EQ(st.at("h.0.mlp.c_fc.weight").shape, (std::vector<int64_t>{h, f}));
}

TEST(CheckpointExport, InspectAndVerify) {
  TempDir dir;
  Trainer tr(TrainerOptions::from_config(config()));
  tr.step();
  const std::string ckpt = tr.save(dir.path);
  const std::string report = inspect_checkpoint(dir.path);
  EXPECT_NE(report.find("iteration   1"), std::string::npos) << report;
  EXPECT_NE(report.find("(t=2, p=2, d=1, v=1)"), std::string::npos) << report;
  EXPECT_NE(report.find("/optim/exp_avg_sq/h.3.mlp.c_proj.weight"), std::string::npos) << report;
  bool ok = false;
  EXPECT_NE(verify_checkpoint(ckpt, &ok).find("OK: "), std::string::npos);
  EXPECT_TRUE(ok);
  std::filesystem::resize_file(ckpt + "/model.h5", std::filesystem::file_size(ckpt + "/model.h5") - 4096);
  const std::string faults = verify_checkpoint(ckpt, &ok);
  EXPECT_FALSE(ok);
  EXPECT_NE(faults.find("truncated"), std::string::npos) << faults;
  // A damaged checkpoint is never exported, and no file is left behind.
  const std::string out = dir.path + "/damaged.safetensors";
  expect_error([&] { export_safetensors(ckpt, out); }, Status::corrupt_data, "is damaged, not exported");
  EXPECT_FALSE(std::filesystem::exists(out));
  EXPECT_FALSE(std::filesystem::exists(out + ".tmp"));
}

TEST(CheckpointExport, UnwritableDestination) {
  TempDir dir;
  Trainer tr(TrainerOptions::from_config(config()));
  tr.save(dir.path);
  std::ofstream(dir.path + "/a_file") << "x";
  expect_error([&] { export_safetensors(dir.path, dir.path + "/a_file/out.safetensors"); },
               Status::io_error, "a_file/out.safetensors.tmp");
}
