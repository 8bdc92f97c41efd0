// The engine's C ABI (capi/ptdp.h): argument checks, handle checks and
// exception-to-status translation, nothing else. The tools are in ptdp_tools.cpp.
#include "capi/ptdp.h"

#include <cmath>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "capi/boundary.h"
#include "capi/trainer_values.h"
#include "checkpoints/inspect.h"
#include "checkpoints/manifest.h"
#include "checkpoints/safetensors_export.h"
#include "checkpoints/safetensors_import.h"
#include "checkpoints/sharded_checkpoint.h"
#include "engine/comm/mpi_comm.h"
#include "engine/core/allocator.h"
#include "engine/core/status.h"
#include "engine/core/text.h"
#include "engine/train/config.h"
#include "engine/train/metrics.h"
#include "engine/train/trainer.h"

struct ptdp_config {
  ptdp::Config config;
};
struct ptdp_trainer {
  std::unique_ptr<ptdp::Trainer> trainer;
};

namespace {

using ptdp::capi::check_buffer;
using ptdp::capi::copy_out;
using ptdp::capi::copy_report;
using ptdp::capi::guard;
using ptdp::capi::require;
using ptdp::capi::require_switch;

// Every live handle and its kind, so that a wrong, destroyed or never-created
// handle is an error, not a crash: checked by address before anything is read
// through it. (An address reused by a later handle of the same kind is that
// handle: the registry cannot tell.)
enum class HandleKind { config, trainer };
const char *kind_name(HandleKind k) { return k == HandleKind::config ? "ptdp_config" : "ptdp_trainer"; }
std::mutex g_handles_mutex;
std::unordered_map<const void *, HandleKind> &handles() {
  static auto *h = new std::unordered_map<const void *, HandleKind>();  // outlives static destructors
  return *h;
}
void register_handle(const void *p, HandleKind k) {
  std::lock_guard<std::mutex> lock(g_handles_mutex);
  handles()[p] = k;
}
// Why p is not a live handle of kind k ("" if it is).
std::string not_live(const void *p, HandleKind k, const char *what) {
  const auto it = handles().find(p);
  if (it == handles().end())
    return std::string(what) + " is not a live " + kind_name(k) +
           " handle (destroyed, never created, or not a ptdp handle)";
  if (it->second != k)
    return std::string(what) + " is a " + kind_name(it->second) + " handle where a " +
           kind_name(k) + " is needed";
  return "";
}
// p as a live handle of kind k; invalid_argument naming `what` otherwise.
void check_handle(const void *p, HandleKind k, const char *what) {
  require(p, what);
  std::lock_guard<std::mutex> lock(g_handles_mutex);
  const std::string why = not_live(p, k, what);
  if (!why.empty()) ptdp::fail(ptdp::Status::invalid_argument, why);
}
void live(const ptdp_config *c, const char *what = "config") { check_handle(c, HandleKind::config, what); }
void live(const ptdp_trainer *t) { check_handle(t, HandleKind::trainer, "trainer"); }

// wrong_state unless a step has run since the trainer was made or loaded:
// `what` ("metric 'x'", "no log line") describes the last step; `none`: the
// message says "no <what>" rather than "<what> is not available".
void need_step(bool stepped, const std::string &what, bool none = false) {
  if (!stepped)
    ptdp::fail(ptdp::Status::wrong_state, none ? "no " : "", what,
               none ? "" : " is not available", " before the first ptdp_trainer_step since the ",
               "trainer was made or loaded");
}
// A destructor's check: true when p (not NULL) was a live handle of kind k,
// now unregistered; else nothing is freed and ptdp_last_error says why.
bool unregister_handle(const void *p, HandleKind k, const char *fn) {
  std::lock_guard<std::mutex> lock(g_handles_mutex);
  const std::string why = not_live(p, k, "the handle");
  if (!why.empty()) {
    ptdp::capi::last_error() = std::string(fn) + ": " + why + "; nothing was destroyed";
    return false;
  }
  handles().erase(p);
  return true;
}

// Option `index` of the schema; invalid_argument outside it.
const ptdp::OptionSpec &option_at(int32_t index) {
  const auto &s = ptdp::option_schema();
  if (index < 0 || index >= (int32_t)s.size())
    ptdp::fail(ptdp::Status::invalid_argument, "option index ", index, " is outside [0, ", s.size(), ")");
  return s[index];
}

}  // namespace

extern "C" {

// The version text is made from the header's macros: there is no second copy.
#define PTDP_STR_(x) #x
#define PTDP_STR(x) PTDP_STR_(x)
const char *ptdp_version(void) {
  return PTDP_STR(PTDP_VERSION_MAJOR) "." PTDP_STR(PTDP_VERSION_MINOR) "." PTDP_STR(
      PTDP_VERSION_PATCH);
}
int32_t ptdp_version_number(void) {
  return PTDP_VERSION_MAJOR * 10000 + PTDP_VERSION_MINOR * 100 + PTDP_VERSION_PATCH;
}
const char *ptdp_status_string(ptdp_status s) {
  if (s < 0 || s > PTDP_ERR_COMM) return "unknown status code";
  return ptdp::status_string((ptdp::Status)s);
}
const char *ptdp_last_error(void) { return ptdp::capi::last_error().c_str(); }

ptdp_status ptdp_config_create(ptdp_config **out) {
  return guard([&] {
    require(out, "out");
    *out = nullptr;
    auto c = std::make_unique<ptdp_config>();
    register_handle(c.get(), HandleKind::config);
    *out = c.release();
  });
}
void ptdp_config_destroy(ptdp_config *c) {
  if (c && unregister_handle(c, HandleKind::config, "ptdp_config_destroy")) delete c;
}

static_assert(PTDP_MAX_NEW_TOKENS == ptdp::Trainer::kMaxNewTokens,
              "PTDP_MAX_NEW_TOKENS out of sync: capi/ptdp.h against engine/train/trainer.h");

ptdp_status ptdp_config_set(ptdp_config *c, const char *key, const char *value) {
  return guard([&] {
    live(c);
    require(key, "key");
    require(value, "value");
    c->config.set(key, value);
  });
}
ptdp_status ptdp_config_set_model_from_checkpoint(ptdp_config *c, const char *dir) {
  return guard([&] {
    live(c);
    require(dir, "dir");
    ptdp::TrainerOptions::model_from_checkpoint(c->config, dir);
  });
}
// The number setters take the options that hold numbers (a number as a path,
// data_path = "5", was taken in silence).
static ptdp_status refuse_text_option(const char *key, const char *setter) {
  return guard([&] {
    require(key, "key");
    const ptdp::OptionSpec *o = ptdp::find_option(key);
    if (o && o->type == ptdp::OptionSpec::String)
      ptdp::fail(ptdp::Status::invalid_argument, setter, ": option '", key,
                 "' holds text (a path or a name), not a number: set it with ptdp_config_set");
  });
}
ptdp_status ptdp_config_set_int(ptdp_config *c, const char *key, int64_t value) {
  if (const ptdp_status st = refuse_text_option(key, "ptdp_config_set_int"); st != PTDP_OK) return st;
  return ptdp_config_set(c, key, std::to_string(value).c_str());
}
ptdp_status ptdp_config_set_double(ptdp_config *c, const char *key, double value) {
  if (const ptdp_status st = refuse_text_option(key, "ptdp_config_set_double"); st != PTDP_OK) return st;
  char buf[64];
  if (value == std::floor(value) && std::fabs(value) < 9.0e18)
    std::snprintf(buf, sizeof buf, "%lld", (long long)value);  // whole numbers fit Int options
  else  // the shortest form that reads back as the value (10.2, not 10.199999999999999)
    return ptdp_config_set(c, key, ptdp::number_text(value).c_str());
  return ptdp_config_set(c, key, buf);
}
ptdp_status ptdp_config_get(const ptdp_config *c, const char *key, char *buf, size_t cap,
                            size_t *out_len) {
  return guard([&] {
    live(c);
    require(key, "key");
    copy_out(c->config.get(key), buf, cap, out_len);
  });
}

int32_t ptdp_option_count(void) { return (int32_t)ptdp::option_schema().size(); }
ptdp_status ptdp_option_info(int32_t index, const char **key, const char **default_value,
                             const char **help) {
  return guard([&] {
    const ptdp::OptionSpec &o = option_at(index);
    if (key) *key = o.key;
    if (default_value) *default_value = o.default_value;
    if (help) *help = o.help;
  });
}

ptdp_status ptdp_option_type(int32_t index, const char **type, double *min, double *max,
                             const char **choices) {
  return guard([&] {
    const ptdp::OptionSpec &o = option_at(index);
    static const char *const names[] = {"int", "float", "string", "choice"};
    if (type) *type = names[o.type];
    if (min) *min = o.min;
    if (max) *max = o.max;
    if (choices) *choices = o.choices ? o.choices : "";
  });
}

ptdp_status ptdp_config_check(const ptdp_config *c) {
  return guard([&] {
    live(c);
    ptdp::TrainerOptions::from_config(c->config);
  });
}

ptdp_status ptdp_config_model_differences(const ptdp_config *c, const char *dir, char *buf,
                                          size_t cap, size_t *out_len) {
  return guard([&] {
    live(c);
    require(dir, "dir");
    const ptdp::TrainerOptions o = ptdp::TrainerOptions::from_config(c->config);
    copy_report(ptdp::model_shape_mismatch(ptdp::checkpoint_model(dir), o.model), buf, cap, out_len);
  });
}

ptdp_status ptdp_trainer_create(const ptdp_config *c, ptdp_trainer **out) {
  return guard([&] {
    require(out, "out");
    *out = nullptr;
    live(c);
    auto t = std::make_unique<ptdp_trainer>();
    t->trainer = std::make_unique<ptdp::Trainer>(ptdp::TrainerOptions::from_config(c->config));
    register_handle(t.get(), HandleKind::trainer);
    *out = t.release();
  });
}
void ptdp_trainer_destroy(ptdp_trainer *t) {
  if (t && unregister_handle(t, HandleKind::trainer, "ptdp_trainer_destroy")) delete t;
}

ptdp_status ptdp_trainer_step(ptdp_trainer *t, double *loss) {
  return guard([&] {
    live(t);
    ptdp::StepMetrics m = t->trainer->step();
    if (loss) *loss = m.lm_loss;
  });
}

ptdp_status ptdp_trainer_step_tokens(ptdp_trainer *t, const int32_t *ids, size_t count,
                                     double *loss) {
  return guard([&] {
    live(t);
    ptdp::StepMetrics m = t->trainer->step_tokens(ids, count);
    if (loss) *loss = m.lm_loss;
  });
}

ptdp_status ptdp_trainer_evaluate(ptdp_trainer *t, int64_t iters, double *loss) {
  return guard([&] {
    live(t);
    require(loss, "loss");
    if (iters > 1000000000)
      ptdp::fail(ptdp::Status::invalid_argument, "iters must be at most 1e9, got ", iters);
    int64_t n = iters > 0 ? iters : t->trainer->options().eval_iters;
    *loss = t->trainer->evaluate((int)n);
  });
}

ptdp_status ptdp_trainer_get(const ptdp_trainer *t, const char *name, double *value) {
  return guard([&] {
    live(t);
    require(name, "name");
    require(value, "value");
    const ptdp::capi::TrainerValue &v = ptdp::capi::trainer_value(name);
    if (v.needs_step) need_step(t->trainer->has_stepped(), std::string("metric '") + name + "'");
    *value = v.get(*t->trainer);
  });
}

int32_t ptdp_trainer_value_count(void) { return (int32_t)ptdp::capi::trainer_values().size(); }

ptdp_status ptdp_trainer_value_info(int32_t index, const char **name, int32_t *step_result) {
  return guard([&] {
    const auto &rows = ptdp::capi::trainer_values();
    if (index < 0 || index >= (int32_t)rows.size())
      ptdp::fail(ptdp::Status::invalid_argument, "trainer value index ", index, " is not in [0, ",
                 rows.size(), ")");
    require(name, "name");
    *name = rows[index].name;
    if (step_result) *step_result = rows[index].step_result ? 1 : 0;
  });
}

namespace {

// The named value of a rank's report (ptdp_trainer_rank_get and
// ptdp_trainer_world_rank_get); `stepped`: a step has run, so the values of
// the last step exist.
double rank_value(const ptdp::Trainer::RankReport &r, const std::string &key, bool stepped) {
  std::string group;  // of bytes_<group>, seconds_<group>, calls_<group>
  for (const char *prefix : {"bytes_", "seconds_", "calls_"})
    if (key.rfind(prefix, 0) == 0) group = key.substr(std::strlen(prefix));
  const bool known_group = group == "tp" || group == "pp" || group == "dp" || group == "embedding";
  const bool step_value = known_group || key == "step_seconds" || key == "compute_seconds" ||
                          key == "idle_fraction" || key == "peak_activation_bytes" ||
                          key == "device_peak_bytes" || key == "device_in_use_bytes";
  if (step_value) need_step(stepped, "rank value '" + key + "'");
  // A group the rank is not in (embedding off the first and last stages) moved nothing.
  const auto it = known_group ? r.comm.find(group) : r.comm.end();
  const ptdp::CommStats none;
  const ptdp::CommStats &c = it == r.comm.end() ? none : it->second;
  if (key == "world_rank") return r.world_rank;
  if (key == "tp_rank") return r.coord.tp;
  if (key == "pp_rank") return r.coord.pp;
  if (key == "dp_rank") return r.coord.dp;
  if (known_group && key[0] == 'b') return (double)c.total_bytes();
  if (known_group && key[0] == 's') return c.seconds;
  if (known_group && key[0] == 'c') return (double)c.total_calls();
  if (key == "step_seconds") return r.step_seconds;
  if (key == "compute_seconds") return r.compute_seconds;
  if (key == "idle_fraction") return r.idle_fraction();
  if (key == "peak_activation_bytes") return (double)r.peak_activation_bytes;
  if (key == "device_peak_bytes") return (double)r.device_peak_bytes;
  if (key == "device_in_use_bytes") return (double)r.device_in_use_bytes;
  ptdp::fail(ptdp::Status::invalid_argument, "unknown rank value '", key,
             "'; known: world_rank, tp_rank, pp_rank, dp_rank, step_seconds, "
             "compute_seconds, idle_fraction, peak_activation_bytes, device_peak_bytes, "
             "device_in_use_bytes, bytes_tp, bytes_pp, "
             "bytes_dp, bytes_embedding, seconds_tp, seconds_pp, seconds_dp, "
             "seconds_embedding, calls_tp, calls_pp, calls_dp, calls_embedding");
}

}  // namespace

ptdp_status ptdp_trainer_rank_get(const ptdp_trainer *t, int32_t local_rank, const char *name,
                                  double *value) {
  return guard([&] {
    live(t);
    require(name, "name");
    require(value, "value");
    const ptdp::Trainer &tr = *t->trainer;
    const int n = tr.local_ranks();
    if (local_rank < 0 || local_rank >= n)
      ptdp::fail(ptdp::Status::invalid_argument, "local_rank ", local_rank, " is outside [0, ", n,
                 "): this process hosts ", n, " rank", n == 1 ? "" : "s");
    // The rank's place is known from the start; the rest describes the last step.
    *value = rank_value(tr.rank_report(local_rank), name, tr.has_stepped());
  });
}

ptdp_status ptdp_trainer_gather_reports(ptdp_trainer *t) {
  return guard([&] {
    live(t);
    t->trainer->gather_rank_reports();
  });
}

ptdp_status ptdp_trainer_world_rank_get(const ptdp_trainer *t, int32_t world_rank, const char *name,
                                        double *value) {
  return guard([&] {
    live(t);
    require(name, "name");
    require(value, "value");
    const ptdp::Trainer &tr = *t->trainer;
    if (world_rank < 0 || world_rank >= tr.world_size())
      ptdp::fail(ptdp::Status::invalid_argument, "world_rank ", world_rank, " is outside [0, ",
                 tr.world_size(), ")");
    need_step(tr.has_stepped(), std::string("rank value '") + name + "'");
    *value = rank_value(tr.world_rank_report(world_rank), name, true);
  });
}

ptdp_status ptdp_trainer_log_line(const ptdp_trainer *t, char *buf, size_t cap, size_t *out_len) {
  return guard([&] {
    live(t);
    need_step(t->trainer->has_stepped(), "log line", true);
    copy_out(ptdp::format_log_line(t->trainer->log_metrics()), buf, cap, out_len);
  });
}

ptdp_status ptdp_trainer_log_json(const ptdp_trainer *t, char *buf, size_t cap, size_t *out_len) {
  return guard([&] {
    live(t);
    need_step(t->trainer->has_stepped(), "log record", true);
    copy_out(ptdp::format_log_json(t->trainer->log_metrics()), buf, cap, out_len);
  });
}

ptdp_status ptdp_append_line(const char *path, const char *line, int32_t fresh) {
  return guard([&] {
    require(path, "path");
    require(line, "line");
    require_switch(fresh, "fresh");
    ptdp::append_json_line(path, line, fresh != 0);
  });
}

ptdp_status ptdp_trainer_logits(ptdp_trainer *t, const int32_t *ids, size_t count,
                                int32_t last_only, float *out, size_t cap, size_t *out_len) {
  return guard([&] {
    live(t);
    require(ids, "ids");
    require_switch(last_only, "last_only");
    if (!out && cap > 0)
      ptdp::fail(ptdp::Status::invalid_argument, "out is NULL but cap is ", cap,
                 " (pass cap 0 with a NULL out to ask for the size)");
    t->trainer->check_logits_tokens(ids, count);  // before the size too: it answers for these ids
    const ptdp::GptConfig &m = t->trainer->options().model;
    const size_t need = (last_only ? 1 : count) * (size_t)m.vocab_size;
    if (out_len) *out_len = need;
    if (!out) return;  // the size was asked for
    if (cap < need)
      ptdp::fail(ptdp::Status::buffer_too_small, "buffer of ", cap, " floats is too small: ", need,
                 " needed (returned in out_len)");
    const std::vector<float> all = t->trainer->logits(std::vector<int32_t>(ids, ids + count));
    std::memcpy(out, all.data() + (last_only ? all.size() - need : 0), need * sizeof(float));
  });
}

ptdp_status ptdp_trainer_generate(ptdp_trainer *t, const char *prompt, int32_t max_new_tokens,
                                  double temperature, uint64_t seed, char *buf, size_t cap,
                                  size_t *out_len) {
  return guard([&] {
    live(t);
    require(prompt, "prompt");
    check_buffer(buf, cap);
    copy_out(t->trainer->generate(prompt, max_new_tokens, temperature, seed), buf, cap, out_len);
  });
}

ptdp_status ptdp_trainer_generate_top(ptdp_trainer *t, const char *prompt, int32_t max_new_tokens,
                                      double temperature, int32_t top_k, double top_p,
                                      uint64_t seed, char *buf, size_t cap, size_t *out_len) {
  return guard([&] {
    live(t);
    require(prompt, "prompt");
    check_buffer(buf, cap);
    copy_out(t->trainer->generate(prompt, max_new_tokens, temperature, seed, top_k, top_p), buf,
             cap, out_len);
  });
}

ptdp_status ptdp_trainer_get_text(const ptdp_trainer *t, const char *name, char *buf, size_t cap,
                                  size_t *out_len) {
  return guard([&] {
    live(t);
    require(name, "name");
    const std::string n = name;
    const ptdp::Trainer &tr = *t->trainer;
    if (n == "loaded_checkpoint") return copy_out(tr.last_loaded(), buf, cap, out_len);
    if (n == "last_checkpoint") return copy_out(tr.last_saved(), buf, cap, out_len);
    if (n == "saved_checkpoints") return copy_out(tr.saved_checkpoints(), buf, cap, out_len);
    if (n == "last_save_error") return copy_out(tr.last_save_error(), buf, cap, out_len);
    if (n == "device") return copy_out(tr.device_name(0), buf, cap, out_len);
    if (n == "exit_reason") return copy_out(tr.exit_reason(), buf, cap, out_len);
    ptdp::fail(ptdp::Status::invalid_argument, "unknown text '", n,
               "'; known: loaded_checkpoint, last_checkpoint, saved_checkpoints, last_save_error, device, ",
               "exit_reason");
  });
}

ptdp_status ptdp_trainer_save(ptdp_trainer *t, const char *dir) {
  return guard([&] {
    live(t);
    require(dir, "dir");
    t->trainer->save(dir);
  });
}

ptdp_status ptdp_trainer_wait_for_saves(ptdp_trainer *t, double *seconds) {
  return guard([&] {
    live(t);
    const double s = t->trainer->wait_for_saves();
    if (seconds) *seconds = s;
  });
}

ptdp_status ptdp_trainer_agree(ptdp_trainer *t, const char *const *names,
                               const char *const *values, size_t count) {
  return guard([&] {
    live(t);
    if (count > 0) {
      require(names, "names");
      require(values, "values");
    }
    std::vector<std::pair<std::string, std::string>> items;
    for (size_t i = 0; i < count; i++) {
      if (!names[i] || !values[i])
        ptdp::fail(ptdp::Status::invalid_argument, "names[", i, "] or values[", i, "] is NULL");
      items.emplace_back(names[i], values[i]);
    }
    t->trainer->agree_with_processes(items);
  });
}

ptdp_status ptdp_trainer_load(ptdp_trainer *t, const char *dir) {
  return guard([&] {
    live(t);
    require(dir, "dir");
    t->trainer->load(dir);
  });
}

ptdp_status ptdp_checkpoint_inspect(const char *dir, char *buf, size_t cap, size_t *out_len) {
  return guard([&] {
    require(dir, "dir");
    copy_report(ptdp::inspect_checkpoint(dir), buf, cap, out_len);
  });
}

ptdp_status ptdp_checkpoint_verify(const char *dir, char *buf, size_t cap, size_t *out_len) {
  return guard([&] {
    require(dir, "dir");
    bool ok = false;
    const std::string report = ptdp::verify_checkpoint(dir, &ok);
    copy_report(report, buf, cap, out_len);
    if (!ok) ptdp::fail(ptdp::Status::corrupt_data, "checkpoint '", dir, "' has faults (the report lists them)");
  });
}

ptdp_status ptdp_checkpoint_export_safetensors(const char *dir, const char *out_path) {
  return guard([&] {
    require(dir, "dir");
    require(out_path, "out_path");
    ptdp::export_safetensors(dir, out_path);
  });
}

ptdp_status ptdp_checkpoint_export_safetensors_dtype(const char *dir, const char *out_path,
                                                     const char *dtype) {
  return guard([&] {
    require(dir, "dir");
    require(out_path, "out_path");
    ptdp::export_safetensors(dir, out_path, dtype ? dtype : "f32");
  });
}

ptdp_status ptdp_checkpoint_import_safetensors(const char *safetensors_path,
                                               const char *config_path, const char *dir) {
  return guard([&] {
    require(safetensors_path, "safetensors_path");
    require(dir, "dir");
    ptdp::import_safetensors(safetensors_path, config_path ? config_path : "", dir);
  });
}

ptdp_status ptdp_abort_job(const char *reason) {
  return guard([&] { ptdp::abort_mpi_job_if_running(reason ? reason : "job aborted"); });
}

}  // extern "C"
