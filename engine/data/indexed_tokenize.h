// `ptdp tokenize --output-prefix P`: text into Megatron's indexed dataset, as
// Megatron-LM's tools/preprocess_data.py makes it. For each JSON key K it
// writes P_K_document.bin + P_K_document.idx (Megatron's names), reading the
// inputs in order: one document per JSON line, its K value a string (one
// sequence) or a list of strings (a sequence each, as sentence-split data);
// empty sequences are dropped and an empty document is still counted;
// --append-eod adds the end-of-document token to a non-empty document's last
// sequence. Same tokenizer ids in, same bytes out as Megatron's tool.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "engine/data/tokenizer.h"

namespace ptdp {

struct IndexedTokenizeOptions {
  std::string format = "jsonl";  // jsonl, or a corpus format (fortune, lines, file): key "text"
  std::vector<std::string> json_keys = {"text"};
  TokenizerSpec tokenizer;  // make_tokenizer's type and files
  bool append_eod = false;
  std::string output_prefix;
  int workers = 1;  // threads parsing and encoding (0: one per core); same output for any
};

// From "key=value" strings (the C ABI's way to pass them): output_prefix,
// format, json_keys (comma-separated), tokenizer_type, vocab_file, merge_file,
// tokenizer_file (see TokenizerSpec), append_eod (0 or 1), workers (0..1024).
// An unknown key or a bad value is an error listing what is allowed.
IndexedTokenizeOptions parse_indexed_tokenize_options(const std::vector<std::string> &kv);

struct IndexedOutput {
  std::string prefix;  // what --data-path takes
  uint64_t num_docs = 0, num_tokens = 0;
};

// The output prefix for one key: PREFIX_KEY_document.
std::string indexed_output_prefix(const std::string &prefix, const std::string &key);

// Tokenizes `inputs` (files, or directories: see expand_inputs) and writes one
// indexed dataset per key. Every output is checked before any work (no
// directory, device or FIFO, none of the inputs) and written atomically.
std::vector<IndexedOutput> build_indexed_dataset(const std::vector<std::string> &inputs,
                                                 const IndexedTokenizeOptions &opt,
                                                 const Tokenizer &tok);

}  // namespace ptdp
