// Preemption and time limits in the trainer (Megatron's --exit-signal-handler,
// --exit-interval, --exit-duration-in-mins): a step that meets one saves and
// says why the run should end (Trainer::exit_reason); a run resumed from that
// checkpoint equals an uninterrupted one bit for bit; a second signal ends the
// process at once; the handlers come and go with the trainer. The launcher's
// side (train_gpt.lua, SIGTERM to a real process, mpirun) is tested by
// tests/lua/preemption.sh and the mpi_exit_signal test.
#include <gtest/gtest.h>
#include <signal.h>

#include <cstring>
#include <string>
#include <vector>

#include "engine/train/config.h"
#include "engine/train/exit_signal.h"
#include "engine/train/trainer.h"
#include "temp_dir.h"
#include "tiny_dataset.h"

using namespace ptdp;

namespace {

// A tiny model on two tensor ranks (threads), dropout on.
TrainerOptions options(const std::vector<std::pair<std::string, std::string>> &more = {}) {
  Config c;
  for (const auto &[k, v] : std::vector<std::pair<std::string, std::string>>{
           {"num_layers", "2"}, {"hidden_size", "32"}, {"num_attention_heads", "4"},
           {"seq_length", "16"}, {"micro_batch_size", "2"}, {"global_batch_size", "4"},
           {"train_iters", "6"}, {"lr", "3e-3"}, {"lr_warmup_iters", "1"},
           {"hidden_dropout", "0.1"}, {"attention_dropout", "0.1"}, {"split", "80,20"},
           {"tensor_model_parallel_size", "2"}, {"num_threads", "1"}})
    c.set(k, v);
  for (const auto &[k, v] : more) c.set(k, v);
  c.set("data_path", tiny_dataset_path());
  return TrainerOptions::from_config(c);
}

std::vector<float> all_weights(const Trainer &tr) {
  std::vector<float> w;
  for (const ParamInfo &p : gpt_param_table(tr.options().model, 1, {})) {
    const std::vector<float> x = tr.gather_parameter(p.name);
    w.insert(w.end(), x.begin(), x.end());
  }
  return w;
}

TEST(Preemption, SignalSavesTheStepAndTheResumedRunEqualsAnUninterruptedOne) {
  TempDir dir;
  std::vector<float> want;
  {
    Trainer whole(options());
    for (int i = 0; i < 6; i++) whole.step();
    want = all_weights(whole);
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
  const std::vector<float> got = all_weights(resumed);
  ASSERT_EQ(got.size(), want.size());
  EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0)
      << "the resumed run's weights differ from the uninterrupted run's";
}

TEST(Preemption, IntervalAndDurationEndTheRun) {
  TempDir dir;
  Trainer tr(options({{"exit_interval", "3"}, {"save", dir.path}}));
  tr.step();
  tr.step();
  EXPECT_EQ(tr.exit_reason(), "");
  tr.step();
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
