// Preemption and time limits in the trainer (Megatron's --exit-signal-handler,
// --exit-interval, --exit-duration-in-mins): a step that meets one saves and
// says why the run should end (Trainer::exit_reason); a run resumed from that
// checkpoint equals an uninterrupted one bit for bit; a second signal ends the
// process at once; the handlers come and go with the trainer. The launcher's
// side (train_gpt.lua, SIGTERM to a real process, mpirun) is tested by
// tests/lua/preemption.sh and the mpi_exit_signal test.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "engine/train/config.h"
#include "engine/train/exit_signal.h"
#include "engine/train/trainer.h"
#include "tests/support/expect_error.h"
#include "tests/support/temp_dir.h"
#include "tests/support/tiny_dataset.h"
#include "tests/support/trained_run.h"

using namespace ptdp;

namespace {

TrainerOptions options(const std::vector<std::pair<std::string, std::string>> &more = {}) {
  return tiny_tp2_options(tiny_dataset_path(), more);
}

TEST(Preemption, SignalSavesTheStepAndTheResumedRunEqualsAnUninterruptedOne) {
  TempDir dir;
  std::vector<float> want;
  {
    Trainer whole(options());
    for (int i = 0; i < 6; i++) whole.step();
    want = all_parameters(whole);
  }
  {
    Trainer tr(options({{"exit_signal_handler", "1"}, {"save", dir.path}}));
    tr.step();
    EXPECT_EQ(tr.exit_reason(), "");
    ASSERT_EQ(raise(SIGTERM), 0);  // recorded by the handler: the process goes on
    EXPECT_EQ(exit_signal_received(), SIGTERM);
    tr.step();
    EXPECT_NE(tr.exit_reason().find("SIGTERM received at iteration 2; saved "), std::string::npos)
        << tr.exit_reason();
    EXPECT_NE(tr.last_saved().find("iter_0000002"), std::string::npos) << tr.last_saved();
  }
  EXPECT_EQ(exit_signal_received(), 0);  // cleared with the last scope
  Trainer resumed(options({{"load", dir.path}}));
  EXPECT_EQ(resumed.iteration(), 2);
  for (int i = 2; i < 6; i++) resumed.step();
  EXPECT_EQ(resumed.exit_reason(), "");
  EXPECT_TRUE(same_bits(all_parameters(resumed), want))
      << "the resumed run's weights differ from the uninterrupted run's";
}

// A signal during an evaluation (here: before it, not yet acted on) stops it
// at its next batch on every rank alike (t = 2, p = 2: four thread ranks read
// the flag and agree), with no loss of part of the split, and the run ends as
// after a step: the state of the iteration saved, the reason said.
TEST(Preemption, ASignalStopsAnEvaluationAndSaves) {
  TempDir dir;
  Trainer tr(options({{"exit_signal_handler", "1"}, {"save", dir.path},
                      {"pipeline_model_parallel_size", "2"}, {"eval_iters", "1000"}}));
  tr.step();
  EXPECT_TRUE(std::isfinite(tr.evaluate(2)));  // no signal: a loss
  ASSERT_EQ(raise(SIGTERM), 0);
  EXPECT_TRUE(std::isnan(tr.evaluate(1000)));
  EXPECT_NE(tr.exit_reason().find("SIGTERM received during the evaluation at iteration 1; saved "),
            std::string::npos)
      << tr.exit_reason();
  EXPECT_NE(tr.last_saved().find("iter_0000001"), std::string::npos) << tr.last_saved();
}

TEST(Preemption, IntervalAndDurationEndTheRun) {
  TempDir dir;
  Trainer tr(options({{"exit_interval", "3"}, {"save", dir.path}}));
  tr.step();
  tr.step();
  EXPECT_EQ(tr.exit_reason(), "");
  tr.step();
  EXPECT_EQ(tr.exit_reason(), "--exit-interval 3 reached at iteration 3; saved " + tr.last_saved());
  tr.evaluate(1);  // (an evaluation leaves the step's request as it is)
  EXPECT_EQ(tr.exit_reason(), "--exit-interval 3 reached at iteration 3; saved " + tr.last_saved());
  tr.step();  // a caller that goes on: the next step decides again
  EXPECT_EQ(tr.exit_reason(), "");

  Trainer quick(options({{"exit_duration_in_mins", "1e-9"}}));
  quick.step();
  EXPECT_NE(quick.exit_reason().find("--exit-duration-in-mins 1e-09: "), std::string::npos)
      << quick.exit_reason();
  EXPECT_NE(quick.exit_reason().find("at iteration 1; nothing saved (no --save)"),
            std::string::npos)
      << quick.exit_reason();
  Trainer roomy(options({{"exit_duration_in_mins", "1000"}}));
  roomy.step();
  EXPECT_EQ(roomy.exit_reason(), "");
}

TEST(Preemption, TheHandlersComeAndGoWithTheScopes) {
  struct sigaction before = {}, during = {}, after = {};
  sigaction(SIGTERM, nullptr, &before);
  {
    ExitSignalScope outer;
    {
      ExitSignalScope inner;
      sigaction(SIGTERM, nullptr, &during);
    }
    struct sigaction still = {};
    sigaction(SIGTERM, nullptr, &still);
    EXPECT_EQ(still.sa_handler, during.sa_handler) << "the inner scope's end removed the handler";
  }
  sigaction(SIGTERM, nullptr, &after);
  EXPECT_NE(during.sa_handler, before.sa_handler);
  EXPECT_EQ(after.sa_handler, before.sa_handler);
}

TEST(PreemptionDeathTest, ASecondSignalEndsTheProcessAtOnce) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        ExitSignalScope scope;
        raise(SIGTERM);  // recorded
        raise(SIGTERM);  // the default action: the process ends here
        std::exit(0);
      },
      testing::KilledBySignal(SIGTERM), "");
}

// `timeout` sends SIGTERM to the process and then to its group: the copy that
// arrives at once from the same sender is the same request (it used to end the
// run before its save), and so is a copy from another sender (`timeout`
// forwarding a group kill it got too); the same signal a second later is a
// second one.
TEST(PreemptionDeathTest, ACopyOfTheFirstSignalFromItsSenderIsNotASecondOne) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        ExitSignalScope scope;
        kill(getpid(), SIGTERM);  // recorded
        kill(getpid(), SIGTERM);  // the same sender at once: the same request
        std::exit(exit_signal_received() == SIGTERM ? 7 : 3);
      },
      testing::ExitedWithCode(7), "");
  EXPECT_EXIT(
      {
        ExitSignalScope scope;
        kill(getpid(), SIGTERM);  // recorded: a kill of the group
        const pid_t forwarder = fork();
        if (forwarder == 0) {  // `timeout`, which got it too, forwards it
          kill(getppid(), SIGTERM);
          _exit(0);
        }
        waitpid(forwarder, nullptr, 0);
        std::exit(exit_signal_received() == SIGTERM ? 7 : 3);
      },
      testing::ExitedWithCode(7), "");
  EXPECT_EXIT(
      {
        ExitSignalScope scope;
        kill(getpid(), SIGTERM);
        usleep(1100 * 1000);
        kill(getpid(), SIGTERM);  // a second request: the process ends here
        std::exit(0);
      },
      testing::KilledBySignal(SIGTERM), "");
}

// Options that act only on the saves a run makes into `save` are refused
// without it (they were ignored, the run exiting 0 having saved nothing).
TEST(Preemption, SaveOptionsWithoutASaveDirectoryAreRefused) {
  for (const auto &[key, value] : std::vector<std::pair<std::string, std::string>>{
           {"save_interval", "1"}, {"async_save", "1"}}) {
    expect_error([&] { options({{key, value}}); }, Status::invalid_config,
                 key + " is set but save is not");
  }
}

// A diagnostic output that can no longer be written (its directory removed
// during the run) is reported once and training goes on: it ended the run,
// and every step since the last save was lost.
TEST(Preemption, AFailedDiagnosticWriteDoesNotEndTheRun) {
  TempDir dir;
  const std::string diag = dir.path + "/diag";
  std::filesystem::create_directories(diag);
  Trainer tr(options({{"timeline", diag + "/t.json"}, {"profile_ops", diag + "/ops.txt"}}));
  tr.step();
  std::filesystem::remove_all(diag);
  ::testing::internal::CaptureStderr();
  EXPECT_NO_THROW(tr.step());
  EXPECT_NO_THROW(tr.step());
  const std::string said = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(said.find("--timeline not written at iteration 2 (training goes on"), std::string::npos)
      << said;
  EXPECT_NE(said.find("--profile-ops not written at iteration 2"), std::string::npos) << said;
  EXPECT_EQ(said.find("iteration 3"), std::string::npos) << "said once: " << said;
  EXPECT_EQ(tr.iteration(), 3);
}

TEST(Preemption, SkippedStepsAreCounted) {
  TrainerOptions o = options({{"fp16", "1"}, {"loss_scale", "2"}});  // static: no overflow of its own
  o.inject_overflow_iteration = 2;
  Trainer tr(o);
  tr.step();
  tr.step();
  tr.step();
  EXPECT_EQ(tr.steps_taken(), 3);
  EXPECT_EQ(tr.steps_skipped(), 1);
}

}  // namespace
