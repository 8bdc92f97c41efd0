#include "checkpoints/safetensors_export.h"

#include "engine/core/output_file.h"
#include "engine/core/temp_files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <optional>
#include <nlohmann/json.hpp>
#include <vector>

#include "checkpoints/commit.h"
#include "checkpoints/crc32c.h"
#include "checkpoints/gpt2_layout.h"
#include "checkpoints/llama_layout.h"
#include "engine/core/mapped_file.h"
#include "checkpoints/safetensors_file.h"
#include "engine/data/tokenizer.h"
#include "checkpoints/hdf5_file.h"
#include "checkpoints/sharded_checkpoint.h"
#include "engine/core/dtype.h"
#include "engine/core/json_text.h"
#include "engine/core/status.h"
#include "engine/core/text.h"

namespace ptdp {

namespace fs = std::filesystem;

namespace {

// One tensor of the output and where its rows come from: row r of the
// checkpoint's dataset ("/model/" + a parameter's name) is output row
// row_of[r] (-1: another output tensor's), written transposed for GPT-2's
// Conv1D weights. A GPT-2 parameter is one output tensor; the LLaMA layout's
// QKV is three (q_proj, k_proj, v_proj).
struct OutTensor {
  std::string name, dataset;
  std::vector<int64_t> shape, dataset_shape;
  int64_t rows = 0, cols = 1;  // [out, in] before any transpose
  bool transpose = false;
  std::vector<int64_t> row_of;
};

std::vector<OutTensor> gpt2_outputs(const ParamInfo &p, const GptConfig &cfg) {
  const Gpt2Layout l = gpt2_layout(p, cfg);
  OutTensor o;
  o.name = p.name;
  o.dataset = "/model/" + p.name;
  o.shape = l.gpt2_shape;
  o.dataset_shape = l.shape;
  o.rows = l.rows;
  o.cols = l.cols;
  o.transpose = l.transpose;
  for (int64_t r = 0; r < l.rows; r++) o.row_of.push_back(gpt2_row(l, r, cfg.hidden_size, cfg.head_dim()));
  return {o};
}

std::vector<OutTensor> llama_outputs(const ParamInfo &p, const GptConfig &cfg) {
  const HfMapping m = llama_mapping(p, cfg);
  std::vector<OutTensor> out;
  for (size_t s = 0; s < m.sources.size(); s++) {
    OutTensor o;
    o.name = m.sources[s].name;
    o.dataset = "/model/" + p.name;
    o.shape = m.sources[s].shape;
    o.dataset_shape = p.global_shape;
    if (p.vocab_rows) o.dataset_shape[0] = cfg.vocab_size;  // checkpoints hold it unpadded
    o.cols = m.cols;
    o.rows = 1;  // rows of m.cols values (SwiGLU's gate bias [f]: one)
    for (int64_t d : o.shape) o.rows *= d;
    o.rows /= o.cols;
    for (int64_t i = 0; i < m.rows; i++) {
      const auto [src, row] = m.row(i);
      o.row_of.push_back(src == (int)s ? row : -1);
    }
    out.push_back(std::move(o));
  }
  return out;
}

// Puts a block of the checkpoint's dataset (rows r0.., columns c0.., nr x nc
// row-major in blk) where it belongs in the output tensor `out`.
void place(const OutTensor &o, int64_t r0, int64_t nr, int64_t c0, int64_t nc, const float *blk,
           float *out) {
  if (!o.transpose) {
    for (int64_t i = 0; i < nr; i++)
      if (o.row_of[(size_t)(r0 + i)] >= 0)
        std::memcpy(out + o.row_of[(size_t)(r0 + i)] * o.cols + c0, blk + i * nc,
                    (size_t)nc * sizeof(float));
    return;
  }
  // out[column][row_of(row)], in tiles of rows: the rows being read stay in
  // cache while their columns are written one by one.
  const int64_t tile = 64;
  for (int64_t i0 = 0; i0 < nr; i0 += tile) {
    const int64_t i1 = std::min(nr, i0 + tile);
    for (int64_t j = 0; j < nc; j++) {
      float *col = out + (c0 + j) * o.rows;
      for (int64_t i = i0; i < i1; i++) col[o.row_of[(size_t)(r0 + i)]] = blk[i * nc + j];
    }
  }
}

// The shortest decimal text that reads back as x, as a JSON number (1e-05, not
// 9.999999747378752e-06).
double shortest(float x) {
  char buf[32];
  for (int digits = 6; digits <= 9; digits++) {
    std::snprintf(buf, sizeof buf, "%.*g", digits, (double)x);
    if ((float)std::strtod(buf, nullptr) == x) break;
  }
  return std::strtod(buf, nullptr);
}

// The transformers GPT2Config that matches the model (recorded in the
// metadata so that a config.json can be written from it). ptdp's GeLU is the
// tanh approximation, GPT-2's "gelu_new"; Megatron's embedding dropout is the
// hidden dropout.
nlohmann::json gpt2_config(const GptConfig &g) {
  return {{"model_type", "gpt2"},
          {"vocab_size", g.vocab_size},
          {"n_positions", g.max_positions()},
          {"n_embd", g.hidden_size},
          {"n_layer", g.num_layers},
          {"n_head", g.num_attention_heads},
          {"n_inner", g.ffn()},
          {"activation_function", "gelu_new"},
          {"layer_norm_epsilon", shortest(g.layernorm_epsilon)},
          {"resid_pdrop", shortest(g.hidden_dropout)},
          {"embd_pdrop", shortest(g.hidden_dropout)},
          {"attn_pdrop", shortest(g.attention_dropout)},
          {"initializer_range", shortest(g.init_method_std)},
          {"tie_word_embeddings", true}};
}

template <class... Args>
[[noreturn]] void damaged(const std::string &dir, const Args &...why) {
  fail(Status::corrupt_data, "checkpoint '", dir, "' is damaged, not exported: ", why...);
}

// The element type asked for: f32 or one of the 16-bit types (no f64: the
// checkpoint holds nothing more precise than float32).
DType export_dtype(const std::string &name) {
  DType t = DType::f32;
  if (!parse_dtype(name, &t) || t == DType::f64)
    fail(Status::bad_value, "export_safetensors: unknown dtype '", name,
         "'; allowed: f32, bf16, f16 (also written fp32, float32, bfloat16, fp16, float16)");
  return t;
}

const char *safetensors_dtype(DType t) {
  return t == DType::bf16 ? "BF16" : t == DType::f16 ? "F16" : "F32";
}

// f16's largest finite value; anything larger would be written as inf.
constexpr float kF16Max = 65504.f;

void check_f16_range(const std::string &tensor, const std::vector<float> &x) {
  for (size_t i = 0; i < x.size(); i++)
    if (std::fabs(x[i]) > kF16Max)
      fail(Status::bad_value, "export_safetensors: '", tensor, "' element ", i, " is ", x[i],
           ", beyond f16's largest value 65504 (it would become inf): export as bf16 or f32");
}


// The Hugging Face config of a LLaMA-shaped model: LlamaForCausalLM (with
// attention_bias and mlp_bias when every linear layer has a bias), or
// Qwen2ForCausalLM when only QKV has biases. rope_theta both as transformers 4 reads it and in
// transformers 5's rope_parameters.
nlohmann::json llama_config(const GptConfig &g, DType type) {
  const bool qwen2 = !g.linear_bias() && g.add_qkv_bias != 0;
  nlohmann::json c = {
      {"architectures", {qwen2 ? "Qwen2ForCausalLM" : "LlamaForCausalLM"}},
      {"model_type", qwen2 ? "qwen2" : "llama"},
      {"vocab_size", g.vocab_size},
      {"hidden_size", g.hidden_size},
      {"intermediate_size", g.ffn()},
      {"num_hidden_layers", g.num_layers},
      {"num_attention_heads", g.num_attention_heads},
      {"num_key_value_heads", g.query_groups()},
      {"head_dim", g.head_dim()},
      {"max_position_embeddings", g.max_positions()},
      {"rms_norm_eps", shortest(g.layernorm_epsilon)},
      {"rope_theta", shortest(g.rotary_base)},
      {"rope_scaling", nullptr},
      {"rope_parameters", {{"rope_type", "default"}, {"rope_theta", shortest(g.rotary_base)}}},
      {"hidden_act", "silu"},
      {"tie_word_embeddings", g.tied()},
      {"attention_dropout", shortest(g.attention_dropout)},
      {"initializer_range", shortest(g.init_method_std)},
      {"torch_dtype", type == DType::bf16 ? "bfloat16" : type == DType::f16 ? "float16" : "float32"}};
  if (qwen2) {
    c["use_sliding_window"] = false;
    c["sliding_window"] = nullptr;
  } else {
    c["attention_bias"] = g.linear_bias();
    c["mlp_bias"] = g.linear_bias();
  }
  return c;
}

}  // namespace

void export_safetensors(const std::string &path, const std::string &out_path,
                        const std::string &dtype) {
  if (out_path.empty()) fail(Status::invalid_argument, "export_safetensors: no output file given");
  // A path ending in .safetensors is the weights file alone (GPT-2, its
  // config in the metadata), under output_file.h's rules, as is any existing
  // file; a directory, or a new path, is a model directory as save_pretrained
  // writes it: model.safetensors, config.json and generation_config.json
  // (made if absent; its other files, a tokenizer say, stay).
  std::error_code ec;
  const bool to_dir = !ends_with(out_path, ".safetensors") &&
                      (fs::is_directory(out_path, ec) ||
                       !fs::exists(fs::symlink_status(out_path, ec)));
  // Nothing of a model already there is replaced: an old index beside new
  // weights would even be what from_pretrained reads. (The configs are
  // looked at once their bytes are known, below: an export killed between
  // its renames left its own.)
  const auto already_holds = [&](const char *name) {
    fail(Status::invalid_argument, "export_safetensors: '", out_path, "' already holds '", name,
         "': export into a directory without a model's files (nothing of a model there is replaced)");
  };
  for (const char *name : {"model.safetensors", "model.safetensors.index.json"})
    if (to_dir && fs::exists(fs::symlink_status(fs::path(out_path) / name, ec))) already_holds(name);
  // Nor among a save directory's checkpoints (its rotation and resume own it).
  if (to_dir) {
    const std::string save_entry = first_save_entry(out_path);
    if (!save_entry.empty())
      fail(Status::invalid_argument, "export_safetensors: '", out_path, "' is a save directory (it holds '",
           save_entry, "'): export into a directory of its own, e.g. '",
           (fs::path(out_path) / "hf").string(), "'");
  }
  const std::string weights_path = to_dir ? (fs::path(out_path) / "model.safetensors").string()
                                          : out_path;
  // A link to a file writes that file; a device node or directory is refused.
  if (!to_dir || fs::exists(out_path, ec)) output_target(weights_path, "export_safetensors output", OutputKind::safetensors);
  // One file only this command writes: held across processes while it is
  // written (two exports to one file both reported writing it, one lost).
  std::optional<OutputClaim> writing;
  if (!to_dir) writing.emplace(weights_path, "export_safetensors output", true);
  const DType type = export_dtype(dtype);
  const CheckpointRef ref = open_checkpoint(path);
  const Manifest &m = ref.manifest;
  const std::string file = ref.dir + "/" + m.file;
  // The checkpoint's files are this command's inputs: never its output.
  std::vector<InputFile> reading;
  for (const std::string &f : ref.read_files) reading.emplace_back(f, "checkpoint file");
  // Nor the model it was imported from (a fine-tuning's export over its base).
  const auto source = m.training.find("imported_from");
  if (source != m.training.end())
    reading.emplace_back(source->second, "model this checkpoint was imported from,");
  // ... also moved or renamed since: told by its recorded size and time.
  const auto record = m.training.find("imported_file");
  if (record != m.training.end() && file_record(weights_path) == record->second)
    fail(Status::invalid_argument, "export_safetensors output '", weights_path, "' has the size and ",
         "time of the model this checkpoint was imported from (", record->second, "; recorded as '",
         source != m.training.end() ? source->second : std::string("?"), "'): refusing to overwrite ",
         "an input (choose another output path)");
  const GptConfig &cfg = m.model;
  // The LLaMA family's layout for a model of its shape; GPT-2's otherwise.
  const bool llama = llama_layout_mismatch(cfg).empty();
  if (llama && !to_dir)
    fail(Status::invalid_argument, "export_safetensors: '", out_path, "' is a file, but a model ",
         "of the LLaMA family exports to a directory (its config.json beside the weights): give ",
         "a directory");
  // Any fault, in the optimizer state too, means the checkpoint is not to be
  // trusted: everything `ptdp ckpt verify` checks is checked before the output
  // is created. The parameters' checksums are checked again as they are read
  // for the export, in case the file changes in between.
  const std::vector<std::string> faults = checkpoint_faults(ref.dir);
  if (faults.size() == 1) damaged(ref.dir, faults[0]);
  if (faults.size() > 1)
    damaged(ref.dir, faults[0], " (and ", faults.size() - 1,
            " more faults; `ptdp ckpt verify` lists them all)");
  const H5File f = open_checkpoint_data(ref);

  // verify (above) checked the manifest's shapes against its model; these
  // checks keep the conversion below from ever reading out of bounds.
  std::vector<OutTensor> convs;
  for (const ParamInfo &p : gpt_param_table(cfg, 1, {})) {
    for (OutTensor &c : llama ? llama_outputs(p, cfg) : gpt2_outputs(p, cfg)) {
      const ManifestDataset *md = m.find(c.dataset);
      if (!md) damaged(ref.dir, "the manifest has no dataset '", c.dataset, "'");
      if (md->dtype != "float32")
        damaged(ref.dir, "dataset '", c.dataset, "' is ", md->dtype, ", not float32");
      if (f.shape(c.dataset) != c.dataset_shape)
        damaged(ref.dir, "dataset '", c.dataset, "' in '", file, "' is ",
                dims_text(f.shape(c.dataset)), " but the manifest says ",
                dims_text(c.dataset_shape));
      convs.push_back(std::move(c));
    }
  }
  // The directory is made only for an output that may be written, and
  // removed again when its file is refused.
  refuse_inside_checkpoint(weights_path, "export_safetensors output", false);
  const bool make_dir = to_dir && !fs::exists(out_path, ec);
  // An interrupted export (SIGINT, SIGTERM) removes the directory it made once
  // its temporary files are gone (rmdir: only while empty and still the one
  // made), until it ends. An export that fails (refused, a full disk) removes
  // it too, so: only what this export made.
  struct HeldDirectory {
    std::string dir;
    bool placed = false;
    ~HeldDirectory() {
      if (dir.empty()) return;
      if (placed) release_temp_directory(dir, {});
      else unmake_directory(dir);
    }
  } held;
  try {
    if (make_dir && !make_held_directory(out_path))
      fail(Status::io_error, "directory '", out_path, "' was made by another command meanwhile (another "
           "export into it?): this export replaces nothing; give another directory, or run it again "
           "when that one is done");
  } catch (const Error &e) {
    fail(Status::io_error, "export_safetensors: ", e.what());
  }
  if (make_dir) held.dir = out_path;
  const std::string out_file = output_target(weights_path, "export_safetensors output", OutputKind::safetensors);

  // Header: every tensor's dtype, shape and byte range in the data that
  // follows, in the order they are written.
  nlohmann::json header = nlohmann::json::object();
  header["__metadata__"] = {{"format", "pt"},
                            {"producer", "ptdp"},
                            {"checkpoint", ref.dir},
                            {"iteration", std::to_string(m.iteration)}};
  if (!llama) header["__metadata__"]["gpt2_config"] = json_file_text(gpt2_config(cfg));
  for (const char *key : {kTokenizerTypeKey, kTokenizerVocabularyKey})  // (an import takes them back)
    if (auto it = m.training.find(key); it != m.training.end()) header["__metadata__"][key] = it->second;
  int64_t offset = 0;
  for (const OutTensor &c : convs) {
    const int64_t bytes = c.rows * c.cols * (int64_t)dtype_size(type);
    header[c.name] = {{"dtype", safetensors_dtype(type)},
                                   {"shape", c.shape},
                                   {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = json_file_text(header);
  text.append((8 - text.size() % 8) % 8, ' ');  // the data starts 8-byte aligned
  unsigned char len[8];
  for (int i = 0; i < 8; i++) len[i] = (unsigned char)((uint64_t)text.size() >> (8 * i));

  // A directory's files: all written to temporaries first, then renamed into
  // place together (below), so an interrupt leaves all of them or none.
  std::vector<std::pair<std::string, std::string>> files;  // target, bytes
  if (to_dir) {
    // The configs from_pretrained reads beside the weights. The token ids of
    // bos and eos are known when the checkpoint came from a Hugging Face
    // import (recorded then); else they are left out.
    nlohmann::json config = llama ? llama_config(cfg, type) : gpt2_config(cfg);
    if (!llama) config["architectures"] = {"GPT2LMHeadModel"};
    nlohmann::json generation = {{"_from_model_config", true}};
    for (const char *id : {"bos_token_id", "eos_token_id"}) {
      auto it = m.training.find(std::string("hf_") + id);
      if (it == m.training.end()) continue;
      try {
        if (json_too_deep_at(it->second.data(), it->second.size()) >= 0)
          damaged(ref.dir, "its training record's hf_", id, " nests too deep to be a token id");
        config[id] = generation[id] = nlohmann::json::parse(it->second);
      } catch (const nlohmann::json::exception &) {
        damaged(ref.dir, "its training record's hf_", id, " is not JSON: ", it->second);
      }
    }
    for (const auto &[name, json] : {std::make_pair("config.json", &config),
                                     std::make_pair("generation_config.json", &generation)}) {
      const std::string target = (fs::path(out_path) / name).string(), bytes = json_file_text(*json, 2) + "\n";
      const auto st = fs::symlink_status(target, ec);
      if (!fs::exists(st)) {
        const std::string what = "export_safetensors " + std::string(name);
        files.push_back({output_target(target, what.c_str(), OutputKind::json), bytes});
        continue;
      }
      // One this very export writes, byte for byte, is an export's stopped
      // before its weights (SIGKILL between its renames): kept, and the
      // export finished; anything else there is a model's, not replaced.
      if (!fs::is_regular_file(st) || read_small_file(target, "'" + target + "'", "", 1 << 20) != bytes)
        already_holds(name);
    }
  }

  // The data, one tensor at a time: its blocks read, checked against their
  // checksums and placed in GPT-2's layout, then converted and written.
  std::string tmp;
  const int fd = create_temp_file(out_file, &tmp);
  bool closed = false;
  try {
    write_all(fd, len, 8, tmp);
    write_all(fd, text.data(), text.size(), tmp);
    std::vector<float> out, blk;
    std::vector<uint16_t> half;
    for (const OutTensor &c : convs) {
      out.assign((size_t)(c.rows * c.cols), 0.f);
      for (const ManifestBlock &b : m.find(c.dataset)->blocks) {
        blk.resize((size_t)b.numel());
        f.read_block(c.dataset, b.offset, b.count, blk.data());
        const uint32_t crc = crc32c(0, blk.data(), blk.size() * sizeof(float));
        if (crc != b.crc32c) {
          char msg[64];
          std::snprintf(msg, sizeof msg, "%08x, the manifest says %08x", crc, b.crc32c);
          damaged(ref.dir, "'", file, "' dataset '", c.dataset, "' block at ", dims_text(b.offset),
                  " of ", dims_text(b.count), ": checksum ", msg);
        }
        const bool two_d = b.offset.size() > 1;
        place(c, b.offset[0], b.count[0], two_d ? b.offset[1] : 0, two_d ? b.count[1] : 1,
              blk.data(), out.data());
      }
      if (type == DType::f32) {
        write_all(fd, out.data(), out.size() * sizeof(float), tmp);
        continue;
      }
      if (type == DType::f16) check_f16_range(c.name, out);
      half.resize(out.size());
      to_16bit(type, out.data(), half.data(), out.size());
      write_all(fd, half.data(), half.size() * sizeof(uint16_t), tmp);
    }
    if (::fsync(fd) != 0)
      fail(Status::io_error, "cannot fsync '", tmp, "': ", std::strerror(errno));
    closed = true;  // even when close fails: the descriptor is gone
    if (::close(fd) != 0)
      fail(Status::io_error, "cannot close '", tmp, "': ", std::strerror(errno));
  } catch (...) {
    if (!closed) ::close(fd);
    remove_temp_file(tmp);
    throw;
  }
  std::vector<std::pair<std::string, std::string>> temps;  // temporary, target
  try {
    for (const auto &[target, bytes] : files) temps.push_back({write_temp_file(target, bytes), target});
  } catch (...) {
    for (const auto &tt : temps) remove_temp_file(tt.first);
    remove_temp_file(tmp);
    throw;
  }
  temps.push_back({tmp, out_file});  // the weights last
  // A model directory is exported into a new or empty one: nothing there is
  // replaced, also not what another export put there meanwhile.
  put_in_place(temps, "export to '" + out_path + "'", to_dir);
  held.placed = true;
  // The rename is durable once the directory is synced.
  const size_t slash = out_file.find_last_of('/');
  const std::string parent = slash == std::string::npos ? "."
                             : slash == 0               ? "/"
                                                        : out_file.substr(0, slash);
  const int dfd = ::open(parent.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0 || ::fsync(dfd) != 0) {
    const int e = errno;
    if (dfd >= 0) ::close(dfd);
    fail(Status::io_error, "wrote '", out_file, "' but cannot fsync its directory '", parent,
         "': ", std::strerror(e));
  }
  ::close(dfd);
  if (!to_dir) return;
}

}  // namespace ptdp
