// The checkpoint commit protocol (ARCHITECTURE §5). A save goes into
// <root>/iter_XXXXXXX.tmp/; commit fsyncs its files, writes manifest.json last,
// renames the directory to <root>/iter_XXXXXXX and then points the tracker
// <root>/latest at it. A crash at any point leaves the previous checkpoint
// loadable: a directory counts as complete only once it has its manifest.
// One process (rank 0) runs begin/commit/prune for a root; the others only
// write their data into the directory begin_checkpoint returned.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "engine/core/checkpoint_names.h"

namespace ptdp {

// checkpoint_name(iteration), "iter_0001000": engine/core/checkpoint_names.h.

// Starts a checkpoint: creates root if needed, removes any leftover of a
// crashed save, creates <root>/iter_XXXXXXX.tmp/ and returns its path.
// Throws io_error naming the path and the OS reason when root is not a
// writable directory. Holds root for `owner` (SaveRootLock) until the commit
// or the abandon.
std::string begin_checkpoint(const std::string &root, int64_t iteration, const void *owner);

// Why a save could not replace or remove `path`, an entry of a save
// directory named as ptdp's (iter_N, iter_N.tmp, iter_N.old, latest): "" when
// it may (absent, a complete checkpoint, a tracker, a leftover holding only
// what saves make, an iter_N.old a removal marked), else the reason. A save
// never removes anything else: not a symbolic link of any of those names.
// With `replaced` (a save of its very iteration), a complete checkpoint too
// must hold only what saves make (a swapped-out one holding a user's file
// stayed under its .tmp name, where every later save of it stopped).
std::string save_name_problem(const std::string &path, bool replaced = false);

// Every entry of root save_name_problem objects to, before a run trains:
// Error(io_error) naming the first and the reason (nothing when root is not
// there yet). A save would otherwise stop at that name after the training.
void check_save_root(const std::string &root);

// The first entry of `dir` named as a save directory's (the tracker, iter_N,
// its .tmp or .old): "" when there is none (or no dir). A tree that is not a
// save (an export's model directory) never goes among them.
std::string first_save_entry(const std::string &dir);

// A writer's hold on a save directory while it lives: another writer saving
// there at the same time is refused (two runs would replace and prune each
// other's checkpoints, one of them reporting the other's as its own, and two
// saves of one iteration would remove each other's unfinished directory).
// Another process is told by flock on the directory itself, so no file is
// made; within a process, by `owner`: the holds of one owner (a trainer's for
// its life and those of its saves) share it, any other owner is refused. A
// null owner is a one-off writer (an import), which shares with nothing. The
// directory must exist.
class SaveRootLock {
 public:
  SaveRootLock() = default;
  SaveRootLock(const std::string &root, const void *owner);
  ~SaveRootLock();
  SaveRootLock(const SaveRootLock &) = delete;
  SaveRootLock &operator=(const SaveRootLock &) = delete;

 private:
  uint64_t dev_ = 0, ino_ = 0;
  bool held_ = false;
};

// Removes the unfinished <root>/iter_XXXXXXX.tmp/ of a failed save (best
// effort, never throws), so that a full disk gets its space back.
void abandon_checkpoint(const std::string &root, int64_t iteration) noexcept;

// Completes it: fsyncs every file in the tmp directory, writes manifest_json as
// manifest.json (last, fsynced), fsyncs the directory, renames it to
// <root>/iter_XXXXXXX (an existing one of that name is swapped out, then
// removed), fsyncs root, then atomically writes the tracker <root>/latest
// ("iter_XXXXXXX\n"). Returns the final path. Throws wrong_state if
// begin_checkpoint was not called, io_error on any OS failure.
std::string commit_checkpoint(const std::string &root, int64_t iteration,
                              const std::string &manifest_json);

// The data file a save writes into its directory, beside manifest.json.
extern const char *const kCheckpointDataFile;  // "model.h5"

// The tracker file of a save directory: <root>/latest.
std::string tracker_path(const std::string &root);

// The newest complete checkpoint under root: the directory `latest` names if
// it has a manifest.json, else the highest-iteration iter_* directory (not
// *.tmp) that has one. `why` (optional) says which rule chose it:
// "from the tracker 'latest'" or "newest complete directory; the tracker was
// missing" / "... was stale: ...". Throws io_error naming root and listing what
// is there (e.g. "iter_0000200.tmp is an unfinished save") when there is none.
std::string find_latest_checkpoint(const std::string &root, std::string *why = nullptr);

// Every complete checkpoint under root (an iter_N directory with its
// manifest.json), highest iteration first; none (or no root): empty. Throws
// io_error naming root when it cannot be listed.
std::vector<std::string> complete_checkpoints(const std::string &root);

// Keep-last-K retention (keep_last >= 0, else bad_value): removes complete
// iter_* directories older than the newest keep_last (none with 0: every one is
// kept), never the one `latest` names, and *.tmp directories older than the
// newest complete checkpoint (a save killed outright, SIGKILL, leaves one). A
// complete one is marked (a "removing" file) and renamed iter_N.old before its
// files go, and marked iter_N.old leftovers (a removal cut short) are finished
// first, so a kill mid-removal never leaves an iter_N without its manifest. A
// link, a directory holding a file no save made, an unmarked iter_N.old (a
// user's copy) and other directories without a manifest are left alone, and
// so is a complete checkpoint for which not_this_runs (when given) names a
// reason: rotation removes only the saving run's checkpoints, never another
// run's copied in (it still counts as kept). Returns the removed paths.
// saved: the iteration the save just made (-1: none); a complete checkpoint
// newer than it (a line a rewind left) is neither counted nor removed: kept,
// and said once (this run's saves replace it if they reach its iteration).
std::vector<std::string> prune_checkpoints(
    const std::string &root, int keep_last,
    const std::function<std::string(const std::string &dir)> &not_this_runs = {}, int64_t saved = -1);

}  // namespace ptdp
