// A short training run's losses and final parameters, and the check that a
// parallel layout reproduced the serial run (ARCHITECTURE §3).
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "engine/train/trainer.h"

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
