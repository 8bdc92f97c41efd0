// CRC32C and the checkpoint commit protocol (ARCHITECTURE §5): crashes are
// simulated by leaving the directories a crashed save would leave.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <functional>
#include <fstream>
#include <random>
#include <sstream>

#include "checkpoints/commit.h"
#include "checkpoints/manifest.h"
#include "engine/core/output_file.h"
#include "checkpoints/disk_bandwidth.h"
#include "checkpoints/crc32c.h"
#include "engine/core/status.h"
#include "tests/support/expect_error.h"
#include "tests/support/temp_dir.h"

using namespace ptdp;
namespace fs = std::filesystem;

namespace {

// The writer these tests save as (SaveRootLock's owner): its saves share a root.
const int kWriter = 0;

std::string slurp(const std::string &path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void spit(const std::string &path, const std::string &text) { std::ofstream(path) << text; }

// What a save writes, as the rules tell it from a user's file of that name: a
// model.h5 opening with HDF5's signature, a manifest naming ptdp's format.
std::string h5(const std::string &text) { return std::string("\x89HDF\r\n\x1a\n", 8) + text; }
std::string manifest_json(const std::string &more = "") {
  return "{\"format\": \"ptdp-checkpoint\"" + (more.empty() ? "" : ", " + more) + "}";
}

// A fresh directory per test, removed afterwards.
class Commit : public ::testing::Test {
 protected:
  void SetUp() override { root = scratch.path + "/ckpt"; }
  // A whole save: a data file, then the commit.
  std::string save(int64_t iteration, const std::string &manifest = manifest_json()) {
    std::string tmp = begin_checkpoint(root, iteration, &kWriter);
    spit(tmp + "/model.h5", h5("weights " + std::to_string(iteration)));
    return commit_checkpoint(root, iteration, manifest);
  }
  TempDir scratch{"ptdp_commit"};
  const std::string &dir = scratch.path;
  std::string root;
};

}  // namespace

TEST(Crc32c, KnownVectors) {
  EXPECT_EQ(crc32c(0, "123456789", 9), 0xE3069283u);
  EXPECT_EQ(crc32c_table(0, "123456789", 9), 0xE3069283u);
  EXPECT_EQ(crc32c(0, "", 0), 0u);
  std::string zeros(32, '\0'), ones(32, '\xff');  // RFC 3720 B.4
  EXPECT_EQ(crc32c(0, zeros.data(), 32), 0x8A9136AAu);
  EXPECT_EQ(crc32c_table(0, ones.data(), 32), 0x62A8AB43u);
}

TEST(Crc32c, IncrementalEqualsOneShotAndHardwareEqualsTable) {
  std::mt19937 rng(7);
  std::vector<unsigned char> buf(4099);
  for (auto &b : buf) b = (unsigned char)rng();
  for (size_t n : {1, 3, 7, 8, 9, 15, 17, 63, 255, 1001, 4097}) {
    size_t off = rng() % 3;  // unaligned starts too
    uint32_t whole = crc32c_table(0, buf.data() + off, n);
    EXPECT_EQ(crc32c(0, buf.data() + off, n), whole) << "n=" << n << " hw=" << crc32c_hardware();
    size_t cut = rng() % (n + 1);
    uint32_t part = crc32c(0, buf.data() + off, cut);
    EXPECT_EQ(crc32c(part, buf.data() + off + cut, n - cut), whole) << "n=" << n;
    EXPECT_EQ(crc32c_table(crc32c_table(0, buf.data() + off, cut), buf.data() + off + cut, n - cut),
              whole);
  }
}

TEST(CheckpointName, SevenDigitsOrMore) {
  EXPECT_EQ(checkpoint_name(0), "iter_0000000");
  EXPECT_EQ(checkpoint_name(1000), "iter_0001000");
  EXPECT_EQ(checkpoint_name(123456789), "iter_123456789");
  expect_error([] { checkpoint_name(-1); }, Status::bad_value, "must be >= 0, got -1");
}

// A save swaps out an iter_N of its own iteration only when a save made it
// (its manifest is there): a user's directory or file of that name stays.
TEST_F(Commit, AnIterDirectoryThatIsNoCheckpointIsNotReplaced) {
  fs::create_directories(root + "/iter_0000002");
  spit(root + "/iter_0000002/notes.txt", "mine");
  expect_error([&] { begin_checkpoint(root, 2, &kWriter); }, Status::io_error,
               "iter_0000002' holds '" + root + "/iter_0000002/notes.txt', which no save made");
  EXPECT_TRUE(fs::exists(root + "/iter_0000002/notes.txt"));
  // A rotation cut short (only the data file left) and a save killed while
  // writing its manifest (the manifest's temporary left): a save's files only,
  // which the next save of that iteration clears.
  fs::create_directories(root + "/iter_0000007");
  spit(root + "/iter_0000007/model.h5", h5("half pruned"));
  fs::create_directories(root + "/iter_0000007.tmp");
  spit(root + "/iter_0000007.tmp/model.h5", h5("killed"));
  spit(root + "/iter_0000007.tmp/manifest.json.tmp.Ab12Cd", "{\"half");
  EXPECT_EQ(begin_checkpoint(root, 7, &kWriter), root + "/iter_0000007.tmp");
  EXPECT_FALSE(fs::exists(root + "/iter_0000007"));
  EXPECT_TRUE(fs::is_empty(root + "/iter_0000007.tmp"));
  // A tracker edited by hand (a trailing CR, spaces around) is still a tracker.
  spit(root + "/latest", "iter_0000007\r\n");
  EXPECT_NO_THROW(begin_checkpoint(root, 8, &kWriter));
  spit(root + "/latest", " \titer_0000007 \n");
  EXPECT_NO_THROW(begin_checkpoint(root, 9, &kWriter));
  spit(root + "/iter_0000003", "a file");
  expect_error([&] { begin_checkpoint(root, 3, &kWriter); }, Status::io_error, "iter_0000003' is not a directory");
  // A complete checkpoint of that iteration is swapped out as before.
  begin_checkpoint(root, 4, &kWriter);
  commit_checkpoint(root, 4, manifest_json());
  begin_checkpoint(root, 4, &kWriter);
  EXPECT_EQ(commit_checkpoint(root, 4, manifest_json("\"again\": 1")), root + "/iter_0000004");
}

TEST_F(Commit, BeginAndCommitMakeFinalDirManifestAndTracker) {
  std::string tmp = begin_checkpoint(root, 1000, &kWriter);  // root made on the way
  EXPECT_EQ(tmp, root + "/iter_0001000.tmp");
  EXPECT_TRUE(fs::is_directory(tmp));
  spit(tmp + "/model.h5", h5("weights"));
  std::string final_dir = commit_checkpoint(root, 1000, manifest_json("\"n\": 1"));
  EXPECT_EQ(final_dir, root + "/iter_0001000");
  EXPECT_FALSE(fs::exists(tmp));
  EXPECT_EQ(slurp(final_dir + "/model.h5"), h5("weights"));
  EXPECT_EQ(slurp(final_dir + "/manifest.json"), manifest_json("\"n\": 1"));
  EXPECT_EQ(slurp(root + "/latest"), "iter_0001000\n");
  EXPECT_FALSE(temp_left_beside(root + "/latest"));
  std::string why;
  EXPECT_EQ(find_latest_checkpoint(root, &why), final_dir);
  EXPECT_EQ(why, "from the tracker 'latest'");
}

// Checkpoints never nest: a save (the trainer's, an import's) into a
// checkpoint directory, or into a root named as one, is refused before
// anything is made, and the checkpoint stays as it was.
TEST_F(Commit, CheckpointsNeverNest) {
  const std::string first = save(10);
  for (const std::string &inner : {first, first + "/sub", first + "/../iter_0000010/x"})
    expect_error([&] { begin_checkpoint(inner, 20, &kWriter); }, Status::invalid_argument,
                 "checkpoint root '" + inner + "' is");
  EXPECT_EQ(complete_checkpoints(root), std::vector<std::string>{first});
  EXPECT_FALSE(fs::exists(first + "/sub"));
  EXPECT_EQ(complete_checkpoints(dir + "/absent"), std::vector<std::string>{});
}

// The tracker's temporary file is a fresh one of its own: a link or a FIFO
// someone left under the old fixed name (latest.tmp) is neither followed nor
// opened (a FIFO would hang the save, a link would truncate its target).
TEST_F(Commit, TrackerNeverWritesThroughWhatIsThere) {
  fs::create_directories(root);
  const std::string precious = dir + "/precious.txt";
  spit(precious, "keep me");
  fs::create_symlink(precious, root + "/latest.tmp");
  ASSERT_EQ(::mkfifo((root + "/latest.tmp.fifo").c_str(), 0644), 0);
  begin_checkpoint(root, 7, &kWriter);
  commit_checkpoint(root, 7, manifest_json());
  EXPECT_EQ(slurp(root + "/latest"), "iter_0000007\n");
  EXPECT_EQ(slurp(precious), "keep me");
  EXPECT_TRUE(fs::is_symlink(root + "/latest.tmp"));
}

// A link named latest or iter_N is the user's (no save makes one): refused
// before training and by the save, and it stays (the commit had replaced a
// link named latest, to a user's notes, with the tracker).
TEST_F(Commit, ALinkNamedAsASavesEntryIsRefusedAndKept) {
  const std::string notes = dir + "/notes.txt";
  spit(notes, "my notes");
  for (const char *name : {"latest", "iter_0000007"}) {
    SCOPED_TRACE(name);
    fs::remove_all(root);
    fs::create_directories(root);
    fs::create_symlink(notes, root + "/" + name);
    expect_error([&] { check_save_root(root); }, Status::io_error, "is a symbolic link, which no save makes");
    expect_error([&] { begin_checkpoint(root, 7, &kWriter); }, Status::io_error,
                 "is a symbolic link, which no save makes");
    EXPECT_TRUE(fs::is_symlink(root + "/" + name));
    EXPECT_EQ(slurp(notes), "my notes");
  }
}

// The disk measurement writes a file of its own: what is already in the
// directory (here a link under its old fixed name) is neither followed nor
// left behind.
TEST_F(Commit, DiskBandwidthNeverWritesThroughWhatIsThere) {
  fs::create_directories(root);
  const std::string precious = dir + "/precious.txt";
  spit(precious, "keep me");
  fs::create_symlink(precious, root + "/ptdp_disk_bandwidth.tmp");
  const DiskBandwidth bw = measure_disk_bandwidth(root, 1 << 20);
  EXPECT_GT(bw.write_gbps, 0);
  EXPECT_GT(bw.read_gbps, 0);
  EXPECT_EQ(slurp(precious), "keep me");
  size_t entries = 0;
  for (const auto &e : fs::directory_iterator(root)) entries += e.exists() || e.is_symlink();
  EXPECT_EQ(entries, 1u);  // the link alone: the measurement's file is gone
}

TEST_F(Commit, CommitWithoutBeginIsWrongState) {
  fs::create_directories(root);
  expect_error([&] { commit_checkpoint(root, 5, manifest_json()); }, Status::wrong_state,
               "call begin_checkpoint first");
}

TEST_F(Commit, CrashedSaveIsIgnoredThenCleanedByBegin) {
  save(100);
  // Crash in the middle of saving 200: data half written, no manifest, no rename.
  fs::create_directories(root + "/iter_0000200.tmp");
  spit(root + "/iter_0000200.tmp/model.h5", h5("half"));
  EXPECT_EQ(find_latest_checkpoint(root), root + "/iter_0000100");
  fs::remove(root + "/latest");  // even without the tracker the .tmp is not taken
  std::string why;
  EXPECT_EQ(find_latest_checkpoint(root, &why), root + "/iter_0000100");
  EXPECT_NE(why.find("tracker was missing"), std::string::npos) << why;
  EXPECT_NE(why.find("iter_0000200.tmp is an unfinished save"), std::string::npos) << why;
  std::string tmp = begin_checkpoint(root, 200, &kWriter);
  EXPECT_TRUE(fs::is_empty(tmp));  // the leftover is gone
}

TEST_F(Commit, DirectoryWithoutManifestIsSkipped) {
  save(100);
  fs::create_directories(root + "/iter_0000300");  // damaged: data but no manifest
  spit(root + "/iter_0000300/model.h5", h5("?"));
  spit(root + "/latest", "iter_0000300\n");
  std::string why;
  EXPECT_EQ(find_latest_checkpoint(root, &why), root + "/iter_0000100");
  EXPECT_NE(why.find("stale: it names 'iter_0000300', which has no manifest.json"), std::string::npos)
      << why;
  // prune leaves damaged directories alone.
  save(400);
  prune_checkpoints(root, 1);
  EXPECT_TRUE(fs::exists(root + "/iter_0000300"));
  // A manifest through a link is none (a save makes no links; a load refuses
  // one): the directory is damaged, not the newest complete checkpoint.
  save(500);
  fs::rename(root + "/iter_0000500/manifest.json", root + "/elsewhere.json");
  fs::create_symlink(root + "/elsewhere.json", root + "/iter_0000500/manifest.json");
  EXPECT_EQ(find_latest_checkpoint(root, &why), root + "/iter_0000400");
  EXPECT_NE(why.find("iter_0000500', which has a manifest.json that is a symbolic link"), std::string::npos)
      << why;
  expect_error([&] { Manifest::read(root + "/iter_0000500"); }, Status::corrupt_data,
               "manifest.json' is a symbolic link: a checkpoint's manifest is a regular file");
}

// Rotation after a rewind: the checkpoints newer than the save just made (the
// line the rewind left) are neither counted nor removed, and said so; the
// newest keep_last at or below it are this run's.
TEST_F(Commit, RotationAfterARewindCountsFromTheSaveJustMade) {
  for (int it : {100, 200, 300, 400}) save(it);
  spit(root + "/latest", "iter_0000200\n");  // this run's save of 200, after loading 100
  ::testing::internal::CaptureStderr();
  const std::vector<std::string> removed = prune_checkpoints(root, 1, {}, 200);
  const std::string said = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(removed, (std::vector<std::string>{root + "/iter_0000100"}));
  for (const char *kept : {"iter_0000200", "iter_0000300", "iter_0000400"})
    EXPECT_TRUE(fs::exists(root + "/" + kept)) << kept;
  EXPECT_NE(said.find("rotation kept '" + root + "/iter_0000400': it is newer than this run's saves"),
            std::string::npos)
      << said;
}

TEST_F(Commit, StaleTrackerFallsBackToNewestComplete) {
  save(100);
  save(200);
  fs::remove_all(root + "/iter_0000200");  // the tracker now names nothing
  std::string why;
  EXPECT_EQ(find_latest_checkpoint(root, &why), root + "/iter_0000100");
  EXPECT_EQ(why.rfind("newest complete directory; the tracker was stale", 0), 0u) << why;
  EXPECT_NE(why.find("'iter_0000200', which does not exist"), std::string::npos) << why;
  spit(root + "/latest", "garbage\n");
  EXPECT_EQ(find_latest_checkpoint(root, &why), root + "/iter_0000100");
  EXPECT_NE(why.find("'garbage', which is not a checkpoint name"), std::string::npos) << why;
  // Its bytes shown printable (a NUL had cut the report printed through %s).
  spit(root + "/latest", std::string("iter_0000100\0junk", 17));
  EXPECT_EQ(find_latest_checkpoint(root, &why), root + "/iter_0000100");
  EXPECT_NE(why.find("'iter_0000100\\x00junk', which is not a checkpoint name"), std::string::npos) << why;
  // A second line (it was ignored in silence) and a tracker too large to be
  // one line (it read as holding '') are named as such.
  spit(root + "/latest", "iter_0000200\niter_0000100\n");
  EXPECT_EQ(find_latest_checkpoint(root, &why), root + "/iter_0000100");
  EXPECT_NE(why.find("it holds more than one line (the first: 'iter_0000200')"), std::string::npos) << why;
  spit(root + "/latest", "iter_0000100\n" + std::string(5000, '\0'));
  EXPECT_EQ(find_latest_checkpoint(root, &why), root + "/iter_0000100");
  EXPECT_NE(why.find("is 5013 bytes; at most 4096 are read"), std::string::npos) << why;
  // A tracker that is no file is named for what it is (never opened: a FIFO blocks).
  fs::remove(root + "/latest");
  ASSERT_EQ(::mkfifo((root + "/latest").c_str(), 0644), 0);
  EXPECT_EQ(find_latest_checkpoint(root, &why), root + "/iter_0000100");
  EXPECT_NE(why.find("latest' is a FIFO, not a one-line file naming a checkpoint"), std::string::npos)
      << why;
  // A manifest that is there but no file is named as such (it was "has no manifest.json").
  fs::remove(root + "/latest");
  spit(root + "/latest", "iter_0000200\n");
  fs::create_directories(root + "/iter_0000200");
  ASSERT_EQ(::mkfifo((root + "/iter_0000200/manifest.json").c_str(), 0644), 0);
  EXPECT_EQ(find_latest_checkpoint(root, &why), root + "/iter_0000100");
  EXPECT_NE(why.find("'iter_0000200', which has a manifest.json that is not a regular file"), std::string::npos)
      << why;
}

TEST_F(Commit, NoCompleteCheckpointListsWhatIsThere) {
  expect_error([&] { find_latest_checkpoint(root); }, Status::io_error, root);  // no root at all
  fs::create_directories(root + "/iter_0000200.tmp");
  fs::create_directories(root + "/iter_0000100");
  fs::create_directories(root + "/other");
  expect_error([&] { find_latest_checkpoint(root); }, Status::io_error,
               "no complete checkpoint in '" + root + "'");
  expect_error([&] { find_latest_checkpoint(root); }, Status::io_error,
               "found: iter_0000200.tmp is an unfinished save, iter_0000100 has no manifest.json");
  fs::remove_all(root);
  fs::create_directories(root);
  expect_error([&] { find_latest_checkpoint(root); }, Status::io_error, "no iter_NNNNNNN directories");
  // A checkpoint copied under another spelling of its name is named, with why.
  fs::create_directories(root + "/iter_2");
  fs::create_directories(root + "/iter_00000005");
  expect_error([&] { find_latest_checkpoint(root); }, Status::io_error,
               "; not checkpoint names (iter_ and the iteration zero-padded to 7 digits, as iter_0000002): 'iter_");
  expect_error([&] { find_latest_checkpoint(root); }, Status::io_error, "'iter_2'");
}

TEST_F(Commit, RecommitReplacesTheSameIteration) {
  save(100, manifest_json("\"v\": 1"));
  std::string tmp = begin_checkpoint(root, 100, &kWriter);
  spit(tmp + "/model.h5", h5("second"));
  commit_checkpoint(root, 100, manifest_json("\"v\": 2"));
  EXPECT_EQ(slurp(root + "/iter_0000100/manifest.json"), manifest_json("\"v\": 2"));
  EXPECT_EQ(slurp(root + "/iter_0000100/model.h5"), h5("second"));
  EXPECT_FALSE(fs::exists(tmp));
  EXPECT_FALSE(fs::exists(root + "/iter_0000100.old"));
  // A file a user put into the checkpoint: the save of its iteration is
  // refused before it begins, and the checkpoint stays as it is (swapped out,
  // it stayed under the .tmp name, where every later save of it stopped).
  spit(root + "/iter_0000100/notes", "mine");
  expect_error([&] { begin_checkpoint(root, 100, &kWriter); }, Status::io_error,
               "iter_0000100/notes', which no save made: the save of iteration 100 would replace it");
  EXPECT_EQ(slurp(root + "/iter_0000100/notes"), "mine");
  EXPECT_EQ(slurp(root + "/iter_0000100/model.h5"), h5("second"));
  EXPECT_FALSE(fs::exists(tmp));
}

// Rotation and a crashed save's leftover go only when they hold nothing but a
// save's files; a user's file inside is kept with its directory.
TEST_F(Commit, NothingANoSaveMadeIsRemoved) {
  for (int it : {100, 200, 300}) save(it);
  spit(root + "/iter_0000100/data.ptdp", "a user's dataset");
  fs::create_directories(root + "/iter_0000400.tmp");
  spit(root + "/iter_0000400.tmp/notes.txt", "precious");
  std::vector<std::string> removed = prune_checkpoints(root, 1);
  EXPECT_EQ(removed, (std::vector<std::string>{root + "/iter_0000200"}));
  EXPECT_EQ(slurp(root + "/iter_0000100/data.ptdp"), "a user's dataset");
  expect_error([&] { begin_checkpoint(root, 400, &kWriter); }, Status::io_error,
               "iter_0000400.tmp' holds '" + root + "/iter_0000400.tmp/notes.txt', which no save made");
  EXPECT_EQ(slurp(root + "/iter_0000400.tmp/notes.txt"), "precious");
  spit(root + "/iter_0000500.tmp", "a file");
  expect_error([&] { begin_checkpoint(root, 500, &kWriter); }, Status::io_error, "is not a directory");
  // A file named like a save's temporary but not mkstemp's six characters.
  fs::create_directories(root + "/iter_0000700.tmp");
  spit(root + "/iter_0000700.tmp/manifest.json.tmp.notes", "mine");
  expect_error([&] { begin_checkpoint(root, 700, &kWriter); }, Status::io_error, "manifest.json.tmp.notes");
  EXPECT_EQ(slurp(root + "/iter_0000700.tmp/manifest.json.tmp.notes"), "mine");
  // A link where a save's temporary directory goes: refused, not unlinked.
  fs::create_directory_symlink(dir, root + "/iter_0000800.tmp");
  expect_error([&] { begin_checkpoint(root, 800, &kWriter); }, Status::io_error, "is a symbolic link");
  EXPECT_TRUE(fs::is_symlink(root + "/iter_0000800.tmp"));
  // A tracker that is something else is not replaced either.
  spit(root + "/latest", "not a tracker, a user's file");
  expect_error([&] { begin_checkpoint(root, 600, &kWriter); }, Status::io_error,
               "latest' exists and is not a checkpoint tracker");
}

// A rotation cut short by a kill (its model.h5 removed, not yet its
// directory) leaves iter_N.old, never an iter_N without its manifest that no
// later rotation would touch; the next rotation finishes it. One holding a
// file no save made stays.
TEST_F(Commit, ARotationCutShortIsFinishedByTheNext) {
  for (int it : {100, 200, 300}) save(it);
  fs::create_directories(root + "/iter_0000050.old");  // a removal marked, then cut short
  spit(root + "/iter_0000050.old/removing", "");
  spit(root + "/iter_0000050.old/model.h5", h5("half removed"));
  fs::create_directories(root + "/iter_0000060.old");
  spit(root + "/iter_0000060.old/removing", "");
  spit(root + "/iter_0000060.old/notes.txt", "the user's");
  // A user's copy of a checkpoint named iter_N.old (no mark; a sweep found it
  // removed), and a link of that name (unlinked before): both stay.
  fs::create_directories(root + "/iter_0000070.old");
  spit(root + "/iter_0000070.old/manifest.json", "{}");
  spit(root + "/iter_0000070.old/model.h5", h5("a backup"));
  fs::create_directory_symlink(root + "/iter_0000300", root + "/iter_0000080.old");
  prune_checkpoints(root, 1);
  EXPECT_FALSE(fs::exists(root + "/iter_0000050.old"));
  EXPECT_TRUE(fs::exists(root + "/iter_0000060.old/notes.txt"));
  EXPECT_EQ(slurp(root + "/iter_0000070.old/model.h5"), h5("a backup"));
  EXPECT_TRUE(fs::is_symlink(root + "/iter_0000080.old"));
  for (const char *gone : {"iter_0000100", "iter_0000100.old", "iter_0000200", "iter_0000200.old"})
    EXPECT_FALSE(fs::exists(root + "/" + gone)) << gone;
  EXPECT_TRUE(fs::exists(root + "/iter_0000300/manifest.json"));
}

// What a save would have to replace is found before a run trains
// (check_save_root, the trainer's start), with the reason a save would give.
TEST_F(Commit, ASaveDirectorysNamesAreCheckedUpFront) {
  check_save_root(root);  // not there yet: nothing to check
  for (int it : {100, 200}) save(it);
  fs::create_directories(root + "/iter_0000150.tmp");  // a crashed save's leftover: a save's to clear
  spit(root + "/iter_0000150.tmp/model.h5", h5("partial"));
  spit(root + "/notes.txt", "not a checkpoint's name: none of ptdp's business");
  check_save_root(root);
  const std::pair<std::string, std::string> refused[] = {
      {"iter_0000400", "is not a directory"},
      {"iter_0000500.old", "is not a removal a save began"},
      {"iter_0000600.tmp", "is a symbolic link"},
      {"iter_0000300", "is a symbolic link"},  // (a save of 300 would replace the user's link)
      {"latest", "exists and is not a checkpoint tracker"}};
  for (const auto &[name, why] : refused) {
    const std::string path = root + "/" + name;
    fs::rename(root + "/latest", dir + "/latest.kept");
    if (name == "iter_0000500.old") {
      fs::create_directories(path);
      spit(path + "/manifest.json", manifest_json());
    } else if (name == "iter_0000600.tmp" || name == "iter_0000300") {
      fs::create_directory_symlink(name == "iter_0000300" ? root + "/iter_0000100" : dir, path);
    } else {
      spit(path, "a user's file");
    }
    expect_error([&] { check_save_root(root); }, Status::io_error, "'" + path + "' " + why);
    fs::remove_all(path);
    fs::rename(dir + "/latest.kept", root + "/latest");
    check_save_root(root);
  }
}

// Without rotation (keep_last 0) every complete checkpoint stays, and a
// killed save's leftover (SIGKILL: no cleanup ran) still goes.
TEST_F(Commit, PruneWithoutRotationClearsOnlyKilledSavesLeftovers) {
  for (int it : {100, 200}) save(it);
  fs::create_directories(root + "/iter_0000150.tmp");  // a save killed outright
  fs::create_directories(root + "/iter_0000300.tmp");  // may be a save under way
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(prune_checkpoints(root, 0), (std::vector<std::string>{root + "/iter_0000150.tmp"}));
  const std::string said = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(said.find("removed '" + root + "/iter_0000150.tmp', what a save killed before its commit left"),
            std::string::npos) << said;
  for (const char *kept : {"iter_0000100", "iter_0000200", "iter_0000300.tmp"})
    EXPECT_TRUE(fs::exists(root + "/" + kept)) << kept;
}

TEST_F(Commit, PruneKeepsNewestKAndTheTrackedOne) {
  for (int it : {100, 200, 300, 400, 500}) save(it);
  fs::create_directories(root + "/iter_0000050.tmp");  // stale: older than 500
  fs::create_directories(root + "/iter_0000600.tmp");  // may be a save under way
  spit(root + "/latest", "iter_0000200\n");            // e.g. rolled back by hand
  std::vector<std::string> removed = prune_checkpoints(root, 2);
  std::sort(removed.begin(), removed.end());
  EXPECT_EQ(removed, (std::vector<std::string>{root + "/iter_0000050.tmp", root + "/iter_0000100",
                                               root + "/iter_0000300"}));
  for (const char *kept : {"iter_0000200", "iter_0000400", "iter_0000500", "iter_0000600.tmp"})
    EXPECT_TRUE(fs::exists(root + "/" + kept)) << kept;
  EXPECT_TRUE(prune_checkpoints(root, 2).empty());
  expect_error([&] { prune_checkpoints(root, -1); }, Status::bad_value, "keep_last must be >= 0");
  // One this run reads (it loaded it) is kept too, and the reason says so.
  hold_input(root + "/iter_0000400/manifest.json", "checkpoint file");
  spit(root + "/latest", "iter_0000500\n");
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(prune_checkpoints(root, 1), (std::vector<std::string>{root + "/iter_0000200"}));
  EXPECT_TRUE(fs::exists(root + "/iter_0000400/manifest.json"));
  EXPECT_NE(::testing::internal::GetCapturedStderr().find(
                "rotation kept '" + root + "/iter_0000400': it holds '" + root +
                "/iter_0000400/manifest.json', which this run reads"),
            std::string::npos);
  // Once: the next rotation keeps it again without saying it again.
  ::testing::internal::CaptureStderr();
  EXPECT_TRUE(prune_checkpoints(root, 1).empty());
  EXPECT_TRUE(fs::exists(root + "/iter_0000400/manifest.json"));
  EXPECT_EQ(::testing::internal::GetCapturedStderr().find("rotation kept"), std::string::npos);
}

// A save or a rotation tells a save's files by what they hold, not only by
// their names: notes saved as model.h5 in an iter_N or iter_N.tmp, a web app's
// manifest.json in an iter_N (a sweep found each removed) stay; so does a
// checkpoint that not_this_runs says is another run's (one copied into the
// --save directory of a resumed run, which rotation removed).
TEST_F(Commit, WhatNoSaveOfThisRunMadeStays) {
  fs::create_directories(root + "/iter_0000001");
  spit(root + "/iter_0000001/model.h5", "my own weights, not HDF5");
  fs::create_directories(root + "/iter_0000002.tmp");
  spit(root + "/iter_0000002.tmp/model.h5", "another file of mine");
  expect_error([&] { begin_checkpoint(root, 1, &kWriter); }, Status::io_error,
               "iter_0000001/model.h5', which no save made");
  expect_error([&] { begin_checkpoint(root, 2, &kWriter); }, Status::io_error,
               "iter_0000002.tmp/model.h5', which no save made");
  // A save cut short under mpirun: parallel HDF5 writes the signature last,
  // so its model.h5 begins with zeros. In iter_N.tmp that is a save's own
  // (called no save's, it stopped every resume); in a final iter_N it is not.
  fs::create_directories(root + "/iter_0000003.tmp");
  spit(root + "/iter_0000003.tmp/model.h5", std::string(4096, '\0') + "shard data");
  EXPECT_EQ(begin_checkpoint(root, 3, &kWriter), root + "/iter_0000003.tmp");
  abandon_checkpoint(root, 3);
  fs::create_directories(root + "/iter_0000004");
  spit(root + "/iter_0000004/model.h5", std::string(4096, '\0'));
  expect_error([&] { begin_checkpoint(root, 4, &kWriter); }, Status::io_error,
               "iter_0000004/model.h5', which no save made");
  fs::remove_all(root + "/iter_0000004");
  fs::create_directories(root + "/iter_0000000");
  spit(root + "/iter_0000000/manifest.json", "{\"name\": \"my web app\"}");
  for (int it : {100, 200, 300}) save(it);
  ::testing::internal::CaptureStderr();
  const std::vector<std::string> removed = prune_checkpoints(root, 1, [&](const std::string &d) {
    return d == root + "/iter_0000100" ? std::string("is another run's checkpoint (seed: 7 and 1)") : "";
  });
  const std::string said = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(removed, (std::vector<std::string>{root + "/iter_0000200"}));
  EXPECT_NE(said.find("rotation kept '" + root + "/iter_0000100': it is another run's checkpoint"),
            std::string::npos) << said;
  for (const char *kept : {"iter_0000000/manifest.json", "iter_0000001/model.h5",
                           "iter_0000002.tmp/model.h5", "iter_0000100/manifest.json"})
    EXPECT_TRUE(fs::exists(root + "/" + kept)) << kept;
}

// A checkpoint directory that is a symbolic link (to a directory outside the
// save directory) is never deleted through, and the link stays: rotation
// removes only what the saves made.
TEST_F(Commit, PruneNeverDeletesThroughALink) {
  const std::string outside = dir + "/elsewhere";
  fs::create_directories(outside);
  spit(outside + "/manifest.json", "{}");
  spit(outside + "/weights.h5", "precious");
  for (int it : {300, 400}) save(it);
  fs::create_symlink(outside, root + "/iter_0000100");  // older than both: would be dropped
  fs::create_symlink(outside, root + "/iter_0000050.tmp");
  std::vector<std::string> removed = prune_checkpoints(root, 1);
  EXPECT_EQ(removed, (std::vector<std::string>{root + "/iter_0000300"}));
  EXPECT_TRUE(fs::is_symlink(root + "/iter_0000100"));
  EXPECT_TRUE(fs::is_symlink(root + "/iter_0000050.tmp"));
  EXPECT_EQ(slurp(outside + "/manifest.json"), "{}");
  EXPECT_EQ(slurp(outside + "/weights.h5"), "precious");
}

TEST_F(Commit, UnwritableRootIsIoErrorNamingThePath) {
  // Under a regular file: ENOTDIR, even for root (who ignores permissions).
  spit(dir + "/file", "x");
  std::string bad = dir + "/file/sub";
  expect_error([&] { begin_checkpoint(bad, 1, &kWriter); }, Status::io_error, "'" + bad + "'");
  expect_error([&] { begin_checkpoint(dir + "/file", 1, &kWriter); }, Status::io_error, "not a directory");
  if (::geteuid() != 0) {
    fs::create_directories(root);
    ::chmod(root.c_str(), 0500);
    expect_error([&] { begin_checkpoint(root, 1, &kWriter); }, Status::io_error, "'" + root + "'");
    ::chmod(root.c_str(), 0700);
  }
}

// Another process, in step with this one: `body` runs in a forked child that
// says when it is ready (ready()) and waits for the go (go()); the parent
// waits for ready(), does its part, then go() and finish() (the child's exit
// status, 0 when its body returned).
class OtherProcess {
 public:
  explicit OtherProcess(const std::function<void(OtherProcess &)> &body) {
    if (::pipe(to_parent_) != 0 || ::pipe(to_child_) != 0) std::abort();
    pid_ = ::fork();
    if (pid_ == 0) {
      try {
        body(*this);
      } catch (...) {
        ::_exit(2);
      }
      ::_exit(0);
    }
  }
  ~OtherProcess() {
    for (int fd : {to_parent_[0], to_parent_[1], to_child_[0], to_child_[1]}) ::close(fd);
  }
  void ready() { signal(to_parent_[1]); }              // the child's side
  void wait_for_go() { wait(to_child_[0]); }
  void wait_until_ready() { wait(to_parent_[0]); }    // the parent's side
  void go() { signal(to_child_[1]); }
  int finish() {
    int status = 0;
    if (::waitpid(pid_, &status, 0) != pid_ || !WIFEXITED(status)) return -1;
    return WEXITSTATUS(status);
  }

 private:
  void signal(int fd) {
    const char c = 'y';
    if (::write(fd, &c, 1) != 1) ::_exit(1);
  }
  void wait(int fd) {
    char c;
    if (::read(fd, &c, 1) != 1) ::_exit(1);
  }
  int to_parent_[2], to_child_[2];
  pid_t pid_ = -1;
};

// Two runs saving into one directory at once replaced and pruned each other's
// checkpoints, one reporting the other's as its own: the second process is
// refused while the first holds the directory.
TEST_F(Commit, OneProcessSavesIntoADirectoryAtATime) {
  fs::create_directories(root);
  OtherProcess other([&](OtherProcess &me) {  // holds the directory until the parent says so
    SaveRootLock held(root, &kWriter);
    me.ready();
    me.wait_for_go();
  });
  other.wait_until_ready();
  expect_error([&] { SaveRootLock second(root, &kWriter); }, Status::invalid_config,
               "is being saved into by another process");
  // Nor does any save begin there (an import into a running trainer's --save).
  expect_error([&] { begin_checkpoint(root, 1, &kWriter); }, Status::invalid_config,
               "is being saved into by another process");
  other.go();
  EXPECT_EQ(other.finish(), 0);
  SaveRootLock mine(root, &kWriter);  // free again
  SaveRootLock shared(root, &kWriter);  // and shared by its owner's holds
}

// The same rule within one process: two trainers saving one iteration into one
// directory from two threads removed each other's unfinished directory, and
// one committed a damaged checkpoint reported as saved. Holds are by owner: a
// second trainer, or a one-off writer (an import: null), is refused while the
// first holds the directory; the owner's own saves share it.
TEST_F(Commit, OneWriterOfAProcessSavesIntoADirectoryAtATime) {
  fs::create_directories(root);
  const int other_trainer = 0;
  {
    SaveRootLock first(root, &kWriter);
    expect_error([&] { SaveRootLock second(root, &other_trainer); }, Status::invalid_config,
                 "is being saved into by another trainer or writer of this process");
    expect_error([&] { begin_checkpoint(root, 1, &other_trainer); }, Status::invalid_config,
                 "another trainer or writer of this process");
    expect_error([&] { begin_checkpoint(root, 1, nullptr); }, Status::invalid_config,
                 "another trainer or writer of this process");
    EXPECT_FALSE(fs::exists(root + "/iter_0000001.tmp"));
    begin_checkpoint(root, 1, &kWriter);  // the owner's save
    commit_checkpoint(root, 1, manifest_json());
  }
  SaveRootLock free_again(root, &other_trainer);
}

// A save holds its directory from begin_checkpoint to the commit (or the
// abandon), not only at its start: a trainer started during an import would
// otherwise prune the import's unfinished .tmp.
TEST_F(Commit, ASaveHoldsItsDirectoryUntilItsCommit) {
  fs::create_directories(root);
  OtherProcess other([&](OtherProcess &me) {  // begins a save, commits it when the parent says so
    begin_checkpoint(root, 5, &kWriter);
    me.ready();
    me.wait_for_go();
    commit_checkpoint(root, 5, manifest_json());
  });
  other.wait_until_ready();
  expect_error([&] { SaveRootLock trainer(root, &kWriter); }, Status::invalid_config,
               "is being saved into by another process");
  other.go();
  EXPECT_EQ(other.finish(), 0);
  EXPECT_TRUE(fs::exists(root + "/iter_0000005/manifest.json"));
  SaveRootLock free_again(root, &kWriter);
}
