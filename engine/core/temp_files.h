// The temporary files and directories a process makes on its way to an
// output (a writer's X.tmp.XXXXXX, a save's iter_N.tmp, a made directory, a
// script's work tree), and the signal cleanup that removes them, and only
// them, when the process is interrupted. Where outputs may go is
// output_file.h's concern; this is how they get there.
#pragma once
#include <cstddef>
#include <string>
#include <utility>
#include <vector>

namespace ptdp {

// A new, empty file of this process's own beside `target` (same directory:
// a rename moves it into place), named target + ".tmp.XXXXXX" and created
// exclusively (mkstemp), so it never opens, truncates or follows whatever is
// already there (a file, a symbolic link, a FIFO, a device); mode 0644. Every
// writer's temporary file comes from here. Returns the open descriptor; the
// name goes to *tmp. An error is Error(io_error) naming `target`.
int create_temp_file(const std::string &target, std::string *tmp);

// A temporary file's end: renamed over `target`, or removed. Either way it
// leaves the list of temporary files that a fatal signal's cleanup removes.
// rename_temp_file's error is Error(io_error) naming both paths (the
// temporary file is then removed).
void rename_temp_file(const std::string &tmp, const std::string &target);
void remove_temp_file(const std::string &tmp);

// Puts a set of temporaries (temporary, target) in place, in order, in one
// UninterruptedStep (an interrupt leaves all or none). new_only: a target
// that is there by then (another command made it since this one checked) is
// not replaced: the files of the set already placed are taken back and the
// call fails naming it. Then every target must still be the file this call
// put there: another command writing the same outputs at the same moment
// left a mix of both sets (one tokenize's .bin beside the other's .idx, one
// export's config.json beside the other's weights), which is an
// Error(io_error) naming the file, never a silent success. `what` names the
// command's outputs ("tokenize output 'P'").
void put_in_place(const std::vector<std::pair<std::string, std::string>> &temps,
                  const std::string &what, bool new_only = false);

// A directory this process makes, and may fill with files of known names (a
// checkpoint's iter_N.tmp): made (its parent must exist) and, until
// release_temp_directory, held for the signal cleanup below, which removes
// those files, then the directory if it is then empty and still the one made
// (device and inode: another put at its path is not). Only the named files:
// nothing else is ever removed. false when a directory is already there (not
// held: not this process's); Error(io_error) when it cannot be made.
bool make_held_directory(const std::string &dir, const std::vector<std::string> &names = {});
// Each missing directory of path made so (parents first); returns those it
// made, deepest first. On an error, what it made is removed again.
std::vector<std::string> make_held_directories(const std::string &path);
// A directory just made by the caller, held so by its identity now (the C
// ABI's ptdp_hold_made_directory). Error(io_error) when none is there.
void hold_made_directory(const std::string &dir);
void release_temp_directory(const std::string &dir, const std::vector<std::string> &names);
// Released, and removed while empty if it is still the directory made (a
// made directory that the caller no longer needs).
void unmake_directory(const std::string &dir);

// A new directory parent/prefixXXXXXX of this process's own (mkdtemp), held
// whole on the signal cleanup's list: an interrupted run removes it with all
// it holds, following no link, while it is still the directory made (device
// and inode). remove_temp_tree removes it so, and only such a directory;
// Error naming what was left when something stays. A script's work directory.
std::string make_temp_tree(const std::string &parent, const std::string &prefix);
void remove_temp_tree(const std::string &dir);

// A step the signal cleanup below must not cut into (a checkpoint's last
// renames: its files must not vanish between them): the cleanup waits for it
// (up to 10 s) before it removes anything. enter_uninterrupted() returns
// false, having entered nothing, once the cleanup has begun (the process is
// ending: do not start the step); else call leave_uninterrupted() after it.
bool enter_uninterrupted();
void leave_uninterrupted();

// enter_uninterrupted() for a scope: Error(io_error) "<what>: the process is
// ending" when the cleanup has begun.
class UninterruptedStep {
 public:
  explicit UninterruptedStep(const std::string &what);
  ~UninterruptedStep() { leave_uninterrupted(); }
  UninterruptedStep(const UninterruptedStep &) = delete;
  UninterruptedStep &operator=(const UninterruptedStep &) = delete;
};

// For programs (the ptdp launcher), not for a library inside someone else's
// process: a signal whose default ends it (SIGINT, SIGTERM, SIGHUP, SIGPIPE,
// SIGQUIT, SIGALRM, SIGUSR1/2, SIGPROF, SIGVTALRM, SIGXCPU) removes this process's temporary files
// that are not yet renamed (create_temp_file's), then end it as the signal
// would have, so that an interrupted command leaves no "X.tmp.XXXXXX" behind.
// A handler installed later (--exit-signal-handler's) passes a signal on to
// this one when it ends the process. SIGXFSZ (a file past ulimit -f) is
// ignored, so that such a write fails (EFBIG) and is reported as any other.
void remove_temp_files_on_signal();

// Writes all n bytes to fd (retrying short and interrupted writes); an error
// is Error(io_error) naming `path`.
void write_all(int fd, const void *p, size_t n, const std::string &path);

// Puts bytes at `target` whole and durably: a fresh temporary file beside it
// (create_temp_file), fsynced, renamed over it. Readers never see a
// half-written file; a link at `target` is replaced, not followed. No checks
// of the target (write_file_atomic makes them): for paths the caller owns.
void replace_file(const std::string &target, const std::string &bytes);
// Its first half: bytes in a fresh temporary file beside `target`, fsynced and
// closed, its name returned for rename_temp_file (or remove_temp_file). For
// outputs put in place together (one UninterruptedStep for their renames).
std::string write_temp_file(const std::string &target, const std::string &bytes);

}  // namespace ptdp
