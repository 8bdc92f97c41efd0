#include "checkpoints/safetensors_export.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <vector>

#include "checkpoints/hdf5_file.h"
#include "checkpoints/sharded_checkpoint.h"
#include "engine/core/status.h"

namespace ptdp {

namespace {

bool ends_with(const std::string &s, const std::string &tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// One tensor in GPT-2's layout: its shape and row-major values.
struct Tensor {
  std::vector<int64_t> shape;
  std::vector<float> data;
};

// w: [rows, cols] row-major -> [cols, rows].
std::vector<float> transpose(const std::vector<float> &w, int64_t rows, int64_t cols) {
  std::vector<float> t(w.size());
  for (int64_t r = 0; r < rows; r++)
    for (int64_t c = 0; c < cols; c++) t[(size_t)(c * rows + r)] = w[(size_t)(r * cols + c)];
  return t;
}

// ptdp's c_attn output index a*3*hd + q*hd + e (q: 0 query, 1 key, 2 value)
// is GPT-2's q*h + a*hd + e.
int64_t gpt2_qkv_index(int64_t i, int64_t h, int64_t hd) {
  const int64_t a = i / (3 * hd), q = i / hd % 3, e = i % hd;
  return q * h + a * hd + e;
}

Tensor to_gpt2(const std::string &name, const std::vector<int64_t> &shape, std::vector<float> w,
               const GptConfig &cfg) {
  const int64_t h = cfg.hidden_size, hd = cfg.head_dim();
  if (ends_with(name, "attn.c_attn.weight")) {  // [3h, h] -> reorder rows -> [h, 3h]
    std::vector<float> r(w.size());
    for (int64_t i = 0; i < 3 * h; i++)
      std::memcpy(&r[(size_t)(gpt2_qkv_index(i, h, hd) * h)], &w[(size_t)(i * h)],
                  (size_t)h * sizeof(float));
    return {{h, 3 * h}, transpose(r, 3 * h, h)};
  }
  if (ends_with(name, "attn.c_attn.bias")) {
    std::vector<float> r(w.size());
    for (int64_t i = 0; i < 3 * h; i++) r[(size_t)gpt2_qkv_index(i, h, hd)] = w[(size_t)i];
    return {shape, r};
  }
  if (ends_with(name, "c_proj.weight") || ends_with(name, "c_fc.weight"))
    return {{shape[1], shape[0]}, transpose(w, shape[0], shape[1])};
  return {shape, std::move(w)};
}

void write_all(int fd, const void *p, size_t n, const std::string &path) {
  const char *c = static_cast<const char *>(p);
  while (n > 0) {
    const ssize_t k = ::write(fd, c, n);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) fail(Status::io_error, "cannot write '", path, "': ", std::strerror(errno));
    c += k;
    n -= (size_t)k;
  }
}

}  // namespace

void export_safetensors(const std::string &path, const std::string &out_file) {
  const CheckpointRef ref = open_checkpoint(path);
  const std::vector<std::string> faults = checkpoint_faults(ref.dir);
  if (!faults.empty())
    fail(Status::corrupt_data, "checkpoint '", ref.dir, "' is damaged, not exported (",
         faults.size(), " fault(s); first: ", faults[0], ")");
  const GptConfig &cfg = ref.manifest.model;
  const H5File f = H5File::open_read(ref.dir + "/" + ref.manifest.file);

  // Header: every tensor's dtype, shape and byte range in the data that follows.
  std::vector<std::string> names;
  std::vector<Tensor> tensors;
  nlohmann::json header;
  header["__metadata__"] = {{"format", "pt"},
                            {"source", "ptdp checkpoint " + ref.dir},
                            {"iteration", std::to_string(ref.manifest.iteration)}};
  int64_t offset = 0;
  for (const ParamInfo &p : gpt_param_table(cfg, 1, {})) {
    const std::string ds = "/model/" + p.name;
    const std::vector<int64_t> shape = f.shape(ds);
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    std::vector<float> w((size_t)n);
    std::vector<int64_t> zero(shape.size(), 0);
    f.read_block(ds, zero, shape, w.data());
    tensors.push_back(to_gpt2(p.name, shape, std::move(w), cfg));
    const int64_t bytes = (int64_t)tensors.back().data.size() * (int64_t)sizeof(float);
    header[p.name] = {{"dtype", "F32"}, {"shape", tensors.back().shape},
                      {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // the data starts 8-byte aligned
  const uint64_t len = text.size();
  unsigned char le[8];
  for (int i = 0; i < 8; i++) le[i] = (unsigned char)(len >> (8 * i));

  const std::string tmp = out_file + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail(Status::io_error, "cannot create '", tmp, "': ", std::strerror(errno));
  try {
    write_all(fd, le, 8, tmp);
    write_all(fd, text.data(), text.size(), tmp);
    for (const Tensor &t : tensors) write_all(fd, t.data.data(), t.data.size() * sizeof(float), tmp);
    if (::fsync(fd) != 0) fail(Status::io_error, "cannot fsync '", tmp, "': ", std::strerror(errno));
  } catch (...) {
    ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  ::close(fd);
  if (std::rename(tmp.c_str(), out_file.c_str()) != 0) {
    const int e = errno;
    ::unlink(tmp.c_str());
    fail(Status::io_error, "cannot rename '", tmp, "' to '", out_file, "': ", std::strerror(e));
  }
}

}  // namespace ptdp
