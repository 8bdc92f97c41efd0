#include "checkpoints/manifest.h"

#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>
#include <type_traits>

#include "checkpoints/crc32c.h"
#include "engine/core/json_text.h"
#include "engine/core/mapped_file.h"
#include "engine/core/status.h"

namespace ptdp {

using nlohmann::json;

int64_t ManifestBlock::numel() const {
  int64_t n = 1;
  for (int64_t c : count) n *= c;
  return n;
}

int64_t ManifestDataset::numel() const {
  int64_t n = 1;
  for (int64_t c : shape) n *= c;
  return n;
}

int64_t ManifestDataset::bytes() const { return numel() * (dtype == "int64" ? 8 : 4); }

std::string CheckpointLayout::text() const {
  return "(t=" + std::to_string(t) + ", p=" + std::to_string(p) + ", d=" + std::to_string(d) +
         ", v=" + std::to_string(v) + ")";
}

namespace {

// Ints as JSON integers, floats widened to double as nlohmann does for a float:
// the bytes (and so manifest_crc32c) of the manifests written before the table.
json model_json(const GptConfig &m) {
  json j = json::object();
  for (const GptConfigField &f : gpt_config_fields()) {
    if (f.kind == GptConfigField::Int)
      j[f.name] = f.int_value(m);
    else if (f.kind == GptConfigField::Choice)
      j[f.name] = f.choice_name(m.*f.int_member);
    else
      j[f.name] = f.float_value(m);
  }
  return j;
}

std::string crc_text(uint32_t c) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%08x", c);
  return buf;
}

const char *kManifestCrc = "manifest_crc32c";

// The manifest's own checksum: over the compact dump of every field but
// itself. nlohmann keeps object keys sorted and prints numbers so that they
// read back the same, so a parsed manifest dumps to the bytes that were summed.
uint32_t fields_crc(const json &j) {
  const std::string text = json_file_text(j);
  return crc32c(0, text.data(), text.size());
}

// Whether j is an integer that T holds: nlohmann converts a float or a
// too-large integer with a plain cast (undefined for a float out of range).
template <class T>
bool integer_fits(const json &j) {
  if (!j.is_number_integer()) return false;
  if (j.is_number_unsigned()) return j.get<uint64_t>() <= (uint64_t)std::numeric_limits<T>::max();
  const int64_t v = j.get<int64_t>();
  return v >= (int64_t)std::numeric_limits<T>::min() && v <= (int64_t)std::numeric_limits<T>::max();
}

// Reads field `key` of object `o` as T, or fails naming where it is.
template <class T>
T field(const json &o, const std::string &key, const std::string &where) {
  if (!o.is_object() || !o.contains(key))
    fail(Status::corrupt_data, where, ": field '", key, "' is missing");
  bool fits = true;
  if constexpr (std::is_integral_v<T>) fits = integer_fits<T>(o.at(key));
  if constexpr (std::is_same_v<T, std::vector<int64_t>>)
    for (const json &e : o.at(key)) fits = fits && integer_fits<int64_t>(e);
  if (!fits)
    fail(Status::corrupt_data, where, ": field '", key, "' has the wrong type (", json_excerpt(o.at(key)),
         ")");
  try {
    return o.at(key).get<T>();
  } catch (const json::exception &) {
    fail(Status::corrupt_data, where, ": field '", key, "' has the wrong type (", json_excerpt(o.at(key)),
         ")");
  }
}

}  // namespace

std::string Manifest::to_json() const {
  json ds = json::array();
  for (const ManifestDataset &d : datasets) {
    json blocks = json::array();
    for (const ManifestBlock &b : d.blocks)
      blocks.push_back({{"offset", b.offset}, {"count", b.count}, {"crc32c", crc_text(b.crc32c)}});
    ds.push_back({{"name", d.name}, {"dtype", d.dtype}, {"shape", d.shape}, {"blocks", blocks}});
  }
  json j{{"format", "ptdp-checkpoint"},
         {"format_version", kFormatVersion},
         {"iteration", iteration},
         {"file", file},
         {"file_bytes", file_bytes},
         {"model", model_json(model)},
         {"layout", {{"t", layout.t}, {"p", layout.p}, {"d", layout.d}, {"v", layout.v}}},
         {"training", training},
         {"datasets", ds}};
  j[kManifestCrc] = crc_text(fields_crc(j));
  return json_file_text(j, 1) + "\n";
}

Manifest Manifest::parse(const std::string &text, const std::string &where) {
  const json j = parse_json_text(text, where);
  if (field<std::string>(j, "format", where) != "ptdp-checkpoint")
    fail(Status::corrupt_data, where, ": format is not 'ptdp-checkpoint'");
  const int version = field<int>(j, "format_version", where);
  if (version != kFormatVersion)
    fail(Status::corrupt_data, where, ": format_version ", version, " is not supported (this ptdp reads ",
         kFormatVersion, ")");
  Manifest m;
  // Before any other field is believed: an edited manifest is damage.
  if (j.contains(kManifestCrc)) {
    const std::string saved = field<std::string>(j, kManifestCrc, where);
    json rest = j;
    rest.erase(kManifestCrc);
    const std::string now = crc_text(fields_crc(rest));
    if (saved != now)
      fail(Status::corrupt_data, where, ": its fields do not match its checksum (", kManifestCrc,
           " ", saved, ", the fields give ", now,
           "): the manifest was edited or damaged after the save, so its iteration, model and "
           "block checksums cannot be trusted; restore it, or load an older checkpoint by "
           "giving its iter_N directory");
    m.checksummed = true;
  }
  m.iteration = field<int64_t>(j, "iteration", where);
  m.file = field<std::string>(j, "file", where);
  // The data file lies in the checkpoint's own directory: a path elsewhere
  // (a slash, "..") would make a load read, or a tool write, another file.
  if (m.file.empty() || m.file == "." || m.file == ".." ||
      m.file.find_first_of(std::string("/\0", 2)) != std::string::npos)
    fail(Status::corrupt_data, where, ": file '", m.file,
         "' is not a plain file name inside the checkpoint's directory");
  m.file_bytes = field<int64_t>(j, "file_bytes", where);
  const json model = j.contains("model") ? j["model"] : json();
  const std::string mw = where + " model";
  GptConfig &g = m.model;
  // Resolved values (ffn_hidden_size = ffn()) read back into the members, which resolve the same.
  for (const GptConfigField &f : gpt_config_fields()) {
    if (f.optional_in_manifest && !(model.is_object() && model.contains(f.name)))
      continue;  // written before the field existed: GPT-2's block, the default
    if (f.kind == GptConfigField::Int) {
      g.*f.int_member = field<int>(model, f.name, mw);
    } else if (f.kind == GptConfigField::Choice) {
      const std::string name = field<std::string>(model, f.name, mw);
      g.*f.int_member = f.choice_index(name);
      if (g.*f.int_member < 0)
        fail(Status::corrupt_data, mw, ": ", f.name, " '", name, "' is not one of {", f.choices, "}");
    } else {
      g.*f.float_member = field<float>(model, f.name, mw);
    }
  }
  try {
    g.validate();
  } catch (const Error &e) {
    fail(Status::corrupt_data, mw, " is not a valid model: ", e.what());
  }
  const json layout = j.contains("layout") ? j["layout"] : json();
  m.layout.t = field<int>(layout, "t", where + " layout");
  m.layout.p = field<int>(layout, "p", where + " layout");
  m.layout.d = field<int>(layout, "d", where + " layout");
  m.layout.v = field<int>(layout, "v", where + " layout");
  m.training = field<std::map<std::string, std::string>>(j, "training", where);
  const json ds = j.contains("datasets") ? j["datasets"] : json();
  if (!ds.is_array()) fail(Status::corrupt_data, where, ": field 'datasets' is missing or not a list");
  for (const json &d : ds) {
    ManifestDataset out;
    out.name = field<std::string>(d, "name", where + " dataset");
    const std::string dw = where + " dataset '" + out.name + "'";
    out.dtype = field<std::string>(d, "dtype", dw);
    if (out.dtype != "float32" && out.dtype != "int64")
      fail(Status::corrupt_data, dw, ": dtype '", out.dtype, "' is not float32 or int64");
    out.shape = field<std::vector<int64_t>>(d, "shape", dw);
    int64_t elements = 1;  // bounded so that numel() and bytes() cannot overflow
    for (int64_t k : out.shape) {
      if (k < 0 || (k > 0 && elements > INT64_MAX / 8 / k))
        fail(Status::corrupt_data, dw, ": shape ", json(out.shape).dump(),
             " has a negative or too large dimension");
      elements *= k;
    }
    const json blocks = d.contains("blocks") ? d["blocks"] : json();
    if (!blocks.is_array()) fail(Status::corrupt_data, dw, ": field 'blocks' is missing");
    int64_t covered = 0;
    for (const json &b : blocks) {
      ManifestBlock mb;
      mb.offset = field<std::vector<int64_t>>(b, "offset", dw + " block");
      mb.count = field<std::vector<int64_t>>(b, "count", dw + " block");
      const std::string crc = field<std::string>(b, "crc32c", dw + " block");
      char *end = nullptr;
      mb.crc32c = (uint32_t)std::strtoul(crc.c_str(), &end, 16);
      if (crc.size() != 8 || *end != '\0' || !std::isxdigit((unsigned char)crc[0]))
        fail(Status::corrupt_data, dw, ": crc32c '", crc, "' is not 8 hex digits");
      if (mb.offset.size() != out.shape.size() || mb.count.size() != out.shape.size())
        fail(Status::corrupt_data, dw, ": a block's offset/count do not have ", out.shape.size(),
             " dimensions");
      for (size_t k = 0; k < out.shape.size(); k++)
        if (mb.offset[k] < 0 || mb.count[k] < 0 || mb.count[k] > out.shape[k] - mb.offset[k])
          fail(Status::corrupt_data, dw, ": a block lies outside the dataset's shape");
      if (mb.numel() > INT64_MAX - covered)  // more than the shape holds: they must overlap
        fail(Status::corrupt_data, dw, ": two of its blocks overlap");
      covered += mb.numel();
      out.blocks.push_back(std::move(mb));
    }
    // One writer per element: blocks that overlap are damage. Without overlap
    // they cover the dataset exactly when their sizes add up to it.
    for (size_t i = 0; i < out.blocks.size(); i++)
      for (size_t j = i + 1; j < out.blocks.size(); j++) {
        const ManifestBlock &a = out.blocks[i], &b = out.blocks[j];
        bool apart = a.numel() == 0 || b.numel() == 0;
        for (size_t k = 0; k < a.offset.size() && !apart; k++)
          apart = a.offset[k] + a.count[k] <= b.offset[k] || b.offset[k] + b.count[k] <= a.offset[k];
        if (!apart) fail(Status::corrupt_data, dw, ": two of its blocks overlap");
      }
    if (covered != out.numel())
      fail(Status::corrupt_data, dw, ": its blocks cover ", covered, " of ", out.numel(),
           " elements");
    m.datasets.push_back(std::move(out));
  }
  std::sort(m.datasets.begin(), m.datasets.end(),
            [](const ManifestDataset &a, const ManifestDataset &b) { return a.name < b.name; });
  // One entry per dataset (find() takes one; verify counted both).
  for (size_t i = 1; i < m.datasets.size(); i++)
    if (m.datasets[i].name == m.datasets[i - 1].name)
      fail(Status::corrupt_data, where, ": dataset '", m.datasets[i].name, "' is listed twice");
  return m;
}

Manifest Manifest::read(const std::string &dir) {
  const std::string path = dir + "/manifest.json";
  // A regular file in its own directory, as a save makes it: through a link
  // it would be another file's (rotation and saves take it for a user's).
  struct stat st;
  if (::lstat(path.c_str(), &st) == 0 && S_ISLNK(st.st_mode))
    fail(Status::corrupt_data, "'", path, "' is a symbolic link: a checkpoint's manifest is a regular "
         "file in its own directory (a save makes no links; copy the file in place of the link)");
  // A regular file only: a FIFO or device put there would block the read.
  Manifest m = parse(read_small_file(path, "'" + path + "'", "", size_t(1) << 30), "'" + path + "'");
  // An iter_N directory holds iteration N (checked also without the
  // manifest's own checksum, which an older or hand-made manifest may lack),
  // by the directory's own name (a trailing slash, /. or a link resolved).
  std::error_code ec;
  const std::filesystem::path real = std::filesystem::weakly_canonical(dir, ec);
  const std::string base = ec ? dir.substr(dir.find_last_of('/') + 1) : real.filename().string();
  if (base.size() > 5 && base.rfind("iter_", 0) == 0 &&
      base.find_first_not_of("0123456789", 5) == std::string::npos) {
    const std::string digits = base.substr(5);
    if (digits.size() > 18 || std::stoll(digits) != m.iteration)
      fail(Status::corrupt_data, "'", path, "' says iteration ", m.iteration, " but its directory is '",
           base, "': the manifest was moved or edited");
  }
  return m;
}

const ManifestDataset *Manifest::find(const std::string &name) const {
  auto it = std::lower_bound(datasets.begin(), datasets.end(), name,
                             [](const ManifestDataset &d, const std::string &n) { return d.name < n; });
  return it != datasets.end() && it->name == name ? &*it : nullptr;
}

std::string model_shape_mismatch(const GptConfig &saved, const GptConfig &wanted) {
  std::string out;
  auto check = [&](const char *name, int64_t a, int64_t b) {
    if (a != b)
      out += std::string(out.empty() ? "" : "; ") + name + ": checkpoint " + std::to_string(a) +
             ", this run " + std::to_string(b);
  };
  for (const GptConfigField &f : gpt_config_fields()) {
    if (f.function && saved.*f.float_member != wanted.*f.float_member) {
      char a[32], b[32];
      std::snprintf(a, sizeof a, "%.9g", (double)(saved.*f.float_member));
      std::snprintf(b, sizeof b, "%.9g", (double)(wanted.*f.float_member));
      out += std::string(out.empty() ? "" : "; ") + f.name + ": checkpoint " + a + ", this run " + b;
    }
    if (!f.shape) continue;  // shape fields are ints or choices
    if (f.kind == GptConfigField::Choice) {
      const int a = saved.*f.int_member, b = wanted.*f.int_member;
      if (a != b)
        out += std::string(out.empty() ? "" : "; ") + f.name + ": checkpoint " + f.choice_name(a) +
               ", this run " + f.choice_name(b);
      continue;
    }
    check(f.name, f.int_value(saved), f.int_value(wanted));
  }
  return out;
}

}  // namespace ptdp
