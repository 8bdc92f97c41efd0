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
