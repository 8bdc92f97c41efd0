#include "engine/plan/machine.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "engine/core/json_text.h"
#include "engine/core/mapped_file.h"
#include "engine/core/status.h"

// kMachinePresets: {name, json} of every engine/plan/machines/*.json, made by cmake/plan.cmake.
#include "plan_presets.inc"

namespace ptdp::plan {

using nlohmann::json;

const char *dtype_name(DType d) {
  return d == DType::fp32 ? "fp32" : d == DType::bf16 ? "bf16" : "fp16";
}
int dtype_bytes(DType d) { return d == DType::fp32 ? 4 : 2; }

double Machine::peak(DType d) const {
  return d == DType::fp32 ? peak_fp32 : d == DType::bf16 ? peak_bf16 : peak_fp16;
}

std::vector<std::string> machine_preset_names() {
  std::vector<std::string> out;
  for (auto &p : kMachinePresets) out.push_back(p[0]);
  return out;
}

namespace {

// What a field may hold: a number in [lo, hi] (0 too where zero_ok; a whole
// one where whole). Every field is a physical quantity: a value far outside
// any machine's made every plan's time NaN or infinite.
struct Range {
  double lo, hi;
  bool zero_ok = false, whole = false;
};
constexpr Range kFlops{1e6, 1e18}, kBytes{1e6, 1e15}, kBandwidth{1e6, 1e15},
    kEfficiency{1e-3, 1}, kSeconds{0, 1}, kWhole{1, 1e6, false, true};

// Reads obj[key] (fallback when absent and >= 0), naming the field and its
// range on error.
double number(const json &obj, const char *key, const std::string &where, Range r,
              double fallback = -1) {
  if (!obj.contains(key)) {
    if (fallback >= 0) return fallback;
    fail(Status::bad_value, where, ": missing field '", key, "'");
  }
  const json &v = obj.at(key);
  if (!v.is_number())
    fail(Status::bad_value, where, ": field '", key, "' must be a number, got ", json_excerpt(v));
  const double x = v.get<double>();
  if (!((x >= r.lo && x <= r.hi) || (r.zero_ok && x == 0)) || (r.whole && x != std::floor(x)))
    fail(Status::bad_value, where, ": field '", key, "' must be ", r.whole ? "a whole number " : "",
         "in [", r.lo, ", ", r.hi, "]", r.zero_ok && r.lo > 0 ? " or 0" : "", ", got ", json_excerpt(v));
  return x;
}

void only_keys(const json &obj, const std::set<std::string> &allowed, const std::string &where) {
  if (!obj.is_object()) fail(Status::bad_value, where, " must be a JSON object");
  for (auto it = obj.begin(); it != obj.end(); ++it)
    if (!allowed.count(it.key())) {
      std::string list;
      for (auto &a : allowed) list += (list.empty() ? "" : ", ") + a;
      fail(Status::bad_value, where, ": unknown field '", it.key(), "'; allowed: ", list);
    }
}

Link link(const json &obj, const char *key, const std::string &origin) {
  std::string where = origin + " " + key;
  if (!obj.contains(key)) fail(Status::bad_value, origin, ": missing field '", key, "'");
  const json &l = obj.at(key);
  only_keys(l, {"bandwidth", "efficiency", "latency_s"}, where);
  Link out;
  out.bandwidth = number(l, "bandwidth", where, kBandwidth);
  out.efficiency = number(l, "efficiency", where, kEfficiency, 1.0);
  out.latency_s = number(l, "latency_s", where, kSeconds);
  return out;
}

}  // namespace

Machine machine_from_json(const std::string &text, const std::string &origin) {
  const json j = parse_json_text(text, origin, Status::bad_value);
  only_keys(j,
            {"name", "description", "devices_per_node", "peak_flops", "memory_bytes",
             "memory_reserved_bytes", "memory_bandwidth", "memory_efficiency",
             "elementwise_bandwidth", "gemm", "op_overhead_s", "optimizer_params_per_s",
             "intra_node", "inter_node", "shared_node", "device_hour_usd"},
            origin);
  Machine m;
  if (!j.contains("name") || !j["name"].is_string())
    fail(Status::bad_value, origin, ": field 'name' must be a string");
  m.name = j["name"].get<std::string>();
  // A name is printed in every report's header: one line of text.
  if (m.name.empty() || std::any_of(m.name.begin(), m.name.end(), [](char ch) { return (unsigned char)ch < 0x20 || ch == 0x7f; }))
    fail(Status::bad_value, origin, ": field 'name' must be a non-empty line of text (no control ",
         "characters), got ", json_excerpt(j["name"]));
  if (j.contains("description") && !j["description"].is_string())
    fail(Status::bad_value, origin, ": field 'description' must be a string, got ", json_excerpt(j["description"]));
  if (j.contains("description")) m.description = j["description"].get<std::string>();
  m.devices_per_node = (int)number(j, "devices_per_node", origin, kWhole);
  if (!j.contains("peak_flops")) fail(Status::bad_value, origin, ": missing field 'peak_flops'");
  const json &pf = j["peak_flops"];
  only_keys(pf, {"fp32", "bf16", "fp16"}, origin + " peak_flops");
  m.peak_fp32 = number(pf, "fp32", origin + " peak_flops", kFlops);
  m.peak_bf16 = number(pf, "bf16", origin + " peak_flops", kFlops, m.peak_fp32);
  m.peak_fp16 = number(pf, "fp16", origin + " peak_flops", kFlops, m.peak_bf16);
  m.memory_bytes = number(j, "memory_bytes", origin, kBytes);
  m.memory_reserved_bytes = number(j, "memory_reserved_bytes", origin, {0, m.memory_bytes / 2}, 0);
  m.memory_bandwidth = number(j, "memory_bandwidth", origin, kBandwidth);
  m.memory_efficiency = number(j, "memory_efficiency", origin, kEfficiency, 1.0);
  m.elementwise_bandwidth = number(j, "elementwise_bandwidth", origin,
                                   {kBandwidth.lo, kBandwidth.hi, true}, 0);
  if (!j.contains("gemm")) fail(Status::bad_value, origin, ": missing field 'gemm'");
  const json &g = j["gemm"];
  std::string gw = origin + " gemm";
  only_keys(g, {"units", "tile_m", "tile_n", "k_half", "max_efficiency"}, gw);
  m.gemm_units = (int)number(g, "units", gw, kWhole);
  m.gemm_tile_m = (int)number(g, "tile_m", gw, {1, 65536, false, true});
  m.gemm_tile_n = (int)number(g, "tile_n", gw, {1, 65536, false, true});
  m.gemm_k_half = number(g, "k_half", gw, {0, 1e6});
  m.gemm_max_efficiency = number(g, "max_efficiency", gw, kEfficiency);
  m.op_overhead_s = number(j, "op_overhead_s", origin, kSeconds, 0);
  m.optimizer_params_per_s = number(j, "optimizer_params_per_s", origin, {1e3, 1e15, true}, 0);
  m.intra = link(j, "intra_node", origin);
  m.inter = link(j, "inter_node", origin);
  if (j.contains("shared_node")) {
    if (!j["shared_node"].is_boolean())
      fail(Status::bad_value, origin, ": field 'shared_node' must be true or false");
    m.shared_node = j["shared_node"].get<bool>();
  }
  m.device_hour_usd = number(j, "device_hour_usd", origin, {0, 1e6}, 0);
  return m;
}

std::string machine_to_json(const Machine &m) {
  json j = {
      {"name", m.name},
      {"description", m.description},
      {"devices_per_node", m.devices_per_node},
      {"peak_flops", {{"fp32", m.peak_fp32}, {"bf16", m.peak_bf16}, {"fp16", m.peak_fp16}}},
      {"memory_bytes", m.memory_bytes},
      {"memory_reserved_bytes", m.memory_reserved_bytes},
      {"memory_bandwidth", m.memory_bandwidth},
      {"memory_efficiency", m.memory_efficiency},
      {"elementwise_bandwidth", m.elementwise_bandwidth},
      {"gemm",
       {{"units", m.gemm_units},
        {"tile_m", m.gemm_tile_m},
        {"tile_n", m.gemm_tile_n},
        {"k_half", m.gemm_k_half},
        {"max_efficiency", m.gemm_max_efficiency}}},
      {"op_overhead_s", m.op_overhead_s},
      {"optimizer_params_per_s", m.optimizer_params_per_s},
      {"intra_node",
       {{"bandwidth", m.intra.bandwidth},
        {"efficiency", m.intra.efficiency},
        {"latency_s", m.intra.latency_s}}},
      {"inter_node",
       {{"bandwidth", m.inter.bandwidth},
        {"efficiency", m.inter.efficiency},
        {"latency_s", m.inter.latency_s}}},
      {"shared_node", m.shared_node},
      {"device_hour_usd", m.device_hour_usd},
  };
  return json_file_text(j, 2) + "\n";
}

// A preset's JSON by its name, nullptr when none is so named.
static const char *preset_json(const std::string &name) {
  for (auto &p : kMachinePresets)
    if (name == p[0]) return p[1];
  return nullptr;
}

bool is_machine_preset(const std::string &name) { return preset_json(name) != nullptr; }

Machine load_machine(const std::string &name_or_file) {
  if (const char *json = preset_json(name_or_file))
    return machine_from_json(json, "preset '" + name_or_file + "'");
  // Not a preset: a file if one is there, otherwise a mistyped name.
  std::error_code ec;
  if (!std::filesystem::exists(name_or_file, ec)) {
    std::string list;
    for (auto &n : machine_preset_names()) list += (list.empty() ? "" : ", ") + n;
    // Spelled as a file ('/' or ".json"): say the file is missing, not the name unknown.
    const bool file_like = name_or_file.find('/') != std::string::npos ||
                           (name_or_file.size() > 5 &&
                            name_or_file.compare(name_or_file.size() - 5, 5, ".json") == 0);
    if (file_like)
      fail(Status::io_error, "machine file '", name_or_file, "': No such file or directory (--machine ",
           "is a preset, one of ", list, ", or a JSON file that exists)");
    fail(Status::bad_value, "unknown machine '", name_or_file, "'; known presets: ", list,
         " (or a JSON file; see engine/plan/machines/)");
  }
  // Read as every input is: a directory, FIFO or device is refused, not waited on.
  const std::string what = "machine file '" + name_or_file + "'";
  return machine_from_json(read_small_file(name_or_file, what, "plan: ", size_t(1) << 20), what);
}

}  // namespace ptdp::plan
