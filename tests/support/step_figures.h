// The losses and gradient norms of a trainer's next steps: what the layout
// tests and the composition fuzzer compare against another run's.
#pragma once
#include <vector>

#include "engine/train/trainer.h"

struct StepFigures {
  std::vector<double> losses, grad_norms;
};

inline StepFigures step_figures(ptdp::Trainer &tr, int n) {
  StepFigures f;
  for (int i = 0; i < n; i++) {
    const ptdp::StepMetrics m = tr.step();
    f.losses.push_back(m.lm_loss);
    f.grad_norms.push_back(m.grad_norm);
  }
  return f;
}
