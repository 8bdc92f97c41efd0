// One --save directory holds one run's checkpoints (issue 15): a run that
// would save among another run's is stopped before its first step, since its
// iter_N would replace theirs and `latest` would then name a mix of models;
// and so is a run from scratch among its own run's (check_save_target).
//
// "The same run" is what every manifest there records (rotation removes the
// older checkpoints, so no other run's may be among them): the same model
// (every field of its `model`) and the same training options of its
// `training` (seed, data_path, split, global_batch_size, the LR schedule,
// AdamW, clip_grad, tokenizer, params_dtype). The layout (t, p, d, v),
// micro_batch_size and train_iters may differ: by the numerics contract the
// first two do not change the run, and a train_iters that changes the LR
// decay (lr_decay_iters 0 = train_iters) shows as lr_decay_iters. Options the manifest does not record (an
// older checkpoint) are not compared.
//
// Equal options do not make a fine-tuned run the run it started from, so every
// manifest also records the run's lineage (training key "lineage"): "new" for a
// run from scratch (two of them with equal options are one run, by the
// numerics contract), kept by every resumption, and for a fine-tuning run
// "finetune:" and the digest of the manifest it started from (two fine-tunings
// of one checkpoint with equal options are again one run); an import's is
// "import:" and the digest of its file's path, size and time. A manifest that
// records none (saved before lineages) counts as "new" against a run that
// records one.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>

#include "checkpoints/manifest.h"

namespace ptdp {

inline constexpr const char *kLineageKey = "lineage";
inline constexpr const char *kLineageNew = "new";
// The lineage of a run fine-tuned from the checkpoint of `parent`, and of an
// import of the model file `source` (its path, size and time).
std::string finetune_lineage(const Manifest &parent);
std::string import_lineage(const std::string &source);

// A recorded training option's value in the form two runs' values compare
// by: a split as the fractions it gives ("969,30,1" and "969,30,01" are one
// split); any other as written.
std::string comparable_option(const std::string &key, const std::string &value);

// What makes `saved` another run than (model, training): "hidden_size:
// checkpoint 64, this run 32; seed: checkpoint 1, this run 2", or "" when it
// is the same run.
std::string other_run_fields(const Manifest &saved, const GptConfig &model,
                             const std::map<std::string, std::string> &training);

// Rotation's test of a complete checkpoint directory: "" when its manifest
// records the saving run (model, training), else why not ("is another run's
// checkpoint (seed: ...)", or its manifest cannot be read). A resumed run
// skips the start's check of its --save, so a checkpoint of another run
// copied in is found here, and kept.
std::string not_this_runs_checkpoint(const std::string &dir, const GptConfig &model,
                                     const std::map<std::string, std::string> &training);

// Throws invalid_config naming `save`, the first checkpoint (newest first) of
// another run and the fields that differ when `save` holds any, unless
// `load` (may be "") is that directory or one of its iter_N: a run resuming
// itself, whose load then checks the model and options. corrupt_data when a
// manifest there cannot be read (no one can tell whose it is).
// Also when `save` holds a checkpoint of a later iteration than `newest`, the
// run's own included: kNoCheckpoint for a run that loaded none (none given,
// or a mistyped --load that found none) at its start, whose saves from
// iteration 0 would replace them, move `latest` back and start its --log-json
// afresh; a save's iteration for a save by a trainer that loaded none;
// kAnyCheckpoint for no such check (a resumption, whose load checks the rest).
inline constexpr int64_t kNoCheckpoint = -1;
inline constexpr int64_t kAnyCheckpoint = INT64_MAX;
void check_save_target(const std::string &save, const std::string &load, const GptConfig &model,
                       const std::map<std::string, std::string> &training, int64_t newest);

// A complete checkpoint under a root that is another run's.
struct OtherRun {
  std::string dir;    // the checkpoint directory
  std::string which;  // "newest" or "one of them"
  std::string diff;   // what `differs` said
  Manifest manifest;
};
// The first complete checkpoint under root (newest first) for which `differs`
// says something, or none. A manifest that cannot be read is corrupt_data
// naming `where` and the checkpoint, ending with `remedy`.
std::optional<OtherRun> find_other_run(const std::string &root,
                                       const std::function<std::string(const Manifest &)> &differs,
                                       const std::string &where, const std::string &remedy);

}  // namespace ptdp
