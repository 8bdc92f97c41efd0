// The engine's writers never replace what is not a regular file, and never
// overwrite their own inputs (engine/core/output_file.h): /dev/null stays a
// device, a FIFO stays a FIFO, a link keeps pointing at its file.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/core/output_file.h"
#include "engine/data/corpus.h"
#include "engine/data/tokenizer.h"
#include "tests/unit/expect_error.h"
#include "tests/unit/temp_dir.h"

namespace {

mode_t lmode(const std::string &path) {
  struct stat st;
  return ::lstat(path.c_str(), &st) == 0 ? st.st_mode : 0;
}

}  // namespace

TEST(OutputFile, WritesNewAndRegularFiles) {
  TempDir dir;
  const std::string p = dir.path + "/out.json";
  ptdp::write_file_atomic(p, "one");
  EXPECT_EQ(read_file(p), "one");
  ptdp::write_file_atomic(p, "two");
  EXPECT_EQ(read_file(p), "two");
}

TEST(OutputFile, RefusesDeviceNodesDirectoriesAndFifos) {
  TempDir dir;
  expect_error([] { ptdp::write_file_atomic("/dev/null", "x", "--timeline"); },
               ptdp::Status::invalid_argument, "--timeline '/dev/null' exists and is a character device");
  EXPECT_TRUE(S_ISCHR(lmode("/dev/null")));
  expect_error([&] { ptdp::write_file_atomic(dir.path, "x"); }, ptdp::Status::invalid_argument,
               "is a directory: refusing to replace it");
  const std::string fifo = dir.path + "/fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
  expect_error([&] { ptdp::write_file_atomic(fifo, "x"); }, ptdp::Status::invalid_argument,
               "is a FIFO");
  EXPECT_TRUE(S_ISFIFO(lmode(fifo)));
}

TEST(OutputFile, SymlinkToAFileWritesThatFileAndKeepsTheLink) {
  TempDir dir;
  const std::string file = dir.path + "/real.json", link = dir.path + "/link.json";
  write_file(file, "old");
  ASSERT_EQ(::symlink(file.c_str(), link.c_str()), 0);
  ptdp::write_file_atomic(link, "new");
  EXPECT_TRUE(S_ISLNK(lmode(link)));
  EXPECT_EQ(read_file(file), "new");
  const std::string dangling = dir.path + "/dangling";
  ASSERT_EQ(::symlink((dir.path + "/nowhere/x").c_str(), dangling.c_str()), 0);
  expect_error([&] { ptdp::write_file_atomic(dangling, "x"); }, ptdp::Status::invalid_argument,
               "symbolic link to nothing");
  const std::string to_dev = dir.path + "/to_dev";
  ASSERT_EQ(::symlink("/dev/null", to_dev.c_str()), 0);
  expect_error([&] { ptdp::write_file_atomic(to_dev, "x"); }, ptdp::Status::invalid_argument,
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
