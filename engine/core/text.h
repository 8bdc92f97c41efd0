// Small string helpers shared across the engine (one copy of each).
#pragma once
#include <climits>
#include <set>
#include <string>
#include <string_view>

#include "engine/core/status.h"

namespace ptdp {

inline bool starts_with(std::string_view s, std::string_view head) {
  return s.size() >= head.size() && s.compare(0, head.size(), head) == 0;
}
inline bool ends_with(std::string_view s, std::string_view tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// A path's text without trailing '/' ("ckpt/" and "ckpt" name one directory;
// "/" stays "/").
inline std::string without_trailing_slashes(std::string path) {
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  return path;
}

// Error(invalid_argument) naming `what` when a name in `path` (between '/')
// is white space alone: every writer and every directory maker refuses it (a
// file named ' ' was written, and a checkpoint saved under '\t/').
inline void refuse_blank_name(const std::string &path, const char *what) {
  size_t start = 0;
  for (size_t end = 0; end <= path.size(); end++) {
    if (end < path.size() && path[end] != '/') continue;
    const std::string_view name(path.data() + start, end - start);
    if (!name.empty() && name.find_first_not_of(" \t\n\r\f\v") == std::string_view::npos)
      fail(Status::invalid_argument, what, " '", path, "' has a name of white space alone; give a path of ",
           "visible names");
    start = end + 1;
  }
}

// Whether s is written as C's hexadecimal ("0x10", "0x1p4"), which strtod
// reads too: the numbers a person gives are decimal, and every parser of them
// refuses this (a "0x10B" token count was read as 267 tokens).
inline bool hex_number(std::string_view s) { return s.find_first_of("xX") != std::string_view::npos; }

// A whole number as people write it: an optional '-' and decimal digits, and
// nothing else. Every reader of a user's integer takes it through this one:
// strtoll skips leading spaces and takes "+4" (a ' 2' worker count was read
// where ' 2' layers were refused), and stops at "0x10"'s x. False when v is no
// such number or is past 64 bits.
inline bool parse_whole(std::string_view v, long long *out) {
  const bool negative = !v.empty() && v.front() == '-';
  if (negative) v.remove_prefix(1);
  if (v.empty()) return false;
  long long x = 0;
  for (const char c : v) {
    if (c < '0' || c > '9') return false;
    if (x > (LLONG_MAX - (c - '0')) / 10) return false;
    x = 10 * x + (c - '0');
  }
  *out = negative ? -x : x;
  return true;
}

// One "key=value" option of the C ABI's string lists, split at the first '='.
// No '=' or an empty key fails (Status::bad_value) naming `what` ("tokenize
// option") and the allowed keys; so does a key already in *seen (a list's
// keys so far: a repeated one would silently take the last value).
struct KeyValue {
  std::string key, value;
};
inline KeyValue split_key_value(const std::string &item, const char *what,
                                const std::string &allowed_keys, std::set<std::string> *seen) {
  const size_t eq = item.find('=');
  if (eq == std::string::npos || eq == 0)
    fail(Status::bad_value, what, " '", item, "' is not key=value; keys: ", allowed_keys);
  KeyValue kv{item.substr(0, eq), item.substr(eq + 1)};
  if (!seen->insert(kv.key).second)
    fail(Status::bad_value, what, " '", kv.key, "' is given twice; give each key once");
  return kv;
}

}  // namespace ptdp
