// GPT samples from a token dataset: the documents of a split form one token
// stream (each ends with EOD); sample k is the window of seq+1 tokens starting
// at k*seq. Global sample indices are shuffled per epoch by a keyed permutation,
// so sample i of the run is the same for every parallel layout.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/data/dataset.h"

namespace ptdp {

struct SplitRange {
  uint64_t first_doc = 0, end_doc = 0;
};

// "98,2" or "949,50,1" -> document ranges for train, valid (and test).
std::vector<SplitRange> parse_split(const std::string &spec, uint64_t num_docs);

class GptSampler {
 public:
  GptSampler(std::shared_ptr<const TokenDataset> ds, SplitRange range, int seq_length,
             uint64_t seed, bool shuffle);
  uint64_t num_samples() const { return num_samples_; }  // per epoch
  uint64_t num_tokens() const { return end_ - begin_; }
  // Writes the seq+1 tokens of global sample `index` (any index: epochs wrap).
  void get(uint64_t index, int32_t *out);
  // Token counts of this split (for the unigram entropy).
  std::vector<uint64_t> token_counts() const;

 private:
  uint64_t permuted(uint64_t index);

  std::shared_ptr<const TokenDataset> ds_;
  uint64_t begin_, end_;  // token range of the split
  int seq_;
  uint64_t seed_;
  bool shuffle_;
  uint64_t num_samples_;
  uint64_t perm_epoch_ = UINT64_MAX;
  std::vector<uint64_t> perm_;
};

}  // namespace ptdp
