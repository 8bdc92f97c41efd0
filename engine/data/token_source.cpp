#include "engine/data/token_source.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "engine/core/status.h"
#include "engine/core/text.h"
#include "engine/data/dataset.h"
#include "engine/data/indexed_dataset.h"

namespace ptdp {

namespace {

bool exists(const std::string &p) {
  struct stat st;
  return ::stat(p.c_str(), &st) == 0;
}

// The first bytes of a file ("" when it cannot be read: the opener says why).
std::string head(const std::string &path, size_t n) {
  int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return "";
  std::string buf(n, '\0');
  ssize_t got = ::read(fd, &buf[0], n);
  ::close(fd);
  buf.resize(got > 0 ? (size_t)got : 0);
  return buf;
}

}  // namespace

std::shared_ptr<const TokenSource> open_token_source(const std::string &path) {
  if (path.empty())
    fail(Status::invalid_config, "the data path is empty: give a ptdp token dataset file or a "
         "Megatron dataset prefix (PREFIX.bin + PREFIX.idx)");
  struct stat st;
  if (::stat(path.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode))
      fail(Status::io_error, "dataset '", path, "' is a directory; give a ptdp token dataset "
           "file or a Megatron dataset prefix PREFIX (for PREFIX.bin + PREFIX.idx)");
    // A FIFO or device: head() would wait on it; the dataset's mapping refuses it.
    if (!S_ISREG(st.st_mode)) return std::make_shared<const TokenDataset>(path);
    const std::string magic = head(path, 7);
    if (magic == "MMIDIDX") {
      if (!ends_with(path, ".idx"))
        fail(Status::invalid_config, "'", path, "' is a Megatron index but is not named "
             "PREFIX.idx: name it so (next to PREFIX.bin) and give PREFIX");
      return std::make_shared<const IndexedDataset>(path.substr(0, path.size() - 4));
    }
    const std::string stem = path.substr(0, path.size() - 4);
    if (magic != "PTDPTOK" && ends_with(path, ".bin") && exists(stem + ".idx"))
      return std::make_shared<const IndexedDataset>(stem);
    return std::make_shared<const TokenDataset>(path);  // its own checks name what is wrong
  }
  if (errno == ENOENT && (exists(path + ".idx") || exists(path + ".bin")))
    return std::make_shared<const IndexedDataset>(path);
  fail(Status::io_error, "cannot open dataset '", path, "': ", std::strerror(errno),
       "; nor is there a Megatron dataset '", path, ".bin' + '", path,
       ".idx' (create one with `ptdp tokenize`)");
}

void check_source_vocab(const TokenSource &src, int model_vocab, const std::string &tokenizer,
                        int tokenizer_vocab, uint64_t vocabulary) {
  const bool ptdp_file = std::strcmp(src.format_name(), "ptdp") == 0;
  if (ptdp_file && src.vocab_size() > model_vocab)
    fail(Status::invalid_config, "dataset '", src.path(), "' has vocabulary size ",
         src.vocab_size(), " but the '", tokenizer, "' tokenizer (and so the model) has ",
         model_vocab);
  if (ptdp_file && src.vocab_size() != tokenizer_vocab)
    fail(Status::invalid_config, "dataset '", src.path(), "' was tokenized with a vocabulary of ",
         src.vocab_size(), src.vocab_size() == 257 ? " (the byte tokenizer's)" : "", " but this run's '",
         tokenizer, "' tokenizer has ", tokenizer_vocab, ": its ids would mean other tokens. ",
         "Tokenize the text again with `ptdp tokenize --tokenizer-type ", tokenizer,
         " ...`, or train with the tokenizer that made it");
  // Of one size, but another vocabulary (its ids name other tokens).
  if (ptdp_file && src.vocabulary() != 0 && vocabulary != 0 && src.vocabulary() != vocabulary)
    fail(Status::invalid_config, "dataset '", src.path(), "' was tokenized with another vocabulary ",
         "than this run's '", tokenizer, "' tokenizer (both of ", tokenizer_vocab, " ids, but its ids "
         "name other tokens: another vocab.json, merges or tokenizer.json). Tokenize the text again "
         "with this run's tokenizer files, or train with the ones that made it");
  if (src.vocab_size() <= model_vocab) return;
  fail(Status::invalid_config, "Megatron dataset '", src.path(), "' holds token ids up to ",
       src.vocab_size() - 1, " but the model's vocabulary has ", model_vocab, " ids (the '",
       tokenizer, "' tokenizer's unless vocab_size is set): another tokenizer made it. Train with that "
       "tokenizer (its tokenizer_type and files), or tokenize the text again with the '", tokenizer,
       "' tokenizer; or, to train on its ids as they are (a sample or generation then decodes them "
       "with the '", tokenizer, "' tokenizer, as other text), set vocab_size to at least ", src.vocab_size());
}

}  // namespace ptdp
