#include "engine/data/dataset.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "engine/core/output_file.h"
#include "engine/core/temp_files.h"
#include "engine/core/status.h"

namespace ptdp {

namespace {
const char kMagic[8] = {'P', 'T', 'D', 'P', 'T', 'O', 'K', '\0'};

struct Header {
  char magic[8];
  uint32_t version;
  uint32_t token_bytes;
  uint32_t vocab_size;
  uint32_t reserved;
  uint64_t num_docs;
  uint64_t num_tokens;
  uint64_t vocabulary;  // vocabulary_fingerprint of the tokenizer (0: not recorded, older files)
  uint8_t pad[16];
};
static_assert(sizeof(Header) == 64, "header must be 64 bytes");

}  // namespace

void write_token_dataset(const std::string &out_path,
                         const std::vector<std::vector<int32_t>> &docs, int vocab_size,
                         uint64_t vocabulary, bool new_only) {
  if (vocab_size <= 0) fail(Status::invalid_argument, "vocab_size must be positive");
  const std::string path = output_target(out_path, "token dataset output", OutputKind::ptdp_dataset);
  Header h{};
  std::memcpy(h.magic, kMagic, 8);
  h.version = kTokenDatasetVersion;
  h.token_bytes = vocab_size <= 65536 ? 2 : 4;
  h.vocab_size = (uint32_t)vocab_size;
  h.vocabulary = vocabulary;
  h.num_docs = docs.size();
  std::vector<uint64_t> offsets(docs.size() + 1, 0);
  for (size_t d = 0; d < docs.size(); d++) {
    for (int32_t t : docs[d])
      if (t < 0 || t >= vocab_size)
        fail(Status::invalid_argument, "token ", t, " in document ", d,
             " is outside the vocabulary [0, ", vocab_size, ")");
    offsets[d + 1] = offsets[d] + docs[d].size();
  }
  h.num_tokens = offsets.back();

  // A temporary file of this process's own: several processes (mpirun) may
  // build the same dataset at once; each rename then installs a complete file.
  std::string tmp;
  int fd = create_temp_file(path, &tmp);
  try {
    write_all(fd, &h, sizeof h, tmp);
    write_all(fd, offsets.data(), offsets.size() * sizeof(uint64_t), tmp);
    std::vector<uint8_t> buf;
    for (const auto &doc : docs) {
      buf.resize(doc.size() * h.token_bytes);
      for (size_t i = 0; i < doc.size(); i++) {
        if (h.token_bytes == 2) {
          uint16_t v = (uint16_t)doc[i];
          std::memcpy(&buf[i * 2], &v, 2);
        } else {
          uint32_t v = (uint32_t)doc[i];
          std::memcpy(&buf[i * 4], &v, 4);
        }
      }
      write_all(fd, buf.data(), buf.size(), tmp);
    }
    if (::fsync(fd) != 0) fail(Status::io_error, "fsync '", tmp, "': ", std::strerror(errno));
  } catch (...) {
    ::close(fd);
    remove_temp_file(tmp);
    throw;
  }
  ::close(fd);
  put_in_place({{tmp, path}}, "token dataset output '" + out_path + "'", new_only);
}

TokenDataset::TokenDataset(const std::string &path)
    : path_(path),
      input_(path, "dataset"),
      file_(path, "dataset '" + path + "'", "", " (create one with `ptdp tokenize`)") {
  const size_t size = file_.size();
  if (size < sizeof(Header))
    fail(Status::corrupt_data, "dataset '", path, "' is ", size,
         " bytes, shorter than its 64-byte header: truncated or not a ptdp dataset");
  const unsigned char *base = file_.data();
  Header h;
  std::memcpy(&h, base, sizeof h);
  if (std::memcmp(h.magic, kMagic, 8) != 0)
    fail(Status::corrupt_data, "'", path, "' is not a ptdp token dataset (bad magic: expected "
         "\"PTDPTOK\"), nor a Megatron index (\"MMIDIDX\", PREFIX.idx)");
  if (h.version != kTokenDatasetVersion)
    fail(Status::corrupt_data, "dataset '", path, "' has format version ", h.version,
         "; this build reads version ", kTokenDatasetVersion);
  if (h.token_bytes != 2 && h.token_bytes != 4)
    fail(Status::corrupt_data, "dataset '", path, "' declares ", h.token_bytes,
         "-byte tokens; allowed: 2 or 4");
  if (h.vocab_size == 0 || h.vocab_size > (1u << 30))
    fail(Status::corrupt_data, "dataset '", path, "' declares a vocabulary of ", h.vocab_size,
         " tokens; allowed: 1 to 2^30");
  // Guard the size arithmetic against absurd counts before multiplying.
  const uint64_t limit = (uint64_t)size;
  if (h.num_docs >= limit || h.num_tokens > limit)
    fail(Status::corrupt_data, "dataset '", path, "' declares ", h.num_docs, " documents and ",
         h.num_tokens, " tokens, more than its ", size, " bytes can hold");
  uint64_t expect = sizeof(Header) + (h.num_docs + 1) * 8 + h.num_tokens * h.token_bytes;
  if (expect != size)
    fail(Status::corrupt_data, "dataset '", path, "' is ", size, " bytes but its header (",
         h.num_docs, " documents, ", h.num_tokens, " tokens) implies ", expect,
         (expect > size ? ": truncated" : ": trailing bytes"));
  vocab_size_ = (int)h.vocab_size;
  vocabulary_ = h.vocabulary;
  token_bytes_ = h.token_bytes;
  num_docs_ = h.num_docs;
  num_tokens_ = h.num_tokens;
  offsets_ = reinterpret_cast<const uint64_t *>(base + sizeof h);
  tokens_ = base + sizeof h + (num_docs_ + 1) * 8;
  if (offsets_[0] != 0 || offsets_[num_docs_] != num_tokens_)
    fail(Status::corrupt_data, "dataset '", path, "': document index does not span the ",
         num_tokens_, " tokens");
  for (uint64_t d = 0; d < num_docs_; d++)
    if (offsets_[d + 1] < offsets_[d])
      fail(Status::corrupt_data, "dataset '", path, "': document index decreases at document ",
           d);
  for (uint64_t i = 0; i < num_tokens_; i++)
    if ((uint32_t)token(i) >= h.vocab_size)
      fail(Status::corrupt_data, "dataset '", path, "': token ", token(i), " at position ", i,
           " is outside the vocabulary [0, ", h.vocab_size, ")");
}

}  // namespace ptdp
