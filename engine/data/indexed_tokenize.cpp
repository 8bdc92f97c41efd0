#include "engine/data/indexed_tokenize.h"

#include <fstream>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>

#include "engine/core/json_text.h"
#include "engine/core/output_file.h"
#include "engine/core/temp_files.h"
#include "engine/core/mapped_file.h"
#include "engine/core/status.h"
#include "engine/core/text.h"
#include "engine/data/corpus.h"
#include "engine/data/indexed_dataset.h"
#include "engine/data/ordered_parallel.h"

namespace ptdp {

namespace {

const char *kOptionKeys =
    "output_prefix, format, json_keys, tokenizer_type, vocab_file, merge_file, tokenizer_file, "
    "append_eod, workers";

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

// A chunk of input: JSON lines (with their file and line numbers), or the
// documents of the other formats.
struct TextChunk {
  std::string file;
  std::vector<uint64_t> line_numbers;  // jsonl
  std::vector<std::string> texts;
};

// Reads the inputs in order, in chunks of about kTokenizeChunkBytes.
class TextReader {
 public:
  TextReader(const std::vector<std::string> &files, const std::string &format)
      : files_(files), jsonl_(format == "jsonl"), docs_(files, format) {}

  bool next(TextChunk &chunk) {
    if (!jsonl_) return docs_.next(chunk.texts, kTokenizeChunkBytes);
    size_t bytes = 0;
    while (bytes < kTokenizeChunkBytes) {
      if (!open_) {
        if (file_ == files_.size()) break;
        if (!chunk.texts.empty()) break;  // a chunk holds one file's lines
        // Mapped, as every input: a FIFO or device is refused, not waited on.
        map_ = MappedFile(files_[file_], "input '" + files_[file_] + "'");
        open_ = true;
        at_ = 0;
        line_ = 0;
      }
      const char *text = reinterpret_cast<const char *>(map_.data());
      if (at_ >= map_.size()) {
        map_ = MappedFile();
        open_ = false;
        file_++;
        continue;
      }
      const char *nl = static_cast<const char *>(std::memchr(text + at_, '\n', map_.size() - at_));
      const size_t end = nl ? (size_t)(nl - text) : map_.size();
      std::string line(text + at_, end - at_);
      at_ = end + 1;
      line_++;
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;  // blank line
      chunk.file = files_[file_];
      chunk.line_numbers.push_back(line_);
      bytes += line.size();
      chunk.texts.push_back(std::move(line));
    }
    return !chunk.texts.empty();
  }

 private:
  const std::vector<std::string> &files_;
  bool jsonl_;
  DocumentReader docs_;  // the other formats
  MappedFile map_;       // jsonl: files_[file_], read up to at_, at line line_
  bool open_ = false;
  size_t file_ = 0, at_ = 0;
  uint64_t line_ = 0;
};

using Sequences = std::vector<std::vector<int32_t>>;  // one document of one key

// One document: its sequences tokenized, EOD on the last one if asked.
Sequences encode_document(const std::vector<std::string> &texts, bool append_eod,
                          const Tokenizer &tok, Tokenizer::Cache &cache) {
  Sequences seqs;
  for (const auto &t : texts) {
    std::vector<int32_t> ids = tok.encode_with(t, cache);
    if (!ids.empty()) seqs.push_back(std::move(ids));
  }
  if (append_eod && !seqs.empty()) seqs.back().push_back(tok.eod());
  return seqs;
}

// A chunk's documents, each with one Sequences per JSON key.
std::vector<std::vector<Sequences>> encode_chunk(const TextChunk &chunk,
                                                 const IndexedTokenizeOptions &opt,
                                                 const Tokenizer &tok, Tokenizer::Cache &cache) {
  std::vector<std::vector<Sequences>> docs;
  docs.reserve(chunk.texts.size());
  for (size_t i = 0; i < chunk.texts.size(); i++) {
    if (opt.format != "jsonl") {
      docs.push_back({encode_document({chunk.texts[i]}, opt.append_eod, tok, cache)});
      continue;
    }
    const std::string where = chunk.file + ":" + std::to_string(chunk.line_numbers[i]);
    const nlohmann::json doc = parse_json_text(chunk.texts[i], where, Status::invalid_argument);
    if (!doc.is_object())
      fail(Status::invalid_argument, where,
           ": a line must be a JSON object, got: ", doc.type_name());
    std::vector<Sequences> per_key;
    for (const auto &key : opt.json_keys) {
      auto it = doc.find(key);
      if (it == doc.end())
        fail(Status::invalid_argument, where, ": no key '", key, "' (the json_keys asked for)");
      per_key.push_back(encode_document(texts_of(*it, key, where), opt.append_eod, tok, cache));
    }
    docs.push_back(std::move(per_key));
  }
  return docs;
}

}  // namespace

IndexedTokenizeOptions parse_indexed_tokenize_options(const std::vector<std::string> &kv) {
  IndexedTokenizeOptions o;
  std::set<std::string> seen;
  for (const std::string &item : kv) {
    const auto [key, value] = split_key_value(item, "tokenize option", kOptionKeys, &seen);
    if (key == "output_prefix") {
      o.output_prefix = value;
    } else if (key == "format") {
      o.format = value;
    } else if (key == "json_keys") {
      o.json_keys = split_commas(value);
      // Each key is one PREFIX_KEY_document dataset: a repeated key would name
      // one output twice.
      for (size_t i = 0; i < o.json_keys.size(); i++)
        for (size_t j = 0; j < i; j++)
          if (o.json_keys[i] == o.json_keys[j])
            fail(Status::bad_value, "json_keys '", value, "' names '", o.json_keys[i],
                 "' twice; each key makes its own dataset, give each once");
    } else if (set_tokenizer_option(o.tokenizer, key, value)) {
    } else if (key == "append_eod") {
      if (value != "0" && value != "1")
        fail(Status::bad_value, "append_eod must be 0 or 1, got '", value, "'");
      o.append_eod = value == "1";
    } else if (key == "workers") {
      o.workers = parse_workers(value);
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
  for (const auto &k : o.json_keys) {
    if (k.empty()) fail(Status::bad_value, "json_keys holds an empty key");
    // A key names its dataset's files (PREFIX_KEY_document): beside the prefix.
    if (k.find('/') != std::string::npos)
      fail(Status::bad_value, "json_keys entry '", k, "' holds a '/': each key names its ",
           "dataset's files (PREFIX_KEY_document.bin and .idx), which stay beside the prefix; ",
           "give keys without '/'");
  }
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
  const int threads = resolve_workers(opt.workers);
  const std::vector<std::string> files = expand_inputs(inputs);
  for (const std::string &f : files) hold_input(f, "tokenized corpus");  // as build_token_dataset
  // Every output is checked (and its temporary opened) before any work.
  std::vector<std::unique_ptr<IndexedDatasetWriter>> writers;
  for (const auto &key : opt.json_keys)
    writers.push_back(std::make_unique<IndexedDatasetWriter>(
        indexed_output_prefix(opt.output_prefix, key), tok.vocab_size(), files));

  TextReader reader(files, opt.format);
  std::vector<std::unique_ptr<Tokenizer::Cache>> caches;  // one per worker
  for (int w = 0; w < threads; w++) caches.push_back(tok.new_cache());
  run_ordered<TextChunk>(
      threads, [&](TextChunk &chunk) { return reader.next(chunk); },
      [&](TextChunk &chunk, int w) { return encode_chunk(chunk, opt, tok, *caches[w]); },
      [&](std::vector<std::vector<Sequences>> &docs) {
        for (const auto &doc : docs)
          for (size_t k = 0; k < writers.size(); k++) writers[k]->add_document(doc[k]);
      });
  if (writers[0]->num_docs() == 0)
    fail(Status::invalid_argument, "the inputs hold no documents (", files.size(), " files read)");

  // Every key's dataset written whole first, then all put in place in one
  // step an interrupt does not cut (it left one key's new pair beside
  // another's old one).
  for (auto &w : writers) w->prepare();
  std::vector<std::pair<std::string, std::string>> temps;
  for (auto &w : writers)
    for (auto &tt : w->staged()) temps.push_back(std::move(tt));
  put_in_place(temps, "tokenize output '" + opt.output_prefix + "'");
  std::vector<IndexedOutput> out;
  for (size_t k = 0; k < writers.size(); k++) {
    out.push_back({indexed_output_prefix(opt.output_prefix, opt.json_keys[k]),
                   writers[k]->num_docs(), writers[k]->num_tokens()});
  }
  return out;
}

}  // namespace ptdp
