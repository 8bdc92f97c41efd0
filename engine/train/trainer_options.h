// A training run's options (Megatron's names, ARCHITECTURE §7): what the
// Trainer is made from, read from a Config (the option schema of config.cpp)
// and cross-checked before any work.
#pragma once
#include <cstdint>
#include <string>

#include "engine/comm/grid.h"
#include "engine/data/tokenizer.h"
#include "engine/model/gpt.h"
#include "engine/parallel/schedule.h"
#include "engine/train/config.h"
#include "engine/train/loss_scaler.h"
#include "engine/train/lr_schedule.h"
#include "engine/train/optimizer.h"

namespace ptdp {

struct TrainerOptions {
  GptConfig model;
  ParallelDims parallel;
  int micro_batch_size = 8, global_batch_size = 32;
  int64_t train_iters = 1000;
  uint64_t seed = 1234;
  LrSchedule lr;
  AdamWConfig adam;
  double clip_grad = 1.0;
  std::string data_path, split = "98,2", tokenizer = "byte";
  std::string vocab_file, merge_file, tokenizer_file;  // the tokenizer's (TokenizerSpec)
  int eval_iters = 10;
  int num_threads = 0;
  // Each rank's device: auto, cpu, cuda (round-robin) or cuda:N (make_device).
  // The option's default is auto; a TrainerOptions made in code runs on the CPU.
  std::string device = "cpu";
  // Device buffers reach the threads/mpi backends through host copies
  // (StagedComm); always on a GPU, and on the CPU when a test asks.
  bool stage_comm_through_host = false;
  // How GPU ranks communicate (--distributed-backend): "nccl"; "host" (the
  // threads/mpi backends through host copies); "auto": nccl for the groups of
  // more than one rank when NCCL is built and no two ranks of this process
  // share a GPU, else host.
  std::string distributed_backend = "auto";
  bool use_flash_attn = false;  // GPT::set_flash_attention
  int64_t ddp_bucket_size = 1000000;
  bool overlap_grad_reduce = false;  // buckets reduced during the backward (grad_sync.h)
  bool distributed_optimizer = false;  // optimizer state sharded over dp (dp_shard.h)
  double comm_timeout_s = 300;
  int virtual_stages = 1;  // v: model chunks per pipeline rank
  ScheduleKind schedule = ScheduleKind::one_f_one_b;
  bool scatter_gather = true;  // only matters when t > 1 and p > 1 (and no sequence parallelism)
  bool sequence_parallel = false;  // GPT::set_sequence_parallel
  Recompute recompute;
  std::string timeline_path;  // Chrome trace of each step, rewritten after it
  std::string op_profile_path;  // time per op of each step and rank, rewritten after it
  // Checkpoints (ARCHITECTURE §5)
  std::string save_path, load_path;
  int64_t save_interval = 0;  // 0 = only after the last iteration
  int keep_last_checkpoints = 0;
  bool async_save = false;  // step()'s saves written by a background thread (Trainer::wait_for_saves)
  bool verify_checkpoint = true;
  bool override_opt_param_scheduler = false;
  // Preemption and time limits (Trainer::exit_reason): a step that meets one
  // saves (with save_path) and asks the caller to end the run.
  bool exit_signal_handler = false;  // SIGTERM, SIGINT
  int64_t exit_interval = 0;         // after each iteration that is a multiple of it
  double exit_duration_mins = 0;     // before the next step and a save would pass it
  // Megatron's --finetune: load_path's weights only; the optimizer, iteration,
  // LR schedule, data position and loss scale start afresh.
  bool finetune = false;
  // Mixed precision (--bf16, --fp16): the model's dtype and where gradients
  // accumulate; the loss scaler is used by fp16 (dynamic) or by any 16-bit
  // run given a static --loss-scale.
  Precision precision;
  LossScalerConfig loss_scaler;
  bool use_loss_scaler = false;
  // Fault injection for tests: at this iteration (0 = never) the first
  // gradient of world rank 0 becomes inf after backward, as an fp16 overflow would.
  int64_t inject_overflow_iteration = 0;
  // Tests: group "tp", "dp", "pp" or "embedding" whose inject_comm_call-th
  // fp32 all-reduce or reduce-scatter gets inject_comm_delta added on its rank
  // 0 (engine/comm/fault_comm.h); CPU ranks only. Empty: none.
  std::string inject_comm_group;
  int inject_comm_call = 1;
  float inject_comm_delta = 0.f;
  int microbatches() const { return global_batch_size / (micro_batch_size * parallel.d); }
  TokenizerSpec tokenizer_spec() const;  // make_tokenizer's
  // Reads and cross-checks a Config; throws invalid_config naming the fields.
  static TrainerOptions from_config(const Config &c);
  // Every option of the Config it was read from, as given: what the processes
  // of a run under mpirun compare (options_processes_share). Empty when made
  // in code.
  std::vector<std::pair<std::string, std::string>> config_values;
  // Sets c's model options to those of the checkpoint at dir (a save
  // directory's newest or one iter_N), as its manifest records them: a run
  // that only reads the model (`ptdp generate --load`) needs no other source.
  static void model_from_checkpoint(Config &c, const std::string &dir);
};

// Options this layout or another option leaves without effect (sequence
// parallelism at t = 1, the distributed optimizer at d = 1, ...), one note
// each ("--sequence-parallel has no effect at t = 1: ..."). Valid, so not
// refused (a sweep over layouts gives every layout the same flags), but
// said: the trainer prints them at its start.
std::vector<std::string> idle_option_notes(const TrainerOptions &o);

}  // namespace ptdp
