// Where the engine's writers put a user's output file. They all write a
// temporary file and rename it over the target, which would replace whatever
// is there: a device node (/dev/null), a FIFO, a directory's entry, or a
// symbolic link. The rules here keep the user's files what they were.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace ptdp {

// What a writer writes. A writer replaces only a file of its own kind (its
// earlier output: the format's first bytes say so) or an empty one; anything
// else at the path (a user's notes, a dataset, a model, the program itself)
// is refused by output_target, whatever the writer and whatever the file.
// `any` is for a script's own small files (ptdp_write_file), whose kind the
// script alone knows.
enum class OutputKind {
  ptdp_dataset,    // "PTDPTOK\0"
  megatron_index,  // "MMIDIDX\0\0"
  megatron_data,   // a .bin: replaced only beside its Megatron .idx
  safetensors,     // u64 header length, then '{'
  json,            // one JSON object (an export's config.json)
  metrics_log,     // --log-json: a first line that is the run record {"kind": "run", ...}
  trace,           // --timeline's Chrome trace: {"displayTimeUnit":"ms","traceEvents":[
  machine,         // plan --save-machine's JSON: name, devices_per_node, peak_flops
  png,             // the PNG signature
  op_profile,      // --profile-ops' text: "rank N (...) on ..., iteration N"
  any,
};
// "a metrics log ...", for messages; and the key a script names it by
// ("metrics_log"), output_kind_of_key's inverse (Error(invalid_argument) for others).
const char *output_kind_name(OutputKind kind);
const char *output_kind_key(OutputKind kind);
OutputKind output_kind_of_key(const std::string &key);

// The path to rename the finished output onto:
//  - nothing there: `path`, when its directory exists (else Error(io_error));
//  - a regular file: `path` (replaced whole);
//  - a symbolic link to a regular file: the file it points to (the link stays);
//  - anything else (a directory, a device node, a FIFO, a socket, a dangling
//    link): Error(invalid_argument) naming it, and nothing is written;
//  - a non-empty file not of `kind`: Error(invalid_argument) naming it.
// `what` names the output in the message ("--timeline", "tokenize output").
std::string output_target(const std::string &path, const char *what, OutputKind kind);

// output_target, and that a file can be made there (the writer's temporary,
// made and removed now): a name too long for it, or a directory no file can
// be made in (/proc, /sys, read-only), is refused. For the checks made before
// any work (a run's per-step outputs, a script's ptdp_check_output) and for
// a writer that appends (no temporary of its own to fail first); a writer
// that renames makes its temporary at once and needs no probe.
std::string check_output_file(const std::string &path, const char *what, OutputKind kind);

// Whether the plain file at `path` holds what a save writes under its name: a
// manifest.json naming ptdp's format, a model.h5 opening with HDF5's
// signature (or empty: a save killed as it made it). A user's file of either
// name (a web app's manifest, notes saved as model.h5) is not a save's, and no
// save or rotation replaces or removes it.
bool holds_save_contents(const std::string &path);

// A checkpoint directory's files are written by a save only (ARCHITECTURE §5):
// Error(invalid_argument) naming `what` when `path` lies inside a directory
// named as a checkpoint's (iter_0001000, its .tmp or .old), through any
// spelling or link; with is_dir, also when `path` is itself so named. Every
// output_target() applies it (and refuses a checkpoint root's tracker
// "latest"); a checkpoint writer applies it to its root, so that checkpoints
// never nest.
void refuse_inside_checkpoint(const std::string &path, const char *what, bool is_dir);

// A directory an output tree goes into (a --save root), checked before
// anything is made: not empty, not inside or named as a checkpoint directory,
// no link to nothing and nothing but directories on the way; Error naming
// `what`, the path and the part that is wrong. What is not there yet is fine.
void check_output_directory(const std::string &dir, const char *what);

// An entry of this process's registry of files (an input read, an output
// claimed), held for as long as the handle lives; movable, not copyable.
class FileRegistration {
 public:
  FileRegistration() = default;
  ~FileRegistration() { release(); }
  FileRegistration(FileRegistration &&o) noexcept : id_(o.id_) { o.id_ = 0; }
  FileRegistration &operator=(FileRegistration &&o) noexcept;
  FileRegistration(const FileRegistration &) = delete;
  FileRegistration &operator=(const FileRegistration &) = delete;

 protected:
  void release();
  uint64_t id_ = 0;  // 0: nothing registered
};

// A file this process reads as an input of a run or command (a dataset, a
// tokenizer's files, a loaded checkpoint's files), known by identity (device
// and inode: through symbolic and hard links, whatever the spelling) for as
// long as the InputFile lives. output_target() refuses every one of them, so
// the rule "an output is never an input of the same run" holds for every
// writer in one place. A path that does not exist registers nothing.
class InputFile : public FileRegistration {
 public:
  InputFile() = default;
  // `what` names the input in the refusal ("dataset", "--vocab-file").
  InputFile(const std::string &path, const std::string &what);
};

// An output a run will write (its --timeline, say) for as long as the claim
// lives: output_target() refuses it to every other writer (what differs), so
// two outputs of one run never name one file (a link or "./" included).
// Construction refuses a file another claim holds. across_processes: another
// process's claim of the file too (hold_output_for_process), for a file only
// one process writes (a per-process --timeline, a tokenize's .bin and .idx).
class OutputClaim : public FileRegistration {
 public:
  OutputClaim() = default;
  OutputClaim(const std::string &path, const std::string &what, bool across_processes = false);
};

// A lock between processes on the output file `path` (the file it names
// through links: its directory's device and inode and its name): an abstract Unix socket bound by one process at a
// time, no file made, released when its holder ends however it ends. The
// socket to keep open while the file is this process's; -1 (sockets
// unavailable: nothing to hold). Error(invalid_config) naming `what` when
// another process holds it (two runs with one --log-json mixed their records
// under one run record).
int hold_output_for_process(const std::string &path, const std::string &what);

// Whether two output paths name one file: the same file when both exist (any
// links), else the same normalized path.
bool same_output(const std::string &a, const std::string &b);

// An input of this process's run from now to its end (what it was made from:
// a tokenized corpus stays an input of the run that trains on it): `path`
// registered as by an InputFile that is never released.
void hold_input(const std::string &path, const std::string &what);

// Whether `path` (through links) is a file this process holds as an input
// (InputFile, hold_input): a cleanup leaves it alone, whatever its name.
bool is_held_input(const std::string &path);

// hold_input for a file a script names, checked first without opening it (a
// FIFO would block the open): a readable regular file, or a link to one.
// Missing: Error(io_error) "<what> '<path>': No such file or directory"; a
// directory, FIFO, device or socket: Error(invalid_argument) naming its kind.
void hold_input_file(const std::string &path, const std::string &what);

// Writes bytes to output_target(path) atomically: a temporary file in the same
// directory, fsync, rename. Readers never see a half-written file.
void write_file_atomic(const std::string &path, const std::string &bytes, const char *what,
                       OutputKind kind);

}  // namespace ptdp
