#include "checkpoints/safetensors_file.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <cmath>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <tuple>
#include <vector>

#include "checkpoints/commit.h"
#include "checkpoints/save_target.h"
#include "checkpoints/sharded_checkpoint.h"
#include "engine/core/dtype.h"
#include "engine/core/json_text.h"
#include "engine/core/mapped_file.h"
#include "engine/core/status.h"
#include "engine/data/tokenizer.h"

namespace ptdp {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

size_t element_size(const std::string &dtype) {
  return dtype == "F32" ? 4 : (dtype == "F16" || dtype == "BF16") ? 2 : 0;
}

// The bytes of one element of every dtype the safetensors format names (0 for a
// name it does not: a newer format's, whose size is not checked here).
size_t format_element_size(const std::string &dtype) {
  static const std::map<std::string, size_t> sizes = {
      {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E4M3", 1}, {"F8_E5M2", 1},
      {"U16", 2},  {"I16", 2}, {"F16", 2}, {"BF16", 2},    {"U32", 4},
      {"I32", 4},  {"F32", 4}, {"U64", 8}, {"I64", 8},     {"F64", 8}};
  const auto it = sizes.find(dtype);
  return it == sizes.end() ? 0 : it->second;
}

template <class... Args>
[[noreturn]] void not_safetensors(const std::string &file, const Args &...why) {
  fail(Status::corrupt_data, "'", file, "' is not a valid safetensors file: ", why...);
}

}  // namespace

Safetensors parse_safetensors(const std::string &file, const unsigned char *data, size_t size) {
  if (size < 8) not_safetensors(file, "it has ", size, " bytes, fewer than its header size");
  uint64_t n = 0;
  for (int i = 7; i >= 0; i--) n = n << 8 | data[i];
  if (n > size - 8)
    not_safetensors(file, "its header of ", n, " bytes is longer than the file (", size, ")");
  if (const long long at = json_too_deep_at(reinterpret_cast<const char *>(data) + 8, (size_t)n); at >= 0)
    not_safetensors(file, "its header nests more than ", kMaxJsonDepth, " levels deep (at byte ", 8 + at,
                    "); a safetensors header nests two");
  json header;
  std::string twice;  // a tensor named twice (JSON would keep the last in silence)
  try {
    std::set<std::string> names;
    int depth = 0;
    header = json::parse(data + 8, data + 8 + n, [&](int, json::parse_event_t event, json &parsed) {
      if (event == json::parse_event_t::object_start) depth++;
      if (event == json::parse_event_t::object_end) depth--;
      if (event == json::parse_event_t::key && depth == 1 && !names.insert(parsed.get<std::string>()).second &&
          twice.empty())
        twice = parsed.get<std::string>();
      return true;
    });
  } catch (const json::exception &e) {
    not_safetensors(file, "its header is not JSON (", e.what(), ")");
  }
  if (!twice.empty()) not_safetensors(file, "its header names '", twice, "' twice");
  // The JSON, then only the format's padding (spaces): a NUL would end the
  // header for some readers and not for others.
  const std::string raw(reinterpret_cast<const char *>(data + 8), (size_t)n);
  const size_t end = raw.find_last_of('}');
  if (end == std::string::npos || raw.find_first_not_of(' ', end + 1) != std::string::npos)
    not_safetensors(file, "its header is padded with something other than spaces");
  if (!header.is_object()) not_safetensors(file, "its header is not a JSON object");
  const unsigned char *base = data + 8 + n;
  const uint64_t data_size = size - 8 - n;
  Safetensors out;
  std::vector<std::tuple<uint64_t, uint64_t, std::string>> spans;  // [begin, end) of each tensor
  for (auto it = header.begin(); it != header.end(); ++it) {
    const json &v = it.value();
    if (it.key() == "__metadata__") {
      if (!v.is_object()) not_safetensors(file, "__metadata__ is not an object");
      for (auto m = v.begin(); m != v.end(); ++m)  // (the format's metadata: text to text)
        if (!m.value().is_string())
          not_safetensors(file, "__metadata__ '", m.key(), "' is ", m.value().type_name(), ", not a string");
      out.metadata = v;
      continue;
    }
    const std::string &name = it.key();
    if (!v.is_object() || !v.contains("dtype") || !v["dtype"].is_string() || !v.contains("shape") ||
        !v["shape"].is_array() || !v.contains("data_offsets") || !v["data_offsets"].is_array() ||
        v["data_offsets"].size() != 2)
      not_safetensors(file, "tensor '", name, "' lacks a dtype, shape or data_offsets: ", json_excerpt(v));
    SourceTensor t;
    t.dtype = v["dtype"].get<std::string>();
    uint64_t numel = 1;
    for (const json &d : v["shape"]) {
      if (!d.is_number_unsigned())
        not_safetensors(file, "tensor '", name, "' has shape ", json_excerpt(v["shape"]));
      const uint64_t k = d.get<uint64_t>();
      if (k != 0 && numel > data_size / k)
        not_safetensors(file, "tensor '", name, "' of shape ", json_excerpt(v["shape"]),
                        " does not fit in the data");
      numel *= k;
      t.shape.push_back((int64_t)k);
    }
    const json &off = v["data_offsets"];
    if (!off[0].is_number_unsigned() || !off[1].is_number_unsigned())
      not_safetensors(file, "tensor '", name, "' has data_offsets ", json_excerpt(off));
    const uint64_t b = off[0].get<uint64_t>(), e = off[1].get<uint64_t>();
    if (b > e)
      not_safetensors(file, "tensor '", name, "' has data_offsets [", b, ", ", e,
                      "] that end before they begin");
    if (e > data_size)
      not_safetensors(file, "tensor '", name, "' has bytes [", b, ", ", e, ") outside the ",
                      data_size, " bytes of data");
    // Every dtype the format names is checked here (ptdp reads F32, F16 and
    // BF16 and refuses another where the tensor is used: buffers that are
    // skipped may be of any type).
    const size_t es = format_element_size(t.dtype);
    if (es && e - b != numel * es)
      not_safetensors(file, "tensor '", name, "' is ", t.dtype, " ", json_excerpt(v["shape"]), " (",
                      numel * es, " bytes) but its data_offsets hold ", e - b, " bytes");
    t.data = base + b;
    t.bytes = e - b;
    out.tensors[name] = std::move(t);
    spans.push_back({b, e, name});
  }
  // The tensors' bytes tile the data, in some order, as the format requires:
  // no two overlap (one tensor's bytes read as another's), nothing between
  // or after them.
  std::sort(spans.begin(), spans.end());
  uint64_t at = 0;
  for (const auto &[b, e, name] : spans) {
    if (b != at)
      not_safetensors(file, "tensor '", name, "' starts at byte ", b, " of the data, but ",
                      b < at ? "the tensor before it ends at " : "the bytes before it end at ", at,
                      b < at ? ": they overlap" : ": a gap");
    at = e;
  }
  if (at != data_size)
    not_safetensors(file, "its tensors end at byte ", at, " of the data, which has ", data_size,
                    " bytes");
  return out;
}

void check_dtype(const std::string &file, const std::string &name, const SourceTensor &t) {
  if (!element_size(t.dtype))
    fail(Status::bad_value, "tensor '", name, "' in '", file, "' is ", t.dtype,
         ": ptdp imports F32, F16 and BF16 tensors");
}

std::vector<float> widen(const std::string &file, const std::string &name, const SourceTensor &t) {
  check_dtype(file, name, t);
  const size_t n = t.bytes / element_size(t.dtype);
  std::vector<float> out(n);
  if (t.dtype == "F32") {
    std::memcpy(out.data(), t.data, n * 4);  // safetensors is little-endian, as the host
  } else {
    for (size_t i = 0; i < n; i++) {
      uint16_t h;
      std::memcpy(&h, t.data + 2 * i, 2);
      out[i] = t.dtype == "BF16" ? bf16_to_float(h) : f16_to_float(h);
    }
  }
  // A model's weights are finite: a NaN or inf would train (and generate) NaN
  // from the first step, far from its cause.
  for (size_t i = 0; i < n; i++)
    if (!std::isfinite(out[i]))
      fail(Status::bad_value, "tensor '", name, "' in '", file, "' holds ", out[i], " at element ", i,
           ": a model's weights must be finite numbers");
  return out;
}

std::string read_text(const std::string &path) {
  return read_small_file(path, "'" + path + "'", "", size_t(64) << 20);  // configs, indexes: KiBs
}

std::string file_record(const std::string &path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return "";
  return std::to_string((long long)st.st_size) + " bytes, modified " +
         std::to_string((long long)st.st_mtim.tv_sec) + "." + std::to_string((long long)st.st_mtim.tv_nsec);
}

std::map<std::string, std::string> imported_source(const std::string &weights) {
  std::error_code ec;
  std::map<std::string, std::string> out = {
      {"imported_from", fs::weakly_canonical(fs::absolute(weights)).string()}};
  if (const std::string record = file_record(weights); !record.empty()) out["imported_file"] = record;
  out[kLineageKey] = import_lineage(out["imported_from"] + "\n" + out["imported_file"]);
  return out;
}

void record_tokenizer(const std::string &weights, const nlohmann::json &metadata,
                      std::map<std::string, std::string> &training) {
  std::map<std::string, std::string> exported;  // a ptdp export's own record
  for (const char *key : {kTokenizerTypeKey, kTokenizerVocabularyKey}) {
    auto it = metadata.find(key);
    if (it != metadata.end() && it->is_string()) exported[key] = it->get<std::string>();
  }
  // A tokenizer.json beside the weights is the model's, as for from_pretrained.
  std::string beside;
  std::error_code ec;
  const fs::path file = fs::path(weights).parent_path() / "tokenizer.json";
  if (fs::is_regular_file(file, ec)) {
    TokenizerSpec spec;
    spec.type = "HuggingFaceTokenizer";
    spec.tokenizer_file = file.string();
    try {
      beside = vocabulary_fingerprint_text(*make_tokenizer(spec));
    } catch (const Error &) {  // (a tokenizer ptdp does not read: the weights import all the same)
    }
  }
  if (!beside.empty()) {
    const auto was = exported.find(kTokenizerVocabularyKey);
    if (was != exported.end() && was->second != beside)
      say("note: '", file.string(), "' is not the tokenizer the model was trained with (its export "
          "records tokenizer_type ", exported[kTokenizerTypeKey], ", vocabulary ", was->second,
          "; this one's is ", beside, "): the import takes the one beside the model");
    training[kTokenizerVocabularyKey] = beside;
  } else {
    // The export's record is the checkpoint's (a type no command takes made
    // a checkpoint every later command refused, advising a type they refuse).
    if (exported.count(kTokenizerTypeKey) && !is_tokenizer_name(exported[kTokenizerTypeKey]))
      fail(Status::corrupt_data, "'", weights, "': its metadata's ", kTokenizerTypeKey, " '",
           exported[kTokenizerTypeKey], "' is none of ", tokenizer_names(),
           " (a ptdp export records one of them; a tokenizer.json beside the weights is taken instead)");
    training.insert(exported.begin(), exported.end());
  }
}

void check_import_target(const std::string &dir, const GptConfig &cfg,
                         const std::map<std::string, std::string> &training) {
  // Every checkpoint there (newest first), as check_save_target does.
  const std::optional<OtherRun> other = find_other_run(
      dir,
      [&](const Manifest &m) {
        std::string why = other_run_fields(m, cfg, training);
        if (why.empty() && m.iteration > 0) why = "a trained checkpoint: the import would hide it";
        return why;
      },
      "'" + dir + "'", "import into another directory");
  if (other)
    fail(Status::invalid_config, "'", dir, "' holds checkpoints of another run (", other->which,
         ": '", other->dir, "', iteration ", other->manifest.iteration, "; ", other->diff,
         "); importing there would mix two runs. Import into an empty directory");
}

std::string save_imported(const std::string &dir, const GptConfig &cfg,
                          const std::vector<ParamInfo> &table, std::vector<float> &params,
                          const std::map<std::string, std::string> &training) {
  std::vector<float> zeros(params.size(), 0.f);  // Adam's moments, one buffer for both
  RankShard shard;
  shard.table = &table;
  shard.params = params.data();
  shard.exp_avg = zeros.data();
  shard.exp_avg_sq = zeros.data();
  SaveRequest req;
  req.root = dir;
  req.model = cfg;
  req.training = training;  // layout (1, 1, 1, 1), iteration 0
  // A failed import leaves no directory it made (rmdir: only while empty).
  struct stat st;
  const bool made = ::lstat(dir.c_str(), &st) != 0;
  try {
    return save_checkpoint(req, {shard});
  } catch (...) {
    if (made) ::rmdir(dir.c_str());
    throw;
  }
}

}  // namespace ptdp
