#include "checkpoints/save_target.h"

#include <cstdio>
#include <filesystem>

#include "checkpoints/commit.h"
#include "engine/core/checkpoint_names.h"
#include "engine/core/philox.h"
#include "engine/core/status.h"
#include "engine/core/text.h"
#include "engine/data/sampler.h"

namespace fs = std::filesystem;

namespace ptdp {
namespace {

// The training options that may differ within one run (see the header).
bool may_differ(const std::string &key) { return key == "micro_batch_size" || key == "train_iters"; }

// Whether --load names the save directory itself or one checkpoint in it.
bool loads_from(const std::string &save, const std::string &load) {
  if (load.empty()) return false;
  std::error_code ec;
  const fs::path l = without_trailing_slashes(load), s = without_trailing_slashes(save);
  if (fs::equivalent(l, s, ec)) return true;
  return l.filename().string().rfind("iter_", 0) == 0 && l.has_parent_path() &&
         fs::equivalent(l.parent_path(), s, ec);
}

// A float as text: short, with more digits only when that is what tells a and b apart.
std::string float_text(float x, float other) {
  char a[32], b[32];
  std::snprintf(a, sizeof a, "%g", (double)x);
  std::snprintf(b, sizeof b, "%g", (double)other);
  if (std::string(a) == b) std::snprintf(a, sizeof a, "%.9g", (double)x);
  return a;
}

// A lineage as a reader can follow it.
std::string lineage_text(const std::string &lineage) {
  if (lineage == kLineageNew) return "a run from scratch";
  if (lineage.rfind("finetune:", 0) == 0)
    return "fine-tuned from the checkpoint of manifest digest " + lineage.substr(9);
  if (lineage.rfind("import:", 0) == 0) return "an import (source digest " + lineage.substr(7) + ")";
  return "'" + lineage + "'";
}

}  // namespace

static std::string digest(const std::string &what, const std::string &of) {
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", (unsigned long long)fnv1a64(of));
  return what + ":" + hex;
}

std::string finetune_lineage(const Manifest &parent) { return digest("finetune", parent.to_json()); }
std::string import_lineage(const std::string &source) { return digest("import", source); }

std::string comparable_option(const std::string &key, const std::string &value) {
  if (key != "split") return value;
  try {
    return split_text(value);
  } catch (const Error &) {
    return value;  // (not a split: compared as written)
  }
}

std::string other_run_fields(const Manifest &saved, const GptConfig &model,
                             const std::map<std::string, std::string> &training) {
  std::string out = model_shape_mismatch(saved.model, model);
  auto add = [&](const std::string &name, const std::string &was, const std::string &now) {
    if (was != now)
      out += (out.empty() ? "" : "; ") + name + ": checkpoint " + was + ", this run " + now;
  };
  // The model fields that leave the parameter shapes alone but change the run.
  for (const GptConfigField &f : gpt_config_fields()) {
    if (f.shape || f.function) continue;  // model_shape_mismatch's
    if (f.kind == GptConfigField::Int) {
      add(f.name, std::to_string(f.int_value(saved.model)), std::to_string(f.int_value(model)));
    } else {
      const float was = f.float_value(saved.model), now = f.float_value(model);
      if (was != now) add(f.name, float_text(was, now), float_text(now, was));
    }
  }
  // The data by what it is when both record that (data_fingerprint), not by
  // how data_path was spelled; by the spelling for an older checkpoint.
  const bool by_content = saved.training.count("data_fingerprint") && training.count("data_fingerprint");
  for (const auto &[key, was] : saved.training) {
    auto now = training.find(key);
    if (key == "data_path" && by_content) continue;
    if (now == training.end() || may_differ(key) || key == kLineageKey) continue;
    if (comparable_option(key, was) != comparable_option(key, now->second)) add(key, was, now->second);
  }
  // The lineage where this run records one; a manifest without one (older)
  // counts as a run from scratch.
  if (const auto now = training.find(kLineageKey); now != training.end()) {
    const auto it = saved.training.find(kLineageKey);
    const std::string was = it == saved.training.end() ? kLineageNew : it->second;
    if (was != now->second) add(kLineageKey, lineage_text(was), lineage_text(now->second));
  }
  return out;
}

std::string not_this_runs_checkpoint(const std::string &dir, const GptConfig &model,
                                     const std::map<std::string, std::string> &training) {
  try {
    const std::string diff = other_run_fields(Manifest::read(dir), model, training);
    return diff.empty() ? "" : "is another run's checkpoint (" + diff + ")";
  } catch (const Error &e) {
    return std::string("has a manifest that cannot be read, so it cannot be told whether it is "
                       "this run's (") + e.what() + ")";
  }
}

namespace {

// invalid_config when `save` holds a checkpoint of another run.
void check_other_run(const std::string &save, const GptConfig &model,
                     const std::map<std::string, std::string> &training) {
  // Every checkpoint there, not only the newest: rotation removes the older
  // ones, and another run's must not be among them.
  const std::optional<OtherRun> other = find_other_run(
      save, [&](const Manifest &m) { return other_run_fields(m, model, training); },
      "--save '" + save + "'", "repair or remove it, or choose another --save directory");
  if (!other) return;
  fail(Status::invalid_config, "--save '", save, "' holds checkpoints of another run (",
       other->which, ": '", other->dir, "', iteration ", other->manifest.iteration, "; ",
       other->diff,
       "); saving there would replace them and mix two runs. Choose another --save directory, "
       "or resume that run with --load '", save,
       "' (the same run means the same model and the same seed, data_path, split, "
       "global_batch_size, LR schedule, optimizer, clip_grad, tokenizer and params_dtype as "
       "its manifest records, and the same lineage: from scratch, or fine-tuned from the same "
       "checkpoint; the layout, micro_batch_size and, where lr_decay_iters is set, "
       "train_iters may differ)");
}

}  // namespace

void check_save_target(const std::string &save, const std::string &load, const GptConfig &model,
                       const std::map<std::string, std::string> &training, int64_t newest) {
  if (!loads_from(save, load)) check_other_run(save, model, training);
  if (newest == kAnyCheckpoint) return;
  const std::vector<std::string> there = complete_checkpoints(save);
  if (there.empty()) return;
  if (newest == kNoCheckpoint)
    fail(Status::invalid_config, "--save '", save, "' holds this run's checkpoints (newest: '",
         there.front(), "'), but this run loaded none and starts at iteration 0: its saves would "
         "replace them and move 'latest' back. Resume the run with --load '", save,
         "', or give --save a new or empty directory");
  bool tmp = false;
  const int64_t there_it = checkpoint_iteration(fs::path(there.front()).filename().string(), &tmp);
  if (there_it > newest)
    fail(Status::invalid_config, "save into '", save, "': it holds this run's checkpoint of iteration ",
         there_it, " ('", there.front(), "'), later than this save's iteration ", newest,
         ", and this trainer loaded none: the save would move 'latest' back. Load that checkpoint "
         "first, or save into a new or empty directory");
}

std::optional<OtherRun> find_other_run(const std::string &root,
                                       const std::function<std::string(const Manifest &)> &differs,
                                       const std::string &where, const std::string &remedy) {
  const std::vector<std::string> there = complete_checkpoints(root);
  for (size_t i = 0; i < there.size(); i++) {
    OtherRun o{there[i], i == 0 ? "newest" : "one of them", "", {}};
    try {
      o.manifest = Manifest::read(there[i]);
    } catch (const Error &e) {
      fail(Status::corrupt_data, where, " holds checkpoints whose ", o.which, ", '", there[i],
           "', has a manifest that cannot be read, so it cannot be told whether they are this "
           "run's (", e.what(), "); ", remedy);
    }
    o.diff = differs(o.manifest);
    if (!o.diff.empty()) return o;
  }
  return std::nullopt;
}

}  // namespace ptdp
