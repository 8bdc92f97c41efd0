// The engine's writers never replace what is not a regular file, and never
// overwrite their own inputs (engine/core/output_file.h): /dev/null stays a
// device, a FIFO stays a FIFO, a link keeps pointing at its file.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>

#include <climits>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "engine/core/output_file.h"
#include "engine/core/text.h"
#include "engine/core/temp_files.h"
#include "engine/data/bpe_tokenizer.h"
#include "engine/data/corpus.h"
#include "engine/data/indexed_dataset.h"
#include "engine/data/token_source.h"
#include "engine/data/tokenizer.h"
#include "engine/train/metrics.h"
#include "tests/support/expect_error.h"
#include "tests/support/temp_dir.h"

namespace {

mode_t lmode(const std::string &path) {
  struct stat st;
  return ::lstat(path.c_str(), &st) == 0 ? st.st_mode : 0;
}

}  // namespace

TEST(OutputFile, WritesNewAndRegularFiles) {
  TempDir dir;
  const std::string p = dir.path + "/out.json";
  ptdp::write_file_atomic(p, "one", "output", ptdp::OutputKind::any);
  EXPECT_EQ(read_file(p), "one");
  ptdp::write_file_atomic(p, "two", "output", ptdp::OutputKind::any);
  EXPECT_EQ(read_file(p), "two");
}

TEST(OutputFile, RefusesDeviceNodesDirectoriesAndFifos) {
  TempDir dir;
  expect_error([] { ptdp::write_file_atomic("/dev/null", "x", "--timeline", ptdp::OutputKind::any); },
               ptdp::Status::invalid_argument, "--timeline '/dev/null' exists and is a character device");
  EXPECT_TRUE(S_ISCHR(lmode("/dev/null")));
  expect_error([&] { ptdp::write_file_atomic(dir.path, "x", "output", ptdp::OutputKind::any); }, ptdp::Status::invalid_argument,
               "is a directory: refusing to replace it");
  const std::string fifo = dir.path + "/fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
  expect_error([&] { ptdp::write_file_atomic(fifo, "x", "output", ptdp::OutputKind::any); }, ptdp::Status::invalid_argument,
               "is a FIFO");
  EXPECT_TRUE(S_ISFIFO(lmode(fifo)));
}

// A new file's directory must be there: refused before any work, not when the
// output is first written (after a training step, say).
TEST(OutputFile, RefusesAMissingOrFileDirectory) {
  TempDir dir;
  expect_error([&] { ptdp::output_target(dir.path + "/nodir/sub/x.json", "--timeline", ptdp::OutputKind::any); },
               ptdp::Status::io_error, "its directory '" + dir.path + "/nodir/sub' does not exist");
  const std::string file = dir.path + "/afile";
  ptdp::write_file_atomic(file, "x", "output", ptdp::OutputKind::any);
  expect_error([&] { ptdp::output_target(file + "/x.json", "--timeline", ptdp::OutputKind::any); }, ptdp::Status::io_error,
               "--timeline '" + file + "/x.json': Not a directory");
  EXPECT_EQ(ptdp::output_target("plain_name.json", "--timeline", ptdp::OutputKind::any), "plain_name.json");  // the cwd
}

// A file with other names (a hard link) is no output: an appending writer
// (--log-json on resume) wrote through one into another checkpoint's model.h5.
// Whether a file can be made there is tried up front (a name too long for the
// writer's temporary, a directory no file can be made in): refused before any
// work, not at the first write after a training step.
TEST(OutputFile, RefusesSharedFilesAndPlacesNoFileCanBeMade) {
  TempDir dir;
  const std::string data = dir.path + "/model.h5", log = dir.path + "/log.jsonl";
  ptdp::write_file_atomic(data, "weights", "output", ptdp::OutputKind::any);
  ASSERT_EQ(::link(data.c_str(), log.c_str()), 0);
  expect_error([&] { ptdp::output_target(log, "--log-json", ptdp::OutputKind::any); }, ptdp::Status::invalid_argument,
               "--log-json '" + log + "' has 2 names (hard links)");
  expect_error([&] { ptdp::append_json_line(log, "{}", false); }, ptdp::Status::invalid_argument,
               "has 2 names");
  EXPECT_EQ(read_file(data), "weights");
  const std::string link = dir.path + "/link.jsonl";  // a symbolic link to it: the same
  std::filesystem::create_symlink(log, link);
  expect_error([&] { ptdp::output_target(link, "--log-json", ptdp::OutputKind::any); }, ptdp::Status::invalid_argument,
               "has 2 names");
  const std::string longest = dir.path + "/" + std::string(NAME_MAX - 10, 'a');
  expect_error([&] { ptdp::check_output_file(longest, "--timeline", ptdp::OutputKind::any); }, ptdp::Status::io_error,
               "cannot create a file there");
  EXPECT_EQ(ptdp::check_output_file(dir.path + "/" + std::string(NAME_MAX - 11, 'a'), "--timeline", ptdp::OutputKind::any),
            dir.path + "/" + std::string(NAME_MAX - 11, 'a'));
  for (const auto &e : std::filesystem::directory_iterator(dir.path))  // the probes left nothing
    EXPECT_EQ(e.path().string().find(".tmp."), std::string::npos) << e.path();
}

// A process's own streams are no outputs: --log-json /dev/stdout replaced
// the file the shell sent standard output to (and the run's log in it).
TEST(OutputFile, RefusesTheProcesssStreams) {
  TempDir dir;
  // Every spelling (a sweep got //dev/fd/3 and chains of links through).
  const std::string l1 = dir.path + "/l1", l2 = dir.path + "/l2";
  std::filesystem::create_symlink("/dev/fd/1", l1);
  std::filesystem::create_symlink(l1, l2);
  for (const std::string &stream : {std::string("/dev/stdout"), std::string("/dev/stderr"),
                                    std::string("/proc/self/fd/1"), std::string("/dev/fd/2"),
                                    std::string("//dev/fd/2"), std::string("/dev/./fd/1"),
                                    std::string("/dev/../dev/stdout"), l2})
    expect_error([&] { ptdp::output_target(stream, "--log-json", ptdp::OutputKind::any); }, ptdp::Status::invalid_argument,
                 "is a stream of a process");
  const std::string log = dir.path + "/captured.txt";
  ptdp::write_file_atomic(log, "the run's log\n", "output", ptdp::OutputKind::any);
  const int saved = ::dup(2), fd = ::open(log.c_str(), O_WRONLY | O_APPEND);
  ASSERT_GE(fd, 0);
  ::dup2(fd, 2);  // as `2> captured.txt`
  bool refused = false;
  try {
    ptdp::output_target(log, "--timeline", ptdp::OutputKind::any);
  } catch (const ptdp::Error &e) {
    refused = std::string(e.what()).find("a file this process has open") != std::string::npos;
  }
  ::dup2(saved, 2);
  ::close(saved);
  // Any descriptor (3>>f), under any name: here the one still open.
  expect_error([&] { ptdp::output_target(log, "--timeline", ptdp::OutputKind::any); }, ptdp::Status::invalid_argument,
               "a file this process has open");
  ::close(fd);
  EXPECT_TRUE(refused);
  EXPECT_EQ(ptdp::output_target(log, "--timeline", ptdp::OutputKind::any), log);  // closed: an output again
  EXPECT_EQ(read_file(log), "the run's log\n");
}

// What a process tokenized stays its run's input (hold_input): no later
// output of the process replaces it.
TEST(OutputFile, HeldInputsStayInputs) {
  TempDir dir;
  const std::string corpus = dir.path + "/corpus.txt";
  ptdp::write_file_atomic(corpus, "text\n", "output", ptdp::OutputKind::any);
  ptdp::hold_input(corpus, "tokenized corpus");
  expect_error([&] { ptdp::write_file_atomic(corpus, "{}", "--log-json", ptdp::OutputKind::any); },
               ptdp::Status::invalid_argument, "is the tokenized corpus '" + corpus + "'");
  EXPECT_TRUE(ptdp::same_output(corpus, dir.path + "/./corpus.txt"));
  EXPECT_FALSE(ptdp::same_output(corpus, dir.path + "/other.txt"));
}

// Two outputs of one run never name one file: a claimed output (a run's
// --timeline) is refused to every other writer, under any spelling or link.
TEST(OutputFile, ClaimedOutputsAreTheirWritersOnly) {
  TempDir dir;
  const std::string t = dir.path + "/trace.json";
  ptdp::write_file_atomic(t, "{}", "output", ptdp::OutputKind::any);  // a trace of an earlier run, replaced by this one
  {
    ptdp::OutputClaim claim(t, "--timeline");
    EXPECT_EQ(ptdp::output_target(t, "--timeline", ptdp::OutputKind::any), t);  // its own writer
    expect_error([&] { ptdp::write_file_atomic(dir.path + "/./trace.json", "{}", "--log-json", ptdp::OutputKind::any); },
                 ptdp::Status::invalid_argument, "is also this run's --timeline");
    ASSERT_EQ(::symlink(t.c_str(), (dir.path + "/link.json").c_str()), 0);
    expect_error([&] { ptdp::OutputClaim other(dir.path + "/link.json", "--profile-ops"); },
                 ptdp::Status::invalid_argument, "two outputs cannot share one file");
  }
  ptdp::write_file_atomic(t, "{}", "--log-json", ptdp::OutputKind::any);  // the claim is gone
}

// A checkpoint's files are a save's only: no writer puts a file inside a
// checkpoint directory (iter_N, its .tmp, through a link too) or over the
// tracker "latest" beside checkpoint directories; elsewhere in the root, and
// a "latest" where no checkpoint is, are anyone's.
TEST(OutputFile, NoWriterPutsAFileAmongACheckpointsFiles) {
  TempDir dir;
  const std::string root = dir.path + "/ck", ckpt = root + "/iter_0000010";
  std::filesystem::create_directories(ckpt);
  std::filesystem::create_directories(root + "/iter_0000020.tmp");
  const std::string manifest = ckpt + "/manifest.json";
  std::ofstream(manifest) << "{}";  // as a save writes it
  ASSERT_EQ(::symlink(ckpt.c_str(), (dir.path + "/link").c_str()), 0);
  for (const std::string &inside : {manifest, ckpt + "/new.json", root + "/iter_0000020.tmp/x",
                                    dir.path + "/link/manifest.json", root + "/./iter_0000010/y"})
    expect_error([&] { ptdp::write_file_atomic(inside, "x", "--timeline", ptdp::OutputKind::any); },
                 ptdp::Status::invalid_argument, "is inside the checkpoint directory");
  expect_error([&] { ptdp::append_json_line(root + "/latest", "{}", false); },
               ptdp::Status::invalid_argument, "is the checkpoint tracker of");
  for (const std::string &named : {root + "/iter_0000030", dir.path + "/iter_0000001.tmp"})
    expect_error([&] { ptdp::write_file_atomic(named, "x", "--profile-ops", ptdp::OutputKind::any); },
                 ptdp::Status::invalid_argument, "is named as a checkpoint directory");
  ptdp::write_file_atomic(root + "/log.jsonl", "x", "--log-json", ptdp::OutputKind::any);  // beside them: allowed
  ptdp::write_file_atomic(dir.path + "/latest", "x", "--log-json", ptdp::OutputKind::any);  // no checkpoint there
  expect_error([&] { ptdp::refuse_inside_checkpoint(ckpt, "--save", true); },
               ptdp::Status::invalid_argument, "is named as a checkpoint directory");
  EXPECT_NO_THROW(ptdp::refuse_inside_checkpoint(root, "--save", true));
}

// A copy of a checkpoint under another name ("best") is one by its files: a
// ptdp manifest.json beside a model.h5. A web app's manifest.json beside a
// Keras model.h5 is no checkpoint.
TEST(OutputFile, ACheckpointIsToldByItsFilesWhateverItsName) {
  TempDir dir;
  const std::string best = dir.path + "/best", app = dir.path + "/app";
  std::filesystem::create_directories(best + "/sub");
  std::filesystem::create_directories(app + "/data");
  std::ofstream(best + "/manifest.json") << "{\n \"datasets\": [],\n \"format\": \"ptdp-checkpoint\"\n}\n";
  std::ofstream(best + "/model.h5") << "\x89HDF\r\n\x1a\n";
  std::ofstream(app + "/manifest.json") << "{\"name\": \"My App\", \"start_url\": \"/\"}";
  std::ofstream(app + "/model.h5") << "\x89HDF\r\n\x1a\n";
  for (const std::string &inside : {best + "/manifest.json", best + "/notes.txt", best + "/sub/x.json"})
    expect_error([&] { ptdp::write_file_atomic(inside, "x", "--timeline", ptdp::OutputKind::any); },
                 ptdp::Status::invalid_argument, "(it holds a checkpoint's manifest.json and model.h5)");
  expect_error([&] { ptdp::check_output_directory(best, "--save"); }, ptdp::Status::invalid_argument,
               "is a checkpoint directory (it holds");
  ptdp::write_file_atomic(app + "/data/x.txt", "x", "note", ptdp::OutputKind::any);
  EXPECT_NO_THROW(ptdp::check_output_directory(app + "/runs", "--save"));
}

// A signal on the thread that is putting a set of files in place (a step
// the cleanup must not cut) is taken when the step ends: the files are all
// there, and the process ends as the signal would end it.
TEST(OutputFile, ASignalWaitsForTheStepOfItsOwnThread) {
  TempDir dir;
  const std::string a = dir.path + "/a.txt", b = dir.path + "/b.txt";
  const pid_t pid = ::fork();
  if (pid == 0) {
    ptdp::remove_temp_files_on_signal();
    const std::string ta = ptdp::write_temp_file(a, "a"), tb = ptdp::write_temp_file(b, "b");
    {
      const ptdp::UninterruptedStep step("test");
      ::raise(SIGTERM);
      ptdp::rename_temp_file(ta, a);
      ptdp::rename_temp_file(tb, b);
    }
    ::_exit(0);  // not reached: the signal ends the process at the step's end
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM) << status;
  EXPECT_TRUE(std::filesystem::exists(a));
  EXPECT_TRUE(std::filesystem::exists(b));
  for (const auto &e : std::filesystem::directory_iterator(dir.path))
    EXPECT_EQ(e.path().string().find(".tmp."), std::string::npos) << e.path();
}

// A set of outputs is put in place whole or not at all. A new-only set (an
// export into a new directory) replaces nothing another command made since
// the check, and takes back what it had placed; and a set whose file is not
// the one it put there afterwards (two commands writing the same outputs at
// once left one's .bin beside the other's .idx) is an error, never a success.
TEST(OutputFile, ASetIsPutInPlaceWholeAndChecked) {
  TempDir dir;
  const std::string a = dir.path + "/a.json", b = dir.path + "/b.json";
  std::ofstream(b) << "another command's";
  expect_error([&] {
    ptdp::put_in_place({{ptdp::write_temp_file(a, "a"), a}, {ptdp::write_temp_file(b, "b"), b}},
                       "export to 'x'", true);
  }, ptdp::Status::io_error, "export to 'x': '" + b + "' is there, and this command replaces nothing");
  EXPECT_FALSE(std::filesystem::exists(a)) << "all or none";
  std::ifstream in(b);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), "another command's");
  for (const auto &e : std::filesystem::directory_iterator(dir.path))
    EXPECT_EQ(e.path().string().find(".tmp."), std::string::npos) << e.path();
  // Two files of the set for one target: the first is not there afterwards.
  expect_error([&] {
    ptdp::put_in_place({{ptdp::write_temp_file(a, "1"), a}, {ptdp::write_temp_file(a, "2"), a}},
                       "tokenize output 'p'");
  }, ptdp::Status::io_error, "'" + a + "' was replaced by another command writing the same outputs");
  ptdp::put_in_place({{ptdp::write_temp_file(a, "new"), a}, {ptdp::write_temp_file(b, "new"), b}},
                     "tokenize output 'p'");  // replacing is what a plain set does
  EXPECT_TRUE(std::filesystem::exists(a));
}

// A file only one process writes (a per-process --timeline, a tokenize's .bin)
// is refused to a second process while the first holds it, and free when the
// first ends, however it ends (two tokenizes of one prefix left a mixed pair).
TEST(OutputFile, AnOutputOfOneProcessIsRefusedToAnother) {
  TempDir dir;
  const std::string out = dir.path + "/trace.json";
  int ready[2], go[2];
  ASSERT_EQ(::pipe(ready), 0);
  ASSERT_EQ(::pipe(go), 0);
  const pid_t pid = ::fork();
  if (pid == 0) {
    const ptdp::OutputClaim held(out, "--timeline", true);
    char c = 1;
    if (::write(ready[1], &c, 1) != 1 || ::read(go[0], &c, 1) != 1) ::_exit(2);
    ::_exit(0);
  }
  char c = 0;
  ASSERT_EQ(::read(ready[0], &c, 1), 1);
  expect_error([&] { ptdp::OutputClaim second(out, "--timeline", true); }, ptdp::Status::invalid_config,
               "--timeline '" + out + "' is being written by another process");
  // Through a link too: the file it names is held (a link let a second run in).
  std::ofstream(out) << "{}";
  std::filesystem::create_symlink(out, dir.path + "/link.json");
  expect_error([&] { ptdp::OutputClaim second(dir.path + "/link.json", "--timeline", true); },
               ptdp::Status::invalid_config, "is being written by another process");
  EXPECT_NO_THROW(ptdp::OutputClaim mine(out, "--timeline"));  // (within this process only)
  // Every writer, not only a second holder: ptdp.write_file, plot and
  // timeline-png aimed at a file another process holds (through a link too).
  for (const std::string &path : {out, dir.path + "/link.json"})
    expect_error([&] { ptdp::output_target(path, "ptdp.write_file", ptdp::OutputKind::any); },
                 ptdp::Status::invalid_config, "is being written by another process");
  ASSERT_EQ(::write(go[1], &c, 1), 1);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  {
    // This process's own hold is its writers' to write.
    const ptdp::OutputClaim free_again(out, "--timeline", true);
    EXPECT_NO_THROW(ptdp::output_target(out, "--timeline", ptdp::OutputKind::any));
  }
  for (int fd : {ready[0], ready[1], go[0], go[1]}) ::close(fd);
}

// Every temporary is on the signal cleanup's list, however many there are (a
// tokenize of 70 json keys holds 140; past 64, some were left behind).
// SIGPIPE too: `ptdp ... | head` ended a run whose async save was writing,
// leaving its iter_N.tmp.
TEST(OutputFile, ASignalRemovesEveryTemporary) {
  for (const int sig : {SIGTERM, SIGPIPE, SIGALRM, SIGUSR1, SIGQUIT}) {
    TempDir dir;
    const pid_t pid = ::fork();
    if (pid == 0) {
      ptdp::remove_temp_files_on_signal();
      for (int i = 0; i < 200; i++) ptdp::write_temp_file(dir.path + "/f" + std::to_string(i), "x");
      ::raise(sig);
      ::_exit(0);  // not reached
    }
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == sig) << status;
    EXPECT_TRUE(std::filesystem::is_empty(dir.path)) << "signal " << sig;
  }
}

// A script's work directory (make_temp_tree) goes whole, on a signal and by
// remove_temp_tree, following no link out of it; nothing else is removed.
// A tree made inside another goes with it, and off the list: its descriptor
// is closed (it stayed open on a directory that no longer existed).
TEST(OutputFile, ATreeInsideARemovedTreeIsReleased) {
  TempDir dir;
  const auto open_fds = [] {
    return std::distance(std::filesystem::directory_iterator("/proc/self/fd"), {});
  };
  const auto before = open_fds();
  const std::string outer = ptdp::make_temp_tree(dir.path, "outer.");
  const std::string inner = ptdp::make_temp_tree(outer, "inner.");
  EXPECT_EQ(open_fds(), before + 2);
  ptdp::remove_temp_tree(outer);
  EXPECT_FALSE(std::filesystem::exists(outer));
  EXPECT_EQ(open_fds(), before);
  expect_error([&] { ptdp::remove_temp_tree(inner); }, ptdp::Status::invalid_argument, "removed already");
}

TEST(OutputFile, ATemporaryTreeGoesWholeAndFollowsNoLink) {
  TempDir dir;
  namespace fs = std::filesystem;
  const std::string outside = dir.path + "/outside";
  fs::create_directories(outside);
  std::ofstream(outside + "/keep.txt") << "user";
  auto fill = [&](const std::string &tree) {
    fs::create_directories(tree + "/round1/iter_0000001/deep/deeper");
    std::ofstream(tree + "/round1/iter_0000001/model.h5") << "x";
    std::ofstream(tree + "/round1/iter_0000001/deep/deeper/f") << "x";
    for (int i = 0; i < 300; i++) std::ofstream(tree + "/round1/f" + std::to_string(i)) << "x";
    fs::create_directory_symlink(outside, tree + "/link_to_dir");
    fs::create_symlink(outside + "/keep.txt", tree + "/round1/link_to_file");
  };
  const std::string made = ptdp::make_temp_tree(dir.path, "work.");
  EXPECT_EQ(made.rfind(dir.path + "/work.", 0), 0u) << made;
  fill(made);
  expect_error([&] { ptdp::remove_temp_tree(outside); }, ptdp::Status::invalid_argument,
               "is not a directory this process made with make_temp_dir");
  expect_error([&] { ptdp::make_temp_tree(dir.path, "a/b."); }, ptdp::Status::invalid_argument,
               "holds a '/'");
  ptdp::remove_temp_tree(made);
  EXPECT_FALSE(fs::exists(fs::symlink_status(made)));
  expect_error([&] { ptdp::remove_temp_tree(made); }, ptdp::Status::invalid_argument,
               "or it was removed already");
  // Another spelling of it is it (a trailing '/', relative after a chdir).
  const std::string spelled = ptdp::make_temp_tree(dir.path, "spelled.");
  ptdp::remove_temp_tree(spelled + "/");
  EXPECT_FALSE(fs::exists(spelled));
  const auto cwd = fs::current_path();
  fs::create_directories(dir.path + "/here");
  fs::current_path(dir.path + "/here");
  const std::string relative = ptdp::make_temp_tree(".", "relative.");
  fs::rename(relative, "../moved");  // (the tree is the directory made, wherever it is)
  fs::current_path(dir.path);
  EXPECT_NO_THROW(ptdp::remove_temp_tree("moved"));
  fs::current_path(cwd);
  EXPECT_FALSE(fs::exists(dir.path + "/moved"));
  fs::remove(dir.path + "/here");
  const pid_t pid = ::fork();
  if (pid == 0) {
    ptdp::remove_temp_files_on_signal();
    fill(ptdp::make_temp_tree(dir.path, "signalled."));
    // Another directory put at a tree's path is not the tree: it stays.
    const std::string swapped = ptdp::make_temp_tree(dir.path, "swapped.");
    ::rmdir(swapped.c_str());
    fs::create_directory(swapped);
    std::ofstream(swapped + "/theirs") << "x";
    ::raise(SIGTERM);
    ::_exit(0);  // not reached
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM) << status;
  std::vector<std::string> left;
  for (const auto &e : fs::directory_iterator(dir.path)) left.push_back(e.path().filename().string());
  std::sort(left.begin(), left.end());
  ASSERT_EQ(left.size(), 2u);
  EXPECT_EQ(left[0], "outside");
  EXPECT_EQ(left[1].rfind("swapped.", 0), 0u);
  std::ifstream kept(outside + "/keep.txt");
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(kept), {}), "user");
}

// A made directory is held by its identity from its making: the signal
// cleanup removes it while empty and still the one made; another directory
// put at its path (emptied and made again by another program) stays, and so
// does one that was there before (never made, never held).
TEST(OutputFile, AMadeDirectoryIsRemovedOnlyWhileItIsTheOneMade) {
  namespace fs = std::filesystem;
  TempDir dir;
  const std::string before = dir.path + "/before", made = dir.path + "/a/b/c", swapped = dir.path + "/swapped";
  fs::create_directory(before);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ptdp::remove_temp_files_on_signal();
    const bool ok = !ptdp::make_held_directory(before) &&
                    ptdp::make_held_directories(made) ==
                        std::vector<std::string>{made, dir.path + "/a/b", dir.path + "/a"} &&
                    ptdp::make_held_directory(swapped);
    ::rmdir(swapped.c_str());
    ::mkdir(swapped.c_str(), 0755);  // another program's, now
    if (!ok) ::_exit(3);
    ::raise(SIGTERM);
    ::_exit(0);  // not reached
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM) << status;
  EXPECT_FALSE(fs::exists(dir.path + "/a"));
  EXPECT_TRUE(fs::is_directory(before));
  EXPECT_TRUE(fs::is_directory(swapped));
  // Held after the caller made it (the C ABI's hold): only a directory there.
  expect_error([&] { ptdp::hold_made_directory(dir.path + "/none"); }, ptdp::Status::io_error,
               "No such file or directory (hold a directory once made)");
  expect_error([&] { ptdp::make_held_directory(dir.path + "/none/deeper"); }, ptdp::Status::io_error,
               "cannot create directory '" + dir.path + "/none/deeper': No such file or directory");
  ptdp::make_held_directory(dir.path + "/mine");
  std::ofstream(dir.path + "/mine/file") << "x";
  ptdp::unmake_directory(dir.path + "/mine");  // not empty: it stays
  EXPECT_TRUE(fs::exists(dir.path + "/mine/file"));
}

// An input replaced during the run (a save's new 'latest' over the one the
// run loaded) keeps its inode while it is registered: the freed number went to
// the run's next output, refused as "the input this run reads".
TEST(OutputFile, AReplacedInputsInodeGoesToNoNewFile) {
  TempDir dir;
  const std::string latest = dir.path + "/latest";
  std::ofstream(latest) << "iter_0000002";
  const ptdp::InputFile read(latest, "checkpoint tracker");
  ptdp::replace_file(latest, "iter_0000004");
  for (int i = 0; i < 32; i++)
    EXPECT_NO_THROW(ptdp::write_file_atomic(dir.path + "/out" + std::to_string(i) + ".txt", "x",
                                            "--profile-ops", ptdp::OutputKind::any));
}

TEST(OutputFile, AnEmptyPathIsNamedAsSuch) {
  expect_error([] { ptdp::write_file_atomic("", "x", "--timeline", ptdp::OutputKind::any); }, ptdp::Status::invalid_argument,
               "--timeline is an empty path");
}

// A file that does not exist yet, named relatively in two spellings ("x" and
// "./x", the working directory's and its absolute path): one file, one claim.
TEST(OutputFile, ClaimsOfAFileNotYetThereMatchEverySpelling) {
  TempDir dir;
  char cwd[4096];
  ASSERT_NE(::getcwd(cwd, sizeof cwd), nullptr);
  ASSERT_EQ(::chdir(dir.path.c_str()), 0);
  {
    ptdp::OutputClaim claim("new.jsonl", "--log-json");
    for (const std::string &other : {std::string("./new.jsonl"), dir.path + "/new.jsonl", std::string("sub/../new.jsonl")})
      expect_error([&] { ptdp::OutputClaim again(other, "--timeline"); },
                   ptdp::Status::invalid_argument, "two outputs cannot share one file");
  }
  ASSERT_EQ(::chdir(cwd), 0);
}

TEST(OutputFile, SymlinkToAFileWritesThatFileAndKeepsTheLink) {
  TempDir dir;
  const std::string file = dir.path + "/real.json", link = dir.path + "/link.json";
  write_file(file, "old");
  ASSERT_EQ(::symlink(file.c_str(), link.c_str()), 0);
  ptdp::write_file_atomic(link, "new", "output", ptdp::OutputKind::any);
  EXPECT_TRUE(S_ISLNK(lmode(link)));
  EXPECT_EQ(read_file(file), "new");
  const std::string dangling = dir.path + "/dangling";
  ASSERT_EQ(::symlink((dir.path + "/nowhere/x").c_str(), dangling.c_str()), 0);
  expect_error([&] { ptdp::write_file_atomic(dangling, "x", "output", ptdp::OutputKind::any); }, ptdp::Status::invalid_argument,
               "symbolic link to nothing");
  const std::string to_dev = dir.path + "/to_dev";
  ASSERT_EQ(::symlink("/dev/null", to_dev.c_str()), 0);
  expect_error([&] { ptdp::write_file_atomic(to_dev, "x", "output", ptdp::OutputKind::any); }, ptdp::Status::invalid_argument,
               "symbolic link to a character device");
  EXPECT_TRUE(S_ISCHR(lmode("/dev/null")));
}

TEST(OutputFile, TokenizeRefusesToOverwriteItsInput) {
  TempDir dir;
  const std::string text = dir.path + "/corpus.txt", alias = dir.path + "/./corpus.txt";
  write_file(text, "hello\nworld\n");
  auto tok = ptdp::make_tokenizer("byte");
  expect_error([&] { ptdp::build_token_dataset({text}, "lines", *tok, alias); },
               ptdp::Status::invalid_argument, "refusing to overwrite an input");
  EXPECT_EQ(read_file(text), "hello\nworld\n");
  // An old output inside an input directory would be read as text: refused too.
  const std::string out = dir.path + "/out.ptdp";
  write_file(out, "previous output");
  expect_error([&] { ptdp::build_token_dataset({dir.path}, "lines", *tok, out); },
               ptdp::Status::invalid_argument, "refusing to overwrite an input");
  EXPECT_EQ(read_file(out), "previous output");
  expect_error([&] { ptdp::build_token_dataset({text}, "lines", *tok, "/dev/null"); },
               ptdp::Status::invalid_argument, "exists and is a character device");
  ptdp::build_token_dataset({text}, "lines", *tok, dir.path + "/fresh.ptdp");
  EXPECT_TRUE(S_ISREG(lmode(dir.path + "/fresh.ptdp")));
}

// An output is never an input of the same run, by identity: a registered input
// (InputFile) is refused under any spelling (itself, a hard link, a symbolic
// link), by every writer (the atomic writer, the JSON-lines log), and only
// while it is an input.
TEST(OutputFile, RegisteredInputsAreRefusedUnderAnySpelling) {
  TempDir dir;
  const std::string in = dir.path + "/data.bin", hard = dir.path + "/hard.bin",
                    soft = dir.path + "/soft.bin";
  write_file(in, "precious");
  ASSERT_EQ(::link(in.c_str(), hard.c_str()), 0);
  ASSERT_EQ(::symlink(in.c_str(), soft.c_str()), 0);
  {
    ptdp::InputFile input(in, "dataset");
    for (const std::string &out : {in, hard, soft, dir.path + "/./data.bin"}) {
      expect_error([&] { ptdp::write_file_atomic(out, "x", "--timeline", ptdp::OutputKind::any); },
                   ptdp::Status::invalid_argument, "is the dataset '" + in + "' this run reads");
      expect_error([&] { ptdp::append_json_line(out, "{}", false); },
                   ptdp::Status::invalid_argument, "refusing to overwrite an input");
      expect_error([&] { ptdp::append_json_line(out, "{}", true); },
                   ptdp::Status::invalid_argument, "refusing to overwrite an input");
    }
    ptdp::InputFile moved = std::move(input);  // still registered, once
    expect_error([&] { ptdp::write_file_atomic(in, "x", "output", ptdp::OutputKind::any); }, ptdp::Status::invalid_argument,
                 "refusing to overwrite an input");
    EXPECT_EQ(read_file(in), "precious");
  }
  std::filesystem::remove(hard);  // (a file with two names is no output)
  ptdp::write_file_atomic(soft, "no longer an input", "output", ptdp::OutputKind::any);  // the InputFile is gone
  EXPECT_EQ(read_file(in), "no longer an input");
  ptdp::InputFile missing(dir.path + "/not_there", "dataset");  // registers nothing
  ptdp::write_file_atomic(dir.path + "/not_there", "new", "output", ptdp::OutputKind::any);
}

// The inputs a run opens register themselves: a ptdp dataset, a Megatron
// dataset's .idx and .bin, a GPT-2 BPE tokenizer's files.
TEST(OutputFile, DatasetsAndTokenizerFilesAreInputsWhileOpen) {
  TempDir dir;
  const std::string text = dir.path + "/corpus.txt", data = dir.path + "/data.ptdp";
  write_file(text, "hello\nworld\n");
  auto bytes = ptdp::make_tokenizer("byte");
  ptdp::build_token_dataset({text}, "lines", *bytes, data);
  const std::string before = read_file(data);
  {
    auto src = ptdp::open_token_source(data);
    expect_error([&] { ptdp::append_json_line(data, "{}", false); },
                 ptdp::Status::invalid_argument, "is the dataset '" + data + "'");
    expect_error([&] { ptdp::build_token_dataset({text}, "lines", *bytes, data); },
                 ptdp::Status::invalid_argument, "refusing to overwrite an input");
  }
  EXPECT_EQ(read_file(data), before);
  const std::string prefix = dir.path + "/mega";
  {
    ptdp::IndexedDatasetWriter w(prefix, 256, {});
    w.add_document({{104, 105}});
    w.finish();
  }
  {
    auto src = ptdp::open_token_source(prefix);
    for (const char *ext : {".idx", ".bin"})
      expect_error([&] { ptdp::write_file_atomic(prefix + ext, "x", "--profile-ops", ptdp::OutputKind::any); },
                   ptdp::Status::invalid_argument, "this run reads");
  }
  const std::string bpe = std::string(PTDP_TEST_DATA_DIR) + "/bpe";
  const std::string vocab = dir.path + "/vocab.json", merges = dir.path + "/merges.txt";
  write_file(vocab, read_file(bpe + "/vocab.json"));
  write_file(merges, read_file(bpe + "/merges.txt"));
  {
    auto tok = ptdp::Gpt2BpeTokenizer::from_vocab_merges(vocab, merges);
    for (const std::string &f : {vocab, merges})
      expect_error([&] { ptdp::build_token_dataset({text}, "lines", *tok, f); },
                   ptdp::Status::invalid_argument, "file '" + f + "' this run reads");
  }
  EXPECT_EQ(read_file(vocab), read_file(bpe + "/vocab.json"));
}

// A writer replaces only a file of its own kind, or an empty one: a sweep
// replaced a user's notes with an export, a model's config.json with a
// metrics log and the ptdp executable with an op profile.
TEST(OutputFile, ReplacesOnlyAFileOfItsOwnKind) {
  using ptdp::OutputKind;
  TempDir dir;
  const auto put = [&](const std::string &name, const std::string &bytes) {
    const std::string p = dir.path + "/" + name;
    std::ofstream(p, std::ios::binary) << bytes;
    return p;
  };
  const std::string notes = put("notes.txt", "my important notes\n");
  for (OutputKind kind : {OutputKind::ptdp_dataset, OutputKind::megatron_index, OutputKind::safetensors,
                          OutputKind::json, OutputKind::metrics_log, OutputKind::trace, OutputKind::machine,
                          OutputKind::png, OutputKind::op_profile})
    expect_error([&] { ptdp::write_file_atomic(notes, "x", "--timeline", kind); },
                 ptdp::Status::invalid_argument,
                 std::string("exists and is not ") + ptdp::output_kind_name(kind));
  EXPECT_EQ(read_file(notes), "my important notes\n");
  // Through a link: the file it points to is what would be replaced.
  const std::string link = dir.path + "/link.json";
  ASSERT_EQ(::symlink(notes.c_str(), link.c_str()), 0);
  expect_error([&] { ptdp::output_target(link, "--log-json", OutputKind::metrics_log); },
               ptdp::Status::invalid_argument, "exists and is not a metrics log");
  // A pretty-printed JSON file is JSON, not JSON lines (a model's config.json).
  const std::string config = put("config.json", "{\n  \"n_layer\": 2\n}\n");
  expect_error([&] { ptdp::output_target(config, "--log-json", OutputKind::metrics_log); },
               ptdp::Status::invalid_argument, "is not a metrics log");
  EXPECT_EQ(ptdp::output_target(config, "config.json", OutputKind::json), config);
  // Each kind's own earlier output, and an empty file, are replaced.
  const std::string log = put("log.jsonl", "{\"kind\": \"run\"}\n{\"iteration\": 1}\n");
  ptdp::write_file_atomic(log, "{\"kind\": \"run\", \"n\": 2}\n", "--log-json", OutputKind::metrics_log);
  EXPECT_EQ(read_file(log), "{\"kind\": \"run\", \"n\": 2}\n");
  // A JSONL corpus or a one-line config starts with an object too, but no run record.
  for (const std::string &other : {put("corpus.jsonl", "{\"text\": \"line 1\"}\n{\"text\": \"2\"}\n"),
                                   put("one.json", "{\"n_embd\": 768}\n")})
    expect_error([&] { ptdp::output_target(other, "--log-json", OutputKind::metrics_log); },
                 ptdp::Status::invalid_argument, "is not a metrics log");
  const std::string empty = put("empty", "");
  EXPECT_EQ(ptdp::output_target(empty, "--plot", OutputKind::png), empty);
  EXPECT_EQ(ptdp::output_target(put("a.png", "\x89PNG\r\n\x1a\n...."), "--plot", OutputKind::png),
            dir.path + "/a.png");
  EXPECT_EQ(ptdp::output_target(put("d.ptdp", std::string("PTDPTOK\0....", 12)), "tokenize output",
                                OutputKind::ptdp_dataset),
            dir.path + "/d.ptdp");
  EXPECT_EQ(ptdp::output_target(put("p.txt", "rank 0 (tp 0, pp 0, dp 0) on cpu, iteration 2\nop\n"),
                                "--profile-ops",
                                OutputKind::op_profile),
            dir.path + "/p.txt");
  // The JSON kinds and the op profile by what their writers write, not by a
  // first '{' or "rank " (a second sweep: --timeline replaced a log, a
  // config.json and an INI file; --log-json a trace; --profile-ops notes).
  const std::string trace = put("t.json", "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[]}\n");
  EXPECT_EQ(ptdp::output_target(trace, "--timeline", OutputKind::trace), trace);
  for (const std::string &other : {log, config, put("s.ini", "[section]\nkey = value\n"),
                                   put("brace.txt", "{my notes}\nmore\n")}) {
    expect_error([&] { ptdp::output_target(other, "--timeline", OutputKind::trace); },
                 ptdp::Status::invalid_argument, "is not a --timeline trace");
    expect_error([&] { ptdp::output_target(other, "--save-machine", OutputKind::machine); },
                 ptdp::Status::invalid_argument, "is not a planner's machine file");
  }
  // A log whose first record quotes bytes that are not UTF-8 (a path's) is a log.
  const std::string latin1 = put("l1.jsonl", "{\"kind\": \"run\", \"data_path\": \"caf\xe9.ptdp\"}\n");
  EXPECT_EQ(ptdp::output_target(latin1, "--log-json", OutputKind::metrics_log), latin1);
  ptdp::append_json_line(latin1, "{\"path\": \"\xff\"}", false);
  // A writer killed inside its record left half a line: the next record
  // starts on a line of its own, the half line cut off (it joined the next
  // record, and readers lost both).
  // (A half line longer than one read of the tail, 4096 bytes, too.)
  const std::string half = "{\"kind\": \"train\", \"note\": \"" + std::string(5000, 'x');
  const std::string cut = put("cut.jsonl", "{\"kind\": \"run\"}\n{\"kind\": \"train\", \"iteration\": 1}\n" + half);
  ::testing::internal::CaptureStderr();
  ptdp::append_json_line(cut, "{\"kind\": \"run\", \"iteration\": 1}", false);
  const std::string said = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(read_file(cut), "{\"kind\": \"run\"}\n{\"kind\": \"train\", \"iteration\": 1}\n"
                            "{\"kind\": \"run\", \"iteration\": 1}\n");
  EXPECT_NE(said.find("ended inside a record (a writer killed while it wrote): its " +
                      std::to_string(half.size()) + " bytes after the last whole line are cut off"),
            std::string::npos) << said;
  // A last record whole but for its line end is kept, and gets one.
  const std::string unended = put("unended.jsonl", "{\"kind\": \"run\"}\n{\"kind\": \"valid\", \"iteration\": 4}");
  ptdp::append_json_line(unended, "{\"kind\": \"run\", \"iteration\": 4}", false);
  EXPECT_EQ(read_file(unended), "{\"kind\": \"run\"}\n{\"kind\": \"valid\", \"iteration\": 4}\n"
                                "{\"kind\": \"run\", \"iteration\": 4}\n");
  // A log that ends whole is appended to as it is, and nothing is said.
  ::testing::internal::CaptureStderr();
  ptdp::append_json_line(cut, "{\"kind\": \"train\", \"iteration\": 2}", false);
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
  EXPECT_TRUE(ptdp::ends_with(read_file(cut), "}\n{\"kind\": \"train\", \"iteration\": 2}\n")) << read_file(cut);
  expect_error([&] { ptdp::output_target(trace, "--log-json", OutputKind::metrics_log); },
               ptdp::Status::invalid_argument, "is not a metrics log");
  expect_error([&] { ptdp::output_target(put("r.txt", "rank 1: apples\nrank 2: pears\n"), "--profile-ops",
                                         OutputKind::op_profile); },
               ptdp::Status::invalid_argument, "is not an op profile");
  const std::string machine = put("m.json", "{\"name\": \"x\", \"devices_per_node\": 8, \"peak_flops\": {}}\n");
  EXPECT_EQ(ptdp::output_target(machine, "--save-machine", OutputKind::machine), machine);
  EXPECT_EQ(ptdp::output_kind_of_key("metrics_log"), OutputKind::metrics_log);
  expect_error([] { ptdp::output_kind_of_key("text"); }, ptdp::Status::invalid_argument,
               "output kind 'text' (allowed: ptdp_dataset, ");
  // safetensors: a header length that fits the file, then '{'.
  std::string st(8, '\0');
  st[0] = 2;
  st += "{}";
  EXPECT_EQ(ptdp::output_target(put("m.safetensors", st), "export", OutputKind::safetensors),
            dir.path + "/m.safetensors");
  st[0] = 100;  // a length past the file's end: not a safetensors file
  expect_error([&] { ptdp::output_target(put("bad.safetensors", st), "export", OutputKind::safetensors); },
               ptdp::Status::invalid_argument, "is not a safetensors file");
  // One with tensors is replaced only where ptdp's export wrote it: a model
  // from elsewhere (the one a checkpoint was imported from) may be all there is.
  const auto with_header = [](const std::string &header) {
    std::string f(8, '\0');
    f[0] = (char)header.size();
    return f + header + "0123";
  };
  const std::string hf = put("hf.safetensors", with_header(
      "{\"__metadata__\":{\"format\":\"pt\"},\"wte.weight\":{\"dtype\":\"F32\",\"shape\":[1],"
      "\"data_offsets\":[0,4]}}"));
  expect_error([&] { ptdp::output_target(hf, "export", OutputKind::safetensors); },
               ptdp::Status::invalid_argument, "is a safetensors file ptdp did not export");
  const std::string ours = put("ours.safetensors", with_header(
      "{\"__metadata__\":{\"producer\":\"ptdp\"},\"wte.weight\":{\"dtype\":\"F32\",\"shape\":[1],"
      "\"data_offsets\":[0,4]}}"));
  EXPECT_EQ(ptdp::output_target(ours, "export", OutputKind::safetensors), ours);
  // A Megatron .bin has no signature: its .idx beside it says what it is.
  const std::string bin = put("p_text_document.bin", "tokens");
  expect_error([&] { ptdp::output_target(bin, "tokenize output", OutputKind::megatron_data); },
               ptdp::Status::invalid_argument, "beside its .idx");
  // ... or its writer's temporary .idx (a tokenize killed between its two
  // renames, the .bin first): the same command finishes the pair. A file of
  // another name, or without the index's magic, is no such temporary.
  put("p_text_document.idx.tmp.ab", std::string("MMIDIDX\0\0....", 13));
  put("p_text_document.idx.tmp.Ab12Cd", "not an index");
  expect_error([&] { ptdp::output_target(bin, "tokenize output", OutputKind::megatron_data); },
               ptdp::Status::invalid_argument, "beside its .idx");
  put("p_text_document.idx.tmp.Zz34Yx", std::string("MMIDIDX\0\0....", 13));
  EXPECT_EQ(ptdp::output_target(bin, "tokenize output", OutputKind::megatron_data), bin);
  for (const char *t : {"p_text_document.idx.tmp.ab", "p_text_document.idx.tmp.Ab12Cd", "p_text_document.idx.tmp.Zz34Yx"})
    std::filesystem::remove(dir.path + "/" + t);
  put("p_text_document.idx", std::string("MMIDIDX\0\0....", 13));
  EXPECT_EQ(ptdp::output_target(bin, "tokenize output", OutputKind::megatron_data), bin);
  // A script's own file (`any`: ptdp_write_file) replaces no file of a format
  // ptdp's writers make, a model from elsewhere included; plain text or a
  // JSON file of its own, yes.
  const std::string h5 = put("copy_of_model.h5", std::string("\x89HDF\r\n\x1a\n", 8) + "superblock");
  const std::string model_config = put("config.json", "{\"model_type\": \"gpt2\", \"n_embd\": 32}");
  // A model's other JSON: its generation config (as an export or transformers
  // writes it) and its weights' index, also past 64 KiB.
  const std::string generation = put("generation_config.json", "{\"_from_model_config\": true}");
  const std::string hf_generation =
      put("hf_generation_config.json", "{\"bos_token_id\": 1, \"transformers_version\": \"4.46.0\"}");
  std::string big_map = "{\"metadata\": {\"total_size\": 1}, \"weight_map\": {";
  for (int i = 0; i < 4000; i++) big_map += (i ? ", " : "") + std::string("\"layer.") + std::to_string(i) + ".weight\": \"model-00001-of-00002.safetensors\"";
  const std::string index = put("model.safetensors.index.json", big_map + "}}");
  ASSERT_GT(big_map.size(), 65536u);
  for (const std::string &f : {hf, ours, machine, bin, dir.path + "/p_text_document.idx", h5, model_config,
                               generation, hf_generation, index})
    expect_error([&] { ptdp::write_file_atomic(f, "x", "the script's record", OutputKind::any); },
                 ptdp::Status::invalid_argument, "replaces only a file of none of the formats");
  EXPECT_EQ(read_file(bin), "tokens");
  const std::string text = put("text.txt", "old"), record = put("record.json", "{\"a\": 1}");
  ptdp::write_file_atomic(text, "new", "the script's record", OutputKind::any);
  ptdp::write_file_atomic(record, "{}", "the script's record", OutputKind::any);
  EXPECT_EQ(read_file(text), "new");
  EXPECT_EQ(read_file(record), "{}");
}

// A name of white space alone is no name: every writer and directory maker
// refuses it (files named ' ' were written, a checkpoint saved under '\t/').
TEST(OutputFile, ANameOfWhiteSpaceAloneIsRefused) {
  TempDir dir;
  for (const std::string &path : {std::string(" "), dir.path + "/\t", dir.path + "/ /x.json"})
    expect_error([&] { ptdp::output_target(path, "--timeline", ptdp::OutputKind::any); },
                 ptdp::Status::invalid_argument, "has a name of white space alone");
  expect_error([&] { ptdp::check_output_directory(dir.path + "/ ", "--save"); }, ptdp::Status::invalid_argument,
               "--save '" + dir.path + "/ ' has a name of white space alone");
  expect_error([&] { ptdp::make_held_directories(dir.path + "/a/ \t/b"); }, ptdp::Status::invalid_argument,
               "white space alone");
  EXPECT_FALSE(std::filesystem::exists(dir.path + "/a"));
  EXPECT_NO_THROW(ptdp::output_target(dir.path + "/a b.json", "--timeline", ptdp::OutputKind::any));
}
