#include "checkpoints/sharded_checkpoint.h"

#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <cstdint>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <cstdio>
#include <cerrno>
#include <cstring>
#include <optional>
#include <nlohmann/json.hpp>

#include "checkpoints/commit.h"
#include "checkpoints/crc32c.h"
#include "checkpoints/hdf5_file.h"
#include "checkpoints/io_world.h"
#include "checkpoints/save_target.h"
#include "engine/core/json_text.h"
#include "engine/core/status.h"
#include "engine/core/text.h"

namespace ptdp {

namespace {

const char *kFile = kCheckpointDataFile;

// The three tensors stored per parameter, and the shard buffer each lives in.
struct Section {
  const char *prefix;
  float *RankShard::*buffer;
};
// In file order; the master section only in 16-bit runs' checkpoints.
const char *kMasterPrefix = "/optim/master/";
const Section kSections[] = {{"/model/", &RankShard::params},
                             {"/optim/exp_avg/", &RankShard::exp_avg},
                             {"/optim/exp_avg_sq/", &RankShard::exp_avg_sq},
                             {kMasterPrefix, &RankShard::master}};
bool is_master(const Section &sec) { return sec.buffer == &RankShard::master; }
bool has_master(const Manifest &m) { return m.find(std::string(kMasterPrefix) + "wte.weight"); }


struct StateField {
  const char *name;
  int64_t TrainingState::*value;
};
const StateField kState[] = {{"iteration", &TrainingState::iteration},
                             {"consumed_samples", &TrainingState::consumed_samples},
                             {"skipped_iterations", &TrainingState::skipped_iterations},
                             {"nan_iterations", &TrainingState::nan_iterations}};

// The loss scaler's state, saved by fp16 runs.
const char *kLossScale = "/state/loss_scale";
const StateField kScalerState[] = {
    {"loss_scale_growth_tracker", &TrainingState::loss_scale_growth_tracker},
    {"loss_scale_hysteresis_tracker", &TrainingState::loss_scale_hysteresis_tracker}};

// A rectangle of a dataset in global coordinates; a 1-D tensor is [n, 1].
// `ld` is the length of a row of the rank's local shard in memory.
struct Region {
  int64_t row0 = 0, rows = 0, col0 = 0, cols = 1, ld = 1;
};

bool is_wte(const ParamInfo &p) { return p.vocab_rows; }  // wte or an untied lm_head

// The dataset's shape: the global one, with the vocabulary unpadded.
std::vector<int64_t> dataset_shape(const ParamInfo &p, int vocab) {
  std::vector<int64_t> s = p.global_shape;
  if (is_wte(p)) s[0] = vocab;
  return s;
}

// What tensor rank `tp` holds of p: its split of the global tensor, without
// the vocabulary padding rows.
Region held_region(const ParamInfo &p, int tp, int vocab) {
  Region r;
  r.rows = p.shape[0];
  r.cols = r.ld = p.shape.size() > 1 ? p.shape[1] : 1;
  if (p.split_axis == 0) r.row0 = tp * r.rows;
  if (p.split_axis == 1) r.col0 = tp * r.cols;
  if (is_wte(p)) r.rows = std::max<int64_t>(0, std::min<int64_t>(r.rows, vocab - r.row0));
  return r;
}

std::vector<int64_t> dims(const ParamInfo &p, int64_t row, int64_t col) {
  return p.shape.size() > 1 ? std::vector<int64_t>{row, col} : std::vector<int64_t>{row};
}

Region block_region(const ManifestBlock &b) {
  Region r;
  r.row0 = b.offset.empty() ? 0 : b.offset[0];
  r.rows = b.count.empty() ? 1 : b.count[0];
  r.col0 = b.offset.size() > 1 ? b.offset[1] : 0;
  r.cols = r.ld = b.count.size() > 1 ? b.count[1] : 1;
  return r;
}

struct WriteBlock {
  std::string dataset;
  std::vector<int64_t> offset, count;
  const float *data;  // count's elements, row-major
};

// The blocks this process writes: per parameter the tensor ranks' shards (a
// replicated tensor only from tensor rank 0, the tied embedding only from the
// first stage), the rows of each shard split over the d data-parallel replicas.
std::vector<WriteBlock> blocks_to_write(const std::vector<RankShard> &local, int d, int vocab) {
  std::vector<WriteBlock> out;
  for (const RankShard &s : local) {
    for (const ParamInfo &p : *s.table) {
      if (p.tied_copy || (p.split_axis < 0 && s.coord.tp != 0)) continue;
      const Region r = held_region(p, s.coord.tp, vocab);
      const int64_t a = r.rows * s.coord.dp / d, b = r.rows * (s.coord.dp + 1) / d;
      if (b <= a) continue;
      for (const Section &sec : kSections)
        if (s.*sec.buffer)
          out.push_back({sec.prefix + p.name, dims(p, r.row0 + a, r.col0), dims(p, b - a, r.cols),
                         s.*sec.buffer + p.offset + a * r.ld});
    }
  }
  return out;
}

int64_t file_size(const std::string &path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 ? (int64_t)st.st_size : -1;
}

}  // namespace

std::string data_file_fault(const std::string &file, int64_t bytes, bool *readable) {
  if (readable) *readable = false;
  struct stat st;
  if (::lstat(file.c_str(), &st) != 0) return "'" + file + "' is missing (the manifest names it)";
  if (S_ISLNK(st.st_mode))
    return "'" + file + "' is a symbolic link: a checkpoint's data file is a regular file in its "
           "own directory (a save makes no links; copy the file in place of the link)";
  if (!S_ISREG(st.st_mode))
    return "'" + file + "' is not a regular file (" +
           (S_ISDIR(st.st_mode) ? "a directory" : S_ISFIFO(st.st_mode) ? "a FIFO" : "a device or socket") +
           "): a checkpoint's data file is one";
  if (readable) *readable = true;
  if ((int64_t)st.st_size != bytes)
    return "'" + file + "' is " + std::to_string(st.st_size) + " bytes but the manifest says " +
           std::to_string(bytes) + ": the file was truncated or replaced";
  return "";
}

namespace {

// Runs fn, returning its error message ("" when it succeeded).
template <class F>
std::string attempt(F &&fn) {
  try {
    fn();
  } catch (const std::exception &e) {
    return e.what();
  }
  return "";
}

// A failure of this process's resources (too many open files, no memory) is
// no fault of the checkpoint being read (an export called an intact
// checkpoint damaged under ulimit -n).
bool resource_failure(const std::exception &e) {
  if (dynamic_cast<const std::bad_alloc *>(&e)) return true;
  if (const auto *err = dynamic_cast<const Error *>(&e); err && err->code() == Status::out_of_memory) return true;
  const std::string what = e.what();
  for (int code : {EMFILE, ENFILE, ENOMEM})
    if (what.find(std::strerror(code)) != std::string::npos) return true;
  return false;
}

// attempt() for a reader listing a checkpoint's faults: a resource failure is
// rethrown, not listed. (Not for the collective save and open paths: every
// rank must reach their agreement, io.first_error, whatever failed.)
template <class F>
std::string attempt_reading(F &&fn) {
  try {
    fn();
  } catch (const std::exception &e) {
    if (resource_failure(e)) throw;
    return e.what();
  }
  return "";
}

}  // namespace

std::string save_checkpoint(const SaveRequest &req, const std::vector<RankShard> &local) {
  const IoWorld io = IoWorld::current();
  const int64_t it = req.state.iteration;
  const int vocab = req.model.vocab_size;
  std::string dir;
  std::string err = io.rank() == 0 ? attempt([&] { dir = begin_checkpoint(req.root, it, req.owner); }) : "";
  err = io.first_error(err);
  if (!err.empty()) fail(Status::io_error, "checkpoint not saved: ", err);
  dir = io.broadcast(dir);
  const std::string file = dir + "/" + kFile;
  const std::vector<ParamInfo> all = gpt_param_table(req.model, 1, {});
  // Every process's shards are of one precision: all have a master or none.
  const bool with_master = !local.empty() && local[0].master;
  auto saved = [&](const Section &sec) { return !is_master(sec) || with_master; };

  // Datasets and attributes are made by every process together (collective
  // under MPI-IO); each then writes its own blocks independently.
  nlohmann::json mine = nlohmann::json::array();
  err = attempt([&] {
    H5File f = H5File::create(file, io.parallel());
    for (const Section &sec : kSections)
      for (const ParamInfo &p : all)
        if (saved(sec)) f.create_dataset(sec.prefix + p.name, H5Type::f32, dataset_shape(p, vocab));
    for (const StateField &s : kState) f.create_dataset(std::string("/state/") + s.name, H5Type::i64, {1});
    if (req.state.has_loss_scale) {
      f.create_dataset(kLossScale, H5Type::f32, {1});
      for (const StateField &s : kScalerState)
        f.create_dataset(std::string("/state/") + s.name, H5Type::i64, {1});
    }
    f.set_attribute("format", "ptdp-checkpoint 1 (datasets have global shapes; see manifest.json)");
    f.set_attribute("iteration", std::to_string(it));
    f.set_attribute("layout", req.layout.text());
    std::string write_err = attempt([&] {
      const std::vector<WriteBlock> blocks = blocks_to_write(local, req.layout.d, vocab);
      // Checksums on every core first (HDF5 calls stay on this thread).
      std::vector<uint32_t> crc(blocks.size());
#pragma omp parallel for schedule(dynamic)
      for (size_t i = 0; i < blocks.size(); i++) {
        int64_t n = 1;
        for (int64_t c : blocks[i].count) n *= c;
        crc[i] = crc32c(0, blocks[i].data, (size_t)n * sizeof(float));
      }
      for (size_t i = 0; i < blocks.size(); i++) {
        const WriteBlock &b = blocks[i];
        f.write_block(b.dataset, b.offset, b.count, b.data);
        mine.push_back({b.dataset, b.offset, b.count, crc[i]});
      }
      if (io.rank() == 0) {
        auto write_state = [&](const StateField &s) {
          const int64_t v = req.state.*s.value;
          const std::string name = std::string("/state/") + s.name;
          f.write_block(name, {0}, {1}, &v);
          mine.push_back({name, {0}, {1}, crc32c(0, &v, sizeof v)});
        };
        for (const StateField &s : kState) write_state(s);
        if (req.state.has_loss_scale) {
          for (const StateField &s : kScalerState) write_state(s);
          const float v = req.state.loss_scale;
          f.write_block(kLossScale, {0}, {1}, &v);
          mine.push_back({kLossScale, {0}, {1}, crc32c(0, &v, sizeof v)});
        }
      }
    });
    f.close();  // collective: every process gets here even after a failed write
    if (!write_err.empty()) fail(Status::io_error, write_err);
  });
  err = io.first_error(err);
  const std::vector<std::string> gathered = io.all_gather(err.empty() ? json_file_text(mine) : "[]");

  // Process 0 writes the manifest and commits; the others wait for its word.
  if (io.rank() == 0 && err.empty()) {
    err = attempt([&] {
      Manifest m;
      m.iteration = it;
      m.file = kFile;
      m.file_bytes = file_size(file);
      m.model = req.model;
      m.layout = req.layout;
      m.training = req.training;
      std::map<std::string, ManifestDataset> ds;
      for (const Section &sec : kSections)
        for (const ParamInfo &p : all)
          if (saved(sec))
            ds[sec.prefix + p.name] = {sec.prefix + p.name, "float32", dataset_shape(p, vocab), {}};
      for (const StateField &s : kState)
        ds[std::string("/state/") + s.name] = {std::string("/state/") + s.name, "int64", {1}, {}};
      if (req.state.has_loss_scale) {
        for (const StateField &s : kScalerState)
          ds[std::string("/state/") + s.name] = {std::string("/state/") + s.name, "int64", {1}, {}};
        ds[kLossScale] = {kLossScale, "float32", {1}, {}};
      }
      for (const std::string &g : gathered)
        for (const auto &b : nlohmann::json::parse(g))
          ds.at(b[0].get<std::string>())
              .blocks.push_back({b[1].get<std::vector<int64_t>>(), b[2].get<std::vector<int64_t>>(),
                                 b[3].get<uint32_t>()});
      for (auto &[name, d] : ds) {
        std::sort(d.blocks.begin(), d.blocks.end(),
                  [](const ManifestBlock &a, const ManifestBlock &b) { return a.offset < b.offset; });
        m.datasets.push_back(std::move(d));
      }
      commit_checkpoint(req.root, it, m.to_json());
    });
    // The new checkpoint is committed whatever happens to the old ones. Every
    // save clears the leftovers of killed saves; rotation when asked for.
    const std::string prune_err =
        req.keep_last >= 0 && err.empty()
            ? attempt([&] { prune_checkpoints(req.root, req.keep_last, [&](const std::string &dir) {
                return not_this_runs_checkpoint(dir, req.model, req.training);
              }, it); })
            : "";
    if (!prune_err.empty())
      say("saved ", req.root, "/", checkpoint_name(it), " but could not remove older checkpoints or killed "
          "saves' leftovers: ", prune_err);
  }
  err = io.first_error(err);
  if (!err.empty()) {
    if (io.rank() == 0) abandon_checkpoint(req.root, it);
    // ("The previous one is kept" only where there is one; a root that cannot
    // be listed now leaves that unsaid, not the save's own error.)
    std::string previous;
    try {
      previous = complete_checkpoints(req.root).empty() ? " (there is no earlier one)" : " (the previous one is kept)";
    } catch (const Error &) {
    }
    fail(Status::io_error, "checkpoint of iteration ", it, " not saved", previous, ": ", err);
  }
  return req.root + "/" + checkpoint_name(it);
}

namespace {

// Where a loaded tensor goes: a rank's region of a dataset and its memory.
struct Target {
  Region region;
  float *mem;
  int64_t copied = 0;
};

// Fails naming the file, dataset and block when `crc` is not the manifest's.
void check_crc(const std::string &file, const std::string &name, const ManifestBlock &b,
               uint32_t crc) {
  if (crc != b.crc32c) {
    char msg[64];
    std::snprintf(msg, sizeof msg, "%08x, the manifest says %08x", crc, b.crc32c);
    fail(Status::corrupt_data, "'", file, "' dataset '", name, "' block at ",
         dims_text(b.offset), " of ", dims_text(b.count), ": checksum ", msg,
         " (the file is damaged; load with verification off only to salvage it)");
  }
}

void check_block_crc(const H5File &f, const std::string &name, const ManifestBlock &b,
                     const void *data, size_t bytes) {
  check_crc(f.path(), name, b, crc32c(0, data, bytes));
}

// Copies the overlap of `src` (a rectangle of a dataset, row-major in `data`)
// into a target region.
void copy_overlap(const Region &src, const float *data, Target &t) {
  const Region &r = t.region;
  const int64_t r0 = std::max(r.row0, src.row0), r1 = std::min(r.row0 + r.rows, src.row0 + src.rows);
  const int64_t c0 = std::max(r.col0, src.col0), c1 = std::min(r.col0 + r.cols, src.col0 + src.cols);
  if (r1 <= r0 || c1 <= c0) return;
  for (int64_t i = r0; i < r1; i++)
    std::memcpy(t.mem + (i - r.row0) * r.ld + (c0 - r.col0),
                data + (i - src.row0) * src.ld + (c0 - src.col0), (size_t)(c1 - c0) * sizeof(float));
  t.copied += (r1 - r0) * (c1 - c0);
}

bool overlaps(const Region &a, const Region &b) {
  return std::max(a.row0, b.row0) < std::min(a.row0 + a.rows, b.row0 + b.rows) &&
         std::max(a.col0, b.col0) < std::min(a.col0 + a.cols, b.col0 + b.cols);
}

// A rectangle of one dataset read by the I/O thread (whole rows of a block,
// or whole rows of the dataset), to verify and scatter.
struct Piece {
  const std::string *name;
  const std::vector<const ManifestBlock *> *blocks;  // the dataset's blocks being read
  std::vector<Target> *targets;
  Region rows;              // where it lies in the dataset; row-major, rows.cols wide
  std::vector<float> *buf;  // the pool buffer it was read into, or null when read
  Target *direct;           // straight into this target's memory
  const float *data;        // the piece's values
};

// Verifies checksums and copies pieces into the shards on a worker thread, in
// order, while the I/O thread reads the next pieces (HDF5 calls stay on the
// I/O thread): loading then takes about as long as reading alone.
class Scatter {
 public:
  Scatter(std::string file, bool verify) : file_(std::move(file)), verify_(verify) {
    for (auto &b : pool_) free_.push_back(&b);
    worker_ = std::thread([this] { run(); });
  }
  ~Scatter() { finish(); }
  // A free buffer (waits for one); null once the worker has failed.
  std::vector<float> *buffer() {
    std::unique_lock<std::mutex> lk(mu_);
    cv_.wait(lk, [&] { return !free_.empty() || !error_.empty(); });
    if (!error_.empty()) return nullptr;
    std::vector<float> *b = free_.back();
    free_.pop_back();
    return b;
  }
  void push(const Piece &p) {
    std::lock_guard<std::mutex> lk(mu_);
    queue_.push_back(p);
    cv_.notify_all();
  }
  // Waits until every piece pushed is done; returns the worker's first error.
  std::string finish() {
    {
      std::lock_guard<std::mutex> lk(mu_);
      done_ = true;
    }
    cv_.notify_all();
    if (worker_.joinable()) worker_.join();
    return error_;
  }

 private:
  void run() {
    for (;;) {
      Piece p;
      {
        std::unique_lock<std::mutex> lk(mu_);
        cv_.wait(lk, [&] { return !queue_.empty() || done_; });
        if (queue_.empty()) return;
        p = queue_.front();
        queue_.pop_front();
      }
      std::string err;
      if (error_.empty()) {
        try {
          process(p);
        } catch (const std::exception &e) {
          err = e.what();
        }
      }
      std::lock_guard<std::mutex> lk(mu_);
      if (error_.empty()) error_ = err;
      if (p.buf) free_.push_back(p.buf);
      cv_.notify_all();
    }
  }
  void process(const Piece &p) {
    const Region &pr = p.rows;
    if (verify_) {
      // Each block's checksum runs over its rows in order; pieces come in row order.
      for (const ManifestBlock *b : *p.blocks) {
        const Region br = block_region(*b);
        const int64_t r0 = std::max(br.row0, pr.row0), r1 = std::min(br.row0 + br.rows, pr.row0 + pr.rows);
        if (r1 <= r0) continue;
        uint32_t &crc = crc_[b];
        if (r0 == br.row0) crc = 0;
        for (int64_t i = r0; i < r1; i++)
          crc = crc32c(crc, p.data + (i - pr.row0) * pr.cols + (br.col0 - pr.col0),
                       (size_t)br.cols * sizeof(float));
        if (r1 == br.row0 + br.rows) check_crc(file_, *p.name, *b, crc);
      }
    }
    for (Target &t : *p.targets) {
      if (&t == p.direct)
        t.copied += pr.rows * pr.cols;
      else
        copy_overlap(pr, p.data, t);  // other replicas, other layouts
    }
  }

  const std::string file_;
  const bool verify_;
  std::map<const ManifestBlock *, uint32_t> crc_;  // running checksums of blocks being read
  std::vector<float> pool_[3];
  std::vector<std::vector<float> *> free_;
  std::deque<Piece> queue_;
  bool done_ = false;
  std::string error_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::thread worker_;
};

constexpr int64_t kPieceBytes = 8 << 20;

std::string resolve_checkpoint(const std::string &path, std::string *why) {
  if (file_size(path + "/manifest.json") >= 0) {
    *why = "the checkpoint directory given";
    return path;
  }
  const std::string trimmed = without_trailing_slashes(path);  // ("iter_N/" is iter_N)
  const std::string base = trimmed.substr(trimmed.find_last_of('/') + 1);
  std::error_code ec;
  // (One that is not there, or a link to nothing, is said so: it was called
  // an unfinished save.)
  const std::filesystem::file_status link = std::filesystem::symlink_status(trimmed, ec);
  if (base.rfind("iter_", 0) == 0 && !std::filesystem::exists(std::filesystem::status(trimmed, ec))) {
    const bool missing = !ec || ec == std::errc::no_such_file_or_directory;
    const std::string why = std::filesystem::is_symlink(link) ? "is a symbolic link to nothing"
                            : missing ? std::string("does not exist (") + std::strerror(ENOENT) + ")"
                                      : "cannot be looked at (" + ec.message() + ")";
    fail(Status::io_error, "'", path, "' ", why, "; give a checkpoint directory, or the --save directory ",
         "of a run to load its newest complete one");
  }
  if (base.rfind("iter_", 0) == 0)
    fail(Status::io_error, "'", path, "' is not a complete checkpoint: it has no manifest.json "
         "(an unfinished or damaged save); give its parent directory to load the newest complete one");
  return find_latest_checkpoint(path, why);
}

}  // namespace

CheckpointRef open_checkpoint(const std::string &path) {
  const IoWorld io = IoWorld::current();
  CheckpointRef ref;
  std::string err = io.rank() == 0 ? attempt([&] { ref.dir = resolve_checkpoint(path, &ref.why); }) : "";
  err = io.first_error(err);
  if (!err.empty()) fail(Status::io_error, "no checkpoint to open: ", err);
  ref.dir = io.broadcast(ref.dir);
  ref.why = io.broadcast(ref.why);
  ref.manifest = Manifest::read(ref.dir);
  // Its files and its save directory's tracker (consulted or not: it names
  // this checkpoint's run, and no output of the command replaces it).
  ref.read_files = {ref.dir + "/manifest.json", ref.dir + "/" + ref.manifest.file,
                    tracker_path(std::filesystem::path(ref.dir).parent_path().string())};
  if (ref.dir != path) ref.read_files.push_back(tracker_path(path));  // the tracker consulted
  return ref;
}

void check_same_model(const CheckpointRef &ckpt, const GptConfig &model) {
  const std::string mismatch = model_shape_mismatch(ckpt.manifest.model, model);
  if (!mismatch.empty())
    fail(Status::invalid_config, "checkpoint '", ckpt.dir, "' holds a different model (", mismatch,
         "); give the checkpoint's model options to load it");
}

TrainingState load_checkpoint(const CheckpointRef &ckpt, const GptConfig &model,
                              const std::vector<RankShard> &local, bool verify, bool *filling) {
  const Manifest &m = ckpt.manifest;
  check_same_model(ckpt, model);
  const std::string file = ckpt.dir + "/" + m.file;
  H5File f = open_checkpoint_data(ckpt);
  if (filling) *filling = true;
  const int vocab = model.vocab_size;

  // Every dataset this process needs, with the ranks' regions in it. The
  // weights come from the master section when the file has one, and go to
  // the shard's master when it has one (see the header).
  const char *weights_from = has_master(m) ? kMasterPrefix : "/model/";
  std::map<std::string, std::vector<Target>> wanted;
  for (const RankShard &s : local)
    for (const ParamInfo &p : *s.table) {
      const Region r = held_region(p, s.coord.tp, vocab);
      for (const Section &sec : kSections) {
        std::string from = sec.prefix;
        float *into = s.*sec.buffer;
        if (sec.buffer == &RankShard::params) {
          from = weights_from;
          if (s.master) into = s.master;
        } else if (is_master(sec)) {
          continue;  // filled as the weights, above
        } else if (!into) {
          continue;  // no optimizer state wanted (fine-tuning)
        }
        float *mem = into + p.offset;
        std::fill(mem + r.rows * r.ld, mem + p.numel, 0.f);  // vocabulary padding rows
        wanted[from + p.name].push_back({r, mem});
      }
    }
  std::map<std::string, std::vector<const ManifestBlock *>> needed;  // outlives the worker
  {
    Scatter scatter(file, verify);
    // In the order the save created the datasets, which is their order in the
    // file: the reads then go front to back and the OS reads ahead.
    std::vector<std::string> order;
    for (const Section &sec : kSections)
      for (const ParamInfo &p : gpt_param_table(model, 1, {})) order.push_back(sec.prefix + p.name);
    for (const std::string &name : order) {
      if (!wanted.count(name)) continue;
      std::vector<Target> &targets = wanted.at(name);
      const ManifestDataset *md = m.find(name);
      if (!md)
        fail(Status::corrupt_data, "the manifest of '", ckpt.dir, "' has no dataset '", name, "'");
      const std::vector<int64_t> in_file = f.shape(name);
      if (in_file != md->shape)
        fail(Status::corrupt_data, "'", file, "' dataset '", name, "' is ", dims_text(in_file),
             " but the manifest says ", dims_text(md->shape));
      // The blocks this process needs. When together they span whole rows of
      // the dataset (all of a layer's tensor shards are here), the rows are
      // read whole: one extent each, no gaps read; else block by block.
      std::vector<const ManifestBlock *> &blocks = needed[name];
      std::vector<std::pair<int64_t, int64_t>> cols;
      int64_t row_begin = INT64_MAX, row_end = 0;
      for (const ManifestBlock &b : md->blocks) {
        const Region br = block_region(b);
        if (std::none_of(targets.begin(), targets.end(),
                         [&](const Target &t) { return overlaps(t.region, br); }))
          continue;  // another process's part
        blocks.push_back(&b);
        cols.push_back({br.col0, br.col0 + br.cols});
        row_begin = std::min(row_begin, br.row0);
        row_end = std::max(row_end, br.row0 + br.rows);
      }
      if (blocks.empty()) continue;
      const int64_t width = md->shape.size() > 1 ? md->shape[1] : 1;
      std::sort(cols.begin(), cols.end());
      int64_t covered = 0;
      for (auto &c : cols)
        if (c.first <= covered) covered = std::max(covered, c.second);
      std::vector<Region> reads;
      if (covered >= width) {
        Region whole;
        whole.row0 = row_begin;
        whole.rows = row_end - row_begin;
        whole.cols = whole.ld = width;
        reads.push_back(whole);
      } else {
        for (const ManifestBlock *b : blocks) reads.push_back(block_region(*b));
      }
      for (const Region &rd : reads) {
        // In pieces of whole rows, so the worker starts while the rest is read.
        const int64_t rows_per = std::max<int64_t>(1, kPieceBytes / (rd.cols * (int64_t)sizeof(float)));
        for (int64_t r = 0; r < rd.rows; r += rows_per) {
          Region piece = rd;
          piece.row0 += r;
          piece.rows = std::min(rows_per, rd.rows - r);
          // Read straight into a shard when the piece is a run of whole rows
          // of its region (the same split as saved); else into a pool buffer.
          Target *direct = nullptr;
          for (Target &t : targets) {
            const Region &g = t.region;
            if (g.col0 == piece.col0 && g.cols == piece.cols && g.ld == piece.cols &&
                g.row0 <= piece.row0 && piece.row0 + piece.rows <= g.row0 + g.rows) {
              direct = &t;
              break;
            }
          }
          std::vector<float> *buf = nullptr;
          float *into = nullptr;
          if (direct) {
            into = direct->mem + (piece.row0 - direct->region.row0) * direct->region.ld;
          } else {
            buf = scatter.buffer();
            if (!buf) break;  // the worker failed: finish() reports it
            buf->resize((size_t)(piece.rows * piece.cols));
            into = buf->data();
          }
          const bool two_d = md->shape.size() > 1;
          f.read_block(name, two_d ? std::vector<int64_t>{piece.row0, piece.col0} : std::vector<int64_t>{piece.row0},
                       two_d ? std::vector<int64_t>{piece.rows, piece.cols} : std::vector<int64_t>{piece.rows},
                       into);
          scatter.push({&name, &blocks, &targets, piece, buf, direct, into});
        }
      }
    }
    const std::string err = scatter.finish();
    if (!err.empty()) fail(Status::corrupt_data, err);
  }
  for (auto &[name, targets] : wanted)
    for (const Target &t : targets)
      if (t.copied != t.region.rows * t.region.cols)
        fail(Status::corrupt_data, "the blocks of '", name, "' in '", ckpt.dir,
             "' do not cover the part this layout needs");
  TrainingState state;
  for (const StateField &s : kState) {
    const std::string name = std::string("/state/") + s.name;
    const ManifestDataset *md = m.find(name);
    if (!md || md->blocks.size() != 1)
      fail(Status::corrupt_data, "the manifest of '", ckpt.dir, "' has no block of '", name, "'");
    int64_t v = 0;
    f.read_block(name, {0}, {1}, &v);
    if (verify) check_block_crc(f, name, md->blocks[0], &v, sizeof v);
    state.*s.value = v;
  }
  if (state.iteration != m.iteration)
    fail(Status::corrupt_data, "checkpoint '", ckpt.dir, "' stores iteration ", state.iteration,
         " but its manifest says ", m.iteration, ": the file belongs to another save");
  if (m.find(kLossScale)) {
    state.has_loss_scale = true;
    for (const StateField &s : kScalerState) {
      const std::string name = std::string("/state/") + s.name;
      const ManifestDataset *md = m.find(name);
      if (!md || md->blocks.size() != 1)
        fail(Status::corrupt_data, "the manifest of '", ckpt.dir, "' has no block of '", name, "'");
      f.read_block(name, {0}, {1}, &(state.*s.value));
      if (verify) check_block_crc(f, name, md->blocks[0], &(state.*s.value), sizeof(int64_t));
    }
    const ManifestDataset *md = m.find(kLossScale);
    if (md->blocks.size() != 1)
      fail(Status::corrupt_data, "the manifest of '", ckpt.dir, "' has no block of '", kLossScale, "'");
    f.read_block(kLossScale, {0}, {1}, &state.loss_scale);
    if (verify) check_block_crc(f, kLossScale, md->blocks[0], &state.loss_scale, sizeof(float));
  }
  return state;
}

H5File open_checkpoint_data(const CheckpointRef &ckpt) {
  const std::string file = ckpt.dir + "/" + ckpt.manifest.file;
  try {
    if (const std::string fault = data_file_fault(file, ckpt.manifest.file_bytes); !fault.empty())
      fail(Status::corrupt_data, fault);
    return H5File::open_read(file);
  } catch (const Error &) {
    refuse_if_removed_while_read(ckpt.dir);
    throw;
  }
}

GptConfig checkpoint_model(const std::string &path) {
  const CheckpointRef ckpt = open_checkpoint(path);
  open_checkpoint_data(ckpt);
  return ckpt.manifest.model;
}

void refuse_if_removed_while_read(const std::string &dir) {
  struct stat st;  // (rotation renames a checkpoint to iter_N.old before removing its files)
  if (::lstat(dir.c_str(), &st) == 0 || errno != ENOENT) return;
  fail(Status::io_error, "checkpoint '", dir, "' was removed while it was read (a run saving into its ",
       "directory rotates its checkpoints: --keep-last-checkpoints): read the directory again (its ",
       "newest checkpoint is then another), or a checkpoint no rotation removes");
}

namespace {
std::vector<std::string> faults_of(const std::string &dir) {
  std::vector<std::string> faults;
  Manifest m;
  std::string err = attempt_reading([&] { m = Manifest::read(dir); });
  if (!err.empty()) return {err};
  const std::string file = dir + "/" + m.file;
  // Every dataset the manifest's own model needs, at the shape it gives it.
  for (const Section &sec : kSections)
    for (const ParamInfo &p : gpt_param_table(m.model, 1, {})) {
      if (is_master(sec) && !has_master(m)) break;  // an fp32 run's checkpoint
      const std::string name = sec.prefix + p.name;
      const ManifestDataset *md = m.find(name);
      const std::vector<int64_t> want = dataset_shape(p, m.model.vocab_size);
      if (!md)
        faults.push_back("the manifest has no dataset '" + name + "'");
      else if (md->shape != want)
        faults.push_back("the manifest says '" + md->name + "' is " + dims_text(md->shape) +
                         " but its model makes it " + dims_text(want));
    }
  bool readable = false;
  if (const std::string fault = data_file_fault(file, m.file_bytes, &readable); !fault.empty()) {
    faults.push_back(fault);
    if (!readable) return faults;
  }
  std::optional<H5File> opened;
  err = attempt_reading([&] { opened.emplace(H5File::open_read(file)); });
  if (!err.empty()) {
    faults.push_back(err);
    return faults;
  }
  const H5File &f = *opened;
  std::vector<float> fbuf;
  std::vector<int64_t> ibuf;
  for (const ManifestDataset &d : m.datasets) {
    err = attempt_reading([&] {
      if (f.shape(d.name) != d.shape)
        fail(Status::corrupt_data, "dataset '", d.name, "' is ", dims_text(f.shape(d.name)),
             " but the manifest says ", dims_text(d.shape));
      for (const ManifestBlock &b : d.blocks) {
        std::string block_err = attempt_reading([&] {
          if (d.dtype == "int64") {
            ibuf.resize((size_t)b.numel());
            f.read_block(d.name, b.offset, b.count, ibuf.data());
            check_block_crc(f, d.name, b, ibuf.data(), ibuf.size() * sizeof(int64_t));
          } else {
            fbuf.resize((size_t)b.numel());
            f.read_block(d.name, b.offset, b.count, fbuf.data());
            check_block_crc(f, d.name, b, fbuf.data(), fbuf.size() * sizeof(float));
          }
        });
        if (!block_err.empty()) faults.push_back(block_err);
      }
    });
    if (!err.empty()) faults.push_back(err);
  }
  for (const std::string &name : f.datasets())
    if (!m.find(name)) faults.push_back("dataset '" + name + "' in '" + file + "' is not in the manifest");
  return faults;
}
}  // namespace

std::vector<std::string> checkpoint_faults(const std::string &dir) {
  std::vector<std::string> faults = faults_of(dir);
  // Faults of a checkpoint that is gone are its removal's, not damage.
  if (!faults.empty()) refuse_if_removed_while_read(dir);
  return faults;
}

}  // namespace ptdp
