#include "engine/train/metrics.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <set>

#include <nlohmann/json.hpp>

#include "engine/core/json_text.h"
#include "engine/core/output_file.h"
#include "engine/core/temp_files.h"
#include "engine/core/status.h"
#include "engine/core/utf8.h"
#include "engine/train/config.h"

namespace ptdp {

// printf writes a NaN with its sign bit as "-nan" (a loss of 0/0 has it):
// the log says "nan", as Megatron's does.
static double unsigned_nan(double x) { return std::isnan(x) ? std::fabs(x) : x; }

std::string format_log_line(const StepMetrics &m) {
  char buf[768];
  int n = std::snprintf(
      buf, sizeof buf,
      " iteration %8lld/%8lld | consumed samples: %12lld | elapsed time per iteration (ms): %.1f"
      " | learning rate: %.3E | global batch size: %5lld | lm loss: %.6E | loss scale: %.1f"
      " | grad norm: %.3f | number of skipped iterations: %3lld | number of nan iterations: %3lld"
      " | tokens/s: %.0f | TFLOP/s per rank: %.3f |",
      (long long)m.iteration, (long long)m.train_iters, (long long)m.consumed_samples,
      m.elapsed_ms, m.lr, (long long)m.global_batch_size, unsigned_nan(m.lm_loss),
      unsigned_nan(m.loss_scale), unsigned_nan(m.grad_norm),
      (long long)m.skipped_iters, (long long)m.nan_iters, m.tokens_per_s, m.tflops_per_rank);
  std::string s(buf, n > 0 ? (size_t)n : 0);
  if (m.mfu >= 0) {
    std::snprintf(buf, sizeof buf, " MFU: %.1f%% |", 100.0 * m.mfu);
    s += buf;
  }
  return s;
}

void LogInterval::add(double loss, bool skipped, double seconds) {
  sum_all_ += loss;
  seconds_ += seconds;
  steps_all_++;
  if (skipped) return;
  sum_ += loss;
  steps_++;
}

IntervalMeans LogInterval::mean_at(int64_t iteration, IntervalMeans none) {
  if (iteration == closed_at_) return closed_;
  if (steps_all_ == 0) {
    closed_ = none;
  } else {
    closed_.lm_loss = steps_ ? sum_ / (double)steps_ : sum_all_ / (double)steps_all_;
    closed_.seconds = seconds_ / (double)steps_all_;
  }
  closed_at_ = iteration;
  sum_ = sum_all_ = seconds_ = 0;
  steps_ = steps_all_ = 0;
  return closed_;
}

std::string json_number(double x) { return std::isfinite(x) ? number_text(x) : "null"; }

std::string format_log_json(const StepMetrics &m) {
  auto i = [](int64_t v) { return std::to_string(v); };
  std::string s = "{\"kind\": \"train\", \"iteration\": " + i(m.iteration) +
                  ", \"train_iters\": " + i(m.train_iters) +
                  ", \"consumed_samples\": " + i(m.consumed_samples) +
                  ", \"elapsed_ms\": " + json_number(m.elapsed_ms) +
                  ", \"lr\": " + json_number(m.lr) +
                  ", \"global_batch_size\": " + i(m.global_batch_size) +
                  ", \"lm_loss\": " + json_number(m.lm_loss) +
                  ", \"loss_scale\": " + json_number(m.loss_scale) +
                  ", \"grad_norm\": " + json_number(m.grad_norm) +
                  ", \"skipped_iters\": " + i(m.skipped_iters) +
                  ", \"nan_iters\": " + i(m.nan_iters) +
                  ", \"tokens_per_s\": " + json_number(m.tokens_per_s) +
                  ", \"tflops_per_rank\": " + json_number(m.tflops_per_rank);
  if (m.mfu >= 0) s += ", \"mfu\": " + json_number(m.mfu);
  return s + "}";
}

namespace {

// The offset just past the last '\n' of the file at `path` of `size` bytes (0
// if none): where its whole lines end; `size` when it cannot be read.
off_t end_of_whole_lines(const std::string &path, off_t size) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return size;
  char buf[4096];
  off_t found = -1, end = size;
  while (found < 0 && end > 0) {
    const off_t start = end > (off_t)sizeof buf ? end - (off_t)sizeof buf : 0;
    if (::pread(fd, buf, (size_t)(end - start), start) != end - start) break;
    for (off_t i = end - start - 1; i >= 0 && found < 0; i--)
      if (buf[i] == '\n') found = start + i + 1;
    end = start;
  }
  ::close(fd);
  if (found >= 0) return found;
  return end == 0 ? 0 : size;  // no line end in it; or unreadable, left as it is
}

// The bytes of the file at `path` from `from` to `size` ("" if unreadable).
std::string bytes_after(const std::string &path, off_t from, off_t size) {
  std::string out((size_t)(size - from), '\0');
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return "";
  const bool read = ::pread(fd, out.data(), out.size(), from) == (ssize_t)out.size();
  ::close(fd);
  return read ? out : "";
}

}  // namespace

void append_json_line(const std::string &path, const std::string &line, bool fresh) {
  if (line.find('\n') != std::string::npos || line.find('\r') != std::string::npos)
    fail(Status::invalid_argument, "a JSON-lines record must be one line; got one with a line break (\\n or \\r)");
  // The target first (what it is, whose input), then the record.
  const std::string target = output_target(path, "--log-json", OutputKind::metrics_log);
  // A metrics log is one run's: the first process to write it holds it while
  // it lives (two runs with one --log-json mixed their records under one run
  // record, both exiting 0).
  {
    static std::mutex mu;
    static std::set<std::string> held;  // this process's logs (their locks stay open)
    const std::lock_guard<std::mutex> lock(mu);
    std::error_code ec;
    // (Absolute first: weakly_canonical leaves a new relative name relative.)
    const std::string key =
        std::filesystem::weakly_canonical(std::filesystem::absolute(target, ec), ec).string();
    if (!held.count(key)) {
      hold_output_for_process(target, "--log-json");
      held.insert(key);
    }
  }
  // One JSON object, as every record of the file, and the first one the run
  // record ({"kind": "run", ...}): what makes the file a metrics log (its
  // kind), so that no later append, and no writer, takes it for another file.
  // Bytes that are not UTF-8 (a path's, say) do not make it another kind, but
  // JSON is UTF-8: they are written as U+FFFD, so every reader of the file
  // (`ptdp plot`, json.loads) still reads every record.
  const std::string record = valid_utf8(line);
  const nlohmann::json j = parse_json_or_discard(record);
  const auto quoted = [&line] { return line.size() > 80 ? line.substr(0, 80) + "..." : line; };
  if (!j.is_object())
    fail(Status::invalid_argument, "a JSON-lines record must be one JSON object ({...}); got '",
         quoted(), "'");
  struct stat there;
  const bool first = fresh || ::stat(target.c_str(), &there) != 0 || there.st_size == 0;
  if (first && j.value("kind", "") != "run")
    fail(Status::invalid_argument, "a metrics log begins with its run record ({\"kind\": \"run\", ...}); "
         "got '", quoted(), "'");
  if (fresh) {
    replace_file(target, record + "\n");
    return;
  }
  int fd = ::open(target.c_str(), O_WRONLY | O_APPEND | O_CREAT, 0644);
  if (fd < 0) fail(Status::io_error, "cannot open '", path, "' to append: ", std::strerror(errno));
  // One write per record: a reader (or a crash) never sees half a line but the
  // last; a write that fails part-way (a full disk) is cut back off, so the
  // file keeps whole records only.
  struct stat st;
  off_t before = ::fstat(fd, &st) == 0 ? st.st_size : -1;
  // A writer killed inside its record left half a line: the next record
  // joined it, and readers lost both. Cut back to the last whole record, and
  // said (a file whose first line is not whole is left as it is); a last
  // record whole but for its line end gets one.
  std::string rec = record + "\n";
  if (before > 0) {
    const off_t whole = end_of_whole_lines(target, before);
    if (whole > 0 && whole != before && parse_json_or_discard(bytes_after(target, whole, before)).is_object()) {
      rec = "\n" + rec;
    } else if (whole > 0 && whole != before && ::ftruncate(fd, whole) == 0) {
      say("note: --log-json '", path, "' ended inside a record (a writer killed while it wrote): its ",
          (long long)(before - whole), " bytes after the last whole line are cut off");
      before = whole;
    }
  }
  size_t done = 0;
  while (done < rec.size()) {
    ssize_t n = ::write(fd, rec.data() + done, rec.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int e = errno;
      if (before >= 0 && ::ftruncate(fd, before) != 0) {
        // the partial record stays; the write's own error is the one to report
      }
      ::close(fd);
      fail(Status::io_error, "cannot append to '", path, "': ", std::strerror(e));
    }
    done += (size_t)n;
  }
  ::close(fd);
}

}  // namespace ptdp
