// The training loop of one run on one CPU rank: data, model, optimizer, LR schedule.
// The global batch is m = global_batch_size / micro_batch_size micro-batches whose
// gradients accumulate; the loss is the mean over every token of the global batch.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "engine/data/sampler.h"
#include "engine/data/tokenizer.h"
#include "engine/model/gpt.h"
#include "engine/train/config.h"
#include "engine/train/lr_schedule.h"
#include "engine/train/metrics.h"
#include "engine/train/optimizer.h"

namespace ptdp {

struct TrainerOptions {
  GptConfig model;
  int micro_batch_size = 8, global_batch_size = 32;
  int64_t train_iters = 1000;
  uint64_t seed = 1234;
  LrSchedule lr;
  AdamWConfig adam;
  double clip_grad = 1.0;
  std::string data_path, split = "98,2", tokenizer = "byte";
  int eval_iters = 10;
  int num_threads = 0;
  // Reads and cross-checks a Config; throws invalid_config naming the fields.
  static TrainerOptions from_config(const Config &c);
};

class Trainer {
 public:
  explicit Trainer(const TrainerOptions &opt);
  const TrainerOptions &options() const { return opt_; }
  GPT<float> &model() { return *model_; }
  const GPT<float> &model() const { return *model_; }
  const Tokenizer &tokenizer() const { return *tok_; }

  StepMetrics step();
  // Mean validation loss over eval_iters global batches (no dropout).
  double evaluate(int iters);
  // Continues `prompt`; temperature 0 is greedy, else samples with a keyed RNG.
  std::string generate(const std::string &prompt, int max_new_tokens, double temperature,
                       uint64_t seed);

  int64_t iteration() const { return iteration_; }
  int64_t consumed_samples() const { return consumed_; }
  const StepMetrics &last_metrics() const { return last_; }
  // Entropy (nats/token) of the unigram distribution of the training split.
  double unigram_entropy() const;
  uint64_t train_samples() const { return train_->num_samples(); }
  uint64_t valid_samples() const { return valid_->num_samples(); }

 private:
  void fill_batch(GptSampler &sampler, uint64_t first, int b);

  TrainerOptions opt_;
  std::unique_ptr<Tokenizer> tok_;
  std::shared_ptr<const TokenDataset> ds_;
  std::unique_ptr<GptSampler> train_, valid_;
  std::unique_ptr<GPT<float>> model_;
  std::unique_ptr<AdamW> adam_;
  int64_t iteration_ = 0, consumed_ = 0, skipped_ = 0, nan_ = 0;
  StepMetrics last_;
  std::vector<int32_t> sample_, tokens_, targets_;
};

}  // namespace ptdp
