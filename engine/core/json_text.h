// JSON text a user hands the engine (a manifest, a model config, a tokenizer,
// a machine file, a trace, a JSON line to tokenize), parsed whole or refused by
// name, and the JSON text the engine writes to files. (Probes that only ask
// "is it this kind?" and JSON the engine wrote into its own records still
// call nlohmann's parser directly.)
// Header-only: nlohmann's parser is a template, and so is every user of it.
#pragma once
#include <nlohmann/json.hpp>
#include <string>

#include "engine/core/status.h"

namespace ptdp {

// How deep a JSON text a user hands the engine may nest: ptdp's own files
// and the formats it reads nest a few levels. A value nested 100,000 deep
// parsed, then crashed the process (its stack) when copied or shown.
constexpr int kMaxJsonDepth = 256;

// The offset of the first bracket nested past kMaxJsonDepth in
// [p, p + n) (brackets inside strings do not count), or -1.
inline long long json_too_deep_at(const char *p, size_t n) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < n; i++) {
    const char c = p[i];
    if (in_string) {
      if (c == '\\') i++;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > kMaxJsonDepth) return (long long)i;
    } else if (c == ']' || c == '}') {
      depth--;
    }
  }
  return -1;
}

// Error(status) "<where> is not valid JSON for ptdp: ..." when the text
// nests too deep.
inline void refuse_deep_json(const char *p, size_t n, const std::string &where, Status status) {
  const long long at = json_too_deep_at(p, n);
  if (at >= 0)
    fail(status, where, " is not JSON ptdp reads: it nests more than ", kMaxJsonDepth,
         " levels deep (at offset ", at, "); its formats nest a few");
}

// A probe's parse ("is it this kind?"): the value, or a discarded one for
// text that is no JSON or nests too deep. Never throws.
inline nlohmann::json parse_json_or_discard(const std::string &text) {
  if (json_too_deep_at(text.data(), text.size()) >= 0) return nlohmann::json(nlohmann::json::value_t::discarded);
  return nlohmann::json::parse(text, nullptr, false);
}

// A JSON value as a message shows it: short (the first 120 characters, then
// how long it is), ASCII (a cut never splits a character).
inline std::string json_excerpt(const nlohmann::json &v) {
  std::string s = v.dump(-1, ' ', true, nlohmann::json::error_handler_t::replace);
  if (s.size() > 120) s = s.substr(0, 120) + "... (" + std::to_string(s.size()) + " characters)";
  return s;
}

// `text` as one JSON value, or Error(status) "<where> is not valid JSON: why".
// nlohmann's parser takes a NUL byte for the end of its input and accepts the
// value before it, so a file with a NUL inside (junk after a valid object, a
// file cut and padded with zeros) would be read in part without a word: it is
// refused here instead, at the NUL's offset.
inline nlohmann::json parse_json_text(const std::string &text, const std::string &where,
                                      Status status = Status::corrupt_data) {
  const size_t nul = text.find('\0');
  if (nul != std::string::npos)
    fail(status, where, " is not valid JSON: a NUL byte at offset ", nul, " (JSON text has none)");
  refuse_deep_json(text.data(), text.size(), where, status);
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception &e) {
    fail(status, where, " is not valid JSON: ", e.what());
  }
}

// JSON the engine writes (a manifest, an export's header and config, a
// machine file, a trace): UTF-8 whatever its strings hold. A path's bytes that
// are not UTF-8 are written as U+FFFD (nlohmann would throw on them, and a
// save would fail after the step it saves); every reader reads the file.
inline std::string json_file_text(const nlohmann::json &j, int indent = -1) {
  return j.dump(indent, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace ptdp
