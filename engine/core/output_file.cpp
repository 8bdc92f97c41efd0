#include "engine/core/output_file.h"

#include <fcntl.h>
#include <signal.h>
#include <time.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <climits>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/core/checkpoint_names.h"
#include "engine/core/json_text.h"
#include "engine/core/philox.h"
#include "engine/core/status.h"
#include "engine/core/utf8.h"

namespace ptdp {

using json = nlohmann::json;

namespace {

const char *kind_of(mode_t m) {
  if (S_ISDIR(m)) return "a directory";
  if (S_ISCHR(m)) return "a character device";
  if (S_ISBLK(m)) return "a block device";
  if (S_ISFIFO(m)) return "a FIFO";
  if (S_ISSOCK(m)) return "a socket";
  return "not a regular file";
}

// The registry: inputs (InputFile: by device and inode) and claimed outputs
// (OutputClaim: by normalized path, as the file may not exist yet), by id.
// An input's inode is kept by a descriptor while it is registered: once the
// file is replaced (a save's new 'latest') a freed inode number would go to
// the next new file, an output refused as "the input this run reads".
struct Registered {
  bool input;
  dev_t dev;
  ino_t ino;
  std::string key, path, what;
  int fd = -1;  // O_PATH on the input, closed with its registration
};
std::mutex registry_mu;
std::map<uint64_t, Registered> registry;
uint64_t next_id = 1;

uint64_t register_file(Registered r) {
  std::lock_guard<std::mutex> lk(registry_mu);
  registry[next_id] = std::move(r);
  return next_id++;
}

// `path` with "." and ".." resolved and the links of its existing part followed.
// One spelling per file, existing or not: absolute first (weakly_canonical
// leaves a relative name that does not exist yet relative, so "x" and "./x"
// would differ), then links resolved as far as the path exists.
std::string normalized(const std::string &path) {
  std::error_code ec;
  const std::filesystem::path abs = std::filesystem::absolute(path, ec);
  if (ec) return path;
  const std::filesystem::path p = std::filesystem::weakly_canonical(abs, ec);
  return ec ? abs.lexically_normal().string() : p.string();
}

// Error when `path` is an output another writer (not `what`) claimed.
void refuse_if_claimed(const std::string &path, const char *what) {
  const std::string key = normalized(path);
  std::lock_guard<std::mutex> lk(registry_mu);
  for (const auto &[id, c] : registry)
    if (!c.input && c.key == key && c.what != what)
      fail(Status::invalid_argument, what, " '", path, "' is also this run's ", c.what, " '", c.path,
           "': two outputs cannot share one file (give each its own path)");
}

// The registered input that is the file st (its description), or nothing.
std::optional<std::pair<std::string, std::string>> input_of(const struct stat &st) {
  std::lock_guard<std::mutex> lk(registry_mu);
  for (const auto &[id, in] : registry)
    if (in.input && in.dev == st.st_dev && in.ino == st.st_ino) return std::pair{in.what, in.path};
  return std::nullopt;
}

// Error when the regular file st (spelled `path`) is a registered input.
void refuse_if_input(const struct stat &st, const std::string &path, const char *what) {
  if (const auto in = input_of(st))
    fail(Status::invalid_argument, what, " '", path, "' is the ", in->first, " '", in->second,
         "' this run reads: refusing to overwrite an input (choose another output path)");
}

}  // namespace

// Whether `dir` holds a checkpoint's two files, whatever its name: a copy of
// an iter_N ("best/") is loaded as a checkpoint, so it is one to the writers.
// Its manifest.json must be ptdp's (its format names it): a web app's
// manifest.json beside a Keras model.h5 makes no checkpoint.
static std::string head_bytes(const std::string &path, size_t n, off_t *size);
bool holds_save_contents(const std::string &path) {
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return false;
  const std::string name = std::filesystem::path(path).filename().string();
  off_t size = 0;
  if (name == kCheckpointManifest) {
    if (st.st_size > (off_t(256) << 20)) return false;
    const std::string text = head_bytes(path, (size_t)st.st_size, &size);  // a manifest: KiBs to MiBs
    return text.find("\"format\": \"ptdp-checkpoint\"") != std::string::npos ||
           text.find("\"format\":\"ptdp-checkpoint\"") != std::string::npos;
  }
  if (name == kCheckpointData) {
    // HDF5's signature opens the file from its creation (ptdp writes no user
    // block); a save killed at its creation leaves it empty.
    static const char kHdf5Signature[] = "\x89HDF\r\n\x1a\n";
    return st.st_size == 0 || head_bytes(path, 8, &size) == std::string(kHdf5Signature, 8);
  }
  return false;
}

static bool holds_checkpoint_files(const std::string &dir) {
  const std::string d = dir.empty() ? "." : dir;
  struct stat data;
  return holds_save_contents(d + "/" + kCheckpointManifest) &&
         ::stat((d + "/" + kCheckpointData).c_str(), &data) == 0 && S_ISREG(data.st_mode);
}

void refuse_inside_checkpoint(const std::string &path, const char *what, bool is_dir) {
  namespace fs = std::filesystem;
  const fs::path p = normalized(path);
  for (fs::path dir = is_dir ? p : p.parent_path(); dir.has_relative_path(); dir = dir.parent_path()) {
    const bool by_name = checkpoint_dir_name(dir.filename().string());
    if (!by_name && !holds_checkpoint_files(dir.string())) continue;
    const char *why = by_name ? "(iter_NNNNNNN)" : "(it holds a checkpoint's manifest.json and model.h5)";
    if (dir == p)
      fail(Status::invalid_argument, what, " '", path, "' is ", by_name ? "named as " : "",
           "a checkpoint directory ", why, ", whose files only a save writes: give another directory");
    fail(Status::invalid_argument, what, " '", path, "' is inside the checkpoint directory '",
         dir.string(), "' ", why, ", whose files only a save writes: give a path outside it");
  }
}

void check_output_directory(const std::string &dir, const char *what) {
  namespace fs = std::filesystem;
  if (dir.empty()) fail(Status::invalid_argument, what, " is an empty path (give a directory)");
  // A name no directory can take is refused now, not when it is first made.
  for (const fs::path &part : fs::path(dir))
    if (part.native().size() > NAME_MAX)
      fail(Status::io_error, what, " '", dir, "': a name of ", part.native().size(),
           " bytes in it is longer than a directory's name may be (", NAME_MAX, ")");
  refuse_inside_checkpoint(dir, what, true);  // a save writes only its own directory
  std::error_code ec;
  // On the way (dir itself, "dir/", a parent): a link to nothing would be
  // "File exists" to a mkdir, and what is there must be a directory (or a
  // link to one).
  for (fs::path p = fs::absolute(dir, ec).lexically_normal(); p.has_relative_path();
       p = p.parent_path()) {
    if (!p.has_filename()) p = p.parent_path();  // "dir/": the link itself
    const bool there = fs::exists(p, ec);
    if (!there && fs::is_symlink(fs::symlink_status(p, ec)))
      fail(Status::io_error, what, " '", dir, "': '", p.string(), "' is a symbolic link to ",
           "nothing: give a directory, or a link to one");
    if (there && !fs::is_directory(p, ec))
      fail(Status::io_error, what, " '", dir, "': '", p.string(), "' is not a directory");
  }
}

namespace {

// A checkpoint's files belong to the checkpoint writer: Error when `path`
// lies inside a checkpoint directory (any spelling or link), takes a
// checkpoint directory's name, or is the tracker "latest" of a directory
// holding checkpoints. Another writer there would
// corrupt a checkpoint (its manifest, its data) or repoint the run's resume.
void refuse_if_checkpoint_part(const std::string &path, const char *what) {
  namespace fs = std::filesystem;
  refuse_inside_checkpoint(path, what, false);
  const fs::path p = normalized(path);
  // A file of a checkpoint directory's name would stop the save of that
  // iteration ("exists and is not a complete checkpoint").
  if (checkpoint_dir_name(p.filename().string()))
    fail(Status::invalid_argument, what, " '", path, "' is named as a checkpoint directory ",
         "(iter_NNNNNNN), a name only a save gives: give another name");
  if (p.filename() != kCheckpointTracker) return;
  std::error_code ec;
  for (const fs::directory_entry &e : fs::directory_iterator(p.parent_path(), ec))
    if (checkpoint_dir_name(e.path().filename().string()))
      fail(Status::invalid_argument, what, " '", path, "' is the checkpoint tracker of '",
           p.parent_path().string(), "' (it names the checkpoint a resume loads; '",
           e.path().filename().string(), "' is there): give another path");
}

}  // namespace

void FileRegistration::release() {
  if (!id_) return;
  std::lock_guard<std::mutex> lk(registry_mu);
  const auto it = registry.find(id_);
  if (it != registry.end()) {
    if (it->second.fd >= 0) ::close(it->second.fd);
    registry.erase(it);
  }
  id_ = 0;
}

FileRegistration &FileRegistration::operator=(FileRegistration &&o) noexcept {
  if (this != &o) {
    release();
    id_ = o.id_;
    o.id_ = 0;
  }
  return *this;
}

InputFile::InputFile(const std::string &path, const std::string &what) {
  const int fd = ::open(path.c_str(), O_PATH | O_CLOEXEC);
  struct stat st;
  if (fd < 0) return;
  if (::fstat(fd, &st) != 0) {
    ::close(fd);
    return;
  }
  id_ = register_file({true, st.st_dev, st.st_ino, "", path, what, fd});
}

namespace {
// Binds the abstract Unix socket `name`: its descriptor, -1 when another
// holds it, -2 when sockets are unavailable.
int bind_process_lock(const std::string &name) {
  sockaddr_un addr = {};
  addr.sun_family = AF_UNIX;
  const size_t n = std::min(name.size(), sizeof addr.sun_path - 1);
  std::memcpy(addr.sun_path + 1, name.data(), n);  // sun_path[0] = 0: the abstract namespace
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -2;
  if (::bind(fd, reinterpret_cast<sockaddr *>(&addr), (socklen_t)(offsetof(sockaddr_un, sun_path) + 1 + n)) == 0)
    return fd;
  const int e = errno;
  ::close(fd);
  return e == EADDRINUSE ? -1 : -2;
}

// "ptdp-<kind>-<device>-<inode>[-<name hash>]" of a directory (and a name in it).
std::string lock_name(const char *kind, const std::string &dir, const std::string &name) {
  struct stat st;
  if (::stat(dir.empty() ? "." : dir.c_str(), &st) != 0) return "";
  char buf[96];
  std::snprintf(buf, sizeof buf, "ptdp-%s-%llx-%llx-%llx", kind, (unsigned long long)st.st_dev,
                (unsigned long long)st.st_ino, (unsigned long long)(name.empty() ? 0 : fnv1a64(name)));
  return buf;
}

// The lock of the output file the path names (through links, "..", a
// relative spelling: a link to another process's --timeline is that file);
// "" when its directory is not there.
std::string output_lock_name(const std::string &path) {
  std::error_code ec;
  std::filesystem::path p = std::filesystem::weakly_canonical(std::filesystem::absolute(path, ec), ec);
  if (ec || p.empty()) p = path;
  return lock_name("output", p.parent_path().string(), p.filename().string());
}

[[noreturn]] void fail_held_elsewhere(const std::string &path, const std::string &what) {
  fail(Status::invalid_config, what, " '", path, "' is being written by another process (a run "
       "or command still going): two writers of one file mix or replace each other's output; "
       "give another path, or wait until it ends");
}

// Whether another process holds the lock `name` (hold_output_for_process):
// listed among the system's bound abstract sockets (read, not bound, so that
// a look never makes another process's hold fail) and not one of this
// process's own sockets.
bool held_by_another_process(const std::string &name) {
  FILE *f = std::fopen("/proc/net/unix", "re");
  if (!f) return false;  // (no way to tell: the holder's own check still stands)
  const std::string listed = "@" + name;
  bool bound = false;
  char line[512];
  while (!bound && std::fgets(line, sizeof line, f)) {
    const char *at = std::strrchr(line, ' ');
    bound = at && std::strncmp(at + 1, listed.c_str(), listed.size()) == 0 &&
            (at[1 + listed.size()] == '\n' || at[1 + listed.size()] == 0);
  }
  std::fclose(f);
  if (!bound) return false;
  std::error_code ec;
  for (std::filesystem::directory_iterator it("/proc/self/fd", ec), end; !ec && it != end; it.increment(ec)) {
    sockaddr_un addr = {};
    socklen_t len = sizeof addr;
    const int fd = std::atoi(it->path().filename().c_str());
    if (::getsockname(fd, reinterpret_cast<sockaddr *>(&addr), &len) == 0 && addr.sun_family == AF_UNIX &&
        len == offsetof(sockaddr_un, sun_path) + 1 + name.size() && addr.sun_path[0] == 0 &&
        std::memcmp(addr.sun_path + 1, name.data(), name.size()) == 0)
      return false;  // this process's own hold
  }
  return true;
}
}  // namespace

int hold_output_for_process(const std::string &path, const std::string &what) {
  const std::string name = output_lock_name(path);
  if (name.empty()) return -1;  // (no directory: the write names the problem)
  const int fd = bind_process_lock(name);
  if (fd == -1) fail_held_elsewhere(path, what);
  return fd < 0 ? -1 : fd;
}

namespace {
// Every writer (output_target): a file another process holds as its output
// (a run's --log-json or --timeline, a tokenize's .bin) is refused, whichever
// writer aims at it (ptdp.write_file, plot, timeline-png), not only a second
// holder.
void refuse_if_held_elsewhere(const std::string &target, const std::string &path, const char *what) {
  const std::string name = output_lock_name(target);
  if (!name.empty() && held_by_another_process(name)) fail_held_elsewhere(path, what);
}
}  // namespace

OutputClaim::OutputClaim(const std::string &path, const std::string &what, bool across_processes) {
  refuse_if_claimed(path, what.c_str());
  const int fd = across_processes ? hold_output_for_process(path, what) : -1;
  id_ = register_file({false, 0, 0, normalized(path), path, what, fd});
}

bool same_output(const std::string &a, const std::string &b) {
  struct stat sa, sb;
  if (::stat(a.c_str(), &sa) == 0 && ::stat(b.c_str(), &sb) == 0)
    return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
  return normalized(a) == normalized(b);
}

void hold_input_file(const std::string &path, const std::string &what) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0 || ::access(path.c_str(), R_OK) != 0)
    fail(Status::io_error, what, " '", path, "': ", std::strerror(errno));
  if (!S_ISREG(st.st_mode))
    fail(Status::invalid_argument, what, " '", path, "' is ", kind_of(st.st_mode),
         ", not a file to read (allowed: a regular file, or a link to one)");
  hold_input(path, what);
}

bool is_held_input(const std::string &path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && input_of(st).has_value();
}

void hold_input(const std::string &path, const std::string &what) {
  static std::mutex held_mu;
  // Never released: the process's inputs, once each.
  static auto *held = new std::map<std::pair<dev_t, ino_t>, InputFile>();
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return;
  std::lock_guard<std::mutex> lk(held_mu);
  if (held->count({st.st_dev, st.st_ino})) return;
  // Held open as well (never closed): a held file removed meanwhile keeps its
  // inode, which a new file (an output) would otherwise get and be refused as
  // this input.
  (void)::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  held->emplace(std::make_pair(st.st_dev, st.st_ino), InputFile(path, what));
}

// output_target's checks of the path's kind and inputs (below).
static std::string checked_target(const std::string &path, const char *what);

// Each kind's key (a script's name for it) and its name in messages.
static const std::pair<OutputKind, std::pair<const char *, const char *>> kKinds[] = {
    {OutputKind::ptdp_dataset, {"ptdp_dataset", "a ptdp token dataset"}},
    {OutputKind::megatron_index, {"megatron_index", "a Megatron index (.idx)"}},
    {OutputKind::megatron_data, {"megatron_data", "a Megatron token file (.bin) beside its .idx"}},
    {OutputKind::safetensors, {"safetensors", "a safetensors file"}},
    {OutputKind::json, {"json", "a JSON object"}},
    {OutputKind::metrics_log, {"metrics_log", "a metrics log (--log-json, its first record {\"kind\": \"run\", ...})"}},
    {OutputKind::trace, {"trace", "a --timeline trace"}},
    {OutputKind::machine, {"machine", "a planner's machine file (--save-machine)"}},
    {OutputKind::png, {"png", "a PNG image"}},
    {OutputKind::op_profile, {"op_profile", "an op profile (--profile-ops)"}},
    {OutputKind::any, {"any", "a file"}},
};

const char *output_kind_name(OutputKind kind) {
  for (const auto &[k, names] : kKinds)
    if (k == kind) return names.second;
  return "a file";
}

const char *output_kind_key(OutputKind kind) {
  for (const auto &[k, names] : kKinds)
    if (k == kind) return names.first;
  return "any";
}

OutputKind output_kind_of_key(const std::string &key) {
  std::string keys;
  for (const auto &[k, names] : kKinds) {
    if (key == names.first) return k;
    keys += std::string(keys.empty() ? "" : ", ") + names.first;
  }
  fail(Status::invalid_argument, "output kind '", key, "' (allowed: ", keys, ")");
}

// The first bytes of the regular file `path` (at most n): what a kind's check reads.
// The first n bytes of a file, to tell what it is: "" when it is gone; a file
// that is there but cannot be opened (too many open files, no permission) is
// an Error naming why: it read as "not of its kind", and the message invited
// the user to remove a good file.
static std::string head_bytes(const std::string &path, size_t n, off_t *size) {
  std::string out;
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0 && errno != ENOENT)
    fail(Status::io_error, "cannot open '", path, "' to tell what it holds: ", std::strerror(errno));
  if (fd < 0) return out;
  struct stat st;
  *size = ::fstat(fd, &st) == 0 ? st.st_size : 0;
  out.resize(n);
  size_t got = 0;
  while (got < n) {
    const ssize_t r = ::read(fd, &out[got], n - got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    got += (size_t)r;
  }
  ::close(fd);
  out.resize(got);
  return out;
}

// Whether the existing regular file `target` is of `kind` (or empty: no one's).
// One that cannot be read is not: what it is cannot be told. `any` (a
// script's own file) is any file of no format of ptdp's writers but JSON.
static bool is_of_kind(const std::string &target, OutputKind kind, bool exported_only = true);

// The format of ptdp's writers (or of a model's files) `target` is in, as
// its name in messages, or "" (plain text, a script's own JSON): a file a
// script's own writer (`any`) leaves alone. Besides the writers' kinds: an
// HDF5 file (a checkpoint's model.h5, copied out of its directory) and a
// model's JSON files (config, generation config, weights index), which its
// weights files would be useless without.
static std::string known_format(const std::string &target) {
  for (OutputKind k : {OutputKind::ptdp_dataset, OutputKind::megatron_index, OutputKind::megatron_data,
                       OutputKind::safetensors, OutputKind::metrics_log, OutputKind::trace,
                       OutputKind::machine, OutputKind::png, OutputKind::op_profile})
    if (is_of_kind(target, k, false)) return output_kind_name(k);
  off_t size = 0;
  const std::string h = head_bytes(target, 65536, &size);
  if (h.compare(0, 8, "\x89HDF\r\n\x1a\n") == 0) return "an HDF5 file (a checkpoint's data?)";
  // A model's JSON: its config.json, generation_config.json (Hugging Face's
  // writers record transformers_version) or its weights' index (weight_map,
  // which can be past 64 KiB: told by its opening then).
  static const char *model_json = "a model's JSON file (its config, generation config or weights "
                                  "index: it names model_type, transformers_version or weight_map)";
  if ((size_t)size <= h.size()) {
    const json j = parse_json_or_discard(h);
    if (j.is_object() &&
        (j.contains("model_type") || j.contains("transformers_version") || j.contains("weight_map") ||
         j.contains("_from_model_config")))
      return model_json;
  } else if (h.find_first_not_of(" \t\r\n") == h.find('{') && h.find("\"weight_map\"") != std::string::npos) {
    return model_json;
  }
  return "";
}

static bool is_of_kind(const std::string &target, OutputKind kind, bool exported_only) {
  off_t size = -1;
  // Only what the kind is told by: a magic's few bytes, or a first line or a
  // whole small JSON file (output_target runs at every --log-json append and
  // every --timeline write).
  const bool lines = kind == OutputKind::json || kind == OutputKind::machine ||
                     kind == OutputKind::metrics_log || kind == OutputKind::op_profile;
  const std::string h = head_bytes(target, lines ? 65536 : 64, &size);
  if (size == 0) return true;
  if (size < 0) return false;
  if (kind == OutputKind::any) return known_format(target).empty();
  const auto starts = [&h](const char *magic, size_t n) { return h.size() >= n && h.compare(0, n, magic, n) == 0; };
  switch (kind) {
    case OutputKind::ptdp_dataset: return starts("PTDPTOK\0", 8);
    case OutputKind::megatron_index: return starts("MMIDIDX\0\0", 9);
    case OutputKind::megatron_data: {  // its index beside it says what it is
      if (target.size() < 4 || target.compare(target.size() - 4, 4, ".bin") != 0) return false;
      off_t idx_size = 0;
      return head_bytes(target.substr(0, target.size() - 4) + ".idx", 9, &idx_size) ==
             std::string("MMIDIDX\0\0", 9);
    }
    case OutputKind::safetensors: {  // one ptdp exported, or one without tensors
      // (a model from elsewhere, the one a checkpoint was imported from say,
      // may be all there is of it)
      if (h.size() < 9 || h[8] != '{') return false;
      uint64_t n = 0;
      for (int i = 7; i >= 0; i--) n = n << 8 | (unsigned char)h[i];
      if (n < 2 || n > (uint64_t)size - 8 || n > (100u << 20)) return false;  // (the format's limit)
      if (!exported_only) return true;  // a safetensors file at all
      off_t ignored = 0;
      const std::string text = head_bytes(target, 8 + (size_t)n, &ignored);
      const json j = parse_json_or_discard(text.size() > 8 ? text.substr(8) : "");
      if (!j.is_object()) return false;
      const auto meta = j.find("__metadata__");
      const bool ptdp = meta != j.end() && meta->is_object() && meta->value("producer", json()) == "ptdp";
      return ptdp || j.size() == (size_t)(meta != j.end());
    }
    // The JSON kinds by what their writers put in them, not by a first '{':
    // a model's config.json, an INI file, a log and a trace all start alike.
    case OutputKind::json: {  // the whole file one JSON object (small: a config)
      if ((size_t)size > h.size()) return false;
      const json j = parse_json_or_discard(h);
      return j.is_object();
    }
    case OutputKind::metrics_log: {  // its first line the run record (a JSONL corpus is no log)
      const size_t eol = h.find('\n');
      if (eol == std::string::npos) return false;
      const json j = parse_json_or_discard(valid_utf8(h.substr(0, eol)));  // (a path's bytes)
      return j.is_object() && j.value("kind", "") == "run";
    }
    case OutputKind::trace: return h.rfind("{\"displayTimeUnit\":\"ms\",\"traceEvents\":[", 0) == 0;
    case OutputKind::machine: {
      if ((size_t)size > h.size()) return false;
      const json j = parse_json_or_discard(h);
      return j.is_object() && j.contains("name") && j.contains("devices_per_node") &&
             j.contains("peak_flops");
    }
    case OutputKind::png: return starts("\x89PNG\r\n\x1a\n", 8);
    case OutputKind::op_profile: {  // "rank N (tp.., pp.., dp..) on DEVICE, iteration N"
      const std::string line = h.substr(0, h.find('\n'));
      size_t digits = 5;
      while (digits < line.size() && std::isdigit((unsigned char)line[digits])) digits++;
      return line.rfind("rank ", 0) == 0 && digits > 5 && line.compare(digits, 2, " (") == 0 &&
             line.find(") on ") != std::string::npos && line.find(", iteration ") != std::string::npos;
    }
    case OutputKind::any: return true;  // (above)
  }
  return false;
}

static void refuse_if_other_kind(const std::string &target, const std::string &path, const char *what,
                                 OutputKind kind) {
  struct stat st;
  if (::stat(target.c_str(), &st) != 0 || !S_ISREG(st.st_mode) || is_of_kind(target, kind)) return;
  if (kind == OutputKind::any)
    fail(Status::invalid_argument, what, " '", path, "' exists and is ",
         known_format(target), ": ", what, " replaces only a file of none of the ",
         "formats ptdp's writers make (a dataset, a model, a log, a trace or a picture is its own ",
         "writer's to replace); give a new name, or remove that file if it is to go");
  if (kind == OutputKind::safetensors && is_of_kind(target, OutputKind::safetensors, false))
    fail(Status::invalid_argument, what, " '", path, "' exists and is a safetensors file ptdp did ",
         "not export (a model from elsewhere may be all there is of it): ", what, " replaces only ",
         "an earlier export; give a new name, or remove that file if it is to go");
  fail(Status::invalid_argument, what, " '", path, "' exists and is not ", output_kind_name(kind),
       " (", st.st_size, " bytes of something else): ", what,
       " replaces only a file of its own kind, written before; give a new name, or remove that file "
       "if it is to go");
}

std::string output_target(const std::string &path, const char *what, OutputKind kind) {
  const std::string target = checked_target(path, what);
  refuse_if_claimed(target, what);
  refuse_if_held_elsewhere(target, path, what);
  refuse_if_other_kind(target, path, what, kind);
  return target;
}

static void probe_creatable(const std::string &target, const std::string &path, const char *what);

std::string check_output_file(const std::string &path, const char *what, OutputKind kind) {
  const std::string target = output_target(path, what, kind);
  probe_creatable(target, path, what);
  return target;
}

// A file with other names (hard links) is not an output: a writer that
// appends would change every name's contents, one that renames would leave
// the other names holding the old bytes; and the other names may lie anywhere
// (inside a checkpoint, say), where no check by path reaches.
static void refuse_if_linked(const struct stat &st, const std::string &path, const char *what) {
  if (st.st_nlink > 1)
    fail(Status::invalid_argument, what, " '", path, "' has ", (unsigned long long)st.st_nlink,
         " names (hard links): refusing to write a file other names share (give a path of its own)");
}

// That the writer will be able to make its temporary file beside `target`
// (create_temp_file's name, 11 bytes longer): tried now, so a name too long or
// a directory it cannot write into (/proc, /sys, read-only) stops the command
// before any work, not at the first write.
static void probe_creatable(const std::string &target, const std::string &path, const char *what) {
  std::string tmp;
  int fd;
  try {
    fd = create_temp_file(target, &tmp);
  } catch (const Error &e) {
    fail(Status::io_error, what, " '", path, "': cannot create a file there (", e.what(),
         "); give a path whose name is at most ", NAME_MAX - 11,
         " bytes long, in a directory this process can write");
  }
  ::close(fd);
  remove_temp_file(tmp);
}

// A writer replaces a file; a process's streams are no files to replace:
// /dev/stdout (a link into /proc/self/fd) replaced the file the shell sent
// standard output to, and the run's log with it. Refused by name: the path in
// its lexical form (//dev/./fd/3 is /dev/fd/3), every hop of a chain of links
// at its end, and its directory's real path (/dev/fd is /proc/self/fd) must
// stay out of /proc and /dev/fd; and by identity: no file behind any of this
// process's open descriptors (3>>f spelled any way at all).
static bool names_a_stream(const std::string &p) {
  return p.rfind("/proc/", 0) == 0 || p == "/proc" || p.rfind("/dev/fd/", 0) == 0 ||
         p == "/dev/fd" || p == "/dev/stdin" || p == "/dev/stdout" || p == "/dev/stderr";
}

// By name, before anything is looked at.
static void refuse_if_stream(const std::string &path, const char *what) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path p = fs::absolute(path, ec).lexically_normal();
  for (int hop = 0; hop < 40; hop++) {
    if (names_a_stream(p.string()) || names_a_stream(fs::weakly_canonical(p.parent_path(), ec).string()))
      fail(Status::invalid_argument, what, " '", path, "' is a stream of a process (through /proc ",
           "or /dev/fd), not a file of its own: a writer replaces its file whole (give a file path)");
    char to[PATH_MAX];
    const ssize_t n = ::readlink(p.c_str(), to, sizeof to - 1);
    if (n <= 0) break;
    const fs::path next(std::string(to, (size_t)n));
    p = (next.is_absolute() ? next : p.parent_path() / next).lexically_normal();
  }
}

// By identity, for the regular file the output would replace.
static void refuse_if_open(const struct stat &file, const std::string &path, const char *what) {
  std::error_code ec;
  for (std::filesystem::directory_iterator it("/proc/self/fd", ec), end; !ec && it != end;
       it.increment(ec)) {
    struct stat s;
    if (::stat(it->path().c_str(), &s) == 0 && s.st_dev == file.st_dev && s.st_ino == file.st_ino)
      fail(Status::invalid_argument, what, " '", path, "' is a file this process has open (a ",
           "descriptor it was started with, standard output or error), not a file of its own: a ",
           "writer replaces its file whole (give a file path)");
  }
}

static std::string checked_target(const std::string &path, const char *what) {
  if (path.empty()) fail(Status::invalid_argument, what, " is an empty path (give a file's path)");
  refuse_if_checkpoint_part(path, what);
  refuse_if_stream(path, what);
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) {
    if (errno != ENOENT) fail(Status::io_error, what, " '", path, "': ", std::strerror(errno));
    // A new file: its directory must be there, so that the refusal comes now,
    // before any work, not when the output is first written.
    const size_t slash = path.find_last_of('/');
    const std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
    struct stat ds;
    if (::stat(dir.c_str(), &ds) != 0)
      fail(Status::io_error, what, " '", path, "': its directory '", dir, "' ",
           errno == ENOENT ? "does not exist" : std::strerror(errno));
    if (!S_ISDIR(ds.st_mode))
      fail(Status::io_error, what, " '", path, "': '", dir, "' is not a directory");
    return path;
  }
  if (S_ISREG(st.st_mode)) {
    refuse_if_input(st, path, what);
    refuse_if_open(st, path, what);
    refuse_if_linked(st, path, what);
    return path;
  }
  if (S_ISLNK(st.st_mode)) {
    char resolved[PATH_MAX];
    struct stat target;
    if (!::realpath(path.c_str(), resolved) || ::stat(resolved, &target) != 0)
      fail(Status::invalid_argument, what, " '", path,
           "' is a symbolic link to nothing: refusing to replace it (give a file path)");
    if (S_ISREG(target.st_mode)) {
      refuse_if_input(target, path, what);
      refuse_if_open(target, path, what);
      refuse_if_linked(target, path, what);
      return resolved;
    }
    fail(Status::invalid_argument, what, " '", path, "' is a symbolic link to ",
         kind_of(target.st_mode), ": refusing to replace it (give a regular file path)");
  }
  fail(Status::invalid_argument, what, " '", path, "' exists and is ", kind_of(st.st_mode),
       ": refusing to replace it (give a regular file path)");
}

void write_all(int fd, const void *p, size_t n, const std::string &path) {
  const char *c = static_cast<const char *>(p);
  while (n) {
    const ssize_t w = ::write(fd, c, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0)  // 0: no progress, a full device
      fail(Status::io_error, "cannot write '", path, "': ", std::strerror(w < 0 ? errno : ENOSPC));
    c += w;
    n -= (size_t)w;
  }
}

namespace {

// The temporary files not yet renamed or removed, for a signal handler to
// remove: slots in chunks (no allocation, no lock in the handler: it may run
// at any moment), each free, being written, or holding a path. When every
// slot is taken (a tokenize of 70 json keys holds 140 files), a new chunk is
// linked on, never freed: every temporary is on the list.
enum : int { kSlotFree, kSlotBusy, kSlotHeld };
struct TempSlot {
  std::atomic<int> state{kSlotFree};
  bool directory;  // rmdir(2) it, after every file's unlink(2), while it is the one made
  bool tree;       // a directory made whole (make_temp_tree): removed with all it holds, by remove_tree only
  int fd;          // a directory's or tree's (or -1), open while held: its inode is never another's meanwhile
  dev_t dev;       // a directory's or tree's identity from its making, for the rmdir of its path
  ino_t ino;
  char path[PATH_MAX];
};
struct TempChunk {
  std::array<TempSlot, 64> slots;
  std::atomic<TempChunk *> next{nullptr};
};
TempChunk first_temp_chunk;

// fn(slot) for every slot (async-signal-safe: atomic loads only).
template <class Fn>
void for_each_temp_slot(Fn fn) {
  for (TempChunk *c = &first_temp_chunk; c; c = c->next.load())
    for (TempSlot &slot : c->slots) fn(slot);
}

// identity and fd: a directory's or tree's, as made (fd -1: none open).
enum class Held { file, directory, tree };
void hold_temp_path(const std::string &tmp, Held kind = Held::file,
                    const struct stat *identity = nullptr, int fd = -1) {
  if (tmp.size() >= PATH_MAX) return;  // (the OS refuses to make such a path)
  for (TempChunk *c = &first_temp_chunk;; c = c->next.load()) {
    for (TempSlot &slot : c->slots) {
      int expected = kSlotFree;
      if (!slot.state.compare_exchange_strong(expected, kSlotBusy)) continue;
      std::memcpy(slot.path, tmp.c_str(), tmp.size() + 1);
      slot.directory = kind == Held::directory;
      slot.tree = kind == Held::tree;
      slot.fd = fd;
      slot.dev = identity ? identity->st_dev : 0;
      slot.ino = identity ? identity->st_ino : 0;
      slot.state.store(kSlotHeld);
      return;
    }
    if (!c->next.load()) {
      TempChunk *more = new TempChunk, *none = nullptr;
      if (!c->next.compare_exchange_strong(none, more)) delete more;  // another thread's came first
    }
  }
}

void release_temp_path(const std::string &tmp) {
  bool done = false;
  for_each_temp_slot([&](TempSlot &slot) {
    int expected = kSlotHeld;
    // (A tree is released only by its removal: a save into it releases its own hold.)
    if (done || slot.state.load() != kSlotHeld || slot.tree || tmp != slot.path) return;
    if (slot.state.compare_exchange_strong(expected, kSlotBusy)) {
      if (slot.fd >= 0) ::close(slot.fd);
      slot.state.store(kSlotFree);
      done = true;
    }
  });
}

// Everything the open directory `fd` holds, following no link: each entry is
// unlinked, a directory emptied first (to a depth of 32). Passes while one
// removes something, as entries removed during a listing may hide others
// (what cannot be removed stays, and ends the passes).
// Async-signal-safe: getdents64, unlinkat, openat, close, lseek.
void empty_directory_at(int fd, int depth) {
  struct Dirent64 {
    uint64_t ino;
    int64_t off;
    unsigned short reclen;
    unsigned char type;
    char name[1];
  };
  alignas(8) char buf[2048];
  for (bool removed = true; removed;) {
    removed = false;
    ::lseek(fd, 0, SEEK_SET);
    for (long n; (n = ::syscall(SYS_getdents64, fd, buf, sizeof buf)) > 0;) {
      for (long at = 0; at < n;) {
        const Dirent64 *d = reinterpret_cast<const Dirent64 *>(buf + at);
        at += d->reclen;
        const char *name = d->name;
        if (name[0] == '.' && (name[1] == 0 || (name[1] == '.' && name[2] == 0))) continue;
        if (::unlinkat(fd, name, 0) == 0) {  // a file, a link
          removed = true;
          continue;
        }
        if (depth >= 32) continue;  // (too deep to empty: left)
        const int sub = ::openat(fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (sub < 0) continue;
        empty_directory_at(sub, depth + 1);
        ::close(sub);
        if (::unlinkat(fd, name, AT_REMOVEDIR) == 0) removed = true;
      }
    }
  }
}

// A held tree and all it holds: the directory made (through the descriptor
// held since), then its path when that is still this directory (another one
// put there stays). Async-signal-safe.
// Whether the slot's path is still the directory it made (lstat: a link put
// there is not it). Async-signal-safe.
bool still_made(const TempSlot &slot) {
  struct stat st;
  return ::lstat(slot.path, &st) == 0 && S_ISDIR(st.st_mode) && st.st_dev == slot.dev &&
         st.st_ino == slot.ino;
}

void remove_tree(const TempSlot &slot) {
  empty_directory_at(slot.fd, 0);
  if (still_made(slot)) ::rmdir(slot.path);
}

// Async-signal-safe: unlink(2) and rmdir(2). Directories in any slot order:
// passes until one removes nothing, so an inner one (iter_N.tmp) goes before
// the root it emptied.
void remove_held_paths() {
  for_each_temp_slot([](TempSlot &slot) {
    if (slot.state.load() == kSlotHeld && !slot.directory && !slot.tree) ::unlink(slot.path);
  });
  for_each_temp_slot([](TempSlot &slot) {
    if (slot.state.load() == kSlotHeld && slot.tree) remove_tree(slot);
  });
  for (bool removed = true; removed;) {
    removed = false;
    for_each_temp_slot([&](TempSlot &slot) {
      if (slot.state.load() == kSlotHeld && slot.directory && still_made(slot) &&
          ::rmdir(slot.path) == 0)
        removed = true;
    });
  }
}

// The steps the cleanup must not cut into (uninterrupted_section below): how
// many are under way, the thread of the latest, and whether the cleanup began.
std::atomic<int> sections_under_way{0};
std::atomic<long> section_thread{0};
std::atomic<bool> cleanup_began{false};
// A signal that came to the thread of a step under way: taken when it ends.
std::atomic<int> pending_signal{0};

long this_thread_id() { return (long)::syscall(SYS_gettid); }  // async-signal-safe

// The cleanup, then the default action of the signal. First the steps under
// way on other threads finish (a commit's renames, up to 10 s), so that the
// cleanup never removes the files of a checkpoint being put in place. Other
// threads (a background save) run on meanwhile and may make a file just after
// the first pass: a second pass, 20 ms later, takes what they made in between.
extern "C" void remove_temp_files_and_die(int sig) {
  // On the step's own thread it cannot be waited for: it ends first, then
  // leave_uninterrupted() takes the signal (a tokenize's or an export's
  // renames, cut between two files, left new files beside old ones).
  if (sections_under_way.load() > 0 && section_thread.load() == this_thread_id()) {
    pending_signal.store(sig);
    return;
  }
  cleanup_began.store(true);
  const struct timespec tick = {0, 1000 * 1000};
  for (int ms = 0; ms < 10000 && sections_under_way.load() > 0 &&
                   section_thread.load() != this_thread_id();
       ms++)
    nanosleep(&tick, nullptr);
  remove_held_paths();
  const struct timespec pause = {0, 20 * 1000 * 1000};
  nanosleep(&pause, nullptr);
  remove_held_paths();
  signal(sig, SIG_DFL);
  raise(sig);
}

}  // namespace

void remove_temp_files_on_signal() {
  // A file past the size limit (ulimit -f) is a write that fails (EFBIG) and
  // is reported as every failed write is, its temporaries removed; SIGXFSZ's
  // default killed the process without a word, leaving them behind.
  {
    struct sigaction old = {};
    if (sigaction(SIGXFSZ, nullptr, &old) == 0 && old.sa_handler == SIG_DFL) signal(SIGXFSZ, SIG_IGN);
  }
  struct sigaction sa = {};
  sa.sa_handler = remove_temp_files_and_die;
  sa.sa_flags = SA_RESTART;  // a signal held for a step's end must not fail the step's calls
  sigemptyset(&sa.sa_mask);
  // Every signal a user or a scheduler ends a process with (its default ends
  // it, SIGQUIT's and SIGXCPU's with a core): `| head` (SIGPIPE), `timeout -s
  // ALRM`, a scheduler's SIGUSR1.
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGPIPE, SIGQUIT, SIGALRM, SIGUSR1, SIGUSR2, SIGPROF,
                  SIGVTALRM, SIGXCPU}) {
    struct sigaction old = {};
    // Only where the signal has its default action: one the user's shell set
    // to be ignored (nohup) stays ignored, and a handler already there (a
    // profiler's SIGPROF, preloaded) stays its owner's.
    if (sigaction(sig, nullptr, &old) != 0 || (old.sa_flags & SA_SIGINFO) || old.sa_handler != SIG_DFL) continue;
    sigaction(sig, &sa, nullptr);
  }
}

bool enter_uninterrupted() {
  sections_under_way.fetch_add(1);
  if (cleanup_began.load()) {  // too late: the process is ending
    sections_under_way.fetch_sub(1);
    return false;
  }
  section_thread.store(this_thread_id());
  return true;
}

void leave_uninterrupted() {
  if (sections_under_way.fetch_sub(1) != 1) return;
  if (const int sig = pending_signal.exchange(0)) remove_temp_files_and_die(sig);
}

UninterruptedStep::UninterruptedStep(const std::string &what) {
  if (!enter_uninterrupted()) fail(Status::io_error, what, ": the process is ending");
}

// A descriptor on the directory made, held open with it so that its inode is
// no other directory's while held (a removed one's number is soon reused);
// -1 where none opens (no descriptor left): then its identity alone.
static int open_directory_held(const std::string &dir, const struct stat &made) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  struct stat st;
  if (fd >= 0 && (::fstat(fd, &st) != 0 || st.st_dev != made.st_dev || st.st_ino != made.st_ino)) {
    ::close(fd);
    return -1;
  }
  return fd;
}

bool make_held_directory(const std::string &dir, const std::vector<std::string> &names) {
  // No signal on this thread between the mkdir and the hold: the directory is
  // on the cleanup's list from its making, by its identity.
  sigset_t all, before;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, &before);
  struct stat st;
  const int made = ::mkdir(dir.c_str(), 0755) == 0 ? 0 : errno;
  bool held = made == 0 && ::lstat(dir.c_str(), &st) == 0;
  try {
    if (held) {
      for (const std::string &name : names) hold_temp_path(dir + "/" + name);
      hold_temp_path(dir, Held::directory, &st, open_directory_held(dir, st));
    }
  } catch (...) {  // (no memory for the list: made, then not kept)
    for (const std::string &name : names) release_temp_path(dir + "/" + name);
    ::rmdir(dir.c_str());
    pthread_sigmask(SIG_SETMASK, &before, nullptr);
    throw;
  }
  pthread_sigmask(SIG_SETMASK, &before, nullptr);
  if (held) return true;
  if (made == EEXIST && ::lstat(dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) return false;
  fail(Status::io_error, "cannot create directory '", dir, "': ",
       made == EEXIST ? "something else than a directory is there" : std::strerror(made ? made : errno));
}

std::vector<std::string> make_held_directories(const std::string &path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  std::vector<fs::path> missing;  // deepest first
  for (fs::path p = fs::absolute(path, ec).lexically_normal(); p.has_relative_path(); p = p.parent_path()) {
    if (!p.has_filename()) p = p.parent_path();
    if (fs::exists(fs::symlink_status(p, ec))) break;
    missing.push_back(p);
  }
  std::vector<std::string> made;
  try {
    for (auto it = missing.rbegin(); it != missing.rend(); ++it)
      if (make_held_directory(it->string())) made.insert(made.begin(), it->string());
  } catch (...) {
    for (const std::string &d : made) unmake_directory(d);
    throw;
  }
  return made;
}

void hold_made_directory(const std::string &dir) {
  struct stat st;
  if (::lstat(dir.c_str(), &st) != 0)
    fail(Status::io_error, "cannot hold '", dir, "': ", std::strerror(errno), " (hold a directory once made)");
  if (!S_ISDIR(st.st_mode))
    fail(Status::io_error, "cannot hold '", dir, "': it is not a directory (a link is not followed)");
  hold_temp_path(dir, Held::directory, &st, open_directory_held(dir, st));
}

void unmake_directory(const std::string &dir) {
  bool made = false;
  for_each_temp_slot([&](TempSlot &slot) {
    int expected = kSlotHeld;
    if (made || slot.state.load() != kSlotHeld || !slot.directory || slot.tree || dir != slot.path) return;
    if (!slot.state.compare_exchange_strong(expected, kSlotBusy)) return;
    made = still_made(slot);
    if (slot.fd >= 0) ::close(slot.fd);
    slot.state.store(kSlotFree);
  });
  if (made) ::rmdir(dir.c_str());  // (while empty)
}

void release_temp_directory(const std::string &dir, const std::vector<std::string> &names) {
  for (const std::string &name : names) release_temp_path(dir + "/" + name);
  release_temp_path(dir);
}

std::string make_temp_tree(const std::string &parent, const std::string &prefix) {
  if (prefix.find('/') != std::string::npos)
    fail(Status::invalid_argument, "temporary directory prefix '", prefix,
         "' holds a '/': it names the new directory inside the parent, not a path");
  std::string name = parent + "/" + prefix + "XXXXXX";
  if (name.size() >= PATH_MAX)
    fail(Status::invalid_argument, "temporary directory under '", parent, "': the path is too long");
  if (!::mkdtemp(name.data()))
    fail(Status::io_error, "cannot make a directory under '", parent, "': ", std::strerror(errno));
  struct stat st;
  const int fd = ::open(name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0 || ::fstat(fd, &st) != 0) {
    const int e = errno;
    if (fd >= 0) ::close(fd);
    ::rmdir(name.c_str());
    fail(Status::io_error, "cannot open the directory made, '", name, "': ", std::strerror(e));
  }
  try {
    hold_temp_path(name, Held::tree, &st, fd);  // (not on the passes for files and empty directories)
  } catch (...) {  // (no memory for the list: made, then not kept)
    ::close(fd);
    ::rmdir(name.c_str());
    throw;
  }
  return name;
}

void remove_temp_tree(const std::string &dir) {
  // The tree by its identity, however `dir` spells it (absolute, a trailing
  // '/', after a chdir): another directory at that path is not it.
  struct stat st;
  const bool there = ::lstat(dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
  bool done = false;
  for_each_temp_slot([&](TempSlot &slot) {
    int expected = kSlotHeld;
    if (done || !there || slot.state.load() != kSlotHeld || !slot.tree || slot.dev != st.st_dev ||
        slot.ino != st.st_ino)
      return;
    if (!slot.state.compare_exchange_strong(expected, kSlotBusy)) return;
    empty_directory_at(slot.fd, 0);
    ::rmdir(dir.c_str());
    ::close(slot.fd);
    slot.state.store(kSlotFree);
    done = true;
  });
  // Trees made inside it went with it: off the list (their descriptors held
  // directories that no longer exist).
  for_each_temp_slot([&](TempSlot &slot) {
    int expected = kSlotHeld;
    struct stat inner;
    if (!done || slot.state.load() != kSlotHeld || !slot.tree || ::fstat(slot.fd, &inner) != 0 ||
        inner.st_nlink != 0 || !slot.state.compare_exchange_strong(expected, kSlotBusy))
      return;
    ::close(slot.fd);
    slot.state.store(kSlotFree);
  });
  if (!done)
    fail(Status::invalid_argument, "'", dir, "' is not a directory this process made with ",
         "make_temp_dir (only those are removed whole), or it was removed already");
  std::error_code ec;
  if (std::filesystem::exists(std::filesystem::symlink_status(dir, ec)))
    fail(Status::io_error, "could not remove all of '", dir, "' (its files are not all this ",
         "process's to remove, or too deep); what is left stays");
}

void rename_temp_file(const std::string &tmp, const std::string &target) {
  if (std::rename(tmp.c_str(), target.c_str()) != 0) {
    const int e = errno;
    remove_temp_file(tmp);
    fail(Status::io_error, "cannot rename '", tmp, "' to '", target, "': ", std::strerror(e));
  }
  release_temp_path(tmp);
}

namespace {
struct FileId {
  dev_t dev = 0;
  ino_t ino = 0;
  bool operator==(const FileId &o) const { return dev == o.dev && ino == o.ino; }
};
FileId file_id(const std::string &path) {
  struct stat st;
  return ::lstat(path.c_str(), &st) == 0 ? FileId{st.st_dev, st.st_ino} : FileId{};
}
// rename(2) that never replaces: renameat2's RENAME_NOREPLACE, or where the
// file system has none, link(2) then unlink(2). False with errno EEXIST when
// target is there.
bool rename_no_replace(const std::string &tmp, const std::string &target) {
#ifdef SYS_renameat2
  if (::syscall(SYS_renameat2, AT_FDCWD, tmp.c_str(), AT_FDCWD, target.c_str(), 1u /* RENAME_NOREPLACE */) == 0)
    return true;
  if (errno != ENOSYS && errno != EINVAL) return false;
#endif
  if (::link(tmp.c_str(), target.c_str()) != 0) return false;
  ::unlink(tmp.c_str());
  return true;
}

// The output sets put into one directory, one at a time across processes: an
// abstract Unix socket named for the directory's device and inode is bound
// by one holder at a time (no file is made, and the kernel releases it when
// its holder ends, however it ends). Two tokenizes of one prefix at once put
// one's .bin beside the other's .idx, each checking its own before the other's
// last rename.
class DirectorySetLock {
 public:
  DirectorySetLock(const std::string &dir, const std::string &what) {
    const std::string name = lock_name("set", dir, "");
    if (name.empty()) return;  // (the rename names the problem)
    for (int waited_ms = 0;; waited_ms += 5) {
      fd_ = bind_process_lock(name);
      if (fd_ >= 0) return;
      if (fd_ == -2) return;  // (no sockets: the check after the renames still tells)
      if (waited_ms >= 60000)
        fail(Status::io_error, what, ": another command has been putting its files into '", dir,
             "' for a minute; run again when it is done");
      const struct timespec tick = {0, 5 * 1000 * 1000};
      nanosleep(&tick, nullptr);
    }
  }
  ~DirectorySetLock() {
    if (fd_ >= 0) ::close(fd_);
  }
  DirectorySetLock(const DirectorySetLock &) = delete;
  DirectorySetLock &operator=(const DirectorySetLock &) = delete;

 private:
  int fd_ = -1;
};
}  // namespace

void put_in_place(const std::vector<std::pair<std::string, std::string>> &temps,
                  const std::string &what, bool new_only) {
  // Each directory of the set, in one order (two sets over the same two
  // directories never wait for each other).
  std::set<std::string> dirs;
  for (const auto &tt : temps) {
    const std::filesystem::path parent = std::filesystem::path(tt.second).parent_path();
    std::error_code ec;
    const std::filesystem::path real = std::filesystem::canonical(parent.empty() ? "." : parent, ec);
    dirs.insert(ec ? parent.string() : real.string());
  }
  auto drop_temps = [&](size_t from) {
    for (size_t i = from; i < temps.size(); i++) remove_temp_file(temps[i].first);
  };
  std::vector<std::unique_ptr<DirectorySetLock>> locks;
  try {
    for (const std::string &d : dirs) locks.push_back(std::make_unique<DirectorySetLock>(d, what));
  } catch (...) {
    drop_temps(0);  // (nothing of this call's is left)
    throw;
  }
  std::vector<FileId> ids;
  for (const auto &tt : temps) ids.push_back(file_id(tt.first));
  {
    const UninterruptedStep step(what + " not completed");
    for (size_t i = 0; i < temps.size(); i++) {
      const auto &[tmp, target] = temps[i];
      if (!new_only) {
        if (std::rename(tmp.c_str(), target.c_str()) == 0) {
          release_temp_path(tmp);
          continue;
        }
      } else if (rename_no_replace(tmp, target)) {
        release_temp_path(tmp);
        continue;
      }
      const int e = errno;
      // All or none: what this call put in place goes again (while it is ours).
      for (size_t k = 0; k < i; k++)
        if (file_id(temps[k].second) == ids[k]) ::unlink(temps[k].second.c_str());
      drop_temps(i);
      if (new_only && e == EEXIST)
        fail(Status::io_error, what, ": '", target, "' is there, and this command replaces nothing "
             "(another command made it meanwhile?): nothing of this one's is left");
      fail(Status::io_error, what, ": cannot rename '", tmp, "' to '", target, "': ", std::strerror(e));
    }
  }
  for (size_t i = 0; i < temps.size(); i++)
    if (!(file_id(temps[i].second) == ids[i]))
      fail(Status::io_error, what, ": '", temps[i].second, "' was replaced by another command writing "
           "the same outputs at the same moment, so they may be a mix of both: run one at a time, "
           "then this one again");
}

void remove_temp_file(const std::string &tmp) {
  ::unlink(tmp.c_str());
  release_temp_path(tmp);
}

int create_temp_file(const std::string &target, std::string *tmp) {
  // mkstemp: a name of its own, so ranks-as-threads writing side by side never collide.
  *tmp = target + ".tmp.XXXXXX";
  const int fd = ::mkstemp(&(*tmp)[0]);
  if (fd < 0)
    fail(Status::io_error, "cannot create a temporary file next to '", target, "': ",
         std::strerror(errno));
  hold_temp_path(*tmp);
  if (::fchmod(fd, 0644) != 0) {  // mkstemp makes it 0600
    const int e = errno;
    ::close(fd);
    remove_temp_file(*tmp);
    fail(Status::io_error, "cannot set the mode of '", *tmp, "': ", std::strerror(e));
  }
  return fd;
}

void replace_file(const std::string &target, const std::string &bytes) {
  rename_temp_file(write_temp_file(target, bytes), target);
}

std::string write_temp_file(const std::string &target, const std::string &bytes) {
  std::string tmp;
  const int fd = create_temp_file(target, &tmp);
  auto bail = [&](const char *step) {
    int e = errno;
    ::close(fd);
    remove_temp_file(tmp);
    fail(Status::io_error, "cannot write '", target, "': ", step, ": ", std::strerror(e));
  };
  try {
    write_all(fd, bytes.data(), bytes.size(), tmp);
  } catch (...) {
    ::close(fd);
    remove_temp_file(tmp);
    throw;
  }
  if (::fsync(fd) != 0) bail("fsync");
  if (::close(fd) != 0) {
    int e = errno;
    remove_temp_file(tmp);
    fail(Status::io_error, "cannot write '", target, "': close: ", std::strerror(e));
  }
  return tmp;
}

void write_file_atomic(const std::string &path, const std::string &bytes, const char *what,
                       OutputKind kind) {
  replace_file(output_target(path, what, kind), bytes);
}

}  // namespace ptdp
