// The small 8-layer model the pipeline and checkpoint tests train at any
// (t, p, d, v): 3 steps with dropout on, on the tiny dataset.
#pragma once
#include <string>

#include "engine/train/config.h"
#include "tests/support/config_options.h"
#include "tests/support/tiny_dataset.h"

inline ptdp::Config pipeline_test_config(int t, int p, int d, int v) {
  ptdp::Config c;
  set_options(c, {{"num_layers", "8"}, {"hidden_size", "32"}, {"num_attention_heads", "4"},
                  {"seq_length", "16"}, {"micro_batch_size", "2"}, {"global_batch_size", "16"},
                  {"train_iters", "10"}, {"lr", "3e-3"}, {"min_lr", "3e-4"},
                  {"lr_warmup_iters", "1"}, {"hidden_dropout", "0.1"}, {"attention_dropout", "0.1"},
                  {"split", "80,20"}, {"data_path", tiny_dataset_path()},
                  {"tensor_model_parallel_size", std::to_string(t)},
                  {"pipeline_model_parallel_size", std::to_string(p)},
                  {"data_parallel_size", std::to_string(d)},
                  {"num_layers_per_virtual_pipeline_stage", std::to_string(8 / (p * v))}});
  return c;
}
