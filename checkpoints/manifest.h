// manifest.json: what a checkpoint holds and how to check it (ARCHITECTURE §5).
// Written last by the commit, so its presence marks a complete checkpoint.
//   format, format_version   "ptdp-checkpoint", 1
//   iteration                the training iteration it was saved after
//   file, file_bytes         "model.h5" and its size (catches truncation early)
//   model                    the GPT shape and regularisation (GptConfig fields)
//   layout                   {t, p, d, v} it was saved with
//   training                 the options that shape resumption (seed, LR schedule, batch)
//   datasets                 every dataset of model.h5: name, dtype, global shape and
//                            the blocks written, each {offset, count, crc32c}; a block's
//                            checksum covers its elements row-major, little-endian
//   manifest_crc32c          CRC32C of every other field: the compact JSON (keys
//                            sorted) of the manifest without this field, so an
//                            edited field (an iteration, a block's checksum) is
//                            caught. Manifests written before it have none and
//                            still load (checksummed = false says so).
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "engine/model/gpt_config.h"

namespace ptdp {

struct ManifestBlock {
  std::vector<int64_t> offset, count;
  uint32_t crc32c = 0;
  int64_t numel() const;
};

struct ManifestDataset {
  std::string name;   // "/model/h.3.attn.c_attn.weight"
  std::string dtype;  // "float32" or "int64"
  std::vector<int64_t> shape;
  std::vector<ManifestBlock> blocks;
  int64_t numel() const;
  int64_t bytes() const;  // numel * element size
};

struct CheckpointLayout {
  int t = 1, p = 1, d = 1, v = 1;
  std::string text() const;  // "(t=2, p=2, d=2, v=2)"
};

struct Manifest {
  static constexpr int kFormatVersion = 1;
  int64_t iteration = 0;
  std::string file = "model.h5";
  int64_t file_bytes = 0;
  GptConfig model;
  CheckpointLayout layout;
  std::map<std::string, std::string> training;
  std::vector<ManifestDataset> datasets;  // sorted by name
  // Whether the parsed manifest.json had (and matched) manifest_crc32c; to_json always writes it.
  bool checksummed = false;

  std::string to_json() const;
  // Parses manifest.json in `dir`; throws corrupt_data naming the file and the
  // field that is missing or malformed or, when it has manifest_crc32c, that
  // its fields do not match it; io_error when it cannot be read.
  static Manifest read(const std::string &dir);
  static Manifest parse(const std::string &json, const std::string &where);
  const ManifestDataset *find(const std::string &name) const;  // null if absent
};

// The fields of `saved` that give parameters a different shape than in
// `wanted`, or the same weights another function (GptConfigField::function:
// the norm's epsilon, the rotary base) ("hidden_size: checkpoint 256, this
// run 512"), "" when they agree: what a load must match.
std::string model_shape_mismatch(const GptConfig &saved, const GptConfig &wanted);

}  // namespace ptdp
