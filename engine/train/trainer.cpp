#include "engine/train/trainer.h"

#include <omp.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <set>
#include <system_error>
#include <thread>

#include "checkpoints/commit.h"
#include "checkpoints/save_target.h"
#include "checkpoints/sharded_checkpoint.h"
#include "engine/comm/fault_comm.h"
#include "engine/comm/mpi_comm.h"
#include "engine/comm/mpi_threads_comm.h"
#include "engine/comm/nccl_comm.h"
#include "engine/comm/thread_comm.h"
#include "engine/core/checkpoint_names.h"
#include "engine/core/output_file.h"
#include "engine/core/temp_files.h"
#include "engine/core/philox.h"
#include "engine/core/status.h"
#include "engine/core/text.h"
#include "engine/parallel/grad_sync.h"
#include "engine/trace/timeline.h"
#include "engine/train/trainer_rank.h"

extern "C" void openblas_set_num_threads(int);

namespace ptdp {

namespace fs = std::filesystem;

namespace {

// A path as every process spelling it another way still names it: absolute,
// links and ".." resolved, no trailing '/'. "" stays "".
std::string same_directory_text(const std::string &path) {
  if (path.empty()) return path;
  std::error_code ec;
  fs::path p = fs::weakly_canonical(fs::absolute(path, ec), ec);
  if (ec) return path;
  return without_trailing_slashes(p.string());
}

// What every process of a run under mpirun must agree on (MpiWorld::agree):
// the model, the batch and schedule, the training options a checkpoint
// records, the data by its contents (each process may name it by its own
// path), and the checkpoints read and written. Not what is a process's own
// (threads, device and ordinal, trace files, timeouts).
std::vector<std::pair<std::string, std::string>> options_processes_share(const TrainerOptions &o,
                                                                         const std::string &data) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const GptConfigField &f : gpt_config_fields()) {
    std::string v = f.kind == GptConfigField::Int      ? std::to_string(f.int_value(o.model))
                    : f.kind == GptConfigField::Choice ? f.choice_name(o.model.*f.int_member)
                                                       : number_text(f.float_value(o.model));
    out.emplace_back(f.name, v);
  }
  for (const auto &[k, v] : resumption_options(o, data))
    if (k != "data_path") out.emplace_back(k, comparable_option(k, v));
  const auto flag = [](bool b) { return std::string(b ? "1" : "0"); };
  out.insert(out.end(), {{"tensor_model_parallel_size", std::to_string(o.parallel.t)},
                         {"pipeline_model_parallel_size", std::to_string(o.parallel.p)},
                         {"data_parallel_size", std::to_string(o.parallel.d)},
                         {"virtual pipeline stages", std::to_string(o.virtual_stages)},
                         {"pipeline_schedule", schedule_name(o.schedule)},
                         {"recompute", flag(o.recompute.enabled) + flag(o.recompute.selective) +
                                           std::to_string((int)o.recompute.method) + "/" +
                                           std::to_string(o.recompute.num_layers)},
                         {"sequence_parallel", flag(o.sequence_parallel)},
                         // (Both shape the messages between ranks: one differing
                         // failed as a recv of 4096 elements that got 2048.)
                         {"scatter_gather_tensors_in_pipeline", flag(o.scatter_gather)},
                         {"distributed_backend", o.distributed_backend},
                         {"use_distributed_optimizer", flag(o.distributed_optimizer)},
                         {"overlap_grad_reduce", flag(o.overlap_grad_reduce)},
                         {"ddp_bucket_size", std::to_string(o.ddp_bucket_size)},
                         {"use_flash_attn", flag(o.use_flash_attn)},
                         {"eval_iters", std::to_string(o.eval_iters)},
                         // (By what they name, not how: one directory spelled two
                         // ways is one; --save's probe and --load's agreement on
                         // what it found tell the rest.)
                         {"save", same_directory_text(o.save_path)},
                         {"load", same_directory_text(o.load_path)},
                         {"save_interval", std::to_string(o.save_interval)},
                         {"keep_last_checkpoints", std::to_string(o.keep_last_checkpoints)},
                         {"verify_checkpoint", flag(o.verify_checkpoint)},
                         {"override_opt_param_scheduler", flag(o.override_opt_param_scheduler)},
                         {"exit_signal_handler", flag(o.exit_signal_handler)},
                         {"exit_interval", std::to_string(o.exit_interval)},
                         {"exit_duration_in_mins", number_text(o.exit_duration_mins)},
                         {"finetune", flag(o.finetune)}});
  // The tokenizer by what its files hold (each process may name them by its
  // own path): a merges.txt of another process's encoded the prompt to other
  // ids, and the sample's collectives failed (MPI_ERR_TRUNCATE).
  std::string tokenizer_files;
  for (const std::string &path : {o.vocab_file, o.merge_file, o.tokenizer_file}) {
    std::ifstream in(path, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    tokenizer_files += (path.empty() ? std::string("-") : std::to_string(fnv1a64(bytes))) + " ";
  }
  out.emplace_back("tokenizer files by what they hold (a hash each of vocab_file, merge_file, "
                   "tokenizer_file; '-' for one not given)", tokenizer_files);
  // And every other option of the run's Config (a --loss-scale of another
  // process trained a third model, exit 0), but what is each process's own:
  // its threads, device, timeout and trace files, and the paths compared
  // above by what they name or hold.
  static const std::set<std::string> own = {"data_path", "save", "load", "vocab_file", "merge_file",
                                            "tokenizer_file", "timeline", "profile_ops", "num_threads",
                                            "device", "comm_timeout"};
  std::set<std::string> listed;
  for (const auto &kv : out) listed.insert(kv.first);
  for (const auto &[key, value] : o.config_values)
    if (!own.count(key) && !listed.count(key)) out.emplace_back(key, comparable_option(key, value));
  return out;
}

// The directories a trainer made for --save, removed again (each only while
// empty, deepest first) if the trainer fails to start: a refused run leaves
// nothing behind that a corrected one would trip over.
// Made directories are on the signal cleanup's list from their making (an
// interrupted run removes them while empty); a trainer that starts takes them
// over (made_save_dirs_) and releases them when it ends.
struct MadeDirectories {
  std::vector<fs::path> made;  // deepest first
  bool keep = false;
  ~MadeDirectories() {
    if (keep) return;
    for (const fs::path &d : made) unmake_directory(d.string());  // (one with files stays)
  }
};

// Before the first step, so an unwritable --save costs no training: the
// directory is made if need be and a probe file is created and removed in it.
void check_save_directory(const std::string &dir, MadeDirectories &made) {
  check_output_directory(dir, "--save");
  std::error_code ec;
  // Links and ".." resolved first: only a path where nothing is, not even a
  // link, is made (and held: the cleanup removes what was made).
  try {
    for (const std::string &d : make_held_directories(fs::weakly_canonical(fs::absolute(dir, ec), ec).string()))
      made.made.push_back(d);
  } catch (const Error &e) {
    fail(Status::io_error, "--save '", dir, "' cannot be used: ", e.what(), " (checked before the first step)");
  }
  if (!fs::is_directory(dir))
    fail(Status::io_error, "--save '", dir, "' cannot be used: it is not a directory (checked before the first step)");
  const std::string probe = dir + "/.ptdp_write_probe." + std::to_string(::getpid()) + "." +
                            std::to_string(std::hash<std::thread::id>{}(std::this_thread::get_id()));
  std::FILE *f = std::fopen(probe.c_str(), "wb");
  if (!f)
    fail(Status::io_error, "--save '", dir, "' cannot be written: ", std::strerror(errno),
         " (checked before the first step)");
  std::fclose(f);
  std::remove(probe.c_str());
}

// Under mpirun every process writes the checkpoint's file into one --save
// directory (collectively): a relative --save from other working
// directories, or a disk of each node's own, is one directory per process,
// and the first save's collective open hung. Each process puts a probe there,
// named for the run (world rank 0's process id) and its rank; each must see
// every process's.
void check_one_save_directory(MpiWorld &mpi, const std::string &save) {
  const int64_t run = mpi.gather_values("process ids", (int64_t)::getpid())[0];
  const std::string stem = ".ptdp_same_save." + std::to_string(run) + ".";
  std::string probe;
  ::close(create_temp_file(save + "/" + stem + std::to_string(mpi.rank()), &probe));
  mpi.gather_values("--save probes", 1);  // (every probe is there now)
  std::set<std::string> ranks;
  std::error_code ec;
  for (fs::directory_iterator it(save, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.rfind(stem, 0) == 0) ranks.insert(name.substr(stem.size(), name.find('.', stem.size()) - stem.size()));
  }
  const std::vector<int64_t> seen = mpi.gather_values("--save probes seen", (int64_t)ranks.size());
  remove_temp_file(probe);
  for (int r = 0; r < mpi.size(); r++)
    if (seen[(size_t)r] != mpi.size())
      fail(Status::invalid_config, "--save '", save, "' is not one directory for the processes of this run: ",
           "the process of world rank ", r, " sees ", seen[(size_t)r], " of the ", mpi.size(),
           " processes' probes there (a relative path from other working directories, or a disk of ",
           "each node's own): give a directory every process shares");
}

}  // namespace

Trainer::Trainer(const TrainerOptions &opt) : opt_(opt), scaler_(opt.loss_scaler) {
  if (opt_.exit_signal_handler) exit_signals_ = std::make_unique<ExitSignalScope>();
  grid_ = std::make_unique<RankGrid>(opt_.parallel);
  const int n = opt_.parallel.world();
  // CPU ranks share the cores (ARCHITECTURE §2): threads per rank = cores / ranks.
  // All cores unless OMP_NUM_THREADS says otherwise, read before any trainer changed it.
  static const int process_threads = omp_get_max_threads();
  // As many as num_threads takes: OMP_NUM_THREADS=100000 crashed in OpenMP.
  if (opt_.num_threads == 0 && process_threads > kMaxProcessThreads)
    fail(Status::invalid_config, "OMP_NUM_THREADS asks for ", process_threads, " threads; a process ",
         "runs at most ", kMaxProcessThreads, " (num_threads' range): set fewer, or give num_threads");
  const int cores = opt_.num_threads > 0 ? opt_.num_threads : process_threads;
  threads_per_rank_ = std::max(1, cores / n);
  openblas_set_num_threads(threads_per_rank_);
  tok_ = make_tokenizer(opt_.tokenizer_spec());
  // Without data_path the caller feeds every batch (step_tokens). The data
  // first: --save's check compares what a run trains on.
  if (!opt_.data_path.empty()) {
    data_ = open_training_data(opt_.data_path, opt_.split);
    for (const auto &src : data_.sources)
      check_source_vocab(*src, opt_.model.vocab_size, opt_.tokenizer, tok_->vocab_size(),
                         vocabulary_fingerprint(*tok_));
    check_training_data(data_, opt_.model.seq_length);
    data_fingerprint_ = data_fingerprint(data_);
  }
  MadeDirectories made;
  if (!opt_.save_path.empty()) {
    check_save_directory(opt_.save_path, made);
    // Every name a save would have to replace, now rather than after training.
    check_save_root(opt_.save_path);
    // A fine-tuning run starts again at iteration 0: its saves would replace
    // (same iteration) or prune whatever checkpoints --save holds, the one it
    // loads among them whatever the spelling or link, or a copy's.
    if (opt_.finetune) {
      const std::vector<std::string> there = complete_checkpoints(opt_.save_path);
      if (!there.empty())
        fail(Status::invalid_config, "--finetune starts a new run at iteration 0, but --save '",
             opt_.save_path, "' already holds checkpoints (newest: '", there.front(),
             "') that its saves would replace or prune: give --save a new or empty directory (to "
             "resume a fine-tuning run, leave --finetune out and --load its --save directory)");
    }
    // A fine-tuning run is a new run even when it loads from its --save directory.
    // A run that loads nothing is a run from scratch (its lineage); one that
    // loads is checked again with the loaded lineage (below).
    std::map<std::string, std::string> training = resumption_options(opt_, data_fingerprint_);
    if (opt_.load_path.empty()) training[kLineageKey] = kLineageNew;
    check_save_target(opt_.save_path, opt_.finetune ? "" : opt_.load_path, opt_.model, training,
                      opt_.load_path.empty() ? kNoCheckpoint : kAnyCheckpoint);
    // The tracker a save will write is this run's, before the first save too:
    // no other output of the run (a --log-json there, say) may take it.
    output_claims_.emplace_back((fs::path(opt_.save_path) / kCheckpointTracker).string(),
                                "--save tracker");
  }
  // Under mpirun each process hosts one rank; otherwise this process hosts all.
  std::vector<int> local;
  if (MpiWorld::launched_by_mpirun()) {
    // MPI starts once per process and ends at exit: later trainers reuse it.
    MpiWorld *mpi = &MpiWorld::of_this_process(opt_.comm_timeout_s);
    mpi_ = mpi;
    // Before the first collective that options shape, and before any check
    // one process could fail alone (the others, in that collective, ended in
    // MPI's own abort): processes given other options fail here, each naming
    // the option.
    if (mpi->size() > 1) mpi->agree("option", options_processes_share(opt_, data_fingerprint_));
    if (n % mpi->size() != 0)
      fail(Status::invalid_config, "the layout needs t*p*d = ", opt_.parallel.t, "*",
           opt_.parallel.p, "*", opt_.parallel.d, " = ", n, " ranks but mpirun started ",
           mpi->size(), " processes, which do not divide them evenly");
    if (opt_.async_save && mpi->size() > 1)
      fail(Status::invalid_config, "async_save writes checkpoints on a background thread, whose "
           "collective file operations would run beside training's MPI calls: under mpirun with ",
           mpi->size(), " processes use the synchronous save (async_save = 0); it works for ranks "
           "that are threads of one process");
    if (mpi->size() > 1 && !opt_.save_path.empty()) check_one_save_directory(*mpi, opt_.save_path);
    // The checkpoint's file is opened collectively by name (MPI-IO coordinates
    // by it: '../ck' and 'ck/' from two working directories hung at the first
    // save): every process names it alike.
    if (mpi->size() > 1) {
      opt_.save_path = same_directory_text(opt_.save_path);
      opt_.load_path = same_directory_text(opt_.load_path);
    }
    const int k = n / mpi->size();  // ranks per process
    for (int i = 0; i < k; i++) local.push_back(mpi->rank() * k + i);
    if (k == 1) {
      world_ = mpi;
    } else {
      owned_world_ = std::make_unique<MpiThreadsWorld>(*mpi, k, opt_.comm_timeout_s);
      world_ = owned_world_.get();
    }
  } else {
    for (int r = 0; r < n; r++) local.push_back(r);
    owned_world_ = std::make_unique<ThreadWorld>(n, opt_.comm_timeout_s);
    world_ = owned_world_.get();
  }
  // Options this layout leaves idle: said once, by the process of world rank 0.
  if (local.front() == 0)
    for (const std::string &note : idle_option_notes(opt_)) say("note: ", note);
  // The process of world rank 0 runs the saves' commits (checkpoints/commit.h).
  if (!opt_.save_path.empty() && local.front() == 0)
    save_lock_ = std::make_unique<SaveRootLock>(opt_.save_path, this);
  for (int r : local) {
    auto R = std::make_unique<Rank>();
    R->world_rank = r;
    R->coord = grid_->coord_of(r);
    R->tp = world_->group("tp", grid_->tp_group(r), r);
    R->dp = world_->group("dp", grid_->dp_group(r), r);
    R->pp = world_->group("pp", grid_->pp_group(r), r);
    const int p = opt_.parallel.p;
    // zbv holds the embedding and the head on the first rank: no group to sum over.
    if (p > 1 && !v_shaped(opt_.schedule) && (R->coord.pp == 0 || R->coord.pp == p - 1))
      R->embedding = world_->group("embedding", grid_->embedding_group(r), r);
    else if (p > 1)
      // Making groups is collective over the mpi world: a middle stage takes
      // part with a group of its own, which it then has no use for.
      world_->group("embedding", {r}, r);
    if (!opt_.data_path.empty()) {
      R->train = make_sampler(data_, 0, opt_.model.seq_length, opt_.seed, true);
      R->valid = make_sampler(data_, 1, opt_.model.seq_length, opt_.seed, false);
    }
    R->device = make_device(opt_.device, r);
    if (!opt_.inject_comm_group.empty()) {  // a test's corrupted collective
      if (R->device->kind() != DeviceKind::cpu)
        fail(Status::invalid_config, "inject_comm_group corrupts host memory: CPU ranks only");
      for (auto *g : {&R->tp, &R->dp, &R->pp, &R->embedding})
        if (*g && (*g)->name() == opt_.inject_comm_group)
          *g = std::make_unique<FaultComm>(std::move(*g), opt_.inject_comm_call,
                                           opt_.inject_comm_delta);
    }
    ranks_.push_back(std::move(R));
  }
  // The per-step outputs: a path that cannot be written is refused now, not
  // after the first step; each is the run's own file (no other output of the
  // run, a --log-json say, may take it). Under mpirun each process checks its
  // own PATH.rankN, and all stop together if one is refused.
  std::exception_ptr own_outputs_refused;
  try {
    claim_step_outputs();
  } catch (...) {  // (any error: the others wait in fail_together for this process's verdict)
    own_outputs_refused = std::current_exception();
  }
  if (mpi_ && mpi_->size() > 1)
    mpi_->fail_together("its --timeline or --profile-ops file", own_outputs_refused);
  else if (own_outputs_refused)
    std::rethrow_exception(own_outputs_refused);
  bind_device_comms();
  for (auto &R : ranks_) {
    const int r = R->world_rank, p = opt_.parallel.p;
    R->model = std::make_unique<GPT<float>>(
        opt_.model, opt_.seed, TensorParallel{R->coord.tp, opt_.parallel.t, R->tp_d},
        PipelineStage{R->coord.pp, p, opt_.virtual_stages, v_shaped(opt_.schedule)},
        opt_.recompute, opt_.precision,
        R->device.get());
    R->model->set_flash_attention(opt_.use_flash_attn);
    R->model->set_sequence_parallel(opt_.sequence_parallel);
    R->model->set_op_profiling(!opt_.op_profile_path.empty());
    R->pipeline = std::make_unique<PipelineRuntime>(
        *R->model, p > 1 ? R->pp_d : nullptr, opt_.parallel.t > 1 ? R->tp_d : nullptr,
        opt_.scatter_gather && !opt_.sequence_parallel);
    const int m = opt_.microbatches();
    R->eval_schedule = forward_only_schedule(opt_.schedule, p, opt_.virtual_stages, m, R->coord.pp);
    R->timeline.set_enabled(!opt_.timeline_path.empty());
    R->report.world_rank = r;
    R->report.coord = R->coord;
    R->report.schedule = pipeline_schedule(opt_.schedule, p, opt_.virtual_stages, m, R->coord.pp);
    for (Communicator *c : {R->tp.get(), R->dp.get(), R->pp.get(), R->embedding.get()})
      if (c) c->stats().timeline = &R->timeline;
    const int d = opt_.parallel.d;
    if (opt_.distributed_optimizer && d > 1) {
      // Each data rank's optimizer holds its shard; the reducer then sums the
      // tied embedding only, and the shard's reduce-scatter does the rest.
      const DpShard shard = DpShard::of(R->model->num_params(), d, R->coord.dp);
      R->adam = std::make_unique<AdamW>(*R->model, opt_.adam, shard.lo, shard.hi);
      R->dp_shard = std::make_unique<DpShardComm>(*R->device, *R->dp_d, shard);
    } else {
      R->adam = std::make_unique<AdamW>(*R->model, opt_.adam);
    }
    R->grad_reducer = std::make_unique<GradReducer>(
        *R->model, R->embedding ? R->embedding_d : nullptr,
        d > 1 && !R->dp_shard ? R->dp_d : nullptr, (size_t)opt_.ddp_bucket_size,
        opt_.overlap_grad_reduce);
    R->sample.resize((size_t)opt_.model.seq_length + 1);
  }
  if (!opt_.load_path.empty()) {
    // As in Megatron, --load naming a place with no complete checkpoint yet
    // starts a fresh run (the first run of `--save X --load X`), and says so.
    std::optional<CheckpointRef> ckpt;
    std::string found;  // what this process's --load found, which every process's must be
    std::exception_ptr refused;
    try {
      // (In here: under mpirun what one process alone finds is agreed below.)
      std::error_code ec;
      if (fs::exists(opt_.load_path, ec) && !fs::is_directory(opt_.load_path, ec))
        fail(Status::invalid_argument, "--load '", opt_.load_path,
             "' is a file; give the checkpoint's directory (or the --save directory of the run)");
      ckpt = open_checkpoint(opt_.load_path);
      found = "iteration " + std::to_string(ckpt->manifest.iteration) + ", manifest " +
              std::to_string(fnv1a64(ckpt->manifest.to_json()));
    } catch (const Error &e) {
      found = "none";
      try {
        if (e.code() != Status::io_error) throw;  // a damaged manifest is an error
        if (opt_.finetune)
          fail(Status::io_error, "load '", opt_.load_path, "' has no weights to take (finetune, ",
               "as `ptdp generate` does too): ", e.what());
      } catch (const Error &why) {
        refused = std::current_exception();
        found = std::string("an error: ") + why.what();
      }
      if (!refused) {
        last_loaded_ = "load: " + std::string(e.what()) + "; starting from iteration 0";
        if (first_local_rank() == 0) say(last_loaded_);
      }
    }
    // Under mpirun, before the load's collectives: a process that found
    // another checkpoint, or none (a relative --load from another working
    // directory), trained its shard from another state, and the job hung.
    if (mpi_ && mpi_->size() > 1) mpi_->agree("checkpoint", {{"what --load found", found}});
    if (refused) std::rethrow_exception(refused);
    if (ckpt) load(*ckpt);
    // Its lineage is known now: a fine-tuned run resumed with --save naming
    // the run it came from has that run's options but is another run; and a
    // load that found nothing (a mistyped path) starts from scratch.
    if (!opt_.save_path.empty())
      check_save_target(opt_.save_path, resumed_from_, opt_.model, manifest_training(),
                        ckpt ? kAnyCheckpoint : kNoCheckpoint);
    // A run resumed from an earlier checkpoint of its --save directory (a
    // rewind) replaces the newer ones there as it saves: said, not silent;
    // and one it cannot replace (a user's file in it) stops it now, not
    // after the training.
    if (ckpt && !opt_.save_path.empty()) {
      std::vector<std::string> newer;
      for (const std::string &dir : complete_checkpoints(opt_.save_path)) {
        bool tmp = false;
        const int64_t it = checkpoint_iteration(fs::path(dir).filename().string(), &tmp);
        if (it <= iteration_) continue;
        newer.push_back(dir);
        if (const std::string why = save_name_problem(dir, true); !why.empty() && it <= opt_.train_iters)
          fail(Status::io_error, "--save '", opt_.save_path, "': '", dir, "' ", why, ": this run, resumed at "
               "iteration ", iteration_, ", would replace it as it saves; move it away or save elsewhere");
      }
      if (!newer.empty() && first_local_rank() == 0)
        say("note: --save '", opt_.save_path, "' holds ", newer.size(), " checkpoint",
            newer.size() == 1 ? "" : "s", " newer than the one loaded (iteration ", iteration_,
            "), the newest '", newer.front(), "': this run's saves replace those of the iterations it saves");
    }
    // Its files (and the tracker read) are inputs now: the outputs checked
    // above are checked again against them, still before the first step.
    if (!opt_.timeline_path.empty()) check_output_file(process_path(opt_.timeline_path), "--timeline", OutputKind::trace);
    if (!opt_.op_profile_path.empty())
      check_output_file(process_path(opt_.op_profile_path), "--profile-ops", OutputKind::op_profile);
  }
  made.keep = true;  // started: the --save directory is this run's
  for (const fs::path &d : made.made) made_save_dirs_.push_back(d.string());  // held since made
}

// NCCL (2.23 and later) finalizes a communicator together with the other
// members: destroyed one after another on this thread, each would wait for
// members not yet at theirs, up to comm_timeout apiece. So every rank drops
// its device communicators on a thread of its own, all at once (each bounded
// by comm_timeout: NcclComm::release), after its gradient reducer, whose
// thread uses them.
Trainer::~Trainer() {
  wait_for_saves();  // the background save reads the ranks' staging
  for (const std::string &d : made_save_dirs_) release_temp_directory(d, {});
  auto release = [](Rank *r) {
    if (r->device && r->device->kind() != DeviceKind::cpu) {
      try {
        r->device->bind_thread();
      } catch (const std::exception &) {  // NcclComm::release binds again
      }
    }
    r->grad_reducer.reset();
    for (auto &c : r->staged) c.reset();
  };
  std::vector<std::thread> threads;
  for (auto &R : ranks_) {
    try {
      threads.emplace_back(release, R.get());
    } catch (const std::exception &) {  // no thread to be had: on this one
      release(R.get());
    }
  }
  for (auto &t : threads) t.join();
}

// The groups as the model and the gradient reductions use them (Rank::tp_d,
// ...): NCCL communicators, the host ones through copies (StagedComm), or on
// the CPU the host ones themselves. NCCL communicators are made collectively,
// so on every rank's own thread.
void Trainer::bind_device_comms() {
  const std::string &backend = opt_.distributed_backend;
  const bool on_gpu = ranks_[0]->device->kind() != DeviceKind::cpu;
  if (backend == "nccl" && !on_gpu)
    fail(Status::invalid_config, "--distributed-backend nccl needs the ranks on GPUs (--device ",
         "cuda); they are on ", ranks_[0]->device->name());
  // NCCL cannot put two ranks on one GPU.
  std::set<std::string> gpus;
  for (auto &R : ranks_) gpus.insert(R->device->hardware_id());
  const bool own_gpus = gpus.size() == ranks_.size();
  if (backend == "nccl" && !own_gpus)
    fail(Status::invalid_config, "--distributed-backend nccl needs a GPU per rank, but the ",
         ranks_.size(), " ranks of this process share ", gpus.size(),
         " GPU(s); use --distributed-backend host (or auto)");
  // This rank's GPU as a number every process computes alike (host and PCI
  // bus id, hashed to 52 bits so that a double holds it exactly).
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  auto gpu_key = [&](const Rank &R) {
    const uint64_t h = std::hash<std::string>{}(std::string(host) + "/" + R.device->hardware_id());
    return (double)(h >> 12);
  };
  auto bind = [&](Rank &R) {
    const bool stage = on_gpu || opt_.stage_comm_through_host;
    Communicator **bound[4] = {&R.tp_d, &R.dp_d, &R.pp_d, &R.embedding_d};
    Communicator *raw[4] = {R.tp.get(), R.dp.get(), R.pp.get(), R.embedding.get()};
    for (int k = 0; k < 4; k++) {
      if (!raw[k]) continue;
      bool nccl = on_gpu && backend == "nccl";
      if (on_gpu && backend == "auto" && raw[k]->size() > 1) {
        // NCCL when every member has it and a GPU of its own, also across
        // processes: the same choice on every member.
        const CommStats before = raw[k]->stats();  // set-up, not the group's traffic
        double unable = nccl_built() ? 0 : 1;
        raw[k]->all_reduce(&unable, 1);
        const double mine = gpu_key(R);
        std::vector<double> keys((size_t)raw[k]->size());
        raw[k]->all_gather(&mine, keys.data(), 1);
        raw[k]->stats() = before;
        nccl = unable == 0 && std::set<double>(keys.begin(), keys.end()).size() == keys.size();
      }
      if (nccl)
        R.staged[k] = make_nccl_comm(*raw[k], *R.device, opt_.comm_timeout_s);
      else if (stage)
        R.staged[k] = std::make_unique<StagedComm>(*raw[k], *R.device);
      *bound[k] = R.staged[k] ? R.staged[k].get() : raw[k];
    }
  };
  // Only NCCL's set-up is collective and needs every rank on its own thread.
  if (on_gpu && backend != "host") {
    run_on_ranks(bind);
  } else {
    for (auto &R : ranks_) bind(*R);
  }
}


int Trainer::first_local_rank() const { return ranks_[0]->world_rank; }

void Trainer::agree_with_processes(const std::vector<std::pair<std::string, std::string>> &items) {
  if (mpi_ && mpi_->size() > 1) mpi_->agree("script option", items);
}
RankCoord Trainer::first_local_coord() const { return ranks_[0]->coord; }

GPT<float> &Trainer::model(int rank) { return *ranks_.at((size_t)rank)->model; }
const GPT<float> &Trainer::model(int rank) const { return *ranks_.at((size_t)rank)->model; }
AdamW &Trainer::optimizer(int rank) { return *ranks_.at((size_t)rank)->adam; }

const CommStats &Trainer::comm_stats(int rank, const std::string &group) const {
  const Rank &r = *ranks_.at((size_t)rank);
  if (group == "tp") return r.tp->stats();
  if (group == "dp") return r.dp->stats();
  if (group == "pp") return r.pp->stats();
  if (group == "embedding") {
    if (!r.embedding)
      fail(Status::invalid_argument, "rank ", r.world_rank,
           " is in no embedding group (only the first and last stages are, when p > 1 and the "
           "schedule is not zbv)");
    return r.embedding->stats();
  }
  fail(Status::invalid_argument, "unknown group '", group, "'; known: tp, pp, dp, embedding");
}

bool Trainer::has_group(int rank, const std::string &group) const {
  const Rank &r = *ranks_.at((size_t)rank);
  return group == "tp" || group == "pp" || group == "dp" || (group == "embedding" && r.embedding);
}

// Lays out b samples starting at global index `first` as [s, b] tokens/targets.
void Trainer::fill_batch(Rank &r, Sampler &sampler, uint64_t first, int b) {
  const int s = opt_.model.seq_length;
  r.tokens.resize((size_t)s * b);
  r.targets.resize((size_t)s * b);
  for (int bi = 0; bi < b; bi++) {
    sampler.get(first + (uint64_t)bi, r.sample.data());
    for (int si = 0; si < s; si++) {
      r.tokens[(size_t)si * b + bi] = r.sample[si];
      r.targets[(size_t)si * b + bi] = r.sample[si + 1];
    }
  }
}

// This rank's squared gradient norm over its model shard: the sums of the d
// data-parallel ranges added in order, whether this rank holds all the
// reduced gradients (each range summed here) or, with the distributed
// optimizer, its own range (the others' sums gathered) — bit for bit the same.
double Trainer::grad_norm_squares(Rank &r) {
  GPT<float> &model = *r.model;
  const int d = opt_.parallel.d;
  std::vector<double> part((size_t)d);
  if (r.dp_shard) {
    const DpShard &s = r.dp_shard->shard();
    const double mine = s.hi > s.lo ? grad_sum_squares(model, s.lo, s.hi) : 0.0;
    r.dp->all_gather(&mine, part.data(), 1, DType::f64);
  } else {
    for (int k = 0; k < d; k++) {
      const DpShard s = DpShard::of(model.num_params(), d, k);
      part[(size_t)k] = s.hi > s.lo ? grad_sum_squares(model, s.lo, s.hi) : 0.0;
    }
  }
  double sq = 0;
  for (double x : part) sq += x;
  return sq;
}

void Trainer::rank_step(Rank &r, int64_t it, Sampler &train) {
  const int64_t t_start = Timeline::now_ns();
  const int b = opt_.micro_batch_size, s = opt_.model.seq_length;
  const int per_replica = opt_.global_batch_size / opt_.parallel.d;
  const double tokens = (double)opt_.global_batch_size * s;
  GPT<float> &model = *r.model;
  float *grads = model.grads();
  model.device().zero(grads, model.num_params() * sizeof(float));
  r.timeline.clear();
  r.report.timings.clear();
  model.reset_peak_stashed_bytes();
  model.device().reset_peak();
  std::map<std::string, CommStats> comm_before;
  for (auto &[name, c] : r.groups()) comm_before[name] = c->stats();

  // The schedule's forwards and backwards; micro-batch j of this replica holds
  // the samples [consumed + dp*per_replica + j*b, ... + b).
  auto batch = [&](int j, bool data) {
    uint64_t first = (uint64_t)consumed_ + (uint64_t)r.coord.dp * per_replica + (uint64_t)j * b;
    if (data) fill_batch(r, train, first, b);
    return MicroBatch{r.tokens.data(), r.targets.data(), (uint32_t)first};
  };
  // The loss's gradient carries the loss scale (1 without a scaler); the
  // gradients are unscaled before clipping and the update.
  const double scale = loss_scale();
  // A test's overflow: an infinite gradient that the backward accumulates into
  // and the reduction spreads (injected first, since buckets may be reduced
  // while the backward runs).
  if (it == opt_.inject_overflow_iteration && r.world_rank == 0 && model.num_params()) {
    const float inf = INFINITY;
    model.device().copy_from_host(grads, &inf, sizeof inf);
  }
  r.grad_reducer->start();
  double loss_sum = r.pipeline->run(r.report.schedule, s, b, (uint32_t)it, true,
                                    (float)(scale / tokens), batch, &r.report.timings);
  // The ops' spans on the device (on a GPU the host only queued them).
  double compute_ns = 0;
  for (const OpTiming &t : r.report.timings) {
    compute_ns += (double)t.device_ns;
    const bool fwd = t.op.kind == PipeOpKind::forward, w = t.op.kind == PipeOpKind::backward_weight;
    r.timeline.add(Span{fwd ? "F" : w ? "W" : "B", fwd ? "forward" : w ? "backward_weight" : "backward",
                        t.device_start_ns, t.device_start_ns + t.device_ns, t.op.microbatch,
                        t.op.chunk, "", -1});
  }

  r.grad_reducer->finish();
  if (r.dp_shard) r.dp_shard->reduce_scatter(grads);  // this rank's shard of the sums
  r.report.grad_buckets = (int)r.grad_reducer->buckets().size();
  r.report.overlapped_grad_buckets = r.grad_reducer->overlapped_buckets();
  // The loss lives on the last stage, the gradients on every stage.
  if (opt_.parallel.p > 1) r.pp->all_reduce(&loss_sum, 1);
  if (opt_.parallel.d > 1) r.dp->all_reduce(&loss_sum, 1);
  double sq = grad_norm_squares(r);
  if (opt_.parallel.t > 1) r.tp->all_reduce(&sq, 1);
  if (opt_.parallel.p > 1) r.pp->all_reduce(&sq, 1);

  StepMetrics &res = r.metrics;
  res = StepMetrics{};
  res.lm_loss = loss_sum / tokens;
  // The schedule counts updates (Megatron steps it only after a successful
  // one): a skipped step's iteration does not move it, as for Adam's count.
  res.lr = opt_.lr.at(it - skipped_);
  res.grad_norm = std::sqrt(sq) / scale;
  // Every rank sees the same loss and norm, so all take the same branch. No
  // update on a skipped step: parameters and moments stay as they were.
  const bool loss_bad = !std::isfinite(res.lm_loss), grads_bad = !std::isfinite(res.grad_norm);
  if (loss_bad || grads_bad) {
    res.skipped_iters = 1;
    // An fp16 gradient overflow is the loss scaler's business (a skipped
    // step); a NaN loss, or bad gradients without a scaler, is a NaN iteration.
    res.nan_iters = loss_bad || !opt_.use_loss_scaler ? 1 : 0;
  } else {
    // (Timed on the device off the CPU: the host only queues the update.)
    const bool on_cpu = model.device().kind() == DeviceKind::cpu;
    auto timer = on_cpu ? nullptr : model.device().make_timer();
    if (timer) timer->start();
    const int64_t t0 = Timeline::now_ns();
    r.adam->update(model, res.lr, it - skipped_,
                   (1.0 / scale) * clip_factor(res.grad_norm, opt_.clip_grad));
    if (r.dp_shard) r.dp_shard->all_gather(model.params());  // every shard's update
    if (timer) timer->stop();
    const int64_t ns = timer ? (int64_t)(timer->elapsed_ms() * 1e6) : Timeline::now_ns() - t0;
    compute_ns += (double)ns;
    r.timeline.add(Span{"optimizer", "optimizer", t0, t0 + ns, -1, -1, "", -1});
  }
  RankReport &rep = r.report;
  rep.compute_seconds = compute_ns * 1e-9;
  rep.step_seconds = (double)(Timeline::now_ns() - t_start) * 1e-9;
  rep.peak_activation_bytes = model.peak_stashed_bytes();
  const MemoryStats mem = model.device().memory();
  rep.device_peak_bytes = mem.peak;
  rep.device_in_use_bytes = mem.in_use;
  for (auto &[name, c] : r.groups()) rep.comm[name] = c->stats().since(comm_before[name]);
}

// "tp 1, pp 0, dp 1": a rank's place, as the trace and the op profile name it.
static std::string coord_label(const RankCoord &c) {
  return "tp " + std::to_string(c.tp) + ", pp " + std::to_string(c.pp) + ", dp " +
         std::to_string(c.dp);
}

void Trainer::write_timeline() const {
  std::vector<RankTimeline> tracks;
  for (auto &r : ranks_) tracks.push_back({r->world_rank, coord_label(r->coord), &r->timeline});
  write_chrome_trace(process_path(opt_.timeline_path), tracks, step_origin_ns_);
}

// Every local rank's op table of the step just taken (the sums start again).
void Trainer::write_diagnostic(const char *flag, bool *failed, const std::function<void()> &write) {
  try {
    write();
  } catch (const std::exception &e) {  // (an Error, or the file system's)
    if (!*failed)  // (each process writes its own file, and says so for its own)
      say(flag, " not written at iteration ", iteration_, " (training goes on; said once): ", e.what());
    *failed = true;
  }
}

void Trainer::write_op_profile() {
  std::string text;
  for (auto &r : ranks_)
    text += "rank " + std::to_string(r->world_rank) + " (" + coord_label(r->coord) + ") on " +
            r->device->name() + ", iteration " + std::to_string(iteration_) + "\n" +
            format_op_profile(r->model->take_op_profile()) + "\n";
  write_file_atomic(process_path(opt_.op_profile_path), text, "--profile-ops", OutputKind::op_profile);
}

// Under mpirun each process writes its own ranks' outputs: path.rankN.
std::string Trainer::process_path(const std::string &path) const {
  if (local_ranks() < world_size()) return path + ".rank" + std::to_string(first_local_rank());
  return path;
}

void Trainer::claim_step_outputs() {
  if (!opt_.timeline_path.empty()) {
    check_output_file(process_path(opt_.timeline_path), "--timeline", OutputKind::trace);
    output_claims_.emplace_back(process_path(opt_.timeline_path), "--timeline", true);
  }
  // Under mpirun each process writes its own PATH.rankN; the other processes'
  // are this run's too, claimed in this process (a --log-json naming one was
  // refused by one process alone, after the start, and the others waited in
  // their first collective until the timeout).
  for (const std::string &path : {opt_.timeline_path, opt_.op_profile_path})
    if (!path.empty() && local_ranks() < world_size())
      for (int r = 0; r < world_size(); r += local_ranks())
        if (r != first_local_rank())
          output_claims_.emplace_back(path + ".rank" + std::to_string(r),
                                      path == opt_.timeline_path ? "--timeline" : "--profile-ops");
  if (!opt_.op_profile_path.empty()) {
    check_output_file(process_path(opt_.op_profile_path), "--profile-ops", OutputKind::op_profile);
    output_claims_.emplace_back(process_path(opt_.op_profile_path), "--profile-ops", true);
  }
}

std::string Trainer::device_name(int rank) const { return ranks_.at(rank)->device->name(); }

StepMetrics Trainer::log_metrics() const {
  StepMetrics m = last_;
  const IntervalMeans mean =
      log_interval_.mean_at(last_.iteration, {last_.lm_loss, last_.elapsed_ms * 1e-3});
  m.lm_loss = mean.lm_loss;
  if (mean.seconds > 0 && last_.elapsed_ms > 0) {  // rates scale with 1 / time
    const double f = last_.elapsed_ms * 1e-3 / mean.seconds;
    m.elapsed_ms = mean.seconds * 1e3;
    m.tokens_per_s *= f;
    m.tflops_per_rank *= f;
    if (m.mfu >= 0) m.mfu *= f;
  }
  return m;
}

StepMetrics Trainer::step() {
  if (!feed_ && !ranks_[0]->train)
    fail(Status::wrong_state, "this trainer has no dataset (data_path is not set): give data_path ",
         "(a token dataset made by `ptdp tokenize`), or feed each batch with step_tokens");
  auto t0 = std::chrono::steady_clock::now();
  const int64_t it = iteration_ + 1;
  step_origin_ns_ = Timeline::now_ns();
  gathered_.clear();  // they describe the previous step
  exit_reason_.clear();
  // A background save that has finished: its outcome now, without waiting.
  if (pending_save_.valid() &&
      pending_save_.wait_for(std::chrono::seconds(0)) == std::future_status::ready)
    wait_for_saves();
  run_on_ranks([&](Rank &r) { rank_step(r, it, feed_ ? *feed_ : *r.train); });
  StepMetrics res = ranks_[0]->metrics;
  if (res.nan_iters) nan_++;
  if (res.skipped_iters) skipped_++;
  steps_taken_++;
  if (res.skipped_iters) steps_skipped_++;
  if (opt_.use_loss_scaler) scaler_.update(res.skipped_iters != 0);
  res.loss_scale = loss_scale();  // after the update, as Megatron logs it
  iteration_ = it;
  consumed_ += opt_.global_batch_size;
  double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double tokens = (double)opt_.global_batch_size * opt_.model.seq_length;
  res.iteration = it;
  res.train_iters = opt_.train_iters;
  res.consumed_samples = consumed_;
  res.global_batch_size = opt_.global_batch_size;
  res.skipped_iters = skipped_;
  res.nan_iters = nan_;
  res.elapsed_ms = sec * 1e3;
  res.tokens_per_s = tokens / sec;
  // The paper's Eq. 3 counts the recomputed forward when every layer is recomputed.
  const Recompute &rc = opt_.recompute;
  const bool all_recomputed =
      rc.enabled && (rc.method == RecomputeMethod::uniform ||
                     rc.num_layers * opt_.parallel.p * opt_.virtual_stages == opt_.model.num_layers);
  res.tflops_per_rank = opt_.model.flops_per_batch(opt_.global_batch_size, all_recomputed) / sec /
                        1e12 / (double)world_size();
  last_ = res;
  log_interval_.add(res.lm_loss, ranks_[0]->metrics.skipped_iters != 0, sec);
  // (Not counted in the step's time.)
  if (!opt_.timeline_path.empty())
    write_diagnostic("--timeline", &timeline_failed_, [&] { write_timeline(); });
  if (!opt_.op_profile_path.empty())
    write_diagnostic("--profile-ops", &op_profile_failed_, [&] { write_op_profile(); });
  longest_step_s_ = std::max(longest_step_s_, sec);
  const bool at_interval = opt_.save_interval > 0 && it % opt_.save_interval == 0;
  const bool save_now = !opt_.save_path.empty() && (at_interval || it == opt_.train_iters);
  if (save_now) save_in_run();
  decide_exit(it);
  return res;
}



namespace {
// The caller's global batch as a sampler holding the samples [first, first + n)
// of the run: the ranks read their micro-batches from it as from the dataset.
class CallerBatch final : public Sampler {
 public:
  CallerBatch(const int32_t *ids, uint64_t first, uint64_t n, int seq_length)
      : ids_(ids), first_(first), n_(n), row_((size_t)seq_length + 1) {}
  uint64_t num_samples() const override { return n_; }
  uint64_t num_tokens() const override { return n_ * row_; }
  void get(uint64_t index, int32_t *out) override {
    if (index < first_ || index - first_ >= n_)
      fail(Status::internal, "sample ", index, " is outside the caller's batch [", first_, ", ",
           first_ + n_, ")");
    std::copy_n(ids_ + (size_t)(index - first_) * row_, row_, out);
  }
  std::vector<double> unigram() const override { return {}; }

 private:
  const int32_t *ids_;
  uint64_t first_, n_;
  size_t row_;
};
}  // namespace

StepMetrics Trainer::step_tokens(const int32_t *ids, size_t count) {
  // Everything is checked before the step, so a refused batch changes nothing.
  const size_t want = step_tokens_count(), row = (size_t)opt_.model.seq_length + 1;
  if (!ids) fail(Status::invalid_argument, "step_tokens needs token ids (got NULL)");
  if (count != want)
    fail(Status::invalid_argument, "step_tokens needs global_batch_size x (seq_length + 1) = ",
         opt_.global_batch_size, " x ", row, " = ", want, " token ids, got ", count);
  const int32_t V = opt_.model.vocab_size;
  for (size_t i = 0; i < count; i++)
    if (ids[i] < 0 || ids[i] >= V)
      fail(Status::invalid_argument, "token id ", ids[i], " at index ", i, " (sequence ", i / row,
           ", position ", i % row, ") is outside the vocabulary [0, ", V, ")");
  CallerBatch batch(ids, (uint64_t)consumed_, (uint64_t)opt_.global_batch_size,
                    opt_.model.seq_length);
  struct Feed {
    Sampler *&slot;
    ~Feed() { slot = nullptr; }
  } feed{feed_};
  feed_ = &batch;
  return step();
}

double Trainer::rank_evaluate(Rank &r, int iters) {
  const int b = opt_.micro_batch_size, s = opt_.model.seq_length;
  const int per_replica = opt_.global_batch_size / opt_.parallel.d;
  double sum = 0;
  for (int k = 0; k < iters; k++) {
    r.stop_signal = opt_.exit_signal_handler ? agreed_signal(r) : 0;  // (every rank at this k)
    if (r.stop_signal) return std::nan("");
    auto batch = [&](int j, bool data) {
      uint64_t first = (uint64_t)k * opt_.global_batch_size + (uint64_t)r.coord.dp * per_replica +
                       (uint64_t)j * b;
      if (data) fill_batch(r, *r.valid, first, b);
      return MicroBatch{r.tokens.data(), r.targets.data(), (uint32_t)first};
    };
    sum += r.pipeline->run(r.eval_schedule, s, b, 0, false, 0.f, batch);
  }
  if (opt_.parallel.p > 1) r.pp->all_reduce(&sum, 1);
  if (opt_.parallel.d > 1) r.dp->all_reduce(&sum, 1);
  return sum / ((double)iters * opt_.global_batch_size * s);
}

double Trainer::evaluate(int iters) {
  if (iters <= 0) fail(Status::invalid_argument, "evaluate needs iters > 0, got ", iters);
  if (!ranks_[0]->valid)
    fail(Status::wrong_state, "evaluate needs data_path (its validation split): this trainer has "
         "no dataset");
  // (exit_reason stays as the last step left it: an evaluation sets it only
  // when a signal cuts it.)
  if (opt_.exit_signal_handler) make_world_groups();
  run_on_ranks([&](Rank &r) { r.value = rank_evaluate(r, iters); });
  // Cut short by a signal: no loss of part of the split; the run ends as after a step.
  if (const int sig = ranks_[0]->stop_signal)
    end_run(exit_signal_name(sig) + " received during the evaluation at iteration " +
            std::to_string(iteration_));
  return ranks_[0]->value;
}


std::vector<float> Trainer::gather_parameter(const std::string &name) const {
  if ((int)ranks_.size() != world_size())
    fail(Status::wrong_state, "gather_parameter needs every rank in this process; under mpirun "
         "this process holds ", ranks_.size(), " of ", world_size());
  // The stage holding it (the first stage's wte, not the last stage's tied copy).
  int stage = -1;
  for (int st = 0; st < opt_.parallel.p && stage < 0; st++) {
    const ParamInfo *p = ranks_[(size_t)grid_->rank_of({0, 0, st})]->model->find_param(name);
    if (p && !p->tied_copy) stage = st;
  }
  if (stage < 0) fail(Status::invalid_argument, "no parameter named '", name, "'");
  const int t = opt_.parallel.t;
  const GPT<float> &m0 = *ranks_[(size_t)grid_->rank_of({0, 0, stage})]->model;
  size_t total = 1;
  for (int64_t d : m0.param(name).global_shape) total *= (size_t)d;
  std::vector<float> out(total);
  for (int tr = 0; tr < t; tr++) {
    const GPT<float> &m = *ranks_[(size_t)grid_->rank_of({tr, 0, stage})]->model;
    const ParamInfo &p = m.param(name);
    if (p.split_axis < 0 && tr > 0) break;  // replicated: tensor rank 0's copy
    std::vector<float> src(p.numel);
    m.device().copy_to_host(src.data(), m.params() + p.offset, p.numel * sizeof(float));
    for (size_t i = 0; i < p.numel; i++) out[(size_t)m.global_index(p, i)] = src[i];
  }
  if (m0.param(name).vocab_rows)  // without the padding rows
    out.resize((size_t)opt_.model.vocab_size * opt_.model.hidden_size);
  return out;
}

double Trainer::unigram_entropy() const {
  if (!ranks_[0]->train)
    fail(Status::wrong_state, "unigram_entropy needs data_path: this trainer has no dataset");
  double h = 0;
  for (double p : ranks_[0]->train->unigram())
    if (p > 0) h -= p * std::log(p);
  return h;
}

uint64_t Trainer::train_samples() const {
  return ranks_[0]->train ? ranks_[0]->train->num_samples() : 0;
}
uint64_t Trainer::valid_samples() const {
  return ranks_[0]->valid ? ranks_[0]->valid->num_samples() : 0;
}

}  // namespace ptdp
