// Code point classes of GPT-2's pre-tokenization regex: \p{L}, \p{N}, \s and
// the rest. The table is generated (scripts/gen_bpe_unicode_tables.py).
#pragma once
#include <cstdint>

namespace ptdp {

enum UnicodeClass : uint8_t { kOther = 0, kLetter = 1, kNumber = 2, kSpace = 3 };

struct UnicodeRange {
  uint32_t lo, hi;  // inclusive
  UnicodeClass cls;
};
extern const UnicodeRange kUnicodeRanges[];  // sorted, disjoint; gaps are kOther
extern const int kNumUnicodeRanges;

UnicodeClass unicode_class(uint32_t cp);

}  // namespace ptdp
