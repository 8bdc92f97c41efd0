// The merge loop of byte-pair encoding, shared by the byte-level BPE
// (bpe_tokenizer) and the SentencePiece-style one (sp_bpe_tokenizer): the
// pair of adjacent symbols whose merge has the lowest rank is merged first,
// the leftmost among equals, until no pair has a merge (as GPT-2's code and
// Hugging Face's Word::merge_all do).
#pragma once
#include <cstdint>
#include <functional>
#include <queue>
#include <unordered_map>
#include <vector>

namespace ptdp {

struct BpeMerge {
  int32_t rank, id;  // its rank (lower first) and the symbol it makes
};
// Keyed by (left id << 32 | right id).
using BpeMerges = std::unordered_map<uint64_t, BpeMerge>;

inline uint64_t bpe_pair(int32_t left, int32_t right) {
  return (uint64_t)left << 32 | (uint32_t)right;
}

// Merges `ids` in place: afterwards it holds the word's final symbols.
inline void bpe_merge(std::vector<int32_t> &ids, const BpeMerges &merges) {
  // The symbols in a linked list; a heap of candidate merges. An entry whose
  // symbols changed since it was pushed is dropped when it comes up.
  const int n = (int)ids.size();
  std::vector<int32_t> prev(n), nxt(n);
  for (int i = 0; i < n; i++) prev[i] = i - 1, nxt[i] = i + 1 < n ? i + 1 : -1;
  struct Cand {
    int32_t rank, pos, new_id;
    bool operator>(const Cand &o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Cand, std::vector<Cand>, std::greater<Cand>> heap;
  auto push = [&](int p) {
    if (p < 0 || nxt[p] < 0) return;
    auto it = merges.find(bpe_pair(ids[p], ids[nxt[p]]));
    if (it != merges.end()) heap.push({it->second.rank, p, it->second.id});
  };
  for (int i = 0; i + 1 < n; i++) push(i);
  while (!heap.empty()) {
    const Cand c = heap.top();
    heap.pop();
    if (ids[c.pos] < 0 || nxt[c.pos] < 0) continue;
    auto it = merges.find(bpe_pair(ids[c.pos], ids[nxt[c.pos]]));
    if (it == merges.end() || it->second.id != c.new_id) continue;
    const int r = nxt[c.pos];
    ids[c.pos] = c.new_id;
    ids[r] = -1;
    nxt[c.pos] = nxt[r];
    if (nxt[r] >= 0) prev[nxt[r]] = c.pos;
    push(prev[c.pos]);
    push(c.pos);
  }
  int k = 0;
  for (int i = 0; i >= 0 && i < n; i = nxt[i]) ids[(size_t)k++] = ids[i];
  ids.resize((size_t)k);
}

}  // namespace ptdp
