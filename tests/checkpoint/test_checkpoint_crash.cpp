// Crash safety of saves (ARCHITECTURE §5: "a crash at any point leaves the
// previous checkpoint loadable"). A training process that saves every
// iteration (tests/checkpoint/save_loop.lua under the ptdp launcher) is
// SIGKILLed at random moments, 20 times, mostly resuming from the directory
// the previous kill left. After each kill the directory must give, without a
// fault, the checkpoint of the last iteration the child finished or of the one
// it was saving, and loading it must give, bit for bit, the parameters an
// uninterrupted in-process run had at that iteration.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "checkpoints/commit.h"
#include "checkpoints/sharded_checkpoint.h"
#include "engine/core/status.h"
#include "engine/train/config.h"
#include "engine/train/trainer.h"
#include "tests/support/temp_dir.h"
#include "tests/support/tiny_dataset.h"

extern char **environ;

using namespace ptdp;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

constexpr int kIters = 24;   // train_iters of every run
constexpr int kTrials = 20;  // kills
constexpr uint64_t kSeed = 20240607;  // PTDP_CRASH_SEED=N tries other kill moments

// The run, shared by the child (as flags) and the in-process reference. With
// h = 64 a save (fsyncs included) is most of a step, so kills often land in one.
const std::vector<std::pair<std::string, std::string>> kOptions = {
    {"num_layers", "4"}, {"hidden_size", "64"}, {"num_attention_heads", "4"},
    {"seq_length", "16"}, {"micro_batch_size", "2"}, {"global_batch_size", "8"},
    {"train_iters", std::to_string(kIters)}, {"lr", "3e-3"}, {"min_lr", "3e-4"},
    {"lr_warmup_iters", "2"}, {"hidden_dropout", "0.1"}, {"attention_dropout", "0.1"},
    {"split", "80,20"}, {"tensor_model_parallel_size", "2"},
    {"pipeline_model_parallel_size", "2"}, {"data_parallel_size", "1"}};

TrainerOptions options() {
  Config c;
  for (const auto &[k, v] : kOptions) c.set(k, v);
  c.set("data_path", tiny_dataset_path());
  return TrainerOptions::from_config(c);
}

std::vector<std::string> param_names() {
  std::vector<std::string> names;
  for (const ParamInfo &p : gpt_param_table(options().model, 1, {})) names.push_back(p.name);
  return names;
}

// Every parameter after each iteration of an uninterrupted run: params[i - 1][k].
std::vector<std::vector<std::vector<float>>> reference_run() {
  Trainer tr(options());
  std::vector<std::vector<std::vector<float>>> params;
  for (int i = 0; i < kIters; i++) {
    tr.step();
    params.emplace_back();
    for (const std::string &n : param_names()) params.back().push_back(tr.gather_parameter(n));
  }
  return params;
}

// The child, killed and reaped however the test ends.
struct Child {
  pid_t pid = -1;  // -1 once reaped
  int status = 0;  // its wait status, once reaped
  ~Child() {
    kill();
    if (pid > 0) ::waitpid(pid, &status, 0);
  }
  void kill() {
    if (pid > 0) ::kill(pid, SIGKILL);
  }
  // Whether it has ended (then reaped, with `status` set); does not block.
  bool ended() {
    if (pid > 0 && ::waitpid(pid, &status, WNOHANG) == pid) pid = -1;
    return pid < 0;
  }
  // Waits up to timeout_s for it to end, or for `until` to hold; false on timeout.
  template <class F>
  bool wait(double timeout_s, F until) {
    const auto end = Clock::now() + std::chrono::duration<double>(timeout_s);
    while (!ended() && !until()) {
      if (Clock::now() > end) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return true;
  }
  bool wait(double timeout_s) {
    return wait(timeout_s, [] { return false; });
  }
};

// Starts the launcher on save_loop.lua saving into dir (resuming from it when
// `resume`), stdout and stderr to `log`. posix_spawn execs at once, so nothing
// of this process's threads runs in the child.
void spawn(Child &child, const std::string &dir, bool resume, const std::string &log, bool async) {
  std::vector<std::string> args = {PTDP_LAUNCHER, PTDP_SAVE_LOOP};
  for (const auto &[k, v] : kOptions) {
    std::string flag = "--" + k;
    for (char &ch : flag)
      if (ch == '_') ch = '-';
    args.push_back(flag);
    args.push_back(v);
  }
  // Keeping the last 2 makes every save prune too, under the same kills.
  args.insert(args.end(), {"--data-path", tiny_dataset_path(), "--save", dir, "--save-interval",
                           "1", "--keep-last-checkpoints", "2"});
  if (resume) {
    args.push_back("--load");
    args.push_back(dir);
  }
  if (async) args.insert(args.end(), {"--async-save", "1"});
  // One OpenMP thread per rank, as in this process: the same arithmetic, bit for
  // bit. No MPI variables: the child is a single process, not an mpirun job.
  std::vector<std::string> env = {"OMP_NUM_THREADS=1"};
  for (char **e = environ; *e; e++) {
    const std::string s = *e;
    if (s.rfind("OMP_NUM_THREADS=", 0) && s.rfind("OMPI_", 0) && s.rfind("PMI", 0)) env.push_back(s);
  }
  auto cvec = [](std::vector<std::string> &v) {
    std::vector<char *> out;
    for (std::string &s : v) out.push_back(s.data());
    out.push_back(nullptr);
    return out;
  };
  std::vector<char *> argv = cvec(args), envp = cvec(env);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  const int rc = posix_spawn(&child.pid, argv[0], &fa, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) {
    child.pid = -1;
    FAIL() << "cannot start " << argv[0] << ": " << std::strerror(rc);
  }
}

std::string read_text(const std::string &path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The last "iteration N" the child printed (its save of N was committed); 0 if none.
int last_printed(const std::string &log) {
  std::istringstream in(read_text(log));
  int last = 0, n;
  for (std::string line; std::getline(in, line);)
    if (std::sscanf(line.c_str(), "iteration %d", &n) == 1) last = n;
  return last;
}

// The unfinished saves in dir, as (name, inode): a pair that was not there
// before the child started is a save it was killed in.
std::set<std::pair<std::string, ino_t>> tmp_dirs(const std::string &dir) {
  std::set<std::pair<std::string, ino_t>> out;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    struct stat st;
    if (name.rfind("iter_", 0) == 0 && name.size() > 4 &&
        name.compare(name.size() - 4, 4, ".tmp") == 0 && ::stat(it->path().c_str(), &st) == 0 &&
        S_ISDIR(st.st_mode))
      out.insert({name, st.st_ino});
  }
  return out;
}

// The iteration of the checkpoint a load of dir takes, 0 if there is none.
int committed(const std::string &dir) {
  try {
    const std::string d = find_latest_checkpoint(dir);
    return std::stoi(d.substr(d.find_last_of('_') + 1));
  } catch (const Error &) {
    return 0;
  }
}

// The newest iter_N directory with a manifest, whatever the tracker says.
int newest_complete(const std::string &dir) {
  int newest = 0, n;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    char rest;
    if (std::sscanf(name.c_str(), "iter_%d%c", &n, &rest) == 1 &&
        fs::exists(it->path() / "manifest.json"))
      newest = std::max(newest, n);
  }
  return newest;
}

// kTrials kills of the child saving every iteration, synchronously or (async)
// on its background thread while the next step runs.
void crash_trials(bool async) {
  TempDir tmp("ptdp_crash");
  const auto ref = reference_run();
  const std::vector<std::string> names = param_names();

  // After a kill: the newest checkpoint is sound and loads into exactly the
  // reference's parameters; returns its iteration (0 when none is committed).
  auto check_dir = [&](const std::string &dir) -> int {
    const int it = committed(dir);
    if (it == 0) return 0;
    const std::string ckpt = find_latest_checkpoint(dir);
    const std::vector<std::string> faults = checkpoint_faults(ckpt);
    EXPECT_TRUE(faults.empty()) << ckpt << ": " << (faults.empty() ? "" : faults[0]);
    Trainer tr(options());
    tr.load(dir);
    EXPECT_EQ(tr.iteration(), it);
    EXPECT_GE(it, 1);
    EXPECT_LE(it, kIters);
    if (it < 1 || it > kIters) return it;
    for (size_t k = 0; k < names.size(); k++) {
      const std::vector<float> got = tr.gather_parameter(names[k]), &want = ref[it - 1][k];
      EXPECT_TRUE(got.size() == want.size() &&
                  std::memcmp(got.data(), want.data(), got.size() * sizeof(float)) == 0)
          << names[k] << " at iteration " << it << " differs from the uninterrupted run";
    }
    return it;
  };

  // One uninterrupted run: it saves every iteration and ends with the last.
  // Its start-up (to the end of the first iteration) and time per iteration
  // set the range of the kill delays.
  std::string dir = tmp.path + "/run_0";
  double startup = -1, per_iter;
  {
    Child child;
    const std::string log = tmp.path + "/log_0";
    const auto t0 = Clock::now();
    auto since = [&] { return std::chrono::duration<double>(Clock::now() - t0).count(); };
    spawn(child, dir, false, log, async);
    ASSERT_FALSE(::testing::Test::HasFatalFailure());
    ASSERT_TRUE(child.wait(120, [&] { return last_printed(log) > 0; }));
    startup = since();
    ASSERT_TRUE(child.wait(120));
    const int st = child.status;
    ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0)
        << "the uninterrupted run failed:\n" << read_text(log);
    ASSERT_GT(startup, 0);
    per_iter = (since() - startup) / (kIters - 1);
    startup = std::max(0.0, startup - per_iter);
    ASSERT_EQ(check_dir(dir), kIters);
  }

  const char *seed_env = std::getenv("PTDP_CRASH_SEED");
  const uint64_t seed = seed_env ? std::strtoull(seed_env, nullptr, 10) : kSeed;
  std::mt19937_64 rng(seed);
  int round = 1, in_saves = 0, on_old_dir = 0, finished = 0, tracker_behind = 0;
  dir = tmp.path + "/run_1";
  for (int trial = 0; trial < kTrials; trial++) {
    SCOPED_TRACE("trial " + std::to_string(trial) + " in " + dir);
    // A directory whose run is complete has nothing left to save: start over.
    int before = committed(dir);
    if (before == kIters) {
      dir = tmp.path + "/run_" + std::to_string(++round);
      before = 0;
    }
    on_old_dir += before > 0;
    const auto tmps_before = tmp_dirs(dir);
    const std::string log = tmp.path + "/log_" + std::to_string(trial + 1);

    // The kill lands inside a step (its save included) a few iterations
    // ahead, at a random moment of it; in the run's first step, anywhere from
    // the start, so start-up and loading are hit too. Waiting for the child's
    // progress, not a fixed time, keeps this so on a slower, loaded machine.
    const int target = std::min(kIters, before + 1 + (int)(rng() % 6));
    const double window = target > before + 1 ? per_iter : 2 * startup + per_iter;
    const double delay = std::uniform_real_distribution<double>(0, window)(rng);
    Child child;
    spawn(child, dir, before > 0, log, async);
    ASSERT_FALSE(::testing::Test::HasFatalFailure());
    ASSERT_TRUE(child.wait(60, [&] { return last_printed(log) >= target - 1; }))
        << "no progress:\n" << read_text(log);
    if (!child.ended()) std::this_thread::sleep_for(std::chrono::duration<double>(delay));
    child.kill();
    ASSERT_TRUE(child.wait(60)) << "the child did not end after SIGKILL";
    const int st = child.status;
    if (WIFEXITED(st)) {
      ASSERT_EQ(WEXITSTATUS(st), 0) << "the run failed:\n" << read_text(log);
      finished++;
    } else {
      ASSERT_TRUE(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL) << "status " << st;
    }

    // The save the kill interrupted, if any: a .tmp directory that is new.
    int saving = 0;
    for (const auto &t : tmp_dirs(dir))
      if (!tmps_before.count(t)) saving = std::stoi(t.first.substr(5, t.first.size() - 9));
    in_saves += saving > 0;
    // Killed after the rename, before the tracker moved: the next run resumes
    // from the tracker's and saves the newer iteration again (swapping it in).
    tracker_behind += newest_complete(dir) > committed(dir);

    const int printed = last_printed(log);
    const int after = check_dir(dir);
    ASSERT_FALSE(::testing::Test::HasFatalFailure());
    // The child had finished iteration `printed` (saved) or, if none, resumed
    // from `before`; it may have been in the save of the next one. An async
    // save of `printed` may still have been in flight (the one before it was
    // on disk: each save waits for the previous).
    const int last_done = printed > 0 ? printed : before;
    const int least = async && printed > 0 ? std::max(before, last_done - 1) : last_done;
    EXPECT_TRUE(after >= least && after <= last_done + 1)
        << "found iteration " << after << "; the child had saved " << least
        << " and was at most in the save of " << last_done + 1 << "\n" << read_text(log);
    if (saving > 0) {
      EXPECT_TRUE(after == saving - 1 || after == saving)
          << "killed in the save of " << saving << " but found iteration " << after;
    }
    std::printf("trial %2d: from %2d, killed %.3f s after %s %2d %s, printed %2d, loads %2d\n",
                trial, before, delay, target > before + 1 ? "iteration" : "the start, target", target - 1,
                saving ? ("in the save of " + std::to_string(saving)).c_str()
                       : (WIFEXITED(st) ? "(it had finished)" : "(outside a save's .tmp)"),
                printed, after);
    ASSERT_FALSE(::testing::Test::HasFailure()) << read_text(log);
  }
  std::printf("seed %llu; uninterrupted run: start-up %.3f s, %.3f s per iteration; %d kills, %d inside a save (a new .tmp directory), "
              "%d on a directory holding checkpoints, %d left the tracker behind a newer "
              "checkpoint, %d runs had finished\n",
              (unsigned long long)seed, startup, per_iter, kTrials, in_saves, on_old_dir, tracker_behind, finished);
  ::testing::Test::RecordProperty("kills_inside_saves", in_saves);
  ::testing::Test::RecordProperty("kills_on_existing_checkpoints", on_old_dir);
  EXPECT_GT(in_saves, 0) << "no kill landed inside a save: the test proves nothing";
  EXPECT_GT(on_old_dir, 0);
}

}  // namespace

TEST(CheckpointCrash, KilledSavesLeaveTheLastOrTheNewCheckpoint) { crash_trials(false); }

// --async-save: the kills land in saves written beside the next step.
TEST(CheckpointCrash, KilledAsyncSavesLeaveTheLastOrTheNewCheckpoint) { crash_trials(true); }
