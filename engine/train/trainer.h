// The training loop over n = t·p·d ranks hosted by this process as threads
// (ARCHITECTURE §2: single controller within a process). step() runs the step
// on every rank and returns the global metrics. The global batch is split by
// global sample index over the d replicas; each replica accumulates its
// micro-batches; the loss is the mean over every token of the global batch.
#pragma once
#include <algorithm>
#include <chrono>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "checkpoints/commit.h"
#include "checkpoints/save_target.h"
#include "checkpoints/sharded_checkpoint.h"
#include "engine/comm/grid.h"
#include "engine/comm/communicator.h"
#include "engine/comm/staged_comm.h"
#include "engine/core/output_file.h"
#include "engine/data/blend.h"
#include "engine/data/sampler.h"
#include "engine/data/tokenizer.h"
#include "engine/model/gpt.h"
#include "engine/parallel/pipeline_runtime.h"
#include "engine/parallel/schedule.h"
#include "engine/train/config.h"
#include "engine/train/exit_signal.h"
#include "engine/train/loss_scaler.h"
#include "engine/train/lr_schedule.h"
#include "engine/train/metrics.h"
#include "engine/train/optimizer.h"
#include "engine/train/trainer_options.h"

namespace ptdp {

class MpiWorld;

class Trainer {
 public:
  explicit Trainer(const TrainerOptions &opt);
  ~Trainer();
  const TrainerOptions &options() const { return opt_; }
  const Tokenizer &tokenizer() const { return *tok_; }
  int world_size() const { return opt_.parallel.world(); }
  int local_ranks() const { return (int)ranks_.size(); }
  int first_local_rank() const;
  RankCoord first_local_coord() const;
  // The model shard of this process's r-th rank (tests, checkpoints).
  GPT<float> &model(int rank = 0);
  const GPT<float> &model(int rank = 0) const;
  // Its optimizer (Adam's moments, laid out like the model's parameters).
  AdamW &optimizer(int rank = 0);
  // A parameter of the whole model assembled from the shards: its global shape,
  // with the vocabulary unpadded for wte. Needs every rank in this process.
  std::vector<float> gather_parameter(const std::string &name) const;
  // Communication counters of this process's r-th rank's groups ("tp", "pp",
  // "dp", "embedding"; the last only on the first and last stages when p > 1).
  const CommStats &comm_stats(int rank, const std::string &group) const;
  bool has_group(int rank, const std::string &group) const;
  // Where this process's r-th rank spent the last training step.
  struct RankReport {
    int world_rank = 0;
    RankCoord coord;
    double step_seconds = 0;     // the whole step on this rank
    double compute_seconds = 0;  // forward, backward and optimizer: the rest is idle
    int64_t peak_activation_bytes = 0;  // stashed for backward, peak of the step
    // The rank's device memory (parameters, optimizer state, activations,
    // scratch): the most in use at once during the step, and in use after it.
    int64_t device_peak_bytes = 0, device_in_use_bytes = 0;
    // Data-parallel gradient buckets, and how many were reduced while the
    // backward ran (--overlap-grad-reduce; 0 without it).
    int grad_buckets = 0, overlapped_grad_buckets = 0;
    std::vector<PipeOp> schedule;       // this rank's operations
    std::vector<OpTiming> timings;      // its compute ops as they ran
    // The step's traffic per group this rank belongs to (tp, pp, dp, embedding).
    std::map<std::string, CommStats> comm;
    double idle_fraction() const {
      return step_seconds > 0 ? std::max(0.0, 1.0 - compute_seconds / step_seconds) : 0.0;
    }
  };
  // Filled by each training step (coordinates only before the first).
  const RankReport &rank_report(int rank) const;
  // Collective (every process calls it after the same step): brings every
  // world rank's report of the last step to the process of world rank 0, which
  // keeps them for world_rank_report, so that one process can print them all in
  // order. Under threads every rank is local and nothing is sent. The gathered
  // reports have no schedule or timings. wrong_state before the first step.
  void gather_rank_reports();
  // World rank r's report from the last gather_rank_reports. Only on the process
  // of world rank 0, and only until the next step (else wrong_state);
  // invalid_argument outside [0, world_size).
  const RankReport &world_rank_report(int world_rank) const;
  // The last step's bubble from replaying the executed schedules of the
  // pipeline ranks of (tp 0, dp 0) with each op's measured duration (its CPU
  // time when each rank has one thread), as if each rank had its own device:
  // makespan / busiest stage - 1. Needs every pipeline rank in this process.
  double replayed_bubble() const;
  // The mean cost of one forward, backward or (zero-bubble) weight-gradient op
  // of the last step over those ranks, as the replay takes it: the op times
  // the bubble formulas take. 0 for a kind the schedule does not run.
  double mean_op_seconds(PipeOpKind kind) const;

  StepMetrics step();
  // The same step on the caller's batch instead of the dataset's (the embedder
  // feeds its own loader): `ids` holds step_tokens_count() token ids, the
  // global batch as global_batch_size sequences of seq_length + 1 ids, one
  // after another; sequence i is global sample consumed_samples() + i, so
  // dropout, the data-parallel split, consumed samples and the iteration are
  // exactly those of step() on a dataset that yielded these samples. A NULL
  // `ids`, another count or an id outside [0, vocab_size) is invalid_argument
  // and changes nothing. Under mpirun every process passes the whole batch.
  StepMetrics step_tokens(const int32_t *ids, size_t count);
  size_t step_tokens_count() const {
    return (size_t)opt_.global_batch_size * ((size_t)opt_.model.seq_length + 1);
  }
  // Mean validation loss over `iters` global batches (no dropout).
  double evaluate(int iters);
  // The logits of one sequence, no dropout: [n, vocab_size] row-major over the
  // real vocabulary, gathered from the tensor-parallel shards. 1 <= n <= max
  // positions and every id in [0, vocab_size), else invalid_argument.
  std::vector<float> logits(const std::vector<int32_t> &tokens);
  // logits()'s checks alone (a caller asking for the size first is refused as
  // the call would be).
  void check_logits_tokens(const int32_t *ids, size_t count) const;
  // Continues `prompt`; temperature 0 is greedy, else samples with a keyed RNG
  // among the top_k most likely tokens (0: all) whose probabilities add up to
  // top_p (the nucleus; 1: all). The text is valid UTF-8: an ill-formed part
  // (a character cut by the byte tokenizer, say) is replaced by U+FFFD.
  // max_new_tokens in [0, kMaxNewTokens] (a longer text: several calls, each
  // continuing the last; the bound keeps a typo from generating for hours).
  std::string generate(const std::string &prompt, int max_new_tokens, double temperature,
                       uint64_t seed, int top_k = 0, double top_p = 1.0);
  static constexpr int kMaxNewTokens = 1 << 20;

  // Saves the whole training state (parameters, Adam moments, iteration,
  // consumed samples, skip counters) as <root>/iter_N, committed atomically;
  // under mpirun every process calls it. Returns the checkpoint's directory.
  // (Waits for an asynchronous save in flight first.)
  std::string save(const std::string &root);
  // With async_save, step()'s saves copy the state to host memory and are
  // written by a background thread while training goes on, under the same
  // commit protocol; the next save, a load, exit_reason's save and the
  // trainer's end wait for the one in flight. This waits now: its outcome is
  // then in last_saved / last_save_error / failed_saves, as a synchronous
  // save's. Returns the seconds it waited.
  double wait_for_saves();
  // Under mpirun, that every process was given the same (name, value) items: a
  // caller's own options that shape collectives (a script's evaluation
  // interval, its sample's prompt). Collective; else Error(invalid_config) on
  // every process naming the first that differs. One process: nothing to do.
  void agree_with_processes(const std::vector<std::pair<std::string, std::string>> &items);
  // Loads a checkpoint saved under any layout: `path` is a save directory (its
  // newest complete checkpoint) or one iter_N directory. Returns a line saying
  // which checkpoint was taken, why, and the layout it was saved with.
  std::string load(const std::string &path);
  // The message of the last save that step() attempted and that failed ("" if none).
  const std::string &last_save_error() const { return last_save_error_; }
  // Saves that failed in this run (each also reported as it happened).
  int failed_saves() const { return failed_saves_; }
  // Why the run should end after the step just taken ("" = it goes on): a
  // signal (exit_signal_handler), exit_interval or exit_duration_mins, agreed
  // by every process. The step has saved the training state first when
  // save_path is set (a failure counts in failed_saves). The caller ends the
  // run; a later step decides again. A signal received during evaluate()
  // stops the evaluation, saves the same way and sets it too.
  const std::string &exit_reason() const { return exit_reason_; }
  // Steps this trainer took, and how many of them skipped the update (loss
  // scale overflow or a NaN): a run whose every step was skipped learned nothing.
  int64_t steps_taken() const { return steps_taken_; }
  int64_t steps_skipped() const { return steps_skipped_; }
  // The directory of the last checkpoint saved, and the line of the last load ("" if none).
  std::string last_saved() const { return saved_.empty() ? "" : saved_.back(); }
  // Every checkpoint this trainer committed, in order, one per line (an exit's
  // step may commit two: a background save's and its own).
  std::string saved_checkpoints() const {
    std::string out;
    for (const std::string &d : saved_) out += d + "\n";
    return out;
  }
  const std::string &last_loaded() const { return last_loaded_; }
  // The device of this process's r-th rank, e.g. "cpu" or "cuda:0 (NVIDIA H100 80GB HBM3)".
  std::string device_name(int rank) const;

  int64_t iteration() const { return iteration_; }
  int64_t consumed_samples() const { return consumed_; }
  const StepMetrics &last_metrics() const { return last_; }
  // Whether this trainer has run a step since it was made or loaded: the last
  // step's metrics, log line and rank reports exist only then (a load sets the
  // iteration but brings no step with it).
  bool has_stepped() const { return last_.iteration != 0; }
  // The last step's metrics as its log line shows them: the lm loss and the
  // time per iteration (and with it tokens/s, TFLOP/s, MFU) are means over the
  // log interval (LogInterval: the steps since the previous call).
  StepMetrics log_metrics() const;
  // The loss scale the next step uses (1 without a loss scaler).
  double loss_scale() const { return opt_.use_loss_scaler ? scaler_.scale() : 1.0; }
  // Entropy (nats/token) of the unigram distribution of the training split.
  double unigram_entropy() const;
  uint64_t train_samples() const;
  uint64_t valid_samples() const;

 private:
  double op_seconds(const OpTiming &t) const;  // an op's cost in the replay
  std::vector<const RankReport *> pipeline_reports(const char *what) const;
  // The pipeline rank holding the LM head: the last, or the first under zbv.
  int head_stage() const {
    const int p = opt_.parallel.p;
    return chunk_home(v_shaped(opt_.schedule), p, p * opt_.virtual_stages - 1).rank;
  }
  struct Rank;
  void run_on_ranks(const std::function<void(Rank &)> &fn);
  void fill_batch(Rank &r, Sampler &sampler, uint64_t first, int b);
  void rank_step(Rank &r, int64_t it, Sampler &train);
  double grad_norm_squares(Rank &r);  // over the rank's model shard
  void write_timeline() const;
  void save_in_run();                   // save(save_path), a failure reported and counted
  SaveRequest save_request(const std::string &root);  // the request of save(root), checked
  void save_failed(const std::string &why);            // reported and counted
  void decide_exit(int64_t it);             // trainer_exit.cpp
  void end_run(std::string reason);          // the exit's save and exit_reason (trainer_exit.cpp)
  int agreed_signal(Rank &r);  // exit_signal_received() of any rank, or 0 (collective)
  void make_world_groups();             // Rank::world on every local rank (collective)
  void write_op_profile();
  // Writes a diagnostic output (--timeline, --profile-ops): a failure is
  // reported once and training goes on, as for a metrics file.
  void write_diagnostic(const char *flag, bool *failed, const std::function<void()> &write);
  bool timeline_failed_ = false, op_profile_failed_ = false;
  std::string process_path(const std::string &path) const;
  // Checks and claims this process's --timeline and --profile-ops files, and
  // claims the other processes' PATH.rankN.
  void claim_step_outputs();
  void bind_device_comms();  // Rank::tp_d, dp_d, pp_d, embedding_d
  // The local ranks' tensors for a save or load: a CPU rank's own buffers, or
  // (other devices, or `snapshot` for a save that outlives the step) copies in
  // the rank's host staging, which a save in flight owns until it is done.
  std::vector<RankShard> local_shards(bool snapshot = false);
  void unstage_shards();
  std::string load(const CheckpointRef &ckpt);
  double rank_evaluate(Rank &r, int iters);
  std::vector<float> rank_logits(Rank &r, const std::vector<int32_t> &tokens);
  std::string rank_generate(Rank &r, const std::string &prompt, int max_new_tokens,
                            double temperature, uint64_t seed, int top_k, double top_p);

  TrainerOptions opt_;
  std::unique_ptr<Tokenizer> tok_;
  TrainingData data_;  // the dataset(s) of data_path and their splits
  std::string data_fingerprint_;  // data_fingerprint(data_): recorded in each save
  std::unique_ptr<RankGrid> grid_;
  // threads; under mpirun the process's mpi world (one rank per process) or
  // mpi messages between thread ranks (several per process)
  std::unique_ptr<CommWorld> owned_world_;
  CommWorld *world_ = nullptr;
  MpiWorld *mpi_ = nullptr;  // under mpirun: the processes' world (agree_with_processes)
  std::vector<std::unique_ptr<Rank>> ranks_;
  int threads_per_rank_ = 1;
  int64_t step_origin_ns_ = 0;  // the timeline's time zero
  std::string failure_;  // set when a step failed on some rank: the job cannot go on
  Sampler *feed_ = nullptr;  // the caller's batch during step_tokens, else each rank's sampler
  int64_t iteration_ = 0, consumed_ = 0, skipped_ = 0, nan_ = 0;
  LossScaler scaler_;
  mutable LogInterval log_interval_;  // read (and closed) by the const log_metrics
  std::string last_save_error_, last_loaded_;
  std::vector<std::string> saved_;  // every committed checkpoint's directory
  // The files of the checkpoint this trainer loaded: inputs of the run, which
  // no output of it (a log, a trace, a profile) may overwrite.
  std::vector<InputFile> loaded_files_;
  std::unique_ptr<SaveRootLock> save_lock_;  // --save: no other writer saves there meanwhile
  std::vector<OutputClaim> output_claims_;  // --timeline, --profile-ops: no other output of the run
  // The --save directories this trainer made: an interrupted run removes them
  // while they are still empty (the signal cleanup's rmdir), until destruction.
  std::vector<std::string> made_save_dirs_;
  // The checkpoint this run resumed from ("" for a new run, and when fine-tuning):
  // saving into its directory continues that run.
  std::string resumed_from_;
  bool loaded_ = false;  // a checkpoint was loaded (resumed or fine-tuned from)
  // Where the model came from (an import's record: imported_from, the
  // tokenizer's hf_bos_token_id / hf_eos_token_id), taken from the loaded
  // checkpoint and written by every later save, fine-tuning included, so an
  // export of a fine-tuned model still knows its bos and eos.
  // And its lineage (checkpoints/save_target.h): "new" from scratch, the
  // loaded checkpoint's when resuming, a new one when fine-tuning.
  std::map<std::string, std::string> provenance_ = {{kLineageKey, kLineageNew}};
  // A manifest's `training`: the resumption options and the provenance.
  std::map<std::string, std::string> manifest_training() const;
  // The tokenizer's vocabulary_fingerprint, as a manifest records it
  // (kTokenizerVocabularyKey), and the refusal of a manifest recording another
  // ("give the checkpoint's ... to <to>").
  std::string vocabulary_text() const;
  void check_vocabulary(const std::string &tokenizer, const std::string &vocabulary, const char *to) const;
  // The tokenizer_type the loaded checkpoint was trained with ("" when it
  // records none, as an import): generate() refuses another.
  std::string loaded_tokenizer_;
  std::string loaded_vocabulary_;  // its vocabulary (kTokenizerVocabularyKey), "" when not recorded
  int failed_saves_ = 0;
  StepMetrics last_;
  // Preemption and time limits (trainer_exit.cpp).
  std::unique_ptr<ExitSignalScope> exit_signals_;  // with exit_signal_handler
  std::string exit_reason_;
  int64_t in_run_saved_iteration_ = -1;  // the iteration save_in_run last saved (or tried)
  std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();
  double longest_step_s_ = 0, last_save_s_ = 0;  // the longest step and save (written in full) seen
  int64_t steps_taken_ = 0, steps_skipped_ = 0;
  // The asynchronous save in flight (async_save): its directory and duration when done.
  struct BackgroundSave {
    std::string dir;
    double seconds = 0;
  };
  std::future<BackgroundSave> pending_save_;
  std::vector<RankReport> gathered_;  // by world rank, on world rank 0; cleared by each step
};

}  // namespace ptdp
