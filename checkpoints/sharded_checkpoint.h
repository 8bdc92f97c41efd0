// Saving and loading the training state of any (t, p, d, v) layout as one HDF5
// file of global-shape datasets (ARCHITECTURE §5):
//   /model/<name>                 parameters (wte unpadded: [vocab_size, h])
//   /optim/exp_avg/<name>         Adam's moments, at parameter shape, so they
//   /optim/exp_avg_sq/<name>      reshard like the parameters
//   /optim/master/<name>          fp32 master weights of a 16-bit run (then
//                                 /model holds them rounded to its dtype)
//   /state/<field>                int64 [1]: iteration, consumed_samples, ...;
//                                 fp16 runs add the loss scaler's state
// Save: every rank writes only its own hyperslabs, each replicated or
// data-parallel-replicated block once, its rows spread over the d replicas.
// Load: every rank reads the hyperslabs its own layout needs, so loading under
// another layout is resharding. Collective over IoWorld::current(): under
// mpirun every process calls with its own ranks' shards.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "checkpoints/hdf5_file.h"
#include "checkpoints/manifest.h"
#include "engine/comm/grid.h"
#include "engine/model/gpt.h"

namespace ptdp {

// One rank's share: its parameter table and the flat buffers it lays out.
struct RankShard {
  RankCoord coord;
  const std::vector<ParamInfo> *table = nullptr;
  float *params = nullptr, *exp_avg = nullptr, *exp_avg_sq = nullptr;
  // fp32 master weights of a 16-bit model; null when params are their own master.
  float *master = nullptr;
};

// Everything else resumption needs. The RNG needs no state of its own: dropout
// and data order are keyed by (seed, iteration, global sample index).
struct TrainingState {
  int64_t iteration = 0, consumed_samples = 0, skipped_iterations = 0, nan_iterations = 0;
  // The dynamic loss scaler of an fp16 run (/state/loss_scale float32, as
  // Megatron's scale tensor, and its two trackers).
  bool has_loss_scale = false;
  float loss_scale = 1.f;
  int64_t loss_scale_growth_tracker = 0, loss_scale_hysteresis_tracker = 0;
};

struct SaveRequest {
  std::string root;   // checkpoints go to <root>/iter_XXXXXXX
  int keep_last = 0;  // > 0: keep only the newest keep_last complete checkpoints
  GptConfig model;
  CheckpointLayout layout;
  TrainingState state;
  std::map<std::string, std::string> training;  // recorded in the manifest
  const void *owner = nullptr;  // the writer holding root (SaveRootLock): a trainer; null, a one-off
};

// Saves and commits; returns the checkpoint's directory. On any failure on any
// process, nothing is committed, the unfinished directory is removed and the
// previous checkpoint stays the newest; throws io_error saying what failed.
std::string save_checkpoint(const SaveRequest &req, const std::vector<RankShard> &local);

// A complete checkpoint found on disk, with its parsed manifest.
struct CheckpointRef {
  std::string dir;  // the checkpoint taken
  std::string why;  // how it was chosen
  Manifest manifest;
  // The files read to choose and open it (the save directory's tracker when a
  // save directory was given, the manifest): inputs of the command, which its
  // outputs must not replace; with the data file, the callers register them.
  std::vector<std::string> read_files;
};

// `path` is a save directory (its newest complete checkpoint is taken) or one
// checkpoint directory. Collective under mpirun (process 0 chooses). Throws
// io_error when there is nothing complete to load, corrupt_data when the
// manifest is damaged.
CheckpointRef open_checkpoint(const std::string &path);

// Error(invalid_config) naming the fields when the checkpoint holds another
// model than `model` (a shape, not an option: nothing makes it load).
void check_same_model(const CheckpointRef &ckpt, const GptConfig &model);

// Fills every local shard (any layout) for `model` from the checkpoint and
// The weights go to each shard's master when it has one, else to its params,
// and come from /optim/master when the checkpoint has it (a 16-bit run's),
// else from /model: so 16-bit and fp32 checkpoints load into either kind of
// run. A shard with a master gets no params: the caller rounds the master.
// returns its training state. verify: check each block read against its
// manifest checksum. Throws invalid_config naming the mismatching fields when
// the model shapes differ (before anything is read), corrupt_data naming the
// file, dataset and block on damage (the shards may then hold a mix).
// A shard whose exp_avg and exp_avg_sq are null gets the weights only
// (fine-tuning: the optimizer starts afresh). *filling (when given) is set
// once the data file is open and the shards start to change: a failure
// before it (a file that will not open) left them as they were.
TrainingState load_checkpoint(const CheckpointRef &ckpt, const GptConfig &model,
                              const std::vector<RankShard> &local, bool verify,
                              bool *filling = nullptr);

// What is wrong with the data file a manifest names, as a save left it ("" if
// nothing): a regular file of the recorded size, inside the checkpoint's
// directory, so not a symbolic link (a save makes none; through one a
// checkpoint would read, and be verified against, a file elsewhere).
// *readable: whether the file can still be opened and checked further (it is
// a regular file, of whatever size).
std::string data_file_fault(const std::string &file, int64_t bytes, bool *readable = nullptr);

// Every fault of a checkpoint directory: unreadable or inconsistent manifest,
// a missing or truncated file, datasets that disagree with the manifest, and
// blocks whose checksum does not match. Empty when it is sound.
std::vector<std::string> checkpoint_faults(const std::string &dir);
// Error(io_error) when the checkpoint directory `dir` is gone (a rotation in
// another process removed it while it was read): its faults are no damage.
void refuse_if_removed_while_read(const std::string &dir);

// The data file of a checkpoint open_checkpoint found, opened for reading (a
// fault of data_file_fault's is Error(corrupt_data)); one that a rotation
// removed since is said so (export, load and generate called it corrupt).
H5File open_checkpoint_data(const CheckpointRef &ckpt);

// The model of the checkpoint at path (a save directory's newest, or one
// iter_N), with the load's errors for a checkpoint whose manifest or data
// file cannot be opened (the data's checksums are read by the load only).
GptConfig checkpoint_model(const std::string &path);

}  // namespace ptdp
