#include "engine/data/sampler.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <sstream>

#include "engine/core/philox.h"
#include "engine/core/status.h"
#include "engine/core/text.h"

namespace ptdp {

namespace {
// The weights of a split spec, checked (see parse_split).
std::vector<double> split_weights(const std::string &spec) {
  std::vector<double> w;
  // (getline yields no empty part after a trailing comma: "98,2," would pass.)
  if (!spec.empty() && spec.back() == ',')
    fail(Status::bad_value, "split '", spec,
         "' must be 2 or 3 non-negative numbers separated by commas, e.g. 98,2 or 949,50,1");
  std::stringstream ss(spec);
  std::string part;
  while (std::getline(ss, part, ',')) {
    char *end = nullptr;
    double v = std::strtod(part.c_str(), &end);
    if (part.empty() || *end != '\0' || !(v >= 0) || !std::isfinite(v) || hex_number(part))
      fail(Status::bad_value, "split '", spec,
           "' must be 2 or 3 non-negative numbers separated by commas, e.g. 98,2 or 949,50,1");
    w.push_back(v);
  }
  if (w.size() < 2 || w.size() > 3)
    fail(Status::bad_value, "split '", spec, "' has ", w.size(), w.size() == 1 ? " part" : " parts",
         "; give 2 or 3 (train,valid[,test]), e.g. 98,2 or 949,50,1");
  if (w[0] <= 0 || w[1] <= 0)
    fail(Status::bad_value, "split '", spec,
         "' must give positive train and valid weights (and optionally test), e.g. 98,2");
  // Relative weights: finite ones whose sum passes the largest double are
  // scaled by the largest first.
  if (std::isinf(w[0] + w[1] + (w.size() > 2 ? w[2] : 0))) {
    const double largest = *std::max_element(w.begin(), w.end());
    for (double &v : w) v /= largest;
  }
  return w;
}
}  // namespace

std::string split_text(const std::string &spec) {
  std::vector<double> w = split_weights(spec);
  if (w.size() == 3 && w[2] == 0) w.pop_back();  // (no test part either way)
  double total = 0;
  for (double v : w) total += v;
  std::string out;
  for (double v : w) {
    char buf[32];  // (15 digits: the same fractions written two ways print alike)
    std::snprintf(buf, sizeof buf, "%.15g", v / total);
    out += (out.empty() ? "" : ",") + std::string(buf);
  }
  return out;
}

std::vector<SplitRange> parse_split(const std::string &spec, uint64_t num_docs) {
  std::vector<double> w = split_weights(spec);
  double total = 0;
  for (double v : w) total += v;
  std::vector<SplitRange> out;
  double acc = 0;
  uint64_t start = 0;
  for (size_t i = 0; i < w.size(); i++) {
    acc += w[i];
    uint64_t end = i + 1 == w.size() ? num_docs : (uint64_t)(acc / total * (double)num_docs + 0.5);
    out.push_back({start, end});
    start = end;
  }
  return out;
}

GptSampler::GptSampler(std::shared_ptr<const TokenSource> ds, SplitRange range, int seq_length,
                       uint64_t seed, bool shuffle)
    : ds_(std::move(ds)), seq_(seq_length), seed_(seed), shuffle_(shuffle) {
  begin_ = ds_->doc_offset(range.first_doc);
  end_ = ds_->doc_offset(range.end_doc);
  num_samples_ = end_ - begin_ > (uint64_t)seq_ ? (end_ - begin_ - 1) / (uint64_t)seq_ : 0;
}

uint64_t GptSampler::permuted(uint64_t index) {
  uint64_t epoch = index / num_samples_, k = index % num_samples_;
  if (!shuffle_) return k;
  if (epoch != perm_epoch_) {
    perm_.resize(num_samples_);
    for (uint64_t i = 0; i < num_samples_; i++) perm_[i] = i;
    for (uint64_t i = num_samples_ - 1; i > 0; i--) {
      Philox4x32 r = philox4x32((uint32_t)seed_, (uint32_t)(seed_ >> 32), (uint32_t)i,
                                (uint32_t)(i >> 32), (uint32_t)epoch, 0x5a3b1eu);
      uint64_t j = (((uint64_t)r.v[0] << 32) | r.v[1]) % (i + 1);
      std::swap(perm_[i], perm_[j]);
    }
    perm_epoch_ = epoch;
  }
  return perm_[k];
}

void GptSampler::get(uint64_t index, int32_t *out) {
  if (num_samples_ == 0)
    fail(Status::invalid_config, "the split has ", end_ - begin_,
         " tokens, too few for one sample of seq_length+1 = ", seq_ + 1, " tokens");
  uint64_t start = begin_ + permuted(index) * (uint64_t)seq_;
  ds_->read(start, (size_t)seq_ + 1, out);
}

std::vector<uint64_t> GptSampler::token_counts() const {
  std::vector<uint64_t> c((size_t)ds_->vocab_size(), 0);
  std::vector<int32_t> buf(1 << 16);
  for (uint64_t i = begin_; i < end_; i += buf.size()) {
    size_t n = (size_t)std::min<uint64_t>(buf.size(), end_ - i);
    ds_->read(i, n, buf.data());
    for (size_t k = 0; k < n; k++) c[(size_t)buf[k]]++;
  }
  return c;
}

std::vector<double> GptSampler::unigram() const {
  std::vector<uint64_t> c = token_counts();
  std::vector<double> p(c.size(), 0.0);
  const double total = (double)(end_ - begin_);
  if (total > 0)
    for (size_t t = 0; t < c.size(); t++) p[t] = (double)c[t] / total;
  return p;
}

}  // namespace ptdp
