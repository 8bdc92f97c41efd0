#include "checkpoints/hdf5_file.h"

#define OMPI_SKIP_MPICXX 1  // parallel HDF5's header includes mpi.h
#include <hdf5.h>
#include <sys/stat.h>

#include <algorithm>
#include <mutex>
#include <cstdio>
#include <utility>

#include "engine/core/status.h"

namespace ptdp {

namespace {

// HDF5 prints its error stack by default; ptdp reports errors itself. And it
// closes every file still open at exit, which crashes on a file whose close
// already failed (a full disk): ptdp closes its files itself, so HDF5's exit
// handler is turned off (this must come before any other HDF5 call).
void silence_hdf5() {
  static const bool done = [] {
    H5dont_atexit();
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
    return true;
  }();
  (void)done;
}

// The innermost message of HDF5's current error stack ("" if none).
std::string hdf5_reason() {
  std::string msg;
  H5Ewalk2(
      H5E_DEFAULT, H5E_WALK_UPWARD,
      [](unsigned n, const H5E_error2_t *e, void *out) -> herr_t {
        if (n == 0 && e->desc) *static_cast<std::string *>(out) = e->desc;
        return 0;
      },
      &msg);
  // A failed system call's description is a long dump (time, descriptor,
  // buffer address...): keep its OS message.
  const std::string os = "error message = '";
  const size_t at = msg.find(os);
  if (at != std::string::npos) msg = msg.substr(at + os.size(), msg.find('\'', at + os.size()) - at - os.size());
  return msg.empty() ? "" : " (" + msg + ")";
}

// Debian's parallel HDF5 is not thread-safe: every call into it, from any
// H5File in the process, holds this lock (recursive: methods call methods).
std::unique_lock<std::recursive_mutex> lock_hdf5() {
  static std::recursive_mutex m;
  return std::unique_lock<std::recursive_mutex>(m);
}

// Closes an HDF5 handle at the end of a scope.
struct Handle {
  hid_t id;
  herr_t (*close)(hid_t);
  ~Handle() {
    if (id >= 0) close(id);
  }
};

hid_t mem_type(H5Type t) { return t == H5Type::f32 ? H5T_NATIVE_FLOAT : H5T_NATIVE_INT64; }
hid_t file_type(H5Type t) { return t == H5Type::f32 ? H5T_IEEE_F32LE : H5T_STD_I64LE; }

}  // namespace

std::string dims_text(const std::vector<int64_t> &d) {
  std::string s = "[";
  for (size_t i = 0; i < d.size(); i++) s += (i ? ", " : "") + std::to_string(d[i]);
  return s + "]";
}

H5File H5File::create(const std::string &path, bool mpi_io) {
  const auto lock = lock_hdf5();
  silence_hdf5();
  Handle fapl{H5Pcreate(H5P_FILE_ACCESS), H5Pclose};
  if (mpi_io) {
#ifdef H5_HAVE_PARALLEL
    H5Pset_fapl_mpio(fapl.id, MPI_COMM_WORLD, MPI_INFO_NULL);
#else
    fail(Status::invalid_config, "cannot write '", path, "' with MPI-IO: this HDF5 is not the "
         "parallel build (install libhdf5-openmpi-dev)");
#endif
  }
  // Large datasets start on 4 KiB boundaries: page-aligned extents for the OS and MPI-IO.
  H5Pset_alignment(fapl.id, 4096, 4096);
  hid_t id = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl.id);
  if (id < 0) fail(Status::io_error, "cannot create HDF5 file '", path, "'", hdf5_reason());
  return H5File(id, path);
}

H5File H5File::open_read(const std::string &path) {
  const auto lock = lock_hdf5();
  silence_hdf5();
  // HDF5 opens whatever is there: a FIFO would block it until a writer came.
  struct stat st;
  if (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode))
    fail(Status::corrupt_data, "'", path, "' is not a regular file (a directory, FIFO or device), ",
         "so not a checkpoint's HDF5 file");
  if (H5Fis_hdf5(path.c_str()) <= 0)
    fail(Status::corrupt_data, "'", path, "' is missing or not an HDF5 file", hdf5_reason());
  hid_t id = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  if (id < 0) fail(Status::io_error, "cannot open HDF5 file '", path, "'", hdf5_reason());
  return H5File(id, path);
}

H5File::H5File(H5File &&o) noexcept : id_(std::exchange(o.id_, -1)), path_(std::move(o.path_)) {}

H5File &H5File::operator=(H5File &&o) noexcept {
  const auto lock = lock_hdf5();
  if (this != &o) {
    if (id_ >= 0) H5Fclose(id_);
    id_ = std::exchange(o.id_, -1);
    path_ = std::move(o.path_);
  }
  return *this;
}

H5File::~H5File() {
  const auto lock = lock_hdf5();
  if (id_ >= 0) H5Fclose(id_);
}

void H5File::close() {
  const auto lock = lock_hdf5();
  if (id_ < 0) return;
  hid_t id = std::exchange(id_, -1);
  if (H5Fclose(id) < 0) {
    // A close that cannot flush (full disk) leaves the file open inside
    // HDF5; it is abandoned (see silence_hdf5: no clean-up at exit).
    fail(Status::io_error, "cannot close HDF5 file '", path_, "'", hdf5_reason());
  }
}

void H5File::create_dataset(const std::string &name, H5Type type,
                            const std::vector<int64_t> &shape) {
  const auto lock = lock_hdf5();
  std::vector<hsize_t> dims(shape.begin(), shape.end());
  for (int64_t d : shape)
    if (d < 0) fail(Status::invalid_argument, "dataset '", name, "' has a negative dimension");
  Handle space{H5Screate_simple((int)dims.size(), dims.data(), nullptr), H5Sclose};
  Handle lcpl{H5Pcreate(H5P_LINK_CREATE), H5Pclose};
  H5Pset_create_intermediate_group(lcpl.id, 1);
  Handle dcpl{H5Pcreate(H5P_DATASET_CREATE), H5Pclose};
  H5Pset_layout(dcpl.id, H5D_CONTIGUOUS);
  H5Pset_alloc_time(dcpl.id, H5D_ALLOC_TIME_EARLY);
  H5Pset_fill_time(dcpl.id, H5D_FILL_TIME_NEVER);
  Handle ds{H5Dcreate2(id_, name.c_str(), file_type(type), space.id, lcpl.id, dcpl.id, H5P_DEFAULT),
            H5Dclose};
  if (ds.id < 0)
    fail(Status::io_error, "cannot create dataset '", name, "' ", dims_text(shape), " in '", path_,
         "'", hdf5_reason());
}

bool H5File::has_dataset(const std::string &name) const {
  const auto lock = lock_hdf5();
  // Each link on the path must exist before the next can be asked about.
  for (size_t pos = name.find('/', 1); ; pos = name.find('/', pos + 1)) {
    std::string prefix = name.substr(0, pos);
    if (H5Lexists(id_, prefix.c_str(), H5P_DEFAULT) <= 0) return false;
    if (pos == std::string::npos) break;
  }
  H5O_info_t info;  // HDF5 1.10 API (Debian 12)
  if (H5Oget_info_by_name2(id_, name.c_str(), &info, H5O_INFO_BASIC, H5P_DEFAULT) < 0) return false;
  return info.type == H5O_TYPE_DATASET;
}

std::vector<int64_t> H5File::shape(const std::string &name) const {
  const auto lock = lock_hdf5();
  if (!has_dataset(name)) fail(Status::corrupt_data, "'", path_, "' has no dataset '", name, "'");
  Handle ds{H5Dopen2(id_, name.c_str(), H5P_DEFAULT), H5Dclose};
  Handle space{H5Dget_space(ds.id), H5Sclose};
  int rank = H5Sget_simple_extent_ndims(space.id);
  std::vector<hsize_t> dims((size_t)std::max(rank, 0));
  H5Sget_simple_extent_dims(space.id, dims.data(), nullptr);
  return std::vector<int64_t>(dims.begin(), dims.end());
}

H5Type H5File::type(const std::string &name) const {
  const auto lock = lock_hdf5();
  if (!has_dataset(name)) fail(Status::corrupt_data, "'", path_, "' has no dataset '", name, "'");
  Handle ds{H5Dopen2(id_, name.c_str(), H5P_DEFAULT), H5Dclose};
  Handle t{H5Dget_type(ds.id), H5Tclose};
  if (H5Tget_class(t.id) == H5T_FLOAT && H5Tget_size(t.id) == 4) return H5Type::f32;
  if (H5Tget_class(t.id) == H5T_INTEGER && H5Tget_size(t.id) == 8) return H5Type::i64;
  fail(Status::corrupt_data, "dataset '", name, "' in '", path_,
       "' is neither float32 nor int64");
}

std::vector<std::string> H5File::datasets() const {
  const auto lock = lock_hdf5();
  std::vector<std::string> out;
  H5Ovisit2(
      id_, H5_INDEX_NAME, H5_ITER_INC,
      [](hid_t, const char *name, const H5O_info_t *info, void *op) -> herr_t {
        if (info->type == H5O_TYPE_DATASET)
          static_cast<std::vector<std::string> *>(op)->push_back(std::string("/") + name);
        return 0;
      },
      &out, H5O_INFO_BASIC);
  std::sort(out.begin(), out.end());
  return out;
}

void H5File::block_io(const std::string &name, const std::vector<int64_t> &offset,
                      const std::vector<int64_t> &count, void *data, H5Type type,
                      bool write) const {
  const auto lock = lock_hdf5();
  const std::vector<int64_t> dims = shape(name);
  if (offset.size() != dims.size() || count.size() != dims.size())
    fail(Status::invalid_argument, "block of dataset '", name, "': offset ", dims_text(offset),
         " and count ", dims_text(count), " must have the dataset's ", dims.size(), " dimensions");
  for (size_t i = 0; i < dims.size(); i++)
    if (offset[i] < 0 || count[i] < 0 || offset[i] + count[i] > dims[i])
      fail(Status::invalid_argument, "block at ", dims_text(offset), " of ", dims_text(count),
           " lies outside dataset '", name, "' ", dims_text(dims), " in '", path_, "'");
  if (this->type(name) != type)
    fail(Status::corrupt_data, "dataset '", name, "' in '", path_, "' is ",
         type == H5Type::f32 ? "int64" : "float32", ", not the expected ",
         type == H5Type::f32 ? "float32" : "int64");
  Handle ds{H5Dopen2(id_, name.c_str(), H5P_DEFAULT), H5Dclose};
  Handle fspace{H5Dget_space(ds.id), H5Sclose};
  std::vector<hsize_t> off(offset.begin(), offset.end()), cnt(count.begin(), count.end());
  if (!dims.empty())
    H5Sselect_hyperslab(fspace.id, H5S_SELECT_SET, off.data(), nullptr, cnt.data(), nullptr);
  Handle mspace{dims.empty() ? H5Screate(H5S_SCALAR)
                             : H5Screate_simple((int)cnt.size(), cnt.data(), nullptr),
                H5Sclose};
  herr_t rc = write ? H5Dwrite(ds.id, mem_type(type), mspace.id, fspace.id, H5P_DEFAULT, data)
                    : H5Dread(ds.id, mem_type(type), mspace.id, fspace.id, H5P_DEFAULT, data);
  if (rc < 0)
    fail(Status::io_error, "cannot ", write ? "write" : "read", " the block at ",
         dims_text(offset), " of dataset '", name, "' in '", path_, "'", hdf5_reason());
}

void H5File::write_block(const std::string &name, const std::vector<int64_t> &offset,
                         const std::vector<int64_t> &count, const float *data) {
  block_io(name, offset, count, const_cast<float *>(data), H5Type::f32, true);
}
void H5File::write_block(const std::string &name, const std::vector<int64_t> &offset,
                         const std::vector<int64_t> &count, const int64_t *data) {
  block_io(name, offset, count, const_cast<int64_t *>(data), H5Type::i64, true);
}
void H5File::read_block(const std::string &name, const std::vector<int64_t> &offset,
                        const std::vector<int64_t> &count, float *data) const {
  block_io(name, offset, count, data, H5Type::f32, false);
}
void H5File::read_block(const std::string &name, const std::vector<int64_t> &offset,
                        const std::vector<int64_t> &count, int64_t *data) const {
  block_io(name, offset, count, data, H5Type::i64, false);
}

void H5File::set_attribute(const std::string &key, const std::string &value) {
  const auto lock = lock_hdf5();
  if (H5Aexists(id_, key.c_str()) > 0) H5Adelete(id_, key.c_str());
  Handle t{H5Tcopy(H5T_C_S1), H5Tclose};
  H5Tset_size(t.id, std::max<size_t>(value.size(), 1));
  Handle space{H5Screate(H5S_SCALAR), H5Sclose};
  Handle a{H5Acreate2(id_, key.c_str(), t.id, space.id, H5P_DEFAULT, H5P_DEFAULT), H5Aclose};
  if (a.id < 0 || H5Awrite(a.id, t.id, value.empty() ? "" : value.data()) < 0)
    fail(Status::io_error, "cannot write attribute '", key, "' in '", path_, "'", hdf5_reason());
}

bool H5File::has_attribute(const std::string &key) const {
  const auto lock = lock_hdf5();
  return H5Aexists(id_, key.c_str()) > 0;
}

std::string H5File::attribute(const std::string &key) const {
  const auto lock = lock_hdf5();
  if (!has_attribute(key)) fail(Status::corrupt_data, "'", path_, "' has no attribute '", key, "'");
  Handle a{H5Aopen(id_, key.c_str(), H5P_DEFAULT), H5Aclose};
  Handle t{H5Aget_type(a.id), H5Tclose};
  if (H5Tget_class(t.id) != H5T_STRING)
    fail(Status::corrupt_data, "attribute '", key, "' in '", path_, "' is not a string");
  std::string v(H5Tget_size(t.id), '\0');
  if (H5Aread(a.id, t.id, v.data()) < 0)
    fail(Status::io_error, "cannot read attribute '", key, "' in '", path_, "'", hdf5_reason());
  v.resize(v.find('\0') == std::string::npos ? v.size() : v.find('\0'));
  return v;
}

}  // namespace ptdp
