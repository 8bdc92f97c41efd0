// The C ABI: argument checks, exception-to-status translation, nothing else.
#include "capi/ptdp.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <mutex>
#include <new>
#include <string>
#include <unordered_map>
#include <vector>

#include "capi/trainer_values.h"
#include "checkpoints/disk_bandwidth.h"
#include "checkpoints/inspect.h"
#include "checkpoints/safetensors_export.h"
#include "checkpoints/safetensors_import.h"
#include "engine/comm/mpi_comm.h"
#include "engine/core/allocator.h"
#include "engine/core/status.h"
#include "engine/core/text.h"
#include "engine/data/corpus.h"
#include "engine/data/indexed_tokenize.h"
#include "engine/trace/timeline_png.h"
#include "engine/train/metrics_plot.h"
#include "engine/train/trainer.h"
#include "kernels/cpu/cpu_kernels.h"

struct ptdp_config {
  ptdp::Config config;
};
struct ptdp_trainer {
  std::unique_ptr<ptdp::Trainer> trainer;
};

namespace {

thread_local std::string g_last_error;

// The C enum (capi/ptdp.h, literal: LuaJIT and ctypes read it as text) and
// ptdp::Status must agree, every code.
static_assert(PTDP_OK == (int)ptdp::Status::ok &&
                  PTDP_ERR_INVALID_ARGUMENT == (int)ptdp::Status::invalid_argument &&
                  PTDP_ERR_UNKNOWN_OPTION == (int)ptdp::Status::unknown_option &&
                  PTDP_ERR_BAD_VALUE == (int)ptdp::Status::bad_value &&
                  PTDP_ERR_INVALID_CONFIG == (int)ptdp::Status::invalid_config &&
                  PTDP_ERR_WRONG_STATE == (int)ptdp::Status::wrong_state &&
                  PTDP_ERR_IO == (int)ptdp::Status::io_error &&
                  PTDP_ERR_CORRUPT_DATA == (int)ptdp::Status::corrupt_data &&
                  PTDP_ERR_BUFFER_TOO_SMALL == (int)ptdp::Status::buffer_too_small &&
                  PTDP_ERR_OUT_OF_MEMORY == (int)ptdp::Status::out_of_memory &&
                  PTDP_ERR_INTERNAL == (int)ptdp::Status::internal &&
                  PTDP_ERR_COMM == (int)ptdp::Status::comm_failure,
              "status codes out of sync: capi/ptdp.h against engine/core/status.h");

ptdp_status set_error(ptdp::Status code, const std::string &msg) {
  g_last_error = msg;
  return (ptdp_status)code;
}

// Runs f, turning every exception into a status code and ptdp_last_error text.
template <class F>
ptdp_status guard(F &&f) {
  try {
    f();
    g_last_error.clear();
    return PTDP_OK;
  } catch (const ptdp::Error &e) {
    return set_error(e.code(), e.what());
  } catch (const std::bad_alloc &) {
    return set_error(ptdp::Status::out_of_memory, "out of memory");
  } catch (const std::exception &e) {
    return set_error(ptdp::Status::internal, std::string("internal error: ") + e.what());
  } catch (...) {
    return set_error(ptdp::Status::internal, "internal error: unknown exception");
  }
}

void require(const void *p, const char *what) {
  if (!p) ptdp::fail(ptdp::Status::invalid_argument, what, " must not be NULL");
}

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
// A destructor's check: true when p (not NULL) was a live handle of kind k,
// now unregistered; else nothing is freed and ptdp_last_error says why.
bool unregister_handle(const void *p, HandleKind k, const char *fn) {
  std::lock_guard<std::mutex> lock(g_handles_mutex);
  const std::string why = not_live(p, k, "the handle");
  if (!why.empty()) {
    g_last_error = std::string(fn) + ": " + why + "; nothing was destroyed";
    return false;
  }
  handles().erase(p);
  return true;
}

// A C array argument of n strings: every one non-NULL, at least one when
// `nonempty` (inputs), any number otherwise (options; NULL when n = 0).
std::vector<std::string> strings(const char *const *a, int32_t n, const char *name, bool nonempty) {
  if (nonempty) require(a, name);
  if (nonempty ? n <= 0 : n < 0)
    ptdp::fail(ptdp::Status::invalid_argument, "num_", name, " must be ",
               nonempty ? "positive" : "zero or more", ", got ", n);
  if (n > 0 && !a)
    ptdp::fail(ptdp::Status::invalid_argument, name, " must hold num_", name, " (", n, ") strings");
  std::vector<std::string> out;
  for (int32_t i = 0; i < n; i++) {
    if (!a[i]) ptdp::fail(ptdp::Status::invalid_argument, name, "[", i, "] must not be NULL");
    out.emplace_back(a[i]);
  }
  return out;
}

// Option `index` of the schema; invalid_argument outside it.
const ptdp::OptionSpec &option_at(int32_t index) {
  const auto &s = ptdp::option_schema();
  if (index < 0 || index >= (int32_t)s.size())
    ptdp::fail(ptdp::Status::invalid_argument, "option index ", index, " is outside [0, ", s.size(), ")");
  return s[index];
}

// A caller's text buffer: NULL only with cap 0 (asking for the size).
// Checked on entry, before any work is done for the text.
void check_buffer(const char *buf, size_t cap) {
  if (!buf && cap > 0)
    ptdp::fail(ptdp::Status::invalid_argument, "buffer is NULL but cap is ", cap,
               " (pass cap 0 with a NULL buffer to ask for the size)");
}

// Copies s into the caller's buffer (NUL-terminated) or reports the size needed.
void copy_out(const std::string &s, char *buf, size_t cap, size_t *out_len) {
  check_buffer(buf, cap);
  if (out_len) *out_len = s.size();
  if (!buf || cap < s.size() + 1)
    ptdp::fail(ptdp::Status::buffer_too_small, "buffer of ", cap, " bytes is too small: ",
               s.size() + 1, " bytes needed (the size without NUL is returned in out_len)");
  std::memcpy(buf, s.c_str(), s.size() + 1);
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
const char *ptdp_last_error(void) { return g_last_error.c_str(); }

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
ptdp_status ptdp_config_set_int(ptdp_config *c, const char *key, int64_t value) {
  return ptdp_config_set(c, key, std::to_string(value).c_str());
}
ptdp_status ptdp_config_set_double(ptdp_config *c, const char *key, double value) {
  char buf[64];
  if (value == std::floor(value) && std::fabs(value) < 9.0e18)
    std::snprintf(buf, sizeof buf, "%lld", (long long)value);  // whole numbers fit Int options
  else
    std::snprintf(buf, sizeof buf, "%.17g", value);
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
    if (v.needs_step && t->trainer->last_metrics().iteration == 0)  // a load alone gives no metrics
      ptdp::fail(ptdp::Status::wrong_state, "metric '", name,
                 "' is not available before the first ptdp_trainer_step");
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
  if (step_value && !stepped)
    ptdp::fail(ptdp::Status::wrong_state, "rank value '", key,
               "' is not available before the first ptdp_trainer_step");
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
    *value = rank_value(tr.rank_report(local_rank), name, tr.iteration() > 0);
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
    if (tr.iteration() == 0)
      ptdp::fail(ptdp::Status::wrong_state, "rank value '", name,
                 "' is not available before the first ptdp_trainer_step");
    *value = rank_value(tr.world_rank_report(world_rank), name, true);
  });
}

ptdp_status ptdp_trainer_log_line(const ptdp_trainer *t, char *buf, size_t cap, size_t *out_len) {
  return guard([&] {
    live(t);
    if (t->trainer->iteration() == 0)
      ptdp::fail(ptdp::Status::wrong_state, "no log line before the first ptdp_trainer_step");
    copy_out(ptdp::format_log_line(t->trainer->log_metrics()), buf, cap, out_len);
  });
}

ptdp_status ptdp_trainer_log_json(const ptdp_trainer *t, char *buf, size_t cap, size_t *out_len) {
  return guard([&] {
    live(t);
    if (t->trainer->iteration() == 0)
      ptdp::fail(ptdp::Status::wrong_state, "no log record before the first ptdp_trainer_step");
    copy_out(ptdp::format_log_json(t->trainer->log_metrics()), buf, cap, out_len);
  });
}

ptdp_status ptdp_append_line(const char *path, const char *line, int32_t fresh) {
  return guard([&] {
    require(path, "path");
    require(line, "line");
    ptdp::append_json_line(path, line, fresh != 0);
  });
}

ptdp_status ptdp_trainer_logits(ptdp_trainer *t, const int32_t *ids, size_t count,
                                int32_t last_only, float *out, size_t cap, size_t *out_len) {
  return guard([&] {
    live(t);
    require(ids, "ids");
    if (!out && cap > 0)
      ptdp::fail(ptdp::Status::invalid_argument, "out is NULL but cap is ", cap,
                 " (pass cap 0 with a NULL out to ask for the size)");
    const ptdp::GptConfig &m = t->trainer->options().model;
    if (count == 0 || count > (size_t)m.max_positions())
      ptdp::fail(ptdp::Status::invalid_argument, "logits: ", count,
                 " tokens; give 1 to max_position_embeddings (", m.max_positions(), ")");
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
    if (n == "last_save_error") return copy_out(tr.last_save_error(), buf, cap, out_len);
    if (n == "device") return copy_out(tr.device_name(0), buf, cap, out_len);
    if (n == "exit_reason") return copy_out(tr.exit_reason(), buf, cap, out_len);
    ptdp::fail(ptdp::Status::invalid_argument, "unknown text '", n,
               "'; known: loaded_checkpoint, last_checkpoint, last_save_error, device, exit_reason");
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
    copy_out(ptdp::inspect_checkpoint(dir), buf, cap, out_len);
  });
}

ptdp_status ptdp_checkpoint_verify(const char *dir, char *buf, size_t cap, size_t *out_len) {
  return guard([&] {
    require(dir, "dir");
    bool ok = false;
    const std::string report = ptdp::verify_checkpoint(dir, &ok);
    copy_out(report, buf, cap, out_len);
    if (!ok) ptdp::fail(ptdp::Status::corrupt_data, "checkpoint '", dir, "' has faults:\n", report);
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

ptdp_status ptdp_tokenize(const char *const *inputs, int32_t num_inputs, const char *format,
                          const char *tokenizer, const char *output_path, int64_t *num_docs,
                          int64_t *num_tokens) {
  return guard([&] {
    require(format, "format");
    require(tokenizer, "tokenizer");
    require(output_path, "output_path");
    const std::vector<std::string> in = strings(inputs, num_inputs, "inputs", true);
    auto tok = ptdp::make_tokenizer(tokenizer);
    ptdp::CorpusStats st = ptdp::build_token_dataset(in, format, *tok, output_path);
    if (num_docs) *num_docs = (int64_t)st.num_docs;
    if (num_tokens) *num_tokens = (int64_t)st.num_tokens;
  });
}

ptdp_status ptdp_tokenize_options(const char *const *inputs, int32_t num_inputs,
                                  const char *const *options, int32_t num_options,
                                  int64_t *num_docs, int64_t *num_tokens) {
  return guard([&] {
    const std::vector<std::string> in = strings(inputs, num_inputs, "inputs", true),
                                   kv = strings(options, num_options, "options", false);
    ptdp::TokenizeOptions o = ptdp::parse_tokenize_options(kv);
    auto tok = ptdp::make_tokenizer(o.tokenizer);
    ptdp::CorpusStats st = ptdp::build_token_dataset(in, o.format, *tok, o.output, o.workers);
    if (num_docs) *num_docs = (int64_t)st.num_docs;
    if (num_tokens) *num_tokens = (int64_t)st.num_tokens;
  });
}

ptdp_status ptdp_tokenize_indexed(const char *const *inputs, int32_t num_inputs,
                                  const char *const *options, int32_t num_options,
                                  int64_t *num_docs, int64_t *num_tokens) {
  return guard([&] {
    const std::vector<std::string> in = strings(inputs, num_inputs, "inputs", true),
                                   kv = strings(options, num_options, "options", false);
    ptdp::IndexedTokenizeOptions o = ptdp::parse_indexed_tokenize_options(kv);
    auto tok = ptdp::make_tokenizer(o.tokenizer);
    std::vector<ptdp::IndexedOutput> out = ptdp::build_indexed_dataset(in, o, *tok);
    for (size_t k = 0; k < out.size(); k++) {
      if (num_docs) num_docs[k] = (int64_t)out[k].num_docs;
      if (num_tokens) num_tokens[k] = (int64_t)out[k].num_tokens;
    }
  });
}

ptdp_status ptdp_render_timeline(const char *trace_json, const char *png, int32_t width) {
  return guard([&] {
    require(trace_json, "trace_json");
    require(png, "png");
    ptdp::render_timeline_png(trace_json, png, width == 0 ? 1600 : width);
  });
}

ptdp_status ptdp_plot_log(const char *log_json, const char *png) {
  return guard([&] {
    require(log_json, "log_json");
    require(png, "png");
    ptdp::plot_metrics_png(log_json, png);
  });
}

ptdp_status ptdp_abort_job(const char *reason) {
  return guard([&] { ptdp::abort_mpi_job_if_running(reason ? reason : "job aborted"); });
}

ptdp_status ptdp_benchmark_disk(const char *dir, int64_t bytes, double *write_gbps,
                                double *read_gbps) {
  return guard([&] {
    require(dir, "dir");
    require(write_gbps, "write_gbps");
    require(read_gbps, "read_gbps");
    const ptdp::DiskBandwidth bw = ptdp::measure_disk_bandwidth(dir, bytes);
    *write_gbps = bw.write_gbps;
    *read_gbps = bw.read_gbps;
  });
}

ptdp_status ptdp_benchmark_sgemm(int32_t n, int32_t repeats, double *gflops) {
  return guard([&] {
    require(gflops, "gflops");
    if (n <= 0 || n > 16384 || repeats <= 0)
      ptdp::fail(ptdp::Status::invalid_argument, "need 0 < n <= 16384 and repeats > 0, got n=", n,
                 " repeats=", repeats);
    std::vector<float> a((size_t)n * n), b((size_t)n * n), c((size_t)n * n);
    for (size_t i = 0; i < a.size(); i++) {
      a[i] = (float)((i * 7 + 3) % 13) * 0.01f;
      b[i] = (float)((i * 5 + 1) % 11) * 0.01f;
    }
    ptdp::cpu::gemm<float>(false, false, n, n, n, 1.f, a.data(), n, b.data(), n, 0.f, c.data(), n);
    auto t0 = std::chrono::steady_clock::now();
    for (int r = 0; r < repeats; r++)
      ptdp::cpu::gemm<float>(false, false, n, n, n, 1.f, a.data(), n, b.data(), n, 0.f, c.data(),
                             n);
    double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    *gflops = 2.0 * n * (double)n * n * repeats / sec / 1e9;
  });
}

}  // extern "C"

// ---- the planner (engine/plan) ----------------------------------------------------
#include "engine/plan/plan.h"

extern "C" ptdp_status ptdp_plan(const char *const *options, int32_t num_options, char *buf,
                                 size_t cap, size_t *out_len) {
  return guard([&] {
    if (num_options > 4096)
      ptdp::fail(ptdp::Status::invalid_argument, "num_options must be in [0, 4096], got ", num_options);
    std::vector<std::pair<std::string, std::string>> kv;
    for (const std::string &o : strings(options, num_options, "options", false)) {
      if (o == "help" || o == "--help") {
        kv.push_back({"help", ""});
        continue;
      }
      auto [key, value] = ptdp::split_key_value(
          o, "plan option", "Megatron's argument names, e.g. num_layers=24 (help lists them)");
      kv.push_back({std::move(key), std::move(value)});
    }
    copy_out(ptdp::plan::plan_report(kv), buf, cap, out_len);
  });
}
