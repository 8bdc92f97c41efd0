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
#include "engine/core/process_lock.h"
#include "engine/core/status.h"
#include "engine/core/text.h"
#include "engine/core/temp_files.h"
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
    // HDF5's signature opens the file (ptdp writes no user block); a save
    // killed at its creation leaves it empty. Parallel HDF5 writes the data
    // first and the signature with the metadata at the close: a save killed
    // before that (under mpirun) left zeros there, and only in iter_N.tmp,
    // where an unfinished save's file lives (called no save's, its .tmp
    // stopped every resume).
    static const char kHdf5Signature[] = "\x89HDF\r\n\x1a\n";
    if (st.st_size == 0) return true;
    const std::string head = head_bytes(path, 8, &size);
    if (head == std::string(kHdf5Signature, 8)) return true;
    bool tmp = false;
    const std::string dir = std::filesystem::path(path).parent_path().filename().string();
    return head == std::string(8, '\0') && checkpoint_iteration(dir, &tmp) >= 0 && tmp;
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
  refuse_blank_name(dir, what);
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
      const std::string idx = target.substr(0, target.size() - 4) + ".idx";
      const std::string magic("MMIDIDX\0\0", 9);
      off_t idx_size = 0;
      if (head_bytes(idx, 9, &idx_size) == magic) return true;
      // ... or the writer's temporary of it (idx.tmp.XXXXXX, mkstemp's name):
      // a writer killed between its two renames (the .bin goes first) left
      // the pair half in place, which the same command finishes.
      namespace fs = std::filesystem;
      const fs::path dir = fs::path(idx).parent_path(), name = fs::path(idx).filename();
      const std::string stem = name.string() + ".tmp.";
      std::error_code ec;
      for (fs::directory_iterator it(dir.empty() ? fs::path(".") : dir, ec), end; !ec && it != end;
           it.increment(ec)) {
        const std::string n = it->path().filename().string();
        if (n.size() == stem.size() + 6 && n.compare(0, stem.size(), stem) == 0 &&
            it->symlink_status(ec).type() == fs::file_type::regular &&
            head_bytes(it->path().string(), 9, &idx_size) == magic)
          return true;
      }
      return false;
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
  refuse_blank_name(path, what);
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

void write_file_atomic(const std::string &path, const std::string &bytes, const char *what,
                       OutputKind kind) {
  replace_file(output_target(path, what, kind), bytes);
}

}  // namespace ptdp
