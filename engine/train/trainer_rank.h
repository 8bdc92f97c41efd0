// One rank of a Trainer as its source files share it (trainer.cpp,
// trainer_checkpoint.cpp, trainer_generate.cpp): its communicators, device,
// model, optimizer, data and last results. Private to the trainer.
#pragma once
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/comm/staged_comm.h"
#include "engine/device/device.h"
#include "engine/parallel/dp_shard.h"
#include "engine/parallel/grad_sync.h"
#include "engine/trace/timeline.h"
#include "engine/train/trainer.h"

namespace ptdp {

struct Trainer::Rank {
  int world_rank = 0;
  RankCoord coord;
  std::unique_ptr<Communicator> tp, dp, pp;
  std::unique_ptr<Communicator> embedding;  // first and last stage when p > 1, else null
  // Every rank (group rank = world rank), made by the first gather_rank_reports
  // under mpirun; unused under threads.
  std::unique_ptr<Communicator> world;
  std::unique_ptr<Device> device;           // outlives the model and optimizer on it
  // The groups as the model and the gradient reductions use them: over device
  // memory (staged copies of the above when the device is not the host's, else
  // the same communicators). Host values (loss, norm) use the ones above.
  std::unique_ptr<Communicator> staged[4];
  Communicator *tp_d = nullptr, *dp_d = nullptr, *pp_d = nullptr, *embedding_d = nullptr;
  std::unique_ptr<GPT<float>> model;
  std::unique_ptr<PipelineRuntime> pipeline;
  std::vector<PipeOp> eval_schedule;  // the training schedule is report.schedule
  Timeline timeline;
  Trainer::RankReport report;  // of the last step
  // This rank's communicators by group name.
  std::vector<std::pair<std::string, Communicator *>> groups() {
    std::vector<std::pair<std::string, Communicator *>> g{
        {"tp", tp.get()}, {"pp", pp.get()}, {"dp", dp.get()}};
    if (embedding) g.push_back({"embedding", embedding.get()});
    return g;
  }
  std::unique_ptr<AdamW> adam;
  // With the distributed optimizer (d > 1): the collectives of its shard.
  std::unique_ptr<DpShardComm> dp_shard;
  std::unique_ptr<Sampler> train, valid;
  std::vector<int32_t> sample, tokens, targets;
  // Host copies of the parameters and optimizer state for checkpoints, when
  // the device's memory is not the host's (trainer_checkpoint.cpp): page-locked
  // (after `device`, so freed before it), or ordinary memory when the host
  // cannot lock that much.
  std::unique_ptr<HostStage> checkpoint_stage;
  std::vector<float> checkpoint_pageable;
  bool checkpoint_lock_failed = false;
  // Where parameters, moments and master weights (null without) of n floats
  // each lie in the staging (trainer_checkpoint.cpp).
  struct Staged {
    float *params, *m, *v, *master;
  };
  Staged checkpoint_staging(size_t n);
  // Results of the last operation run on this rank.
  StepMetrics metrics;
  double value = 0;
  int stop_signal = 0;  // the signal that cut an evaluation short (agreed), or 0
  std::string text;
  // Last, so that it goes first: its thread uses the model and communicators.
  std::unique_ptr<GradReducer> grad_reducer;
};

// The options a resumed run must share with the saved one, as text
// (trainer_checkpoint.cpp; also what --save compares against its directory),
// with the data's fingerprint (data_fingerprint; none without data_path).
std::map<std::string, std::string> resumption_options(const TrainerOptions &o,
                                                      const std::string &data_fingerprint);

}  // namespace ptdp
