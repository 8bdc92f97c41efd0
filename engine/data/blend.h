// What a run trains on: --data-path names one dataset, or a weighted blend of
// several as Megatron's `--data-path 0.3 A 0.7 B`.
//
// A blend draws global sample i from the dataset whose share is furthest
// behind its weight after i samples (largest w_d * (i + 1) - n_d, ties to the
// first), and takes that dataset's next sample n_d (its own shuffled order,
// its own epochs). Sample i is a pure function of i and the weights, so every
// parallel layout, and a resumed run, sees the same samples; after N samples
// each dataset has given w_d * N of them to within one.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/data/sampler.h"
#include "engine/data/token_source.h"

namespace ptdp {

struct DataPathSpec {
  std::vector<std::string> paths;
  std::vector<double> weights;  // one per path, normalised to sum 1
};

// "PATH", or "W1 PATH1 W2 PATH2 ..." (whitespace between; the weights are
// non-negative numbers with a positive sum, normalised as Megatron does).
// A string whose first item is no number is one path (it may hold spaces).
DataPathSpec parse_data_path(const std::string &spec);

// The opened datasets of a run and the document ranges of each one's splits.
struct TrainingData {
  std::vector<std::shared_ptr<const TokenSource>> sources;
  std::vector<double> weights;
  std::vector<std::vector<SplitRange>> splits;  // per source: train, valid[, test]
  std::string split_spec;                       // for messages
};

TrainingData open_training_data(const std::string &data_path, const std::string &split);

// What the data is, whatever its path's spelling: per dataset (in blend
// order) its weight, documents, tokens and a hash of its first and last 64Ki
// tokens, as "w:docs/tokens/hash" joined by spaces. Two runs on one file
// agree; two files of other contents almost never do. Recorded in a
// checkpoint's manifest, so that a --save directory is told another run's by
// what it trained on, not by how data_path was written.
std::string data_fingerprint(const TrainingData &data);

// Every dataset with a positive weight must give at least one sample of
// seq_length + 1 tokens in the train and in the valid split.
void check_training_data(const TrainingData &data, int seq_length);

// The sampler of split 0 (train) or 1 (valid): a GptSampler for one dataset,
// a BlendedSampler over one GptSampler per dataset for a blend. Dataset d of a
// blend shuffles with its own key derived from `seed` (the first one's is
// `seed`, as a single dataset's).
std::unique_ptr<Sampler> make_sampler(const TrainingData &data, int split, int seq_length,
                                      uint64_t seed, bool shuffle);

class BlendedSampler final : public Sampler {
 public:
  BlendedSampler(std::vector<std::unique_ptr<Sampler>> parts, std::vector<double> weights);
  uint64_t num_samples() const override;  // sum of the parts with a positive weight
  uint64_t num_tokens() const override;
  void get(uint64_t index, int32_t *out) override;
  std::vector<double> unigram() const override;  // the weights' mixture of the parts'
  // Which part serves global sample `index`, and that part's sample number.
  std::pair<size_t, uint64_t> locate(uint64_t index);

 private:
  static constexpr uint64_t kBlock = 4096;
  size_t choose(uint64_t index, const std::vector<uint64_t> &counts) const;

  std::vector<std::unique_ptr<Sampler>> parts_;
  std::vector<double> weights_;
  // Samples each part has given before block b (kBlock samples) starts:
  // computed once, in order, so a far index costs one pass and no more.
  std::vector<std::vector<uint64_t>> block_counts_;
  uint64_t cached_block_ = UINT64_MAX;
  std::vector<uint32_t> which_;    // of the cached block: the part of each sample
  std::vector<uint64_t> within_;   // and its sample number in that part
};

}  // namespace ptdp
