// Text generation from the trained model: one sequence through every
// pipeline stage per new token (with a KV cache: the newest token alone), the
// last stage picks it and tells the others.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "engine/core/philox.h"
#include "engine/core/status.h"
#include "engine/core/utf8.h"
#include "engine/parallel/schedule.h"
#include "engine/train/trainer.h"
#include "engine/train/trainer_rank.h"

namespace ptdp {

namespace {
// The next token from one position's logits over the real vocabulary [0, V):
// greedy at temperature 0, else sampled with a Philox draw keyed by (seed, k)
// among the tokens top-k and top-p keep (by default all of them). The draw
// walks the kept tokens in id order; a token of probability 0 is never drawn.
int pick_token(const float *row, int V, double temperature, uint64_t seed, int k, int top_k,
               double top_p, std::vector<double> &prob, std::vector<int> &order) {
  int next = 0;
  if (temperature == 0) {
    for (int j = 1; j < V; j++)
      if (row[j] > row[next]) next = j;
    return next;
  }
  double mx = row[0], sum = 0;
  for (int j = 1; j < V; j++) mx = std::max(mx, (double)row[j]);
  for (int j = 0; j < V; j++) sum += prob[j] = std::exp(((double)row[j] - mx) / temperature);
  if ((top_k > 0 && top_k < V) || top_p < 1) {
    // Most likely first (the lower id among equals); keep the first top_k, and
    // of those the fewest whose mass reaches top_p of the whole.
    order.resize((size_t)V);
    for (int j = 0; j < V; j++) order[j] = j;
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return prob[a] > prob[b]; });
    const int keep_k = top_k > 0 ? std::min(top_k, V) : V;
    double mass = 0, kept = 0;
    int keep = 0;
    while (keep < keep_k && (keep == 0 || mass < top_p * sum)) mass += prob[order[keep++]];
    for (int i = keep; i < V; i++) prob[order[i]] = 0;
    for (int i = 0; i < keep; i++) kept += prob[order[i]];
    sum = kept;
  }
  double u = uniform_from_u32(philox4x32((uint32_t)seed, (uint32_t)(seed >> 32), (uint32_t)k, 0,
                                         0x6e6, 0).v[0]) * sum;
  int last = 0;
  for (int j = 0; j < V; j++) {
    if (prob[j] == 0) continue;
    last = j;
    u -= prob[j];
    if (u <= 0) return j;
  }
  return last;
}
}  // namespace

std::string Trainer::rank_generate(Rank &r, const std::string &prompt, int max_new_tokens,
                                   double temperature, uint64_t seed, int top_k, double top_p) {
  std::vector<int32_t> toks = tok_->encode(prompt);
  const size_t prompt_len = toks.size();
  if (toks.empty()) toks.push_back(tok_->eod());  // start of a new document
  GPT<float> &model = *r.model;
  const int V = opt_.model.vocab_size, Vl = model.local_vocab(), t = opt_.parallel.t;
  const int p = opt_.parallel.p, window = opt_.model.max_positions();
  // One micro-batch of one sequence through every stage; the last picks the
  // token and tells the others.
  const std::vector<PipeOp> ops =
      forward_only_schedule(opt_.schedule, p, opt_.virtual_stages, 1, r.coord.pp);
  const int head = head_stage();
  std::vector<float> mine((size_t)Vl), row((size_t)Vl * t);
  std::vector<double> prob((size_t)V);
  std::vector<int> order;
  // While the text fits the model's positions, each step runs only the newest
  // token (the prompt once), its keys and values joining the model's cache;
  // past them, the last `window` tokens again each step, at positions 0...
  size_t cached = 0;  // tokens whose keys and values the cache holds
  for (int k = 0; k < max_new_tokens; k++) {
    const bool fits = toks.size() <= (size_t)window;
    const size_t first = fits ? cached : toks.size() - window;
    const int n = (int)(toks.size() - first);
    const MicroBatch mb{toks.data() + first, nullptr, 0, fits, fits ? (int)first : 0};
    r.pipeline->run(ops, n, 1, 0, false, 0.f, [&](int, bool) { return mb; });
    cached = fits ? toks.size() : 0;
    int next = 0;
    if (r.coord.pp == head) {
      // The last position's logits, gathered over the vocabulary shards.
      mine = model.logits_to_host(n - 1, 1);
      if (t > 1)
        r.tp->all_gather(mine.data(), row.data(), (size_t)Vl);
      else
        std::copy(mine.begin(), mine.end(), row.begin());
      next = pick_token(row.data(), V, temperature, seed, k, top_k, top_p, prob, order);
    }
    if (p > 1) {
      float f = (float)next;  // exact: token ids are far below 2^24
      r.pp->broadcast(&f, 1, head);
      next = (int)f;
    }
    if (next == tok_->eod()) break;
    toks.push_back(next);
  }
  size_t skip = prompt_len == 0 ? 1 : 0;  // the EOD we started from
  return tok_->decode(toks.data() + skip, toks.size() - skip);
}

std::vector<float> Trainer::rank_logits(Rank &r, const std::vector<int32_t> &tokens) {
  GPT<float> &model = *r.model;
  const int n = (int)tokens.size(), V = opt_.model.vocab_size, Vl = model.local_vocab();
  const int t = opt_.parallel.t, p = opt_.parallel.p;
  const std::vector<PipeOp> ops =
      forward_only_schedule(opt_.schedule, p, opt_.virtual_stages, 1, r.coord.pp);
  const int head = head_stage();
  r.pipeline->run(ops, n, 1, 0, false, 0.f, [&](int, bool) {
    return MicroBatch{tokens.data(), nullptr, 0};
  });
  std::vector<float> out((size_t)n * V);
  if (r.coord.pp == head) {
    // [n, Vl] per tensor rank, gathered as [t, n, Vl], then rows of the real vocabulary.
    std::vector<float> mine = model.logits_to_host(0, n), all((size_t)n * Vl * t);
    if (t > 1)
      r.tp->all_gather(mine.data(), all.data(), mine.size());
    else
      all = mine;
    for (int i = 0; i < n; i++)
      for (int j = 0; j < V; j++)
        out[(size_t)i * V + j] = all[((size_t)(j / Vl) * n + i) * Vl + j % Vl];
  }
  if (p > 1) r.pp->broadcast(out.data(), out.size(), head);
  return out;
}

void Trainer::check_logits_tokens(const int32_t *ids, size_t count) const {
  if (count == 0 || count > (size_t)opt_.model.max_positions())
    fail(Status::invalid_argument, "logits: ", count,
         " tokens; give 1 to max_position_embeddings (", opt_.model.max_positions(), ")");
  for (size_t i = 0; i < count; i++)
    if (ids[i] < 0 || ids[i] >= opt_.model.vocab_size)
      fail(Status::invalid_argument, "logits: token id ", ids[i], " at index ", i, " is outside [0, ",
           opt_.model.vocab_size, ")");
}

std::vector<float> Trainer::logits(const std::vector<int32_t> &tokens) {
  check_logits_tokens(tokens.data(), tokens.size());
  std::vector<float> first;  // every rank ends with the same logits: the first's are returned
  run_on_ranks([&](Rank &r) {
    std::vector<float> out = rank_logits(r, tokens);
    if (&r == ranks_[0].get()) first = std::move(out);
  });
  return first;
}

std::string Trainer::generate(const std::string &prompt, int max_new_tokens, double temperature,
                              uint64_t seed, int top_k, double top_p) {
  if (max_new_tokens < 0 || max_new_tokens > kMaxNewTokens)
    fail(Status::invalid_argument, "max_new_tokens must be in [0, ", kMaxNewTokens, "], got ",
         max_new_tokens, " (a longer text: continue it in another call)");
  if (!(temperature >= 0) || !std::isfinite(temperature))
    fail(Status::invalid_argument, "temperature must be >= 0 (0 = greedy), got ", temperature);
  if (top_k < 0) fail(Status::invalid_argument, "top_k must be >= 0 (0 = every token), got ", top_k);
  if (!(top_p > 0 && top_p <= 1))
    fail(Status::invalid_argument, "top_p must be in (0, 1] (1 = every token), got ", top_p);
  // Greedy decoding samples nothing: a limit on what is sampled would be ignored.
  const char *greedy = " limits the tokens sampled from, and temperature 0 samples none (greedy "
                       "decoding takes the most likely token): give a temperature > 0, or leave "
                       "top_k and top_p out";
  if (temperature == 0 && top_k > 0) fail(Status::invalid_argument, "top_k ", top_k, greedy);
  if (temperature == 0 && top_p < 1) fail(Status::invalid_argument, "top_p ", top_p, greedy);
  // Another tokenizer would read the model's ids as other text.
  if (!loaded_tokenizer_.empty() && loaded_tokenizer_ != opt_.tokenizer)
    fail(Status::invalid_config, "the loaded checkpoint was trained with tokenizer_type ",
         loaded_tokenizer_, ", this run has ", opt_.tokenizer, ": give tokenizer_type ",
         loaded_tokenizer_, " (and its files) to generate with it");
  check_vocabulary(loaded_tokenizer_, loaded_vocabulary_, "generate with it");
  // An import without a tokenizer beside it records none. A tokenizer that
  // cannot decode every id the model may emit is not its own (the byte
  // tokenizer, the default, for a LLaMA or GPT-2 vocabulary, say).
  const auto imported = provenance_.find("imported_from");
  if (loaded_tokenizer_.empty() && imported != provenance_.end() &&
      opt_.model.vocab_size > tok_->vocab_size())
    fail(Status::invalid_config, "the loaded checkpoint was imported from '", imported->second,
         "' with no record of its tokenizer; its vocabulary has ", opt_.model.vocab_size,
         " tokens, more than tokenizer_type ", opt_.tokenizer, "'s ", tok_->vocab_size(),
         ": give the model's own tokenizer (tokenizer_type HuggingFaceTokenizer with "
         "tokenizer_file, or GPT2BPETokenizer's files)");
  run_on_ranks([&](Rank &r) {
    r.text = rank_generate(r, prompt, max_new_tokens, temperature, seed, top_k, top_p);
  });
  return valid_utf8(ranks_[0]->text);  // the model may stop inside a character
}

}  // namespace ptdp
