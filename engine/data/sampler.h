// GPT samples from a token dataset: the documents of a split form one token
// stream (each ends with EOD); sample k is the window of seq+1 tokens starting
// at k*seq. Global sample indices are shuffled per epoch by a keyed permutation,
// so sample i of the run is the same for every parallel layout. A blend of
// several datasets (engine/data/blend.h) is a Sampler too.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/data/token_source.h"

namespace ptdp {

struct SplitRange {
  uint64_t first_doc = 0, end_doc = 0;
};

// "98,2" or "949,50,1" -> document ranges for train, valid (and test).
std::vector<SplitRange> parse_split(const std::string &spec, uint64_t num_docs);
// A split spec as the fractions it gives ("969,30,1", "1938,60,2" and
// "969, 30, 01" are all "0.969,0.03,0.001"): how two runs' splits compare.
std::string split_text(const std::string &spec);

// What the trainer draws samples from.
class Sampler {
 public:
  virtual ~Sampler() = default;
  virtual uint64_t num_samples() const = 0;  // per epoch
  virtual uint64_t num_tokens() const = 0;
  // Writes the seq+1 tokens of global sample `index` (any index: epochs wrap).
  virtual void get(uint64_t index, int32_t *out) = 0;
  // The distribution of token ids the samples are drawn from (sums to 1; for
  // the unigram entropy the losses are compared with).
  virtual std::vector<double> unigram() const = 0;
};

class GptSampler final : public Sampler {
 public:
  GptSampler(std::shared_ptr<const TokenSource> ds, SplitRange range, int seq_length,
             uint64_t seed, bool shuffle);
  uint64_t num_samples() const override { return num_samples_; }
  uint64_t num_tokens() const override { return end_ - begin_; }
  void get(uint64_t index, int32_t *out) override;
  std::vector<double> unigram() const override;
  // Token counts of this split.
  std::vector<uint64_t> token_counts() const;

 private:
  uint64_t permuted(uint64_t index);

  std::shared_ptr<const TokenSource> ds_;
  uint64_t begin_, end_;  // token range of the split
  int seq_;
  uint64_t seed_;
  bool shuffle_;
  uint64_t num_samples_;
  uint64_t perm_epoch_ = UINT64_MAX;
  std::vector<uint64_t> perm_;
};

}  // namespace ptdp
