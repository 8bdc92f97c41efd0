// The small 8-layer model the pipeline and checkpoint tests train at any
// (t, p, d, v): 3 steps with dropout on, on the tiny dataset.
#pragma once
#include <string>

#include "engine/train/config.h"
#include "tests/support/tiny_dataset.h"

inline ptdp::Config pipeline_test_config(int t, int p, int d, int v) {
  ptdp::Config c;
  c.set("num_layers", "8");
  c.set("hidden_size", "32");
  c.set("num_attention_heads", "4");
  c.set("seq_length", "16");
  c.set("micro_batch_size", "2");
  c.set("global_batch_size", "16");
  c.set("train_iters", "10");
  c.set("lr", "3e-3");
  c.set("min_lr", "3e-4");
  c.set("lr_warmup_iters", "1");
  c.set("hidden_dropout", "0.1");
  c.set("attention_dropout", "0.1");
  c.set("split", "80,20");
  c.set("data_path", tiny_dataset_path());
  c.set("tensor_model_parallel_size", std::to_string(t));
  c.set("pipeline_model_parallel_size", std::to_string(p));
  c.set("data_parallel_size", std::to_string(d));
  c.set("num_layers_per_virtual_pipeline_stage", std::to_string(8 / (p * v)));
  return c;
}
