// --async-save: step()'s saves copy the state to host memory and a background
// thread writes them while training goes on. The checkpoint of iteration N
// holds iteration N's state although later steps ran during its write (the
// same weights, moments and resumed losses as a synchronous save's); a
// failure in the background is reported and counted as a synchronous one; a
// save, a load and the trainer's end wait for the save in flight. Kills during
// async saves: test_checkpoint_crash.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "engine/train/config.h"
#include "engine/train/trainer.h"
#include "tests/support/temp_dir.h"
#include "tests/support/tiny_dataset.h"
#include "tests/support/trained_run.h"

using namespace ptdp;

namespace {

TrainerOptions options(const std::string &save, bool async) {
  return tiny_tp2_options(tiny_dataset_path(), {{"train_iters", "8"}, {"save_interval", "2"},
                                                {"save", save}, {"async_save", async ? "1" : "0"}});
}

// Loads `ckpt` and takes two more steps: the weights loaded and the losses.
struct Resumed {
  std::vector<float> weights;
  double loss3 = 0, loss4 = 0;
};
Resumed resume(const std::string &ckpt) {
  TempDir scratch;
  Trainer tr(options(scratch.path, false));
  tr.load(ckpt);
  Resumed r;
  r.weights = all_parameters(tr);
  r.loss3 = tr.step().lm_loss;
  r.loss4 = tr.step().lm_loss;
  return r;
}

TEST(AsyncSave, EachCheckpointHoldsItsOwnIterationsState) {
  TempDir sync_dir, async_dir;
  {
    Trainer s(options(sync_dir.path, false)), a(options(async_dir.path, true));
    for (int i = 0; i < 6; i++) {
      s.step();
      a.step();  // iteration 2's and 4's saves run beside the next steps
    }
    a.wait_for_saves();
    EXPECT_EQ(a.failed_saves(), 0) << a.last_save_error();
    EXPECT_EQ(a.last_saved(), async_dir.path + "/iter_0000006");
  }
  for (const char *it : {"/iter_0000002", "/iter_0000004", "/iter_0000006"}) {
    SCOPED_TRACE(it);
    const Resumed want = resume(sync_dir.path + it), got = resume(async_dir.path + it);
    EXPECT_TRUE(same_bits(got.weights, want.weights)) << "the weights differ from the synchronous save's";
    // The moments and the data position too: the next steps' losses, bit for bit.
    EXPECT_EQ(got.loss3, want.loss3);
    EXPECT_EQ(got.loss4, want.loss4);
  }
}

// A background save that cannot write (the file size limit: EFBIG, as a full
// disk) is reported and counted; training goes on and the previous checkpoint
// stays the newest.
TEST(AsyncSave, AFailedBackgroundSaveIsReportedAndCounted) {
  TempDir dir;
  Trainer tr(options(dir.path, true));
  tr.step();
  tr.step();  // iteration 2: a save that succeeds
  EXPECT_EQ(tr.wait_for_saves() >= 0, true);
  ASSERT_EQ(tr.failed_saves(), 0) << tr.last_save_error();
  struct rlimit old;
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &old), 0);
  struct sigaction ignore = {}, prev;
  ignore.sa_handler = SIG_IGN;
  sigaction(SIGXFSZ, &ignore, &prev);
  struct rlimit small = old;
  small.rlim_cur = 4096;  // the checkpoint is larger
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &small), 0);
  tr.step();
  tr.step();  // iteration 4: its save fails in the background
  tr.step();  // training goes on
  tr.wait_for_saves();
  setrlimit(RLIMIT_FSIZE, &old);
  sigaction(SIGXFSZ, &prev, nullptr);
  EXPECT_EQ(tr.failed_saves(), 1);
  EXPECT_NE(tr.last_save_error().find("checkpoint of iteration 4 not saved"), std::string::npos)
      << tr.last_save_error();
  EXPECT_EQ(tr.last_saved(), dir.path + "/iter_0000002");
  EXPECT_FALSE(std::filesystem::exists(dir.path + "/iter_0000004"));
  EXPECT_EQ(tr.iteration(), 5);
}

// save() and load() wait for the save in flight (it owns the host staging a
// load fills), and a trainer that ends leaves its last save on disk.
TEST(AsyncSave, SaveLoadAndTheEndWaitForIt) {
  TempDir dir, other;
  {
    Trainer tr(options(dir.path, true));
    tr.step();
    tr.step();  // in flight
    EXPECT_EQ(tr.save(other.path), other.path + "/iter_0000002");
    EXPECT_EQ(tr.last_saved(), other.path + "/iter_0000002");
    EXPECT_TRUE(std::filesystem::exists(dir.path + "/iter_0000002/manifest.json"));
    tr.step();
    tr.step();  // iteration 4 in flight
    tr.load(dir.path + "/iter_0000002");
    EXPECT_EQ(tr.iteration(), 2);
    EXPECT_TRUE(std::filesystem::exists(dir.path + "/iter_0000004/manifest.json"));
    tr.step();
    tr.step();  // iteration 4 again, in flight as the trainer ends
  }
  EXPECT_TRUE(std::filesystem::exists(dir.path + "/iter_0000004/manifest.json"));
}

}  // namespace
