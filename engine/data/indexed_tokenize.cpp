#include "engine/data/indexed_tokenize.h"

#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>

#include "engine/core/status.h"
#include "engine/data/corpus.h"
#include "engine/data/indexed_dataset.h"

namespace ptdp {

namespace {

const char *kOptionKeys =
    "output_prefix, format, json_keys, tokenizer_type, vocab_file, merge_file, tokenizer_file, "
    "append_eod";

std::vector<std::string> split_commas(const std::string &s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string part; std::getline(ss, part, ',');) out.push_back(part);
  return out;
}

// The sequences of one JSON value: a string is one, a list of strings is one each.
std::vector<std::string> texts_of(const nlohmann::json &v, const std::string &key,
                                  const std::string &where) {
  if (v.is_string()) return {v.get<std::string>()};
  if (v.is_array()) {
    std::vector<std::string> out;
    for (const auto &e : v) {
      if (!e.is_string())
        fail(Status::invalid_argument, where, ": key '", key, "' is a list holding a ",
             e.type_name(), "; expected a string or a list of strings");
      out.push_back(e.get<std::string>());
    }
    return out;
  }
  fail(Status::invalid_argument, where, ": key '", key, "' holds a ", v.type_name(),
       "; expected a string or a list of strings");
}

}  // namespace

IndexedTokenizeOptions parse_indexed_tokenize_options(const std::vector<std::string> &kv) {
  IndexedTokenizeOptions o;
  for (const std::string &item : kv) {
    const size_t eq = item.find('=');
    if (eq == std::string::npos)
      fail(Status::invalid_argument, "tokenize option '", item, "' is not key=value; keys: ",
           kOptionKeys);
    const std::string key = item.substr(0, eq), value = item.substr(eq + 1);
    if (key == "output_prefix") {
      o.output_prefix = value;
    } else if (key == "format") {
      o.format = value;
    } else if (key == "json_keys") {
      o.json_keys = split_commas(value);
    } else if (set_tokenizer_option(o.tokenizer, key, value)) {
    } else if (key == "append_eod") {
      if (value != "0" && value != "1")
        fail(Status::bad_value, "append_eod must be 0 or 1, got '", value, "'");
      o.append_eod = value == "1";
    } else {
      fail(Status::unknown_option, "unknown tokenize option '", key, "'; allowed: ", kOptionKeys);
    }
  }
  if (o.output_prefix.empty())
    fail(Status::invalid_argument, "tokenize needs output_prefix (the Megatron dataset to write)");
  if (o.format != "jsonl" && o.format != "fortune" && o.format != "lines" && o.format != "file")
    fail(Status::bad_value, "unknown input format '", o.format, "'; allowed: jsonl, ",
         corpus_format_names());
  if (o.json_keys.empty()) fail(Status::bad_value, "json_keys is empty; give at least one key");
  for (const auto &k : o.json_keys)
    if (k.empty()) fail(Status::bad_value, "json_keys holds an empty key");
  if (o.format != "jsonl" && !(o.json_keys.size() == 1 && o.json_keys[0] == "text"))
    fail(Status::invalid_argument, "json_keys applies to the jsonl format only (format is '",
         o.format, "')");
  return o;
}

std::string indexed_output_prefix(const std::string &prefix, const std::string &key) {
  return prefix + "_" + key + "_document";
}

std::vector<IndexedOutput> build_indexed_dataset(const std::vector<std::string> &inputs,
                                                 const IndexedTokenizeOptions &opt,
                                                 const Tokenizer &tok) {
  const std::vector<std::string> files = expand_inputs(inputs);
  // Every output is checked (and its temporary opened) before any work.
  std::vector<std::unique_ptr<IndexedDatasetWriter>> writers;
  for (const auto &key : opt.json_keys)
    writers.push_back(std::make_unique<IndexedDatasetWriter>(
        indexed_output_prefix(opt.output_prefix, key), tok.vocab_size(), files));

  // One document: its sequences tokenized, EOD on the last one if asked.
  auto add = [&](IndexedDatasetWriter &w, const std::vector<std::string> &texts) {
    std::vector<std::vector<int32_t>> seqs;
    for (const auto &t : texts) {
      std::vector<int32_t> ids = tok.encode(t);
      if (!ids.empty()) seqs.push_back(std::move(ids));
    }
    if (opt.append_eod && !seqs.empty()) seqs.back().push_back(tok.eod());
    w.add_document(seqs);
  };

  for (const auto &f : files) {
    if (opt.format != "jsonl") {
      for (const auto &d : read_documents(f, opt.format)) add(*writers[0], {d});
      continue;
    }
    std::ifstream in(f, std::ios::binary);
    if (!in) fail(Status::io_error, "cannot open input '", f, "'");
    std::string line;
    for (uint64_t n = 1; std::getline(in, line); n++) {
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;  // blank line
      const std::string where = f + ":" + std::to_string(n);
      nlohmann::json doc;
      try {
        doc = nlohmann::json::parse(line);
      } catch (const nlohmann::json::exception &e) {
        fail(Status::invalid_argument, where, ": not valid JSON: ", e.what());
      }
      if (!doc.is_object())
        fail(Status::invalid_argument, where, ": a line must be a JSON object, got: ",
             doc.type_name());
      for (size_t k = 0; k < opt.json_keys.size(); k++) {
        auto it = doc.find(opt.json_keys[k]);
        if (it == doc.end())
          fail(Status::invalid_argument, where, ": no key '", opt.json_keys[k],
               "' (the json_keys asked for)");
        add(*writers[k], texts_of(*it, opt.json_keys[k], where));
      }
    }
    if (in.bad()) fail(Status::io_error, "cannot read input '", f, "'");
  }
  if (writers[0]->num_docs() == 0)
    fail(Status::invalid_argument, "the inputs hold no documents (", files.size(), " files read)");

  std::vector<IndexedOutput> out;
  for (size_t k = 0; k < writers.size(); k++) {
    writers[k]->finish();
    out.push_back({indexed_output_prefix(opt.output_prefix, opt.json_keys[k]),
                   writers[k]->num_docs(), writers[k]->num_tokens()});
  }
  return out;
}

}  // namespace ptdp
