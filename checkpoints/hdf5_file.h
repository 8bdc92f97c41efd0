// A small RAII layer over the HDF5 C API for checkpoints (ARCHITECTURE §5):
// datasets with global shapes written and read one block (hyperslab) at a
// time, string attributes, and HDF5's errors turned into ptdp errors that
// name the file and the dataset. Debian's parallel HDF5 is not thread-safe:
// every method holds one process-wide lock, so files may be used from several
// threads (their calls run one at a time).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace ptdp {

enum class H5Type { f32, i64 };

// A shape or an offset as text, "[768, 256]", for messages and reports.
std::string dims_text(const std::vector<int64_t> &d);

class H5File {
 public:
  // Creates (truncating) or opens a file; throws io_error naming the path.
  // mpi_io: every MPI process of MPI_COMM_WORLD creates it together (parallel
  // HDF5); then create_dataset, set_attribute and close are collective (same
  // calls in the same order on every process) and block writes independent.
  static H5File create(const std::string &path, bool mpi_io = false);
  static H5File open_read(const std::string &path);
  H5File(H5File &&o) noexcept;
  H5File &operator=(H5File &&o) noexcept;
  H5File(const H5File &) = delete;
  H5File &operator=(const H5File &) = delete;
  ~H5File();
  // Closes the file (flushes); the destructor does it too, but cannot report errors.
  void close();
  const std::string &path() const { return path_; }

  // A dataset "/a/b/name" (groups made as needed) of the given global shape:
  // contiguous, allocated at creation, never filled (every block gets written).
  void create_dataset(const std::string &name, H5Type type, const std::vector<int64_t> &shape);
  bool has_dataset(const std::string &name) const;
  std::vector<int64_t> shape(const std::string &name) const;  // throws corrupt_data if absent
  H5Type type(const std::string &name) const;
  // Every dataset's full name, sorted.
  std::vector<std::string> datasets() const;

  // The block of `count` elements per dimension at `offset`, row-major in memory.
  void write_block(const std::string &name, const std::vector<int64_t> &offset,
                   const std::vector<int64_t> &count, const float *data);
  void write_block(const std::string &name, const std::vector<int64_t> &offset,
                   const std::vector<int64_t> &count, const int64_t *data);
  void read_block(const std::string &name, const std::vector<int64_t> &offset,
                  const std::vector<int64_t> &count, float *data) const;
  void read_block(const std::string &name, const std::vector<int64_t> &offset,
                  const std::vector<int64_t> &count, int64_t *data) const;

  // String attributes of the root group (config, layout, format version).
  void set_attribute(const std::string &key, const std::string &value);
  std::string attribute(const std::string &key) const;  // throws corrupt_data if absent
  bool has_attribute(const std::string &key) const;

 private:
  H5File(int64_t id, std::string path) : id_(id), path_(std::move(path)) {}
  void block_io(const std::string &name, const std::vector<int64_t> &offset,
                const std::vector<int64_t> &count, void *data, H5Type type, bool write) const;
  int64_t id_ = -1;  // hid_t
  std::string path_;
};

}  // namespace ptdp
