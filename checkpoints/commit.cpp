// The checkpoint commit protocol: POSIX calls for everything whose ordering
// matters (open/write/fsync/rename), std::filesystem only to list and remove.
#include "checkpoints/commit.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <set>

#include "checkpoints/disk_bandwidth.h"
#include "engine/core/checkpoint_names.h"
#include "engine/core/output_file.h"
#include "engine/core/temp_files.h"
#include "engine/core/mapped_file.h"
#include "engine/core/status.h"
#include "engine/core/utf8.h"

namespace fs = std::filesystem;

namespace ptdp {
namespace {

const char *kManifest = kCheckpointManifest;
// Put into a checkpoint directory before a removal renames it iter_N.old (a
// rotation, a commit's fallback swap): only a directory so marked is a
// removal to finish, so a user's own copy named iter_N.old is never removed.
const char *kRemovalMark = "removing";
}  // namespace
const char *const kCheckpointDataFile = kCheckpointData;
namespace {
const char *kTracker = kCheckpointTracker;

[[noreturn]] void os_fail(const char *what, const std::string &path, int err) {
  fail(Status::io_error, "cannot ", what, " '", path, "': ", std::strerror(err));
}

std::string join(const std::string &dir, const std::string &name) {
  return (fs::path(dir) / name).string();
}

bool exists(const std::string &path) {
  struct stat st;
  return ::lstat(path.c_str(), &st) == 0;
}

bool is_dir(const std::string &path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// (A link is none: a save makes none, and a load refuses one.)
bool has_manifest(const std::string &dir) {
  struct stat st;
  return ::lstat(join(dir, kManifest).c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

void fsync_path(const std::string &path, bool dir) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | (dir ? O_DIRECTORY : 0));
  if (fd < 0) os_fail("open (to fsync)", path, errno);
  if (::fsync(fd) != 0) {
    int e = errno;
    ::close(fd);
    os_fail("fsync", path, e);
  }
  if (::close(fd) != 0) os_fail("close", path, errno);
}

// The directories begin_checkpoint made for a root (by its absolute, normal
// path), held for the signal cleanup until the commit. Only those are
// released: a directory above that the caller made and holds (ptdp.mkdirs
// of a benchmark's --dir) stays its own (a commit released every ancestor,
// and an interrupted benchmark left the empty --dir it had made).
std::mutex made_roots_mutex;
std::map<std::string, std::vector<std::string>> made_roots;

std::string root_key(const std::string &root) {
  std::error_code ec;
  return fs::absolute(root, ec).lexically_normal().string();
}

void hold_made_roots(const std::string &root, const std::vector<std::string> &made) {
  if (made.empty()) return;
  std::lock_guard<std::mutex> lock(made_roots_mutex);
  std::vector<std::string> &held = made_roots[root_key(root)];
  held.insert(held.end(), made.begin(), made.end());
}

// Takes the directories begin_checkpoint made for root off the signal
// cleanup's list: they hold a checkpoint now.
void release_made_roots(const std::string &root) {
  std::vector<std::string> made;
  {
    std::lock_guard<std::mutex> lock(made_roots_mutex);
    auto it = made_roots.find(root_key(root));
    if (it == made_roots.end()) return;
    made.swap(it->second);
    made_roots.erase(it);
  }
  for (const std::string &d : made) release_temp_directory(d, {});
}

// The files a save makes under their own names (held for the signal cleanup).
const std::vector<std::string> &save_files() {
  static const std::vector<std::string> names = {kManifest, kCheckpointDataFile};
  return names;
}

// Whether a file of a checkpoint directory is one a save makes: the manifest,
// the data file, or the manifest's temporary (create_temp_file's
// manifest.json.tmp.XXXXXX, left by a save killed while writing it).
// (The manifest's temporary: exactly create_temp_file's name, six characters
// of mkstemp's after "manifest.json.tmp.", not any name that begins so.)
bool made_by_a_save(const std::string &name) {
  const std::string tmp = std::string(kManifest) + ".tmp.";
  const bool temporary = name.size() == tmp.size() + 6 && name.compare(0, tmp.size(), tmp) == 0 &&
                         std::all_of(name.begin() + (long)tmp.size(), name.end(),
                                     [](char c) { return std::isalnum((unsigned char)c); });
  return name == kManifest || name == kCheckpointDataFile || name == kRemovalMark || temporary;
}

// The first file of directory `path` that no save made ("" when there is
// none), listing the save's temporaries into *others when given. With
// `replaced` (a save of that very iteration puts its new copy in place), a
// file this run read from it is the save's own too: the run loaded that
// checkpoint and holds its files open, so removing the old copy takes nothing
// from it (kept, the old copy stayed under the save's .tmp name, in the way
// of every later save of the iteration).
std::string foreign_file(const std::string &path, std::vector<std::string> *others = nullptr,
                         bool replaced = false) {
  std::error_code ec;
  for (fs::directory_iterator it(path, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    // (A file this run reads is never a save's leftover, whatever its name;
    // nor is a manifest.json or model.h5 that does not hold what a save writes.)
    const bool named = name == kManifest || name == kCheckpointDataFile;
    const bool ours = made_by_a_save(name) && it->symlink_status(ec).type() == fs::file_type::regular &&
                      (replaced || !is_held_input(it->path().string())) &&
                      (!named || holds_save_contents(it->path().string()));
    if (!ours) return it->path().string();
    if (others && name != kManifest && name != kCheckpointDataFile) others->push_back(name);
  }
  if (ec) fail(Status::io_error, "cannot list '", path, "': ", ec.message());
  return "";
}

// Why the file foreign_file found keeps its directory, to follow "it ".
std::string foreign_reason(const std::string &file) {
  return "holds '" + file + "', which " +
         (is_held_input(file) ? "this run reads" : "no save made");
}

// Why a save could not remove `path` (a checkpoint directory's name: final,
// .tmp or .old) as its own: "" when it may (absent, or a directory holding
// only what saves make, and for .old the removal mark), else the reason, to
// follow "'<path>' ". Nothing a save did not make is ever removed: not a
// user's file in it, not a symbolic link in its place, not a user's copy of a
// checkpoint named iter_N.old.

std::string not_removable(const std::string &path, bool replaced = false) {
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) return "";
  if (S_ISLNK(st.st_mode)) return "is a symbolic link, which no save makes";
  if (!S_ISDIR(st.st_mode)) return "is not a directory";
  if (const std::string foreign = foreign_file(path, nullptr, replaced); !foreign.empty())
    return foreign_reason(foreign);
  bool old = false;
  if (checkpoint_dir_name(fs::path(path).filename().string(), &old) && old &&
      !exists(join(path, kRemovalMark)))
    return std::string("is not a removal a save began (it has no '") + kRemovalMark +
           "' mark), so someone's copy";
  return "";
}

// Removes a checkpoint directory (final, .tmp or .old) if not_removable says
// it may, the manifest first, so a removal cut short leaves no
// complete-looking directory; else removes nothing and returns the reason.
std::string remove_save_dir(const std::string &path, bool replaced = false) {
  if (std::string why = not_removable(path, replaced); !why.empty()) return why;
  if (!exists(path)) return "";
  std::vector<std::string> others;  // the temporaries and the mark, after the manifest and data
  foreign_file(path, &others, replaced);
  for (const char *name : {kManifest, kCheckpointDataFile})
    if (std::remove(join(path, name).c_str()) != 0 && errno != ENOENT)
      os_fail("remove", join(path, name), errno);
  for (const std::string &name : others)
    if (std::remove(join(path, name).c_str()) != 0 && errno != ENOENT)
      os_fail("remove", join(path, name), errno);
  if (::rmdir(path.c_str()) != 0) os_fail("remove", path, errno);
  return "";
}

void rename_or_fail(const std::string &from, const std::string &to) {
  if (std::rename(from.c_str(), to.c_str()) != 0)
    fail(Status::io_error, "cannot rename '", from, "' to '", to, "': ", std::strerror(errno));
}

struct Entry {
  int64_t iter;
  std::string name;
  bool tmp, complete;
  bool link;  // a symbolic link someone put there: loaded through, never deleted
};

// The iter_* directories of root, newest first (a final before its .tmp).
std::vector<Entry> scan(const std::string &root) {
  std::vector<Entry> out;
  std::error_code ec;
  fs::directory_iterator it(root, ec), end;
  for (; !ec && it != end; it.increment(ec)) {
    std::string name = it->path().filename().string();
    Entry e{0, name, false, false, false};
    e.iter = checkpoint_iteration(name, &e.tmp);
    if (e.iter < 0 || !is_dir(it->path().string())) continue;
    e.link = it->is_symlink(ec);
    if (ec) break;
    e.complete = !e.tmp && has_manifest(it->path().string());
    out.push_back(e);
  }
  if (ec) fail(Status::io_error, "cannot list checkpoint directory '", root, "': ", ec.message());
  std::sort(out.begin(), out.end(), [](const Entry &a, const Entry &b) {
    return a.iter != b.iter ? a.iter > b.iter : a.tmp < b.tmp;
  });
  return out;
}

// What is wrong with a directory's manifest ("" when it is a regular file):
// one that is there but no regular file (a FIFO, a link to a device) is named
// as such ("has no manifest.json" was wrong).
std::string manifest_problem(const std::string &dir) {
  struct stat st;
  if (::lstat(join(dir, kManifest).c_str(), &st) != 0) return std::string("has no ") + kManifest;
  if (S_ISLNK(st.st_mode)) return std::string("has a ") + kManifest + " that is a symbolic link (a save makes none)";
  return S_ISREG(st.st_mode) ? "" : std::string("has a ") + kManifest + " that is not a regular file";
}

std::string describe(const Entry &e, const std::string &root) {
  if (e.tmp) return e.name + " is an unfinished save";
  if (e.complete) return e.name + " is complete";
  return e.name + " " + manifest_problem(join(root, e.name)) + " (damaged)";
}

// The tracker's one line, white space around it dropped; "" when it is not one
// line, *why (optional) saying what it is instead (unreadable, too large, more
// lines: a second line was ignored in silence).
std::string tracker_line(const std::string &path, std::string *why = nullptr) {
  std::string text;
  try {
    text = read_small_file(path, "tracker '" + path + "'", "", 4096);  // a FIFO there: not read
  } catch (const Error &e) {
    if (why) *why = e.what();
    return "";
  }
  // White space around the name dropped, as Megatron's reader strips it (a
  // leading space made the hand-edited tracker stale to a load and foreign
  // to a save).
  while (!text.empty() && std::isspace((unsigned char)text.back())) text.pop_back();
  text.erase(0, std::min(text.size(), text.find_first_not_of(" \t\r\n\v\f")));
  if (text.find('\n') != std::string::npos) {
    if (why)
      *why = "it holds more than one line (the first: '" +
             printable_message(text.substr(0, std::min<size_t>(text.find('\n'), 64))) + "')";
    return "";
  }
  return text;
}

// Whether a tracker line names a checkpoint directory (iter_NNNNNNN, not .tmp).
bool names_a_checkpoint(const std::string &name) {
  bool tmp;
  return checkpoint_iteration(name, &tmp) >= 0 && !tmp;
}

// The complete checkpoint the tracker names, or "" with *stale saying why not.
std::string tracked(const std::string &root, std::string *stale) {
  std::string path = join(root, kTracker);
  if (::access(path.c_str(), R_OK) != 0) {
    *stale = ::access(path.c_str(), F_OK) == 0 ? "stale: cannot read '" + path + "'" : "missing";
    return "";
  }
  struct stat st;
  if (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {  // (never opened: a FIFO would block)
    const char *kind = S_ISDIR(st.st_mode)    ? "a directory"
                       : S_ISFIFO(st.st_mode) ? "a FIFO"
                                              : "not a plain file";
    *stale = "stale: '" + path + "' is " + kind + ", not a one-line file naming a checkpoint";
    return "";
  }
  std::string why;
  const std::string name = tracker_line(path, &why);
  if (!why.empty()) {
    *stale = "stale: " + why;
    return "";
  }
  if (!names_a_checkpoint(name)) {
    *stale = "stale: it holds '" + printable_message(name) + "', which is not a checkpoint name like "
             "iter_0001000";  // (a NUL in it had cut the report printed through %s)
    return "";
  }
  std::string dir = join(root, name);
  if (!is_dir(dir)) *stale = "stale: it names '" + name + "', which does not exist";
  else if (!has_manifest(dir)) *stale = "stale: it names '" + name + "', which " + manifest_problem(dir);
  else return name;
  return "";
}

// Marks a checkpoint directory as a removal a save began (kRemovalMark);
// false (errno set) when the mark cannot be made.
bool mark_for_removal(const std::string &dir) {
  const int fd = ::open(join(dir, kRemovalMark).c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return false;
  ::close(fd);
  return true;
}

// Puts the complete tmp directory in place as final. Returns the path that
// now holds a replaced older copy (to be removed), or "" if there was none.
std::string put_in_place(const std::string &tmp, const std::string &final_dir) {
  if (!exists(final_dir)) {
    rename_or_fail(tmp, final_dir);
    return "";
  }
  // Swapping the two names in one step means no moment without final_dir.
  if (::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, final_dir.c_str(), RENAME_EXCHANGE) == 0)
    return tmp;
  if (errno != EINVAL && errno != ENOSYS && errno != EOPNOTSUPP)
    fail(Status::io_error, "cannot swap '", tmp, "' with '", final_dir, "': ", std::strerror(errno));
  // The file system cannot swap: move the old copy aside first, marked as a
  // removal, then rename. A crash between the two leaves <name>.old, which the
  // next commit or rotation removes.
  std::string aside = final_dir + ".old";
  const std::string why = remove_save_dir(aside);
  if (!why.empty()) fail(Status::io_error, "'", aside, "' ", why, ": move it away");
  if (!mark_for_removal(final_dir)) os_fail("mark for removal", final_dir, errno);
  rename_or_fail(final_dir, aside);
  rename_or_fail(tmp, final_dir);
  return aside;
}

}  // namespace

std::string tracker_path(const std::string &root) { return join(root, kTracker); }

namespace {

// A complete checkpoint directory (not a link): its manifest is there.
bool complete_dir(const std::string &path) {
  struct stat st;
  return ::lstat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode) && has_manifest(path);
}

}  // namespace

std::string save_name_problem(const std::string &path, bool replaced) {
  const std::string name = fs::path(path).filename().string();
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) return "";
  if (name == kTracker) {
    // The commit replaces the tracker: only a tracker (a checkpoint's name on
    // one line). Anything else of that name is the user's: a dataset saved as
    // 'latest', or a link, which no save makes (the commit had replaced a
    // user's link to their notes with a file).
    if (S_ISLNK(st.st_mode)) return "is a symbolic link, which no save makes";
    const bool tracker_like = S_ISREG(st.st_mode) && st.st_size <= 64 &&
                              names_a_checkpoint(tracker_line(path));
    return tracker_like ? "" : "exists and is not a checkpoint tracker (one line naming an iter_N "
                               "directory)";
  }
  bool old = false, tmp = false;
  if (!checkpoint_dir_name(name, &old)) return "";
  checkpoint_iteration(name, &tmp);
  // A complete checkpoint (not a link: no save makes one) is a save's to
  // replace; anything else of a checkpoint's name only if it holds nothing
  // but what saves make.
  if (!old && !tmp && complete_dir(path) && !replaced) return "";
  return not_removable(path, replaced && !old && !tmp);
}

namespace {
struct HeldRoot {
  int fd;
  int holders;
  const void *owner;
};
std::mutex held_roots_mutex;
std::map<std::pair<uint64_t, uint64_t>, HeldRoot> held_roots;  // (device, inode): this process's

// begin_checkpoint's holds, by the save's .tmp directory, until its commit or abandon.
std::mutex save_holds_mutex;
std::map<std::string, std::unique_ptr<SaveRootLock>> save_holds;
void release_save_hold(const std::string &tmp) noexcept {
  std::lock_guard<std::mutex> g(save_holds_mutex);
  save_holds.erase(tmp);
}
}  // namespace

SaveRootLock::SaveRootLock(const std::string &root, const void *owner) {
  struct stat st;
  if (::stat(root.c_str(), &st) != 0) os_fail("lock the save directory", root, errno);
  std::lock_guard<std::mutex> g(held_roots_mutex);
  const std::pair<uint64_t, uint64_t> key{(uint64_t)st.st_dev, (uint64_t)st.st_ino};
  if (auto it = held_roots.find(key); it != held_roots.end()) {
    if (!owner || it->second.owner != owner)
      fail(Status::invalid_config, "save directory '", root, "' is being saved into by another "
           "trainer or writer of this process: two writers saving into one directory replace "
           "and prune each other's checkpoints; save elsewhere, or wait until that one is done");
    it->second.holders++;
  } else {
    const int fd = ::open(root.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) os_fail("open the save directory", root, errno);
    // A file system without locks (some NFS mounts) gives another error: the
    // run goes on without the hold rather than not at all.
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0 && errno == EWOULDBLOCK) {
      ::close(fd);
      fail(Status::invalid_config, "save directory '", root, "' is being saved into by another process (a "
           "run still going): two runs saving into one directory replace and prune each other's "
           "checkpoints; save elsewhere, or wait until that run ends");
    }
    held_roots[key] = {fd, 1, owner};
  }
  dev_ = key.first;
  ino_ = key.second;
  held_ = true;
}

SaveRootLock::~SaveRootLock() {
  if (!held_) return;
  std::lock_guard<std::mutex> g(held_roots_mutex);
  auto it = held_roots.find({dev_, ino_});
  if (it != held_roots.end() && --it->second.holders == 0) {
    ::close(it->second.fd);  // (the lock goes with it)
    held_roots.erase(it);
  }
}

void check_save_root(const std::string &root) {
  std::error_code ec;
  if (!fs::is_directory(root, ec)) return;
  for (fs::directory_iterator it(root, ec), end; !ec && it != end; it.increment(ec))
    if (const std::string why = save_name_problem(it->path().string()); !why.empty())
      fail(Status::io_error, "--save '", root, "': '", it->path().string(), "' ", why,
           "; a save could not replace it (a save directory's iter_N, iter_N.tmp, iter_N.old "
           "and latest names are ptdp's to write and remove): move it away or save elsewhere");
  if (ec) fail(Status::io_error, "cannot list '", root, "': ", ec.message());
}

std::string begin_checkpoint(const std::string &root, int64_t iteration, const void *owner) {
  std::string tmp = join(root, checkpoint_name(iteration) + ".tmp");
  refuse_inside_checkpoint(root, "checkpoint root", true);  // checkpoints never nest
  if (exists(root) && !is_dir(root))
    fail(Status::io_error, "checkpoint directory '", root, "' exists but is not a directory");
  // The directories this save makes for its root (an import's) go too if the
  // save is interrupted while they are still empty (the commit releases them).
  try {
    hold_made_roots(root, make_held_directories(root));
  } catch (const Error &e) {
    fail(Status::io_error, "checkpoint directory '", root, "': ", e.what());
  }
  if (::access(root.c_str(), W_OK) != 0) os_fail("write into checkpoint directory", root, errno);
  // Not into a directory another writer is saving into (an import into a
  // running trainer's --save lost the trainer's final checkpoint; two trainers
  // of one process saving one iteration committed a damaged checkpoint); the
  // owner's own hold (its trainer's) is shared. Held until the commit or the
  // abandon: a trainer started meanwhile would prune this save's .tmp.
  auto hold = std::make_unique<SaveRootLock>(root, owner);
  // The commit swaps out an iter_N of the same iteration: only one that a
  // save made (complete: its manifest is there). A directory or file of that
  // name that is something else is the user's, and is not replaced.
  // The names this save will use, cleared now (before the data is written) if
  // they hold only what a save makes, else refused: a leftover of a crashed
  // save (.tmp), of a crashed fallback swap (.old, put_in_place), of a rotation
  // cut short (an iter_N without its manifest). Anything else is the user's.
  const std::string final_dir = join(root, checkpoint_name(iteration));
  for (const std::string &path : {final_dir, final_dir + ".old", tmp, tracker_path(root)})
    if (const std::string why = save_name_problem(path, path == final_dir); !why.empty())
      fail(Status::io_error, "'", path, "' ", why, ": the save of iteration ", iteration,
           " would replace it; move it away or save elsewhere");
  for (const std::string &path : {final_dir + ".old", tmp}) remove_save_dir(path);
  if (!complete_dir(final_dir)) remove_save_dir(final_dir);
  // An interrupted save (SIGINT, SIGTERM) leaves no iter_N.tmp behind: held
  // for the signal cleanup from its making. (Cleared above: one there now is
  // another writer's.)
  if (!make_held_directory(tmp, save_files())) os_fail("create", tmp, EEXIST);
  std::lock_guard<std::mutex> g(save_holds_mutex);
  save_holds[tmp] = std::move(hold);
  return tmp;
}

void abandon_checkpoint(const std::string &root, int64_t iteration) noexcept {
  try {
    const std::string tmp = join(root, checkpoint_name(iteration) + ".tmp");
    release_temp_directory(tmp, save_files());
    remove_save_dir(tmp);  // (only what the save made)
    release_save_hold(tmp);
  } catch (...) {
  }
}

std::string commit_checkpoint(const std::string &root, int64_t iteration,
                              const std::string &manifest_json) {
  std::string name = checkpoint_name(iteration);
  std::string tmp = join(root, name + ".tmp"), final_dir = join(root, name);
  struct Release {  // begin_checkpoint's hold, however the commit ends
    const std::string &tmp;
    ~Release() { release_save_hold(tmp); }
  } release{tmp};
  if (!is_dir(tmp))
    fail(Status::wrong_state, "cannot commit checkpoint '", final_dir, "': '", tmp,
         "' does not exist; call begin_checkpoint first");
  // Data first, manifest last: a manifest on disk means all before it is too.
  std::error_code ec;
  for (fs::recursive_directory_iterator it(tmp, ec), end; !ec && it != end; it.increment(ec)) {
    fs::file_status st = it->symlink_status(ec);
    if (ec) break;
    if (fs::is_regular_file(st)) {
      fsync_path(it->path().string(), false);
      // Now clean: let the page cache go, so a large checkpoint does not push
      // out the pages training uses (it is rarely read back soon).
      release_page_cache(it->path().string());
    }
    else if (fs::is_directory(st)) fsync_path(it->path().string(), true);
  }
  if (ec) fail(Status::io_error, "cannot list '", tmp, "': ", ec.message());
  // From the manifest to the tracker, a signal's cleanup waits: it would
  // otherwise remove the files of a checkpoint being put in place.
  const UninterruptedStep step("checkpoint '" + final_dir + "' not committed");
  replace_file(join(tmp, kManifest), manifest_json);
  fsync_path(tmp, true);
  const std::string old = put_in_place(tmp, final_dir);
  release_temp_directory(tmp, save_files());
  release_made_roots(root);
  fsync_path(root, true);  // makes the rename durable
  if (!old.empty()) {
    // The previous checkpoint of this iteration, swapped out: gone, unless it
    // holds files no save made (then it stays, renamed, and the save says so).
    // The new checkpoint is in place: a cleanup that fails is only reported.
    try {
      struct stat st;
      const bool link = ::lstat(old.c_str(), &st) == 0 && S_ISLNK(st.st_mode);  // was iter_N
      const std::string why = link ? "" : remove_save_dir(old, true);
      if (link && ::unlink(old.c_str()) != 0) os_fail("remove the link", old, errno);
      if (!why.empty()) say("kept '", old, "': it ", why);
    } catch (const Error &e) {
      say("the previous copy '", old, "' stays: ", e.what());
    }
  }
  // The tracker is only a hint (the loader falls back to scanning), but it is
  // still replaced atomically so it never holds half a name.
  replace_file(join(root, kTracker), name + "\n");
  fsync_path(root, true);
  return final_dir;
}

std::string find_latest_checkpoint(const std::string &root, std::string *why) {
  std::vector<Entry> entries = scan(root);
  std::string stale, name = tracked(root, &stale);
  if (!name.empty()) {
    if (why) *why = "from the tracker 'latest'";
    return join(root, name);
  }
  std::string skipped;
  for (const Entry &e : entries) {
    if (e.complete) {
      if (why) {
        *why = "newest complete directory; the tracker was " + stale;
        if (!skipped.empty()) *why += "; skipped: " + skipped;
      }
      return join(root, e.name);
    }
    skipped += (skipped.empty() ? "" : ", ") + describe(e, root);
  }
  // Names like a checkpoint's that are none ('iter_2', 'iter_00000002': one
  // spelling per iteration) are named: "no iter_* directories" hid them.
  std::string misnamed;
  std::error_code ec;
  for (fs::directory_iterator it(root, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string n = it->path().filename().string();
    if (n.compare(0, 5, "iter_") == 0 && !checkpoint_dir_name(n))
      misnamed += (misnamed.empty() ? "'" : ", '") + n + "'";
  }
  if (!misnamed.empty())
    misnamed = "; not checkpoint names (iter_ and the iteration zero-padded to 7 digits, as " +
               checkpoint_name(2) + "): " + misnamed;
  fail(Status::io_error, "no complete checkpoint in '", root,
       "' (one is an iter_NNNNNNN directory with a ", kManifest, "); found: ",
       skipped.empty() ? "no iter_NNNNNNN directories" : skipped, misnamed);
}

std::string first_save_entry(const std::string &dir) {
  std::error_code ec;
  std::vector<std::string> names;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name == kCheckpointTracker || checkpoint_dir_name(name)) names.push_back(name);
  }
  std::sort(names.begin(), names.end());  // the same one named every time
  return names.empty() ? "" : names.front();
}

std::vector<std::string> complete_checkpoints(const std::string &root) {
  std::vector<std::string> out;
  if (!exists(root)) return out;
  for (const Entry &e : scan(root))
    if (e.complete) out.push_back(join(root, e.name));
  return out;
}

std::vector<std::string> prune_checkpoints(
    const std::string &root, int keep_last,
    const std::function<std::string(const std::string &dir)> &not_this_runs, int64_t saved) {
  if (keep_last < 0)
    fail(Status::bad_value, "keep_last must be >= 0 (0: every complete checkpoint is kept), got ",
         keep_last);
  // A removal cut short earlier (iter_N.old, below or a commit's fallback
  // swap): finished now, if it holds only what saves make.
  std::error_code ec;
  std::vector<std::string> old_copies;
  for (fs::directory_iterator it(root, ec), end; !ec && it != end; it.increment(ec)) {
    bool old = false;
    if (checkpoint_dir_name(it->path().filename().string(), &old) && old)
      old_copies.push_back(it->path().string());
  }
  for (const std::string &old : old_copies) remove_save_dir(old);  // (a user's copy stays)
  std::vector<Entry> entries = scan(root);
  std::string stale, keep_tracked = tracked(root, &stale);
  int64_t newest = -1;
  for (const Entry &e : entries)
    if (e.complete) newest = std::max(newest, e.iter);
  std::vector<std::string> removed;
  int kept = 0;
  for (const Entry &e : entries) {
    const std::string path = join(root, e.name);
    bool newer = false;  // than the save just made
    if (e.tmp) {
      if (e.iter >= newest) continue;  // a newer .tmp may be a save under way
    } else if (!e.complete || keep_last == 0) {
      continue;
    } else if (saved >= 0 && e.iter > saved) {
      newer = true;
    } else if (++kept <= keep_last || e.name == keep_tracked) {
      continue;
    }
    // Rotation deletes only directories the saves made: through a link it
    // would delete another directory's files (it still counts as kept).
    if (e.link) continue;
    // Only what the saves made: a directory holding anything else (a user's
    // file put there) is kept, and said so.
    std::string foreign;  // why rotation keeps one it would remove, said once
    if (newer)
      foreign = "is newer than this run's saves (a line a rewind left): they replace it if they "
                "reach its iteration";
    else if (const std::string file = foreign_file(path); !file.empty())
      foreign = foreign_reason(file);
    else if (e.complete && not_this_runs)
      foreign = not_this_runs(path);
    if (foreign.empty()) {
      // A complete checkpoint is first renamed to a leftover's name
      // (iter_N.old, which the next rotation removes): a removal cut short (a
      // kill between its files) never leaves an iter_N without its manifest,
      // which no later rotation would touch. Only when that name is free.
      std::string gone = path;
      // (Unmarked, it is removed under its own name.)
      if (!e.tmp && !exists(path + ".old") && mark_for_removal(path) &&
          std::rename(path.c_str(), (path + ".old").c_str()) == 0)
        gone += ".old";
      foreign = remove_save_dir(gone);
    }
    if (!foreign.empty()) {
      // Said once per directory and reason in a process (every save's
      // rotation said it again: a dozen lines in a few seconds).
      static std::mutex said_mutex;
      static std::set<std::string> said;
      const std::lock_guard<std::mutex> lock(said_mutex);
      if (said.insert(path + "\n" + foreign).second)
        say("rotation kept '", path, "': it ", foreign, " (said once)");
      continue;
    }
    // (What it removed of a save that never committed is said: it went in silence.)
    if (e.tmp)
      say("note: removed '", path, "', what a save killed before its commit left (it held only a "
          "save's files)");
    removed.push_back(path);
  }
  return removed;
}

}  // namespace ptdp
