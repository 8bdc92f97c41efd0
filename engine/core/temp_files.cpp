#include "engine/core/temp_files.h"

#include <fcntl.h>
#include <signal.h>
#include <time.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <climits>
#include <cstring>
#include <filesystem>
#include <memory>
#include <set>
#include <vector>

#include "engine/core/process_lock.h"
#include "engine/core/status.h"
#include "engine/core/text.h"

namespace ptdp {

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
  refuse_blank_name(path, "directory");
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

// When this library was loaded, on the clock file times are taken from (the
// kernel's coarse one): a directory born before is none this process made.
static const struct timespec library_loaded = [] {
  struct timespec t = {0, 0};
  ::clock_gettime(CLOCK_REALTIME_COARSE, &t);
  return t;
}();

void hold_made_directory(const std::string &dir) {
  struct stat st;
  if (::lstat(dir.c_str(), &st) != 0)
    fail(Status::io_error, "cannot hold '", dir, "': ", std::strerror(errno), " (hold a directory once made)");
  if (!S_ISDIR(st.st_mode))
    fail(Status::io_error, "cannot hold '", dir, "': it is not a directory (a link is not followed)");
  // The caller says it made it; a directory that was there before this
  // process loaded the library (a user's, empty) is refused, not removed by a
  // signal's cleanup later. Its birth time where the file system keeps one,
  // else its last status change.
  struct statx sx;
  struct timespec born = st.st_ctim;
  if (::statx(AT_FDCWD, dir.c_str(), AT_SYMLINK_NOFOLLOW, STATX_BTIME, &sx) == 0 && (sx.stx_mask & STATX_BTIME))
    born = {(time_t)sx.stx_btime.tv_sec, (long)sx.stx_btime.tv_nsec};
  if (born.tv_sec < library_loaded.tv_sec ||
      (born.tv_sec == library_loaded.tv_sec && born.tv_nsec < library_loaded.tv_nsec))
    fail(Status::io_error, "cannot hold '", dir, "': it was there before this process loaded ptdp, so ",
         "it is no directory this program made (only those are held, to be removed if the program is ",
         "interrupted)");
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
  refuse_blank_name(parent, "temporary directory's parent");
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

}  // namespace ptdp
