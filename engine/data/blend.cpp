#include "engine/data/blend.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <sstream>

#include <sys/stat.h>

#include "engine/core/status.h"
#include "engine/core/text.h"

namespace ptdp {

namespace {

// Whether strtod takes all of s: a number, written as a weight is or not
// ("0x10", "nan", "inf").
bool reads_as_number(const std::string &s) {
  char *end = nullptr;
  std::strtod(s.c_str(), &end);
  return !s.empty() && *end == '\0';
}

// Whether s is written as a weight is (decimal: "inf", "nan" and "1e309"
// too); its value, which may be infinite or NaN, goes to *out.
bool parse_number(const std::string &s, double *out) {
  if (!reads_as_number(s) || hex_number(s)) return false;
  *out = std::strtod(s.c_str(), nullptr);
  return true;
}

// Whether the path names a dataset there: a file, or a Megatron PREFIX.idx.
bool names_dataset(const std::string &path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 || ::stat((path + ".idx").c_str(), &st) == 0;
}

// WEIGHT PATH pairs, each weight a finite decimal number >= 0, of a positive sum.
DataPathSpec read_blend(const std::vector<std::string> &items, const std::string &spec) {
  DataPathSpec out;
  const char *form = "a blend is WEIGHT PATH pairs, e.g. '0.3 A 0.7 B'";
  if (hex_number(items[0]))  // (a number, but not as a weight is written)
    fail(Status::invalid_config, "data_path '", spec, "': the weight '", items[0],
         "' (item 1) is not a decimal number; ", form);
  if (items.size() % 2 != 0)
    fail(Status::invalid_config, "data_path '", spec, "': ", form, "; got ", items.size(),
         " items, an odd number");
  double total = 0;
  for (size_t i = 0; i < items.size(); i += 2) {
    double w;
    if (!parse_number(items[i], &w))
      fail(Status::invalid_config, "data_path '", spec, "': '", items[i], "' (item ", i + 1,
           ") is not a weight; ", form);
    if (!std::isfinite(w))
      fail(Status::invalid_config, "data_path '", spec, "': the weight ", items[i], " of '",
           items[i + 1], "' is not a finite number; weights are finite and >= 0");
    if (w < 0)
      fail(Status::invalid_config, "data_path '", spec, "': the weight ", items[i], " of '",
           items[i + 1], "' is negative; weights are >= 0");
    out.weights.push_back(w);
    out.paths.push_back(items[i + 1]);
  }
  for (double w : out.weights) total += w;
  if (!(total > 0))
    fail(Status::invalid_config, "data_path '", spec, "': the weights sum to ", total,
         "; they must sum to a positive number");
  // Weights are relative: finite ones that sum past the largest double
  // (1e308 and 1e308) are scaled by the largest first, so each is one half.
  double scale = 1;
  if (std::isinf(total)) {
    scale = *std::max_element(out.weights.begin(), out.weights.end());
    total = 0;
    for (double w : out.weights) total += w / scale;
  }
  for (double &w : out.weights) w = w / scale / total;
  return out;
}

}  // namespace

DataPathSpec parse_data_path(const std::string &spec) {
  std::vector<std::string> items;
  std::istringstream in(spec);
  for (std::string item; in >> item;) items.push_back(item);
  if (items.empty())
    fail(Status::invalid_config, "data_path is not set: give a token dataset (a ptdp file or a "
         "Megatron PREFIX for PREFIX.bin + PREFIX.idx, made by `ptdp tokenize`) or a blend "
         "such as '0.3 A 0.7 B'");
  // One path is the text as given, spaces at its ends too (' x.ptdp' is not
  // 'x.ptdp', which a trimmed path trained on in silence).
  const DataPathSpec whole{{spec}, {1.0}};
  // A first word that is no number: one path, which may hold spaces.
  if (items.size() == 1 || !reads_as_number(items[0])) return whole;
  // A blend's form; but a text that names a dataset as a whole too ('1 d.ptdp'
  // beside a file of that name): which one is meant cannot be told, and
  // guessing would train on the other silently (ptdp.dataset says the same).
  if (names_dataset(spec))
    fail(Status::invalid_config, "data_path '", spec, "' names a dataset and also reads as a blend "
         "(weight ", items[0], " of '", items[1], "'): write './", spec,
         "' for the dataset of that name, or rename it");
  return read_blend(items, spec);
}

TrainingData open_training_data(const std::string &data_path, const std::string &split) {
  DataPathSpec spec = parse_data_path(data_path);
  TrainingData d;
  d.weights = spec.weights;
  d.split_spec = split;
  for (const std::string &p : spec.paths) {
    d.sources.push_back(open_token_source(p));
    d.splits.push_back(parse_split(split, d.sources.back()->num_docs()));
  }
  return d;
}

std::string data_fingerprint(const TrainingData &data) {
  constexpr uint64_t kEnds = uint64_t(1) << 16;  // tokens hashed at each end
  std::string out;
  for (size_t i = 0; i < data.sources.size(); i++) {
    const TokenSource &s = *data.sources[i];
    const uint64_t n = s.num_tokens();
    uint64_t h = 1469598103934665603ull;  // FNV-1a over the token ids' bytes
    std::vector<int32_t> buf;
    auto hash = [&](uint64_t first, uint64_t count) {
      buf.resize((size_t)count);
      s.read(first, (size_t)count, buf.data());
      for (int32_t t : buf)
        for (int b = 0; b < 4; b++) h = (h ^ (((uint32_t)t >> (8 * b)) & 0xff)) * 1099511628211ull;
    };
    hash(0, std::min(n, kEnds));
    if (n > kEnds) hash(n - std::min(n - kEnds, kEnds), std::min(n - kEnds, kEnds));
    char part[128];
    std::snprintf(part, sizeof part, "%s%.17g:%llu/%llu/%016llx", i ? " " : "", data.weights[i],
                  (unsigned long long)s.num_docs(), (unsigned long long)n, (unsigned long long)h);
    out += part;
  }
  return out;
}

void check_training_data(const TrainingData &data, int seq_length) {
  for (size_t i = 0; i < data.sources.size(); i++) {
    if (data.weights[i] <= 0) continue;
    const TokenSource &s = *data.sources[i];
    const SplitRange tr = data.splits[i][0], va = data.splits[i][1];
    const uint64_t train = s.doc_offset(tr.end_doc) - s.doc_offset(tr.first_doc);
    const uint64_t valid = s.doc_offset(va.end_doc) - s.doc_offset(va.first_doc);
    if (train <= (uint64_t)seq_length || valid <= (uint64_t)seq_length)
      fail(Status::invalid_config, "dataset '", s.path(), "' split ", data.split_spec, " gives ",
           train, " train and ", valid, " valid tokens; each split needs at least seq_length+1 = ",
           seq_length + 1);
  }
}

std::unique_ptr<Sampler> make_sampler(const TrainingData &data, int split, int seq_length,
                                      uint64_t seed, bool shuffle) {
  auto part = [&](size_t i) {
    // Dataset 0 keeps the run's seed, so a one-dataset run is what it always was.
    const uint64_t key = seed + (uint64_t)i * 0x9E3779B97F4A7C15ull;
    return std::make_unique<GptSampler>(data.sources[i], data.splits[i][(size_t)split],
                                        seq_length, key, shuffle);
  };
  if (data.sources.size() == 1) return part(0);
  std::vector<std::unique_ptr<Sampler>> parts;
  for (size_t i = 0; i < data.sources.size(); i++) parts.push_back(part(i));
  return std::make_unique<BlendedSampler>(std::move(parts), data.weights);
}

BlendedSampler::BlendedSampler(std::vector<std::unique_ptr<Sampler>> parts,
                               std::vector<double> weights)
    : parts_(std::move(parts)), weights_(std::move(weights)) {
  double total = 0;
  for (double w : weights_) total += w;
  if (parts_.empty() || parts_.size() != weights_.size() || !(total > 0))
    fail(Status::invalid_argument, "a blend needs one non-negative weight per dataset, with a "
         "positive sum; got ", parts_.size(), " datasets and ", weights_.size(), " weights");
  for (double &w : weights_) w /= total;
  block_counts_.push_back(std::vector<uint64_t>(parts_.size(), 0));
}

uint64_t BlendedSampler::num_samples() const {
  uint64_t n = 0;
  for (size_t i = 0; i < parts_.size(); i++)
    if (weights_[i] > 0) n += parts_[i]->num_samples();
  return n;
}

uint64_t BlendedSampler::num_tokens() const {
  uint64_t n = 0;
  for (size_t i = 0; i < parts_.size(); i++)
    if (weights_[i] > 0) n += parts_[i]->num_tokens();
  return n;
}

std::vector<double> BlendedSampler::unigram() const {
  std::vector<double> p;
  for (size_t i = 0; i < parts_.size(); i++) {
    if (weights_[i] <= 0) continue;
    std::vector<double> q = parts_[i]->unigram();
    if (q.size() > p.size()) p.resize(q.size(), 0.0);
    for (size_t t = 0; t < q.size(); t++) p[t] += weights_[i] * q[t];
  }
  return p;
}

size_t BlendedSampler::choose(uint64_t index, const std::vector<uint64_t> &counts) const {
  size_t best = parts_.size();
  double best_deficit = 0;
  for (size_t d = 0; d < parts_.size(); d++) {
    if (weights_[d] <= 0) continue;
    const double deficit = weights_[d] * (double)(index + 1) - (double)counts[d];
    if (best == parts_.size() || deficit > best_deficit) {
      best = d;
      best_deficit = deficit;
    }
  }
  return best;
}

std::pair<size_t, uint64_t> BlendedSampler::locate(uint64_t index) {
  const uint64_t block = index / kBlock;
  if (block != cached_block_) {
    // The counts at the start of every block up to this one, in order.
    while (block_counts_.size() <= block) {
      std::vector<uint64_t> c = block_counts_.back();
      const uint64_t first = (block_counts_.size() - 1) * kBlock;
      for (uint64_t i = first; i < first + kBlock; i++) c[choose(i, c)]++;
      block_counts_.push_back(std::move(c));
    }
    std::vector<uint64_t> c = block_counts_[block];
    which_.resize(kBlock);
    within_.resize(kBlock);
    for (uint64_t k = 0; k < kBlock; k++) {
      const size_t d = choose(block * kBlock + k, c);
      which_[k] = (uint32_t)d;
      within_[k] = c[d]++;
    }
    cached_block_ = block;
  }
  const uint64_t k = index % kBlock;
  return {which_[k], within_[k]};
}

void BlendedSampler::get(uint64_t index, int32_t *out) {
  auto [d, k] = locate(index);
  parts_[d]->get(k, out);
}

}  // namespace ptdp
