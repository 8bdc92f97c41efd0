#include "engine/data/corpus.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "engine/core/philox.h"
#include "engine/core/output_file.h"
#include "engine/core/mapped_file.h"
#include "engine/core/status.h"
#include "engine/core/text.h"
#include "engine/core/utf8.h"
#include "engine/data/dataset.h"
#include "engine/data/ordered_parallel.h"

namespace ptdp {

namespace fs = std::filesystem;

const char *corpus_format_names() { return "fortune, lines, file"; }

std::vector<std::string> read_documents(const std::string &path, const std::string &format) {
  if (format != "fortune" && format != "lines" && format != "file")
    fail(Status::bad_value, "unknown corpus format '", format,
         "'; allowed: ", corpus_format_names());
  // A regular file only (the rule of every input: a FIFO would block), mapped.
  const MappedFile map(path, "corpus file '" + path + "'");
  std::string text(reinterpret_cast<const char *>(map.data()), map.size());
  // Text is UTF-8 in every format, as jsonl's JSON must be: ill-formed bytes
  // are refused where they are, not tokenized as they come.
  if (const size_t bad = first_ill_formed_utf8(text); bad != std::string::npos) {
    const size_t line = 1 + (size_t)std::count(text.begin(), text.begin() + (std::ptrdiff_t)bad, '\n');
    size_t shown = 0;  // the bad bytes and what follows, up to 8 bytes of the line
    while (shown < 8 && bad + shown < text.size() && text[bad + shown] != '\n') shown++;
    fail(Status::invalid_argument, "corpus file '", path, "' line ", line, ": not valid UTF-8 (",
         text.substr(bad, shown), " at byte ", bad,  // shown as \xNN by ptdp::Error
         "); every format takes UTF-8 text, as jsonl does");
  }
  std::vector<std::string> docs;
  if (format == "file") {
    if (!text.empty()) docs.push_back(std::move(text));
    return docs;
  }
  // Each document keeps the input's bytes: a line's newline only where the
  // input has one (not after an unterminated last line).
  size_t at = 0;
  std::string cur;
  while (at < text.size()) {
    const size_t end = text.find('\n', at);
    const bool newline = end != std::string::npos;
    const std::string_view line(text.data() + at, (newline ? end : text.size()) - at);
    at = newline ? end + 1 : text.size();
    // A CRLF file's line ends in '\r': blank when that is all, a fortune
    // separator when it follows the '%'.
    const bool blank = line.empty() || line == "\r";
    if (format == "lines") {
      if (!blank) docs.push_back(std::string(line) + (newline ? "\n" : ""));
    } else if (line == "%" || line == "%\r") {
      if (!cur.empty()) docs.push_back(std::move(cur));
      cur.clear();
    } else {
      cur.append(line);
      if (newline) cur += '\n';
    }
  }
  if (!cur.empty()) docs.push_back(std::move(cur));
  return docs;
}

std::vector<std::string> expand_inputs(const std::vector<std::string> &inputs) {
  if (inputs.empty()) fail(Status::invalid_argument, "no input files given to tokenize");
  std::vector<std::string> files;
  for (const auto &in : inputs) {
    std::error_code ec;
    if (fs::is_directory(in, ec)) {
      std::vector<std::string> found, skipped;
      const fs::path dir = fs::canonical(in, ec);
      for (const auto &e : fs::directory_iterator(in, ec)) {
        const std::string name = e.path().filename().string();
        std::error_code lec;
        // fortunes has *.u8 links to its own files, and strfile indexes X.dat
        // beside each X: both left out in silence (their text is read once).
        if (e.is_symlink()) {
          const fs::path target = fs::canonical(e.path(), lec);
          if (!lec && target.parent_path() == dir && fs::is_regular_file(target, lec)) continue;
          skipped.push_back("'" + name + "' (a symbolic link out of the directory)");
        } else if (!e.is_regular_file()) {
          skipped.push_back("'" + name + "' (" + (e.is_directory() ? "a directory" : "not a regular file") + ")");
        } else if (e.path().extension() == ".dat" &&
                   fs::is_regular_file(e.path().parent_path() / e.path().stem(), lec)) {
          continue;
        } else if (name[0] == '.') {  // an editor's or a tool's, not the corpus
          skipped.push_back("'" + name + "' (a hidden file)");
        } else {
          found.push_back(e.path().string());
        }
      }
      std::sort(found.begin(), found.end());
      files.insert(files.end(), found.begin(), found.end());
      // Said, not silent: what else was left out.
      if (!skipped.empty()) {
        std::sort(skipped.begin(), skipped.end());
        std::string list;
        for (size_t i = 0; i < skipped.size() && i < 5; i++) list += (i ? ", " : "") + skipped[i];
        if (skipped.size() > 5) list += ", and " + std::to_string(skipped.size() - 5) + " more";
        say("note: corpus directory '", in, "': ", skipped.size(), " of its entries not read: ", list,
            " (a directory's own regular files are read; give others by name)");
      }
    } else if (fs::exists(in, ec)) {
      files.push_back(in);
    } else {
      // (exists() is false on any error: a loop of links is not "missing".)
      fail(Status::io_error, "corpus input '", in, "' ",
           !ec || ec == std::errc::no_such_file_or_directory ? "does not exist" : "cannot be read: " + ec.message());
    }
  }
  return files;
}

bool DocumentReader::next(std::vector<std::string> &chunk, size_t max_bytes) {
  size_t bytes = 0;
  while (bytes < max_bytes) {
    if (pos_ == docs_.size()) {
      if (file_ == files_.size()) break;
      docs_ = read_documents(files_[file_++], format_);
      pos_ = 0;
      continue;
    }
    bytes += docs_[pos_].size();
    chunk.push_back(std::move(docs_[pos_++]));
  }
  return !chunk.empty();
}

CorpusStats build_token_dataset(const std::vector<std::string> &inputs, const std::string &format,
                                const Tokenizer &tok, const std::string &out_path, int workers,
                                bool new_only) {
  const int threads = resolve_workers(workers);
  const std::vector<std::string> files = expand_inputs(inputs);
  // Before any work: the output must be a file we may replace, and no input.
  std::vector<InputFile> reading;
  for (const std::string &f : files) reading.emplace_back(f, "tokenize input");
  // What the dataset is made from stays an input of this process's run after
  // the tokenizing (a run's --log-json must not replace its --corpus).
  for (const std::string &f : files) hold_input(f, "tokenized corpus");
  output_target(out_path, "tokenize output", OutputKind::ptdp_dataset);
  // Another tokenize writing it now is refused (both reported success, one's
  // file being the other's); a new-only caller (a dataset made from --corpus,
  // by every process under mpirun) instead keeps the file made first.
  const OutputClaim claim =
      new_only ? OutputClaim() : OutputClaim(out_path, "token dataset output", true);  // (its writer's name)
  using Docs = std::vector<std::vector<int32_t>>;
  Docs docs;  // the whole tokenized corpus, once: it is shuffled before writing
  CorpusStats st;
  DocumentReader reader(files, format);
  std::vector<std::unique_ptr<Tokenizer::Cache>> caches;  // one per worker
  for (int w = 0; w < threads; w++) caches.push_back(tok.new_cache());
  run_ordered<std::vector<std::string>>(
      threads,
      [&](std::vector<std::string> &chunk) { return reader.next(chunk, kTokenizeChunkBytes); },
      [&](std::vector<std::string> &chunk, int w) {
        Docs out(chunk.size());
        for (size_t i = 0; i < chunk.size(); i++) {
          out[i] = tok.encode_with(chunk[i], *caches[w]);
          out[i].push_back(tok.eod());
        }
        return out;
      },
      [&](Docs &out) {
        for (auto &t : out) {
          st.num_tokens += t.size();
          docs.push_back(std::move(t));
        }
      });
  if (docs.empty()) fail(Status::invalid_argument, "the corpus inputs hold no documents");
  // Shuffle documents (fixed key) so that contiguous train/valid splits draw
  // from every input file, not from the alphabetically last ones.
  for (uint64_t i = docs.size() - 1; i > 0; i--) {
    uint64_t j = philox4x32(0x5eed, 0xd0c5, (uint32_t)i, (uint32_t)(i >> 32), 0, 0).v[0] % (i + 1);
    std::swap(docs[i], docs[j]);
  }
  st.num_docs = docs.size();
  write_token_dataset(out_path, docs, tok.vocab_size(), vocabulary_fingerprint(tok), new_only);
  return st;
}

TokenizeOptions parse_tokenize_options(const std::vector<std::string> &kv) {
  const char *keys =
      "output, format, workers, new_only, tokenizer_type, vocab_file, merge_file, tokenizer_file";
  TokenizeOptions o;
  std::set<std::string> seen;
  for (const std::string &item : kv) {
    const auto [key, value] = split_key_value(item, "tokenize option", keys, &seen);
    if (key == "output")
      o.output = value;
    else if (key == "format")
      o.format = value;
    else if (key == "workers")
      o.workers = parse_workers(value);
    else if (key == "new_only") {
      if (value != "0" && value != "1")
        fail(Status::bad_value, "new_only must be 0 or 1, got '", value, "'");
      o.new_only = value == "1";
    }
    else if (!set_tokenizer_option(o.tokenizer, key, value))
      fail(Status::unknown_option, "unknown tokenize option '", key, "'; allowed: ", keys);
  }
  if (o.output.empty())
    fail(Status::invalid_argument, "tokenize needs output (the ptdp dataset file to write)");
  return o;
}

}  // namespace ptdp
