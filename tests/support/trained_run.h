// A short training run's losses and final parameters, and the check that a
// parallel layout reproduced the serial run (ARCHITECTURE §3).
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "engine/train/config.h"
#include "engine/train/trainer.h"

// A tiny model on two tensor ranks (threads), dropout on, on the dataset at
// `data_path`; `more` adds or overrides options (save, async_save, ...).
inline ptdp::TrainerOptions tiny_tp2_options(
    const std::string &data_path, const std::vector<std::pair<std::string, std::string>> &more = {}) {
  ptdp::Config c;
  for (const auto &[k, v] : std::vector<std::pair<std::string, std::string>>{
           {"num_layers", "2"}, {"hidden_size", "32"}, {"num_attention_heads", "4"},
           {"seq_length", "16"}, {"micro_batch_size", "2"}, {"global_batch_size", "4"},
           {"train_iters", "6"}, {"lr", "3e-3"}, {"lr_warmup_iters", "1"},
           {"hidden_dropout", "0.1"}, {"attention_dropout", "0.1"}, {"split", "80,20"},
           {"tensor_model_parallel_size", "2"}, {"num_threads", "1"}})
    c.set(k, v);
  for (const auto &[k, v] : more) c.set(k, v);
  c.set("data_path", data_path);
  return ptdp::TrainerOptions::from_config(c);
}

// Every parameter of the whole model, gathered from the shards and laid end to
// end in the serial model's order.
inline std::vector<float> all_parameters(const ptdp::Trainer &tr) {
  std::vector<float> w;
  for (const ptdp::ParamInfo &p : ptdp::gpt_param_table(tr.options().model, 1, {})) {
    const std::vector<float> x = tr.gather_parameter(p.name);
    w.insert(w.end(), x.begin(), x.end());
  }
  return w;
}

// Bit for bit (== would take -0 for +0 and refuse NaN).
inline bool same_bits(const std::vector<float> &a, const std::vector<float> &b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

struct TrainedRun {
  std::vector<double> losses;
  std::vector<std::vector<float>> params;  // whole tensors, in the serial model's order
};

// Runs `steps` steps and gathers every parameter named like the serial model's.
inline TrainedRun train_run(const ptdp::TrainerOptions &opt, int steps) {
  ptdp::Trainer tr(opt);
  TrainedRun r;
  for (int i = 0; i < steps; i++) r.losses.push_back(tr.step().lm_loss);
  ptdp::GPT<float> serial_shape(opt.model, 1);
  for (const ptdp::ParamInfo &p : serial_shape.param_table())
    r.params.push_back(tr.gather_parameter(p.name));
  return r;
}

// param_tol: the largest parameter difference allowed (default justified below).
inline void expect_matches_serial(const TrainedRun &run, const TrainedRun &serial,
                                  double param_tol = 3e-5) {
  ASSERT_EQ(run.losses.size(), serial.losses.size());
  for (size_t i = 0; i < run.losses.size(); i++)
    // fp32 with sums reordered (row-parallel partial sums, replica sums, the tied
    // embedding's two halves): ~1e-7 relative per step; 1e-5 leaves room for ten
    // steps of Adam.
    EXPECT_NEAR(run.losses[i], serial.losses[i], 1e-5 * serial.losses[i]) << "step " << i;
  for (size_t k = 0; k < run.params.size(); k++) {
    double diff = 0;
    for (size_t i = 0; i < run.params[k].size(); i++)
      diff = std::max(diff, (double)std::abs(run.params[k][i] - serial.params[k][i]));
    // Adam divides each gradient by its RMS, so rounding differences of relative
    // size ~1e-6 in a near-zero gradient (biases) move that update by up to a few
    // 1e-6 (observed: 6e-6). A real bug moves parameters by O(lr) = 3e-3 per step;
    // the default bound is 1% of one step.
    EXPECT_LT(diff, param_tol) << "parameter tensor " << k;
  }
}
