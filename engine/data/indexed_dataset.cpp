#include "engine/data/indexed_dataset.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "engine/core/output_file.h"
#include "engine/core/temp_files.h"
#include "engine/core/status.h"

// The format is little-endian; the files are mapped and copied as they are.
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "indexed datasets need a little-endian host");

namespace ptdp {

namespace {

const char kMagic[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', '\0', '\0'};
const char *kAllowedDtypes = "1 uint8, 2 int8, 3 int16, 4 int32, 5 int64, 8 uint16";

// Bytes per token of a dtype code; 0 for a code that is no integer type.
size_t dtype_bytes(uint8_t code) {
  switch (code) {
    case 1: case 2: return 1;
    case 3: case 8: return 2;
    case 4: return 4;
    case 5: return 8;
    default: return 0;
  }
}

const char *dtype_name(uint8_t code) {
  static const char *names[] = {"?", "uint8", "int8", "int16", "int32", "int64", "float64",
                                "float32", "uint16"};
  return code <= 8 ? names[code] : "unknown";
}

// The index is packed: its int32/int64 arrays start at odd offsets, so every
// value is copied out rather than read through a cast pointer.
template <class T>
T load(const unsigned char *p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

template <class T>
void decode(const unsigned char *p, size_t n, int32_t *out) {
  for (size_t i = 0; i < n; i++) out[i] = (int32_t)load<T>(p + i * sizeof(T));
}

void decode_tokens(uint8_t code, const unsigned char *p, size_t n, int32_t *out) {
  switch (code) {
    case 1: decode<uint8_t>(p, n, out); break;
    case 2: decode<int8_t>(p, n, out); break;
    case 3: decode<int16_t>(p, n, out); break;
    case 4: decode<int32_t>(p, n, out); break;
    case 5: decode<int64_t>(p, n, out); break;
    case 8: decode<uint16_t>(p, n, out); break;
  }
}

}  // namespace

uint8_t indexed_dtype_for_vocab(int vocab_size) { return vocab_size < 65500 ? 8 : 4; }

IndexedDataset::IndexedDataset(const std::string &prefix)
    : prefix_(prefix), idx_input_(prefix + ".idx", "dataset index"),
      bin_input_(prefix + ".bin", "dataset") {
  const std::string idx = prefix + ".idx", bin = prefix + ".bin";
  const std::string context = "Megatron dataset '" + prefix + "': ",
                    hint = " (a Megatron dataset is PREFIX.bin + PREFIX.idx)";
  idx_file_ = MappedFile(idx, "its index '" + idx + "'", context, hint);
  bin_file_ = MappedFile(bin, "its data file '" + bin + "'", context, hint);
  const unsigned char *p = idx_file_.data();
  const size_t n = idx_file_.size();
  if (n < sizeof kMagic || std::memcmp(p, kMagic, sizeof kMagic) != 0)
    fail(Status::corrupt_data, "'", idx, "' is not a Megatron index (bad magic: expected "
         "\"MMIDIDX\\x00\\x00\" in its first 9 bytes)");
  if (n < kIndexedHeaderBytes)
    fail(Status::corrupt_data, "Megatron index '", idx, "' is ", n, " bytes, shorter than its ",
         kIndexedHeaderBytes, "-byte header: truncated");
  const uint64_t version = load<uint64_t>(p + 9);
  if (version != kIndexedDatasetVersion)
    fail(Status::corrupt_data, "Megatron index '", idx, "' has version ", version,
         "; this build reads version ", kIndexedDatasetVersion);
  dtype_ = p[17];
  token_bytes_ = dtype_bytes(dtype_);
  if (token_bytes_ == 0)
    fail(Status::corrupt_data, "Megatron index '", idx, "' declares dtype code ", (int)dtype_,
         " (", dtype_name(dtype_), "), which is no token type; allowed: ", kAllowedDtypes);
  num_seqs_ = load<uint64_t>(p + 18);
  const uint64_t doc_entries = load<uint64_t>(p + 26);
  // Guard the size arithmetic against absurd counts before multiplying.
  if (num_seqs_ > n || doc_entries > n)
    fail(Status::corrupt_data, "Megatron index '", idx, "' declares ", num_seqs_,
         " sequences and ", doc_entries, " document-index entries, more than its ", n,
         " bytes can hold");
  const uint64_t expect = kIndexedHeaderBytes + num_seqs_ * 12 + doc_entries * 8;
  if (n < expect)
    fail(Status::corrupt_data, "Megatron index '", idx, "' is ", n, " bytes but its header (",
         num_seqs_, " sequences, ", doc_entries, " document-index entries) implies ", expect,
         ": truncated");
  // A multimodal dataset adds one mode byte per sequence; anything else is
  // another file's data or damage.
  if (n != expect && n != expect + num_seqs_)
    fail(Status::corrupt_data, "Megatron index '", idx, "' has ", n - expect,
         " trailing bytes after its document index (", expect, " bytes expected)");
  lengths_ = p + kIndexedHeaderBytes;
  pointers_ = lengths_ + num_seqs_ * 4;
  doc_index_ = pointers_ + num_seqs_ * 8;

  // Document index: 0, non-decreasing, ending at the sequence count.
  if (doc_entries == 0)
    fail(Status::corrupt_data, "Megatron index '", idx,
         "' has an empty document index (it needs at least the leading 0)");
  if (load<int64_t>(doc_index_) != 0)
    fail(Status::corrupt_data, "Megatron index '", idx, "': the document index starts at ",
         load<int64_t>(doc_index_), ", not 0");
  for (uint64_t d = 1; d < doc_entries; d++)
    if (load<int64_t>(doc_index_ + 8 * d) < load<int64_t>(doc_index_ + 8 * (d - 1)))
      fail(Status::corrupt_data, "Megatron index '", idx,
           "': the document index decreases at entry ", d);
  const int64_t last = load<int64_t>(doc_index_ + 8 * (doc_entries - 1));
  if (last != (int64_t)num_seqs_)
    fail(Status::corrupt_data, "Megatron index '", idx, "': the document index ends at sequence ",
         last, " but there are ", num_seqs_, " sequences");
  num_docs_ = doc_entries - 1;

  // Sequences: lengths and pointers. Megatron's builder lays them back to
  // back, pointer = the bytes of the sequences before it; an index whose
  // pointers disagree with its lengths and dtype (overlapping, out of order,
  // misaligned, another dtype byte) would be read as other tokens, so the
  // first such sequence is named and the dataset refused.
  uint64_t next = 0;  // byte where sequence s must start
  for (uint64_t s = 0; s < num_seqs_; s++) {
    const int32_t len = load<int32_t>(lengths_ + 4 * s);
    const int64_t ptr = load<int64_t>(pointers_ + 8 * s);
    if (len < 0)
      fail(Status::corrupt_data, "Megatron index '", idx, "': sequence ", s,
           " has a negative length ", len);
    if (ptr < 0)
      fail(Status::corrupt_data, "Megatron index '", idx, "': sequence ", s,
           " has a negative pointer ", ptr);
    if ((uint64_t)ptr != next)
      fail(Status::corrupt_data, "Megatron index '", idx, "': sequence ", s, " starts at byte ",
           ptr, " but the ", num_tokens_, " tokens of ", dtype_name(dtype_),
           " before it end at byte ", next,
           ": its pointers disagree with its lengths or its dtype (Megatron's builder writes "
           "the sequences back to back)");
    num_tokens_ += (uint64_t)len;
    next += (uint64_t)len * token_bytes_;
    if (num_tokens_ > bin_file_.size())  // more tokens than bytes: truncated
      break;
  }
  const uint64_t need = num_tokens_ * token_bytes_;
  if (need != bin_file_.size())
    fail(Status::corrupt_data, "Megatron dataset '", prefix, "': '", bin, "' is ", bin_file_.size(),
         " bytes but its index describes ", num_tokens_, num_tokens_ > bin_file_.size() ? "+" : "",
         " tokens of ", dtype_name(dtype_), " = ", need, num_tokens_ > bin_file_.size() ? "+" : "",
         " bytes", need > bin_file_.size() ? ": the .bin is truncated (or the .idx is another dataset's)"
                                    : ": the .bin has trailing bytes (or the .idx is another dataset's)");

  // Token ids: none negative, none beyond what a model can embed.
  int64_t max_id = -1;
  std::vector<int32_t> buf(1 << 16);
  for (uint64_t i = 0; i < num_tokens_; i += buf.size()) {
    const size_t k = (size_t)std::min<uint64_t>(buf.size(), num_tokens_ - i);
    if (dtype_ == 5) {  // int64: check the full value before narrowing
      for (size_t j = 0; j < k; j++) {
        int64_t v = load_token(i + j);
        if (v < 0 || v > INT32_MAX)
          fail(Status::corrupt_data, "Megatron dataset '", prefix, "': token ", v,
               " at position ", i + j, " is not a valid token id (0 to 2^31 - 1)");
      }
    }
    read(i, k, buf.data());
    for (size_t j = 0; j < k; j++) {
      if (buf[j] < 0)
        fail(Status::corrupt_data, "Megatron dataset '", prefix, "': token ", buf[j],
             " at position ", i + j, " is negative");
      max_id = std::max<int64_t>(max_id, buf[j]);
    }
  }
  vocab_size_ = (int)(max_id + 1);
}

uint64_t IndexedDataset::seq_start(uint64_t s) const {
  return s < num_seqs_ ? (uint64_t)load<int64_t>(pointers_ + 8 * s) / token_bytes_ : num_tokens_;
}

uint64_t IndexedDataset::doc_offset(uint64_t d) const {
  return seq_start((uint64_t)load<int64_t>(doc_index_ + 8 * d));
}

int64_t IndexedDataset::load_token(uint64_t i) const {
  // Only the int64 check calls this; it finds the byte the same way read() does.
  const unsigned char *bin = bin_file_.data();
  return load<int64_t>(bin + i * 8);
}

void IndexedDataset::read(uint64_t first, size_t n, int32_t *out) const {
  const unsigned char *bin = bin_file_.data();
  decode_tokens(dtype_, bin + first * token_bytes_, n, out);  // back to back: token i at byte i x size
}

// ---- writer ----------------------------------------------------------------

namespace {


template <class T>
void put(std::string &out, T v) {
  out.append(reinterpret_cast<const char *>(&v), sizeof v);
}

}  // namespace

IndexedDatasetWriter::IndexedDatasetWriter(const std::string &prefix, int vocab_size,
                                           const std::vector<std::string> &inputs)
    : vocab_size_(vocab_size), dtype_(indexed_dtype_for_vocab(vocab_size)) {
  if (prefix.empty()) fail(Status::invalid_argument, "the output prefix is empty");
  if (vocab_size <= 0) fail(Status::invalid_argument, "vocab_size must be positive");
  for (const std::string &f : inputs) inputs_.emplace_back(f, "tokenize input");
  // Each dataset its own writer's name: one command's other datasets (its
  // other json keys) are other writers, whose files its claims refuse.
  const std::string what = "tokenize output (" + prefix + ")";
  bin_path_ = output_target(prefix + ".bin", what.c_str(), OutputKind::megatron_data);
  idx_path_ = output_target(prefix + ".idx", what.c_str(), OutputKind::megatron_index);
  if (same_output(bin_path_, idx_path_))
    fail(Status::invalid_argument, "tokenize output '", prefix, ".bin' and '", prefix,
         ".idx' are one file (links to it): the index would replace the tokens; give two files");
  // Through links, the two files must still be one pair (X.bin beside X.idx):
  // a link to another dataset's half would pair new tokens with its old index.
  const auto stem = [](const std::string &p) {
    return std::filesystem::weakly_canonical(std::filesystem::absolute(p)).replace_extension().string();
  };
  const auto ends = [](const std::string &p, const char *ext) {
    return p.size() >= 4 && p.compare(p.size() - 4, 4, ext) == 0;
  };
  if (stem(bin_path_) != stem(idx_path_) || !ends(bin_path_, ".bin") || !ends(idx_path_, ".idx"))
    fail(Status::invalid_argument, "tokenize output '", prefix, "': its .bin is '", bin_path_,
         "' and its .idx '", idx_path_, "' (through a link): a dataset's two files are one pair, ",
         "X.bin beside X.idx; remove the link or give another prefix");
  bin_claim_ = OutputClaim(bin_path_, what, true);  // (another tokenize's too)
  idx_claim_ = OutputClaim(idx_path_, what, true);
  fd_ = create_temp_file(bin_path_, &bin_tmp_);
}

IndexedDatasetWriter::~IndexedDatasetWriter() {
  if (fd_ >= 0) ::close(fd_);
  if (!finished_) {
    if (!bin_tmp_.empty()) remove_temp_file(bin_tmp_);
    if (!idx_tmp_.empty()) remove_temp_file(idx_tmp_);
  }
}

void IndexedDatasetWriter::flush() {
  write_all(fd_, buf_.data(), buf_.size(), bin_tmp_);
  buf_.clear();
}

void IndexedDatasetWriter::add_document(const std::vector<std::vector<int32_t>> &sequences) {
  if (finished_ || fd_ < 0) fail(Status::wrong_state, "the indexed dataset '", bin_path_, "' is finished");
  const size_t size = dtype_bytes(dtype_);
  for (const auto &seq : sequences) {
    if (seq.empty()) continue;
    if (seq.size() > (size_t)INT32_MAX)
      fail(Status::invalid_argument, "a sequence of ", seq.size(),
           " tokens is longer than the format's int32 lengths allow");
    for (int32_t t : seq) {
      if (t < 0 || t >= vocab_size_)
        fail(Status::invalid_argument, "token ", t, " in document ", num_docs(),
             " is outside the vocabulary [0, ", vocab_size_, ")");
      if (size == 2) {
        uint16_t v = (uint16_t)t;
        buf_.insert(buf_.end(), (unsigned char *)&v, (unsigned char *)&v + 2);
      } else {
        buf_.insert(buf_.end(), (unsigned char *)&t, (unsigned char *)&t + 4);
      }
    }
    lengths_.push_back((int32_t)seq.size());
    num_tokens_ += seq.size();
    if (buf_.size() >= (1u << 20)) flush();
  }
  doc_index_.push_back((int64_t)lengths_.size());
}

void IndexedDatasetWriter::prepare() {
  if (finished_ || !idx_tmp_.empty()) return;
  flush();
  if (::fsync(fd_) != 0) fail(Status::io_error, "fsync '", bin_tmp_, "': ", std::strerror(errno));
  ::close(fd_);
  fd_ = -1;
  // The index, laid out as the header comment of indexed_dataset.h says.
  std::string idx(kMagic, sizeof kMagic);
  put<uint64_t>(idx, kIndexedDatasetVersion);
  put<uint8_t>(idx, dtype_);
  put<uint64_t>(idx, lengths_.size());
  put<uint64_t>(idx, doc_index_.size());
  for (int32_t len : lengths_) put<int32_t>(idx, len);
  int64_t ptr = 0;
  for (int32_t len : lengths_) {
    put<int64_t>(idx, ptr);
    ptr += (int64_t)len * (int64_t)dtype_bytes(dtype_);
  }
  for (int64_t d : doc_index_) put<int64_t>(idx, d);
  idx_tmp_ = write_temp_file(idx_path_, idx);
}

std::vector<std::pair<std::string, std::string>> IndexedDatasetWriter::staged() {
  if (finished_) return {};
  if (idx_tmp_.empty()) fail(Status::wrong_state, "the indexed dataset '", bin_path_, "' is not prepared");
  finished_ = true;
  // .bin first: a reader opens the .idx first, and a new .idx never points
  // into an old .bin.
  return {{bin_tmp_, bin_path_}, {idx_tmp_, idx_path_}};
}

void IndexedDatasetWriter::commit() {
  put_in_place(staged(), "indexed dataset '" + bin_path_.substr(0, bin_path_.size() - 4) + "'");
}

}  // namespace ptdp
