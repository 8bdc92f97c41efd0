// A whole input file mapped read-only: the one place that opens, checks and
// maps the files the engine reads in bulk (token datasets, Megatron .idx/.bin,
// safetensors). Only a regular file is mapped; a directory, FIFO, device or
// socket is refused before anything can block on it. An empty file maps to
// nothing (data() null, size() 0).
#pragma once
#include <cstddef>
#include <string>

namespace ptdp {

class MappedFile {
 public:
  MappedFile() = default;
  // Errors (Status::io_error) read "<context>cannot open <what>: <reason><hint>",
  // "<context><what> is a directory, not a file", "<context><what> is not a
  // regular file (...)" and "<context>cannot map <what>: <reason>"; `what`
  // names the file ("dataset 'x.ptdp'").
  MappedFile(const std::string &path, const std::string &what, const std::string &context = "",
             const std::string &hint = "");
  ~MappedFile();
  MappedFile(MappedFile &&o) noexcept;
  MappedFile &operator=(MappedFile &&o) noexcept;
  MappedFile(const MappedFile &) = delete;
  MappedFile &operator=(const MappedFile &) = delete;

  const unsigned char *data() const { return data_; }
  size_t size() const { return size_; }

 private:
  const unsigned char *data_ = nullptr;
  size_t size_ = 0;
};

// A small input file's bytes (a config.json, an index, a tokenizer's files)
// through the same rules: a regular file only (a FIFO or device would block or
// never end), at most max_bytes (io_error naming the file and the limit).
// `context` starts the messages as MappedFile's does.
std::string read_small_file(const std::string &path, const std::string &what,
                            const std::string &context = "", size_t max_bytes = size_t(1) << 30);

}  // namespace ptdp
