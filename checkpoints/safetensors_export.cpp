#include "checkpoints/safetensors_export.h"

#include "engine/core/output_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>
#include <vector>

#include "checkpoints/crc32c.h"
#include "checkpoints/gpt2_layout.h"
#include "checkpoints/hdf5_file.h"
#include "checkpoints/sharded_checkpoint.h"
#include "engine/core/dtype.h"
#include "engine/core/status.h"

namespace ptdp {

namespace {

// How one parameter goes from the checkpoint ("/model/" + its name) to GPT-2.
struct Conversion : Gpt2Layout {
  std::string dataset;  // "/model/h.0.attn.c_attn.weight"
};

Conversion conversion(const ParamInfo &p, const GptConfig &cfg) {
  Conversion c;
  static_cast<Gpt2Layout &>(c) = gpt2_layout(p, cfg);
  c.dataset = "/model/" + p.name;
  return c;
}

// Puts a block of the checkpoint's tensor (rows r0.., columns c0.., nr x nc
// row-major in blk) where it belongs in GPT-2's tensor `out`.
void place(const Conversion &c, int64_t r0, int64_t nr, int64_t c0, int64_t nc, const float *blk,
           int64_t h, int64_t hd, float *out) {
  if (!c.transpose) {
    for (int64_t i = 0; i < nr; i++)
      std::memcpy(out + gpt2_row(c, r0 + i, h, hd) * c.cols + c0, blk + i * nc,
                  (size_t)nc * sizeof(float));
    return;
  }
  // out[column][gpt2_row(row)], in tiles of rows: the rows being read stay in
  // cache while their columns are written one by one.
  const int64_t tile = 64;
  for (int64_t i0 = 0; i0 < nr; i0 += tile) {
    const int64_t i1 = std::min(nr, i0 + tile);
    for (int64_t j = 0; j < nc; j++) {
      float *col = out + (c0 + j) * c.rows;
      for (int64_t i = i0; i < i1; i++) col[gpt2_row(c, r0 + i, h, hd)] = blk[i * nc + j];
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
         "'; allowed: f32, bf16, f16");
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

}  // namespace

void export_safetensors(const std::string &path, const std::string &out_path,
                        const std::string &dtype) {
  if (out_path.empty()) fail(Status::invalid_argument, "export_safetensors: no output file given");
  // A link to a file writes that file; a device node or directory is refused.
  output_target(out_path, "export_safetensors output");
  const DType type = export_dtype(dtype);
  const CheckpointRef ref = open_checkpoint(path);
  const Manifest &m = ref.manifest;
  const std::string file = ref.dir + "/" + m.file;
  // The checkpoint's files are this command's inputs: never its output.
  std::vector<InputFile> reading;
  for (const std::string &f : ref.read_files) reading.emplace_back(f, "checkpoint file");
  const std::string out_file = output_target(out_path, "export_safetensors output");
  const GptConfig &cfg = m.model;
  // Any fault, in the optimizer state too, means the checkpoint is not to be
  // trusted: everything `ptdp ckpt verify` checks is checked before the output
  // is created. The parameters' checksums are checked again as they are read
  // for the export, in case the file changes in between.
  const std::vector<std::string> faults = checkpoint_faults(ref.dir);
  if (faults.size() == 1) damaged(ref.dir, faults[0]);
  if (faults.size() > 1)
    damaged(ref.dir, faults[0], " (and ", faults.size() - 1,
            " more faults; `ptdp ckpt verify` lists them all)");
  const H5File f = H5File::open_read(file);

  // verify (above) checked the manifest's shapes against its model; these
  // checks keep the conversion below from ever reading out of bounds.
  std::vector<Conversion> convs;
  for (const ParamInfo &p : gpt_param_table(cfg, 1, {})) {
    Conversion c = conversion(p, cfg);
    const ManifestDataset *md = m.find(c.dataset);
    if (!md) damaged(ref.dir, "the manifest has no dataset '", c.dataset, "'");
    if (md->dtype != "float32")
      damaged(ref.dir, "dataset '", c.dataset, "' is ", md->dtype, ", not float32");
    if (f.shape(c.dataset) != c.shape)
      damaged(ref.dir, "dataset '", c.dataset, "' in '", file, "' is ",
              dims_text(f.shape(c.dataset)), " but the manifest says ", dims_text(c.shape));
    convs.push_back(std::move(c));
  }

  // Header: every tensor's dtype, shape and byte range in the data that
  // follows, in the order they are written.
  nlohmann::json header = nlohmann::json::object();
  header["__metadata__"] = {{"format", "pt"},
                            {"producer", "ptdp"},
                            {"checkpoint", ref.dir},
                            {"iteration", std::to_string(m.iteration)},
                            {"gpt2_config", gpt2_config(cfg).dump()}};
  int64_t offset = 0;
  for (const Conversion &c : convs) {
    const int64_t bytes = c.rows * c.cols * (int64_t)dtype_size(type);
    header[c.dataset.substr(7)] = {{"dtype", safetensors_dtype(type)},
                                   {"shape", c.gpt2_shape},
                                   {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // the data starts 8-byte aligned
  unsigned char len[8];
  for (int i = 0; i < 8; i++) len[i] = (unsigned char)((uint64_t)text.size() >> (8 * i));

  // The data, one tensor at a time: its blocks read, checked against their
  // checksums and placed in GPT-2's layout, then converted and written.
  std::string tmp;
  const int fd = create_temp_file(out_file, &tmp);
  bool closed = false;
  try {
    write_all(fd, len, 8, tmp);
    write_all(fd, text.data(), text.size(), tmp);
    const int64_t h = cfg.hidden_size, hd = cfg.head_dim();
    std::vector<float> out, blk;
    std::vector<uint16_t> half;
    for (const Conversion &c : convs) {
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
              blk.data(), h, hd, out.data());
      }
      if (type == DType::f32) {
        write_all(fd, out.data(), out.size() * sizeof(float), tmp);
        continue;
      }
      if (type == DType::f16) check_f16_range(c.dataset.substr(7), out);
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
    ::unlink(tmp.c_str());
    throw;
  }
  if (std::rename(tmp.c_str(), out_file.c_str()) != 0) {
    const int e = errno;
    ::unlink(tmp.c_str());
    fail(Status::io_error, "cannot rename '", tmp, "' to '", out_file, "': ", std::strerror(e));
  }
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
}

}  // namespace ptdp
