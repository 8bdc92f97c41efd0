// Reading raw text corpora into documents, and building a token dataset from them.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "engine/data/tokenizer.h"

namespace ptdp {

// Formats: "fortune" (documents separated by lines holding only '%', as in
// Debian's fortunes files), "lines" (one document per non-empty line),
// "file" (each file is one document).
const char *corpus_format_names();
std::vector<std::string> read_documents(const std::string &path, const std::string &format);

// The files to read for a list of inputs: a file as it is, a directory as
// its regular files sorted by name. Left out in silence: a link to a file of
// the directory (fortunes' *.u8) and a strfile index X.dat beside its X; left
// out and named in a note on stderr: other links, subdirectories and other
// entries that are no regular file, hidden files. Error(io_error) naming a
// missing input.
std::vector<std::string> expand_inputs(const std::vector<std::string> &inputs);

// The documents of `files` (read_documents, one file at a time), in chunks of
// about `max_bytes` of text (a longer document is a chunk of its own).
class DocumentReader {
 public:
  DocumentReader(std::vector<std::string> files, std::string format)
      : files_(std::move(files)), format_(std::move(format)) {}
  // Appends the next chunk's documents to `chunk`; false at the end.
  bool next(std::vector<std::string> &chunk, size_t max_bytes);

 private:
  std::vector<std::string> files_, docs_;  // docs_: the current file's, from pos_ on
  std::string format_;
  size_t file_ = 0, pos_ = 0;
};

struct CorpusStats {
  uint64_t num_docs = 0, num_tokens = 0;
};
// Reads every input (a file, or every regular file of a directory, sorted by
// name, skipping fortune index files *.dat), tokenizes, appends EOD to each
// document and writes the dataset atomically. `workers` threads encode (0: one
// per core; see ordered_parallel.h); the file is the same for any number.
CorpusStats build_token_dataset(const std::vector<std::string> &inputs, const std::string &format,
                                const Tokenizer &tok, const std::string &out_path, int workers = 1,
                                bool new_only = false);

// What build_token_dataset takes, from "key=value" strings (the C ABI's way):
// output (required), format (default fortune), workers (default 1, 0: one
// per core), new_only (0 or 1: never replace an output made meanwhile) and the
// tokenizer's keys (set_tokenizer_option). An unknown key is
// an error listing the allowed ones.
struct TokenizeOptions {
  std::string output, format = "fortune";
  TokenizerSpec tokenizer;
  int workers = 1;
  bool new_only = false;  // write_token_dataset's
};
TokenizeOptions parse_tokenize_options(const std::vector<std::string> &kv);

}  // namespace ptdp
