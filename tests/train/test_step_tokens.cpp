// Trainer::step_tokens: a step on the caller's token ids is the dataset's step
// when the caller passes the samples the dataset would have given (the same
// losses and parameters, bit for bit, in any layout); bad batches change nothing.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "engine/core/status.h"
#include "engine/train/trainer.h"
#include "tests/support/config_options.h"
#include "tests/support/expect_error.h"
#include "tests/support/temp_dir.h"
#include "tests/support/tiny_dataset.h"

using namespace ptdp;

namespace {

TrainerOptions options(int t, int p, int d) {
  Config c;
  set_options(c, {{"num_layers", "2"}, {"hidden_size", "32"}, {"num_attention_heads", "4"},
                  {"seq_length", "16"}, {"micro_batch_size", "2"}, {"global_batch_size", "8"},
                  {"train_iters", "20"}, {"lr", "3e-3"}, {"lr_warmup_iters", "2"}});
  c.set("hidden_dropout", "0.1");  // dropout keys use the global sample index
  set_options(c, {{"attention_dropout", "0.1"}, {"split", "80,20"},
                  {"tensor_model_parallel_size", std::to_string(t)},
                  {"pipeline_model_parallel_size", std::to_string(p)},
                  {"data_parallel_size", std::to_string(d)}, {"data_path", tiny_dataset_path()}});
  return TrainerOptions::from_config(c);
}

// The global batch the dataset gives from global sample `first` on, as the
// caller of step_tokens lays it out: one sequence of seq_length + 1 ids after another.
std::vector<int32_t> dataset_batch(const TrainerOptions &o, uint64_t first) {
  TrainingData data = open_training_data(o.data_path, o.split);
  std::unique_ptr<Sampler> s = make_sampler(data, 0, o.model.seq_length, o.seed, true);
  const size_t row = (size_t)o.model.seq_length + 1;
  std::vector<int32_t> ids((size_t)o.global_batch_size * row);
  for (int i = 0; i < o.global_batch_size; i++) s->get(first + (uint64_t)i, ids.data() + i * row);
  return ids;
}

// Every local rank's parameters and Adam moments, bit for bit.
void expect_same_state(Trainer &a, Trainer &b) {
  ASSERT_EQ(a.local_ranks(), b.local_ranks());
  for (int r = 0; r < a.local_ranks(); r++) {
    const size_t bytes = a.model(r).num_params() * sizeof(float);
    EXPECT_EQ(std::memcmp(a.model(r).params(), b.model(r).params(), bytes), 0) << "rank " << r;
    EXPECT_EQ(std::memcmp(a.optimizer(r).exp_avg(), b.optimizer(r).exp_avg(), bytes), 0)
        << "rank " << r;
  }
  EXPECT_EQ(a.iteration(), b.iteration());
  EXPECT_EQ(a.consumed_samples(), b.consumed_samples());
}

void expect_same_metrics(const StepMetrics &a, const StepMetrics &b) {
  EXPECT_EQ(a.lm_loss, b.lm_loss);
  EXPECT_EQ(a.grad_norm, b.grad_norm);
  EXPECT_EQ(a.lr, b.lr);
  EXPECT_EQ(a.iteration, b.iteration);
  EXPECT_EQ(a.consumed_samples, b.consumed_samples);
}

// Steps 1 and 3 from the caller's ids, step 2 from the dataset: the same run as
// three dataset steps, so the two sources share the sample counter.
void check_layout(int t, int p, int d) {
  SCOPED_TRACE("t=" + std::to_string(t) + " p=" + std::to_string(p) + " d=" + std::to_string(d));
  const TrainerOptions o = options(t, p, d);
  Trainer data(o), fed(o);
  for (int k = 0; k < 3; k++) {
    StepMetrics a = data.step();
    StepMetrics b = k == 1 ? fed.step()
                           : fed.step_tokens(dataset_batch(o, (uint64_t)fed.consumed_samples()).data(),
                                             fed.step_tokens_count());
    expect_same_metrics(a, b);
  }
  expect_same_state(data, fed);
}

}  // namespace

TEST(StepTokens, SameRunAsTheDatasetSerial) { check_layout(1, 1, 1); }
TEST(StepTokens, SameRunAsTheDatasetParallel) { check_layout(2, 2, 2); }

// Without data_path the caller feeds every batch: the same run as the
// dataset's; what needs a dataset is a clear wrong_state, not a crash.
TEST(StepTokens, TrainerWithoutADataset) {
  const TrainerOptions o = options(2, 1, 2);
  TrainerOptions bare = o;
  bare.data_path.clear();
  Trainer data(o), fed(bare);
  EXPECT_EQ(fed.train_samples(), 0u);
  EXPECT_EQ(fed.valid_samples(), 0u);
  expect_error([&] { fed.step(); }, Status::wrong_state, "feed each batch with step_tokens");
  expect_error([&] { fed.evaluate(1); }, Status::wrong_state, "evaluate needs data_path");
  expect_error([&] { fed.unigram_entropy(); }, Status::wrong_state, "needs data_path");
  for (int k = 0; k < 2; k++)
    expect_same_metrics(data.step(), fed.step_tokens(dataset_batch(o, fed.consumed_samples()).data(),
                                                     fed.step_tokens_count()));
  expect_same_state(data, fed);
  EXPECT_FALSE(fed.generate("The ", 4, 0, 1).empty());
}

// NULL, a wrong count, ids outside the vocabulary: clear errors, and the
// trainer is as it was (the next good batch gives the dataset's step).
TEST(StepTokens, BadBatchesChangeNothing) {
  const TrainerOptions o = options(1, 1, 2);
  Trainer data(o), fed(o);
  const size_t n = fed.step_tokens_count();
  EXPECT_EQ(n, (size_t)8 * 17);
  std::vector<int32_t> ids = dataset_batch(o, 0);
  expect_error([&] { fed.step_tokens(nullptr, n); }, Status::invalid_argument, "got NULL");
  expect_error([&] { fed.step_tokens(ids.data(), n - 1); }, Status::invalid_argument,
               "needs global_batch_size x (seq_length + 1) = 8 x 17 = 136 token ids, got 135");
  std::vector<int32_t> bad = ids;
  bad[20] = 257;  // the byte tokenizer's vocabulary is [0, 257)
  expect_error([&] { fed.step_tokens(bad.data(), n); }, Status::invalid_argument,
               "token id 257 at index 20 (sequence 1, position 3) is outside the vocabulary [0, 257)");
  bad[20] = ids[20];
  bad[n - 1] = -1;
  expect_error([&] { fed.step_tokens(bad.data(), n); }, Status::invalid_argument,
               "token id -1 at index 135 (sequence 7, position 16)");
  EXPECT_EQ(fed.iteration(), 0);
  EXPECT_EQ(fed.consumed_samples(), 0);
  expect_same_state(data, fed);
  expect_same_metrics(data.step(), fed.step_tokens(ids.data(), n));
  expect_same_state(data, fed);
}

// A checkpoint saved after fed steps resumes the run the dataset would have made.
TEST(StepTokens, CheckpointAfterFedSteps) {
  TempDir dir;
  const TrainerOptions o = options(1, 2, 1);
  Trainer data(o), fed(o);
  for (int k = 0; k < 2; k++) {
    data.step();
    fed.step_tokens(dataset_batch(o, (uint64_t)fed.consumed_samples()).data(), fed.step_tokens_count());
  }
  fed.save(dir.path);
  Trainer resumed(o);
  resumed.load(dir.path);
  EXPECT_EQ(resumed.iteration(), 2);
  EXPECT_EQ(resumed.consumed_samples(), 16);
  expect_same_metrics(data.step(), resumed.step());
  expect_same_state(data, resumed);
}
