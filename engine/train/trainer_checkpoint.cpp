// The trainer's checkpoint glue: what a resumed run must share with the
// saved one, the ranks' shards (staged through the host off the CPU), save
// and load (checkpoints/ does the files).
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <future>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "checkpoints/save_target.h"
#include "checkpoints/sharded_checkpoint.h"
#include "engine/core/status.h"
#include "engine/train/trainer.h"
#include "engine/train/trainer_rank.h"

namespace ptdp {

// The options a resumed run must share with the saved one, as text.
std::map<std::string, std::string> resumption_options(const TrainerOptions &o,
                                                      const std::string &data_fingerprint) {
  const auto num = number_text;
  std::map<std::string, std::string> out = {{"seed", std::to_string(o.seed)},
          {"split", o.split},
          {"data_path", o.data_path},
          {"global_batch_size", std::to_string(o.global_batch_size)},
          {"micro_batch_size", std::to_string(o.micro_batch_size)},
          {"train_iters", std::to_string(o.train_iters)},
          {"lr", num(o.lr.max_lr)},
          {"min_lr", num(o.lr.min_lr)},
          {"lr_warmup_iters", std::to_string(o.lr.warmup_iters)},
          {"lr_decay_iters", std::to_string(o.lr.decay_iters)},
          {"lr_decay_style", o.lr.style},
          {"weight_decay", num(o.adam.weight_decay)},
          {"adam_beta1", num(o.adam.beta1)},
          {"adam_beta2", num(o.adam.beta2)},
          {"adam_eps", num(o.adam.eps)},
          {"clip_grad", num(o.clip_grad)},
          {kTokenizerTypeKey, o.tokenizer},
          {"params_dtype", dtype_name(o.precision.dtype)}};
  if (!data_fingerprint.empty()) out["data_fingerprint"] = data_fingerprint;
  return out;
}

// The staging: page-locked so that the copies run at the DMA's full rate
// without the driver's own bounce buffers; ordinary memory once the host has
// refused to lock that much. Kept between saves and loads, as the copies are.
Trainer::Rank::Staged Trainer::Rank::checkpoint_staging(size_t n) {
  const bool has_master = adam->has_master();
  const size_t count = (has_master ? 4 : 3) * n;
  float *p = nullptr;
  if (!checkpoint_lock_failed) {
    try {
      if (!checkpoint_stage) checkpoint_stage = std::make_unique<HostStage>(*device);
      p = reinterpret_cast<float *>(checkpoint_stage->reserve(count * sizeof(float)));
    } catch (const Error &e) {
      if (e.code() != Status::out_of_memory) throw;
      checkpoint_stage.reset();
      checkpoint_lock_failed = true;
    }
  }
  if (!p) {
    checkpoint_pageable.resize(count);
    p = checkpoint_pageable.data();
  }
  return {p, p + n, p + 2 * n, has_master ? p + 3 * n : nullptr};
}

// Checkpoints read and write host memory. A CPU rank hands its own buffers; a
// rank on another device stages them in host copies (and unstage_shards puts
// loaded values back).
// A distributed optimizer's ranks stage too: a checkpoint holds the whole
// optimizer state, gathered from the data ranks' shards (so that it loads
// into any layout, with the distributed optimizer or without).
std::vector<RankShard> Trainer::local_shards(bool snapshot) {
  if (opt_.distributed_optimizer && opt_.parallel.d > 1)
    run_on_ranks([&](Rank &r) {  // collective over each data-parallel group
      const Trainer::Rank::Staged h = r.checkpoint_staging(r.model->num_params());
      r.dp_shard->gather_to_host(r.adam->exp_avg(), h.m);
      r.dp_shard->gather_to_host(r.adam->exp_avg_sq(), h.v);
      if (h.master) r.dp_shard->gather_to_host(r.adam->master(), h.master);
    });
  std::vector<RankShard> shards;
  for (auto &r : ranks_) {
    GPT<float> &m = *r->model;
    AdamW &a = *r->adam;
    if (r->device->kind() == DeviceKind::cpu && !snapshot && !r->dp_shard) {
      shards.push_back({r->coord, &m.param_table(), m.params(), a.exp_avg(), a.exp_avg_sq(),
                        a.master()});
      continue;
    }
    const size_t n = m.num_params(), bytes = n * sizeof(float);
    Device &dev = *r->device;
    const Trainer::Rank::Staged h = r->checkpoint_staging(n);
    // (read through the const view: a copy out is no write, and leaves the
    // ops' 16-bit copy of the weights current)
    dev.copy_to_host(h.params, static_cast<const GPT<float> &>(m).params(), bytes);
    if (!r->dp_shard) {
      dev.copy_to_host(h.m, a.exp_avg(), bytes);
      dev.copy_to_host(h.v, a.exp_avg_sq(), bytes);
      if (h.master) dev.copy_to_host(h.master, a.master(), bytes);
    }
    shards.push_back({r->coord, &m.param_table(), h.params, h.m, h.v, h.master});
  }
  return shards;
}

void Trainer::unstage_shards() {
  for (auto &r : ranks_) {
    if (r->device->kind() == DeviceKind::cpu && !r->dp_shard) continue;
    GPT<float> &m = *r->model;
    AdamW &a = *r->adam;
    const size_t n = m.num_params(), bytes = n * sizeof(float);
    Device &dev = *r->device;
    const Trainer::Rank::Staged h = r->checkpoint_staging(n);  // as local_shards left them
    dev.copy_from_host(m.params(), h.params, bytes);
    // The optimizer's range of the whole state (all of it without a shard).
    const size_t lo = a.lo(), k = (a.hi() - a.lo()) * sizeof(float);
    if (!k) continue;  // a data rank past the end of a tiny model
    dev.copy_from_host(a.exp_avg(), h.m + lo, k);
    dev.copy_from_host(a.exp_avg_sq(), h.v + lo, k);
    if (h.master) dev.copy_from_host(a.master(), h.master + lo, k);
  }
}

std::string Trainer::save(const std::string &root) {
  wait_for_saves();
  saved_.push_back(save_checkpoint(save_request(root), local_shards()));
  return saved_.back();
}

std::map<std::string, std::string> Trainer::manifest_training() const {
  std::map<std::string, std::string> out = resumption_options(opt_, data_fingerprint_);
  out.insert(provenance_.begin(), provenance_.end());
  out[kTokenizerVocabularyKey] = vocabulary_text();
  return out;
}

std::string Trainer::vocabulary_text() const { return vocabulary_fingerprint_text(*tok_); }

void Trainer::check_vocabulary(const std::string &tokenizer, const std::string &vocabulary,
                               const char *to) const {
  if (vocabulary.empty() || vocabulary == vocabulary_text()) return;  // (an import records none)
  fail(Status::invalid_config, "the checkpoint was trained with another vocabulary (tokenizer_type ", tokenizer,
       ", vocabulary ", vocabulary, ") than this run's tokenizer (", opt_.tokenizer, ", vocabulary ",
       vocabulary_text(), "), whose ids name other tokens: give the checkpoint's tokenizer_type and files to ", to);
}

SaveRequest Trainer::save_request(const std::string &root) {
  if (!failure_.empty())
    fail(Status::wrong_state, "the job failed earlier; its state is not saved: ", failure_);
  if (root.empty()) fail(Status::invalid_argument, "save needs a directory");
  SaveRequest req;
  req.root = root;
  req.owner = this;
  req.keep_last = opt_.keep_last_checkpoints;
  req.model = opt_.model;
  req.layout = {opt_.parallel.t, opt_.parallel.p, opt_.parallel.d, opt_.virtual_stages};
  req.state = {iteration_, consumed_, skipped_, nan_};
  if (opt_.use_loss_scaler && opt_.loss_scaler.dynamic) {
    const LossScalerState &ls = scaler_.state();
    req.state.has_loss_scale = true;
    req.state.loss_scale = (float)ls.scale;
    req.state.loss_scale_growth_tracker = ls.growth_tracker;
    req.state.loss_scale_hysteresis_tracker = ls.hysteresis_tracker;
  }
  req.training = manifest_training();
  // Every save, not only --save's: a directory holding another run's
  // checkpoints is not written into (this run's own, or the one it resumed,
  // is); from a trainer that loaded none, nor one holding a later checkpoint.
  check_save_target(root, resumed_from_, opt_.model, req.training,
                    loaded_ ? kAnyCheckpoint : iteration_);
  return req;
}

// A save of step(): synchronous, or (async_save) the state copied to the
// ranks' host staging now and written by a background thread, after the one
// before it. A failure is reported and counted either way; training goes on.
void Trainer::save_in_run() {
  const auto t0 = std::chrono::steady_clock::now();
  in_run_saved_iteration_ = iteration_;
  try {
    if (!opt_.async_save) {
      save(opt_.save_path);
      last_save_error_.clear();
    } else {
      wait_for_saves();
      SaveRequest req = save_request(opt_.save_path);
      std::vector<RankShard> shards = local_shards(true);
      // At the trainer's own priority: a lower one (tried) lets busy training
      // threads starve the write until the next save must wait for it. It
      // reports its own duration, the margin --exit-duration-in-mins needs.
      pending_save_ = std::async(std::launch::async, [req = std::move(req), shards = std::move(shards)] {
        const auto start = std::chrono::steady_clock::now();
        BackgroundSave done;
        done.dir = save_checkpoint(req, shards);
        done.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        return done;
      });
    }
  } catch (const Error &e) {
    save_failed(e.what());
  } catch (const std::exception &e) {  // no thread for the background save, say
    save_failed(std::string("checkpoint of iteration ") + std::to_string(iteration_) +
                " not saved: " + e.what());
  }
  last_save_s_ = std::max(last_save_s_, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
}

double Trainer::wait_for_saves() {
  if (!pending_save_.valid()) return 0;
  const auto t0 = std::chrono::steady_clock::now();
  try {
    const BackgroundSave done = pending_save_.get();
    saved_.push_back(done.dir);
    last_save_s_ = std::max(last_save_s_, done.seconds);  // what a save takes, written in full
    last_save_error_.clear();
  } catch (const Error &e) {
    save_failed(e.what());
  } catch (const std::exception &e) {
    save_failed(std::string("internal error in the background save: ") + e.what());
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// A failed save must not end the run: report it, keep training, and the
// previous checkpoint stays the newest.
void Trainer::save_failed(const std::string &why) {
  last_save_error_ = why;
  failed_saves_++;
  if (first_local_rank() == 0) say(why);
}

std::string Trainer::load(const std::string &path) {
  wait_for_saves();  // it owns the staging that a load fills
  if (!failure_.empty()) fail(Status::wrong_state, "the job failed earlier: ", failure_);
  if (path.empty()) fail(Status::invalid_argument, "load needs a checkpoint directory");
  return load(open_checkpoint(path));
}

std::string Trainer::load(const CheckpointRef &ckpt) {
  // The options that decide the data order and dropout (seed, split) and the
  // LR schedule must be the saved ones, or the run would not continue the same
  // way. Checked before anything is read, so a refused load changes nothing;
  // the model first (no option makes another model's checkpoint load).
  check_same_model(ckpt, opt_.model);
  // The model's ids are its tokenizer's: training on text through a
  // vocabulary whose ids name other tokens (of the same size too) would
  // teach it other text. (A caller feeding ids, step_tokens, uses none.)
  const auto recorded = [&](const char *key) {
    const auto it = ckpt.manifest.training.find(key);
    return it == ckpt.manifest.training.end() ? std::string() : it->second;
  };
  if (!opt_.data_path.empty())
    check_vocabulary(recorded(kTokenizerTypeKey), recorded(kTokenizerVocabularyKey), "train on this run's data");
  const std::map<std::string, std::string> now = resumption_options(opt_, data_fingerprint_);
  // "key: checkpoint x, this run y; ..." for each of keys that differs. A key
  // the checkpoint does not record (an older or hand-written manifest) cannot
  // be compared: gathered in `unrecorded`, said below (a resume with another
  // seed went on in silence).
  std::string unrecorded;
  const auto differences = [&](const std::vector<std::string> &keys) {
    std::string diff;
    for (const std::string &k : keys) {
      auto it = ckpt.manifest.training.find(k);
      if (it == ckpt.manifest.training.end())
        unrecorded += (unrecorded.empty() ? "" : ", ") + k;
      else if (comparable_option(k, it->second) != comparable_option(k, now.at(k)))
        diff += (diff.empty() ? "" : "; ") + k + ": checkpoint " + it->second + ", this run " + now.at(k);
    }
    return diff;
  };
  std::vector<std::string> keys = {"seed", "split"};
  // (The LR schedule acts on steps only: a run that takes none from the
  // checkpoint, train_iters at or below its iteration, only evaluates.)
  const bool steps_ahead = opt_.train_iters > ckpt.manifest.iteration;
  if (!opt_.override_opt_param_scheduler && steps_ahead)
    for (const char *k : {"lr", "min_lr", "lr_warmup_iters", "lr_decay_iters", "lr_decay_style"})
      keys.push_back(k);
  if (opt_.finetune) keys.clear();  // a new run: its own seed, split and schedule
  const std::string diff = differences(keys);
  if (!diff.empty())
    fail(Status::invalid_config, "checkpoint '", ckpt.dir, "' was trained with other options (",
         diff, "); give the checkpoint's values",
         opt_.override_opt_param_scheduler ? "" : " (or override_opt_param_scheduler = 1 for the LR schedule)");
  // The optimizer's and batch options may change on a resume (Megatron takes
  // the command line's), but said: a value given by mistake would otherwise
  // change the run in silence.
  if (!opt_.finetune && first_local_rank() == 0) {
    std::string changed = differences({"global_batch_size", "micro_batch_size", "weight_decay",
                                       "adam_beta1", "adam_beta2", "adam_eps", "clip_grad", "params_dtype"});
    // (The dropout rates are the model block's, which records them beside its
    // shape: floats, written as such, "0.1" rather than 0.10000000149011612.)
    const auto float_text = [](float x) {
      char buf[32];
      std::snprintf(buf, sizeof buf, "%.7g", x);
      return std::string(buf);
    };
    for (const auto &[name, was, is] : {std::make_tuple("hidden_dropout", ckpt.manifest.model.hidden_dropout,
                                                        opt_.model.hidden_dropout),
                                        std::make_tuple("attention_dropout", ckpt.manifest.model.attention_dropout,
                                                        opt_.model.attention_dropout)})
      if (was != is)
        changed += (changed.empty() ? "" : "; ") + std::string(name) + ": checkpoint " + float_text(was) +
                   ", this run " + float_text(is);
    if (!changed.empty())
      say("note: this run goes on from checkpoint '", ckpt.dir, "' with other options than it was "
          "trained with (", changed, "): they apply from its iteration on");
    // So are the data's and the tokenizer's records, which the checks above
    // and below pass when they are missing (a run on other data went on
    // without a word).
    const bool text = !opt_.data_path.empty();  // (the tokenizer's records matter to a run on text)
    for (const auto &[k, wanted] : {std::pair<const char *, bool>{"data_fingerprint", now.count("data_fingerprint") > 0},
                                    {kTokenizerTypeKey, text}, {kTokenizerVocabularyKey, text}})
      if (wanted && !ckpt.manifest.training.count(k)) unrecorded += (unrecorded.empty() ? "" : ", ") + std::string(k);
    // (An import records none: its weights come from elsewhere, as its load says.)
    if (!unrecorded.empty() && !ckpt.manifest.training.count("imported_from"))
      say("note: checkpoint '", ckpt.dir, "' does not record ", unrecorded,
          ": this run's values are used, unchecked against what it was trained with");
  }
  // Other data goes on from the checkpoint (continued training on new data
  // is allowed), but said: its saves are then another run's to the rotation of
  // a --save directory holding the earlier data's checkpoints, which it keeps.
  if (!opt_.finetune && first_local_rank() == 0) {
    auto was = ckpt.manifest.training.find("data_fingerprint");
    auto is = now.find("data_fingerprint");
    if (was != ckpt.manifest.training.end() && is != now.end() && was->second != is->second)
      say("note: this run's data is not what checkpoint '", ckpt.dir, "' was trained on "
          "(data_fingerprint: checkpoint ", was->second, ", this run ", is->second, "): training goes "
          "on with it from the checkpoint's position; a --save directory holding the earlier data's "
          "checkpoints keeps them (another run's to its rotation)");
  }
  TrainingState st;
  bool filling = false;
  try {
    std::vector<RankShard> shards = local_shards();
    if (opt_.finetune)
      for (RankShard &s : shards) s.exp_avg = s.exp_avg_sq = nullptr;  // weights only
    st = load_checkpoint(ckpt, opt_.model, shards, opt_.verify_checkpoint, &filling);
    unstage_shards();
  } catch (const Error &e) {
    // A model of another shape, or a data file that will not open, is refused
    // before anything is read; after that, some tensors may already hold the
    // checkpoint's values: the model is a mix.
    if (filling) failure_ = std::string("loading '") + ckpt.dir + "' failed part-way: " + e.what();
    throw;
  }
  // Device work of each rank on its own thread (its GPU current there): 16-bit
  // params = round(master), and for Megatron's --finetune Adam's moments
  // zeroed (even after steps taken before this load).
  run_on_ranks([&](Rank &r) {
    r.adam->master_to_model(*r.model);
    // A 16-bit shard's checkpoint gives the weights as master weights only:
    // each data rank rounded its range, and they all-gather the rest.
    if (r.dp_shard && r.adam->has_master()) r.dp_shard->all_gather(r.model->params());
    if (!opt_.finetune) return;
    const size_t bytes = (r.adam->hi() - r.adam->lo()) * sizeof(float);
    if (!bytes) return;
    r.device->zero(r.adam->exp_avg(), bytes);
    r.device->zero(r.adam->exp_avg_sq(), bytes);
  });
  if (opt_.finetune) {
    // The weights go on, everything else starts afresh.
    st = TrainingState{};
    scaler_ = LossScaler(opt_.loss_scaler);
  }
  // An fp16 run continues its scaler; one starting from another run's
  // checkpoint (fp32, bf16) starts from the initial scale.
  if (st.has_loss_scale && opt_.use_loss_scaler && opt_.loss_scaler.dynamic)
    scaler_.set_state({st.loss_scale, st.loss_scale_growth_tracker, st.loss_scale_hysteresis_tracker});
  iteration_ = st.iteration;
  last_ = StepMetrics{};  // metrics belong to steps of this trainer
  gathered_.clear();      // and so do the rank reports
  log_interval_ = LogInterval{};
  consumed_ = st.consumed_samples;
  skipped_ = st.skipped_iterations;
  nan_ = st.nan_iterations;
  const CheckpointLayout now_layout{opt_.parallel.t, opt_.parallel.p, opt_.parallel.d,
                                   opt_.virtual_stages};
  last_loaded_ = "loaded " + ckpt.dir + " (" + ckpt.why + "), iteration " +
                 std::to_string(iteration_) + ", saved with " + ckpt.manifest.layout.text() +
                 ", loaded into " + now_layout.text();
  resumed_from_ = opt_.finetune ? "" : ckpt.dir;
  loaded_ = true;
  provenance_.clear();
  for (const auto &[key, value] : ckpt.manifest.training)
    if (key == "imported_from" || key == "imported_file" || key.rfind("hf_", 0) == 0 ||
        (key == kLineageKey && !opt_.finetune))
      provenance_[key] = value;
  if (opt_.finetune) provenance_[kLineageKey] = finetune_lineage(ckpt.manifest);
  loaded_tokenizer_ = recorded(kTokenizerTypeKey);
  loaded_vocabulary_ = recorded(kTokenizerVocabularyKey);
  loaded_files_.clear();
  std::error_code ec;  // (a listing that fails protects less; the load itself succeeded)
  for (std::filesystem::recursive_directory_iterator it(ckpt.dir, ec), end; !ec && it != end;
       it.increment(ec))
    if (it->is_regular_file(ec)) loaded_files_.emplace_back(it->path().string(), "checkpoint file");
  for (const std::string &f : ckpt.read_files) loaded_files_.emplace_back(f, "checkpoint file");
  if (opt_.finetune)
    last_loaded_ = "loaded the weights of " + ckpt.dir + " (" + ckpt.why + ", saved at iteration " +
                   std::to_string(ckpt.manifest.iteration) + " with " +
                   ckpt.manifest.layout.text() + ") into " + now_layout.text() +
                   " to fine-tune: iteration 0, fresh optimizer and LR schedule";
  if (!ckpt.manifest.checksummed)
    last_loaded_ += " (its manifest has no checksum of its own: an older checkpoint, whose "
                    "manifest fields are not checked)";
  return last_loaded_;
}

}  // namespace ptdp
