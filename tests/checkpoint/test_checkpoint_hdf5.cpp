// The HDF5 layer of checkpoints: global-shape datasets written by shards in one
// split and read back in another (resharding), attributes, and clear errors.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <numeric>

#include "checkpoints/hdf5_file.h"
#include "tests/support/expect_error.h"
#include "tests/support/temp_dir.h"

using namespace ptdp;


// A [6, 4] matrix written as two row shards and a [4, 6] one as three column
// shards (as tensor ranks do), then read back whole and in another split.
TEST(Hdf5File, ShardsWrittenInOneSplitReadInAnother) {
  TempDir tmp("ptdp_h5");
  const std::string path = tmp.path + "/model.h5";
  std::vector<float> rows(24), cols(24);
  std::iota(rows.begin(), rows.end(), 0.5f);
  std::iota(cols.begin(), cols.end(), -10.f);
  {
    H5File f = H5File::create(path);
    f.create_dataset("/model/h.0.attn.c_attn.weight", H5Type::f32, {6, 4});
    f.create_dataset("/model/h.0.attn.c_proj.weight", H5Type::f32, {4, 6});
    f.create_dataset("/state/iteration", H5Type::i64, {1});
    for (int r = 0; r < 2; r++)  // rows [3r, 3r+3)
      f.write_block("/model/h.0.attn.c_attn.weight", {3 * r, 0}, {3, 4}, rows.data() + 12 * r);
    for (int r = 0; r < 3; r++) {  // columns [2r, 2r+2): a [4, 2] shard, contiguous in memory
      std::vector<float> shard(8);
      for (int i = 0; i < 4; i++)
        for (int j = 0; j < 2; j++) shard[i * 2 + j] = cols[i * 6 + 2 * r + j];
      f.write_block("/model/h.0.attn.c_proj.weight", {0, 2 * r}, {4, 2}, shard.data());
    }
    int64_t it = 1234567890123;
    f.write_block("/state/iteration", {0}, {1}, &it);
    f.set_attribute("config", "{\"num_layers\": 2}");
    f.set_attribute("empty", "");
    f.close();
  }
  H5File f = H5File::open_read(path);
  EXPECT_EQ(f.datasets(), (std::vector<std::string>{"/model/h.0.attn.c_attn.weight",
                                                     "/model/h.0.attn.c_proj.weight",
                                                     "/state/iteration"}));
  EXPECT_EQ(f.shape("/model/h.0.attn.c_proj.weight"), (std::vector<int64_t>{4, 6}));
  std::vector<float> whole(24);
  f.read_block("/model/h.0.attn.c_attn.weight", {0, 0}, {6, 4}, whole.data());
  EXPECT_EQ(whole, rows);
  f.read_block("/model/h.0.attn.c_proj.weight", {0, 0}, {4, 6}, whole.data());
  EXPECT_EQ(whole, cols);
  std::vector<float> half(12);  // two column shards of three columns
  f.read_block("/model/h.0.attn.c_proj.weight", {0, 3}, {4, 3}, half.data());
  for (int i = 0; i < 4; i++)
    for (int j = 0; j < 3; j++) EXPECT_EQ(half[i * 3 + j], cols[i * 6 + 3 + j]);
  int64_t it = 0;
  f.read_block("/state/iteration", {0}, {1}, &it);
  EXPECT_EQ(it, 1234567890123);
  EXPECT_EQ(f.attribute("config"), "{\"num_layers\": 2}");
  EXPECT_EQ(f.attribute("empty"), "");
  EXPECT_TRUE(f.has_dataset("/state/iteration"));
  EXPECT_FALSE(f.has_dataset("/optim/exp_avg/wte.weight"));
  EXPECT_EQ(f.type("/state/iteration"), H5Type::i64);
}

TEST(Hdf5File, BadFilesAndBlocksAreClearErrors) {
  TempDir tmp("ptdp_h5");
  const std::string &dir = tmp.path;
  expect_error([&] { H5File::open_read(dir + "/missing.h5"); }, Status::corrupt_data,
               "missing.h5' is missing or not an HDF5 file");
  { std::ofstream(dir + "/text.h5") << "not hdf5"; }
  expect_error([&] { H5File::open_read(dir + "/text.h5"); }, Status::corrupt_data,
               "text.h5' is missing or not an HDF5 file");
  expect_error([&] { H5File::create(dir + "/text.h5/sub.h5"); }, Status::io_error,
               "cannot create HDF5 file");
  H5File f = H5File::create(dir + "/a.h5");
  f.create_dataset("/w", H5Type::f32, {3, 2});
  std::vector<float> buf(8);
  expect_error([&] { f.write_block("/w", {2, 0}, {2, 2}, buf.data()); }, Status::invalid_argument,
               "block at [2, 0] of [2, 2] lies outside dataset '/w' [3, 2]");
  expect_error([&] { f.write_block("/w", {0}, {3}, buf.data()); }, Status::invalid_argument,
               "must have the dataset's 2 dimensions");
  int64_t x[6];
  expect_error([&] { f.read_block("/w", {0, 0}, {3, 2}, x); }, Status::corrupt_data,
               "is float32, not the expected int64");
  expect_error([&] { f.shape("/nothing/here"); }, Status::corrupt_data,
               "has no dataset '/nothing/here'");
  expect_error([&] { f.attribute("config"); }, Status::corrupt_data, "has no attribute 'config'");
}
