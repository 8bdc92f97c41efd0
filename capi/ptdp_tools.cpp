// The tools' C ABI (capi/ptdp_tools.h): tokenizers, drawings, benchmarks and
// the planner, with the same boundary rules as the engine's (capi/boundary.h).
#include "capi/ptdp_tools.h"

#include <sys/stat.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "capi/boundary.h"
#include "checkpoints/disk_bandwidth.h"
#include "engine/core/mapped_file.h"
#include "engine/core/output_file.h"
#include "engine/core/temp_files.h"
#include "engine/core/status.h"
#include "engine/core/text.h"
#include "engine/data/corpus.h"
#include "engine/data/indexed_tokenize.h"
#include "engine/plan/plan.h"
#include "engine/trace/timeline_png.h"
#include "engine/train/metrics_plot.h"
#include "kernels/kernels.h"

using ptdp::capi::check_buffer;
using ptdp::capi::copy_out;
using ptdp::capi::copy_report;
using ptdp::capi::guard;
using ptdp::capi::require;
using ptdp::capi::require_switch;
using ptdp::capi::strings;

extern "C" {

ptdp_status ptdp_tokenize(const char *const *inputs, int32_t num_inputs, const char *format,
                          const char *tokenizer, const char *output_path, int64_t *num_docs,
                          int64_t *num_tokens) {
  return guard([&] {
    require(format, "format");
    require(tokenizer, "tokenizer");
    require(output_path, "output_path");
    const std::vector<std::string> in = strings(inputs, num_inputs, "inputs", true);
    auto tok = ptdp::make_tokenizer(tokenizer);
    ptdp::CorpusStats st = ptdp::build_token_dataset(in, format, *tok, output_path);
    if (num_docs) *num_docs = (int64_t)st.num_docs;
    if (num_tokens) *num_tokens = (int64_t)st.num_tokens;
  });
}

ptdp_status ptdp_tokenize_options(const char *const *inputs, int32_t num_inputs,
                                  const char *const *options, int32_t num_options,
                                  int64_t *num_docs, int64_t *num_tokens) {
  return guard([&] {
    const std::vector<std::string> in = strings(inputs, num_inputs, "inputs", true),
                                   kv = strings(options, num_options, "options", false);
    ptdp::TokenizeOptions o = ptdp::parse_tokenize_options(kv);
    auto tok = ptdp::make_tokenizer(o.tokenizer);
    ptdp::CorpusStats st =
        ptdp::build_token_dataset(in, o.format, *tok, o.output, o.workers, o.new_only);
    if (num_docs) *num_docs = (int64_t)st.num_docs;
    if (num_tokens) *num_tokens = (int64_t)st.num_tokens;
  });
}

ptdp_status ptdp_tokenize_indexed(const char *const *inputs, int32_t num_inputs,
                                  const char *const *options, int32_t num_options,
                                  int64_t *num_docs, int64_t *num_tokens) {
  return guard([&] {
    const std::vector<std::string> in = strings(inputs, num_inputs, "inputs", true),
                                   kv = strings(options, num_options, "options", false);
    ptdp::IndexedTokenizeOptions o = ptdp::parse_indexed_tokenize_options(kv);
    auto tok = ptdp::make_tokenizer(o.tokenizer);
    std::vector<ptdp::IndexedOutput> out = ptdp::build_indexed_dataset(in, o, *tok);
    for (size_t k = 0; k < out.size(); k++) {
      if (num_docs) num_docs[k] = (int64_t)out[k].num_docs;
      if (num_tokens) num_tokens[k] = (int64_t)out[k].num_tokens;
    }
  });
}

ptdp_status ptdp_render_timeline(const char *trace_json, const char *png, int32_t width) {
  return guard([&] {
    require(trace_json, "trace_json");
    require(png, "png");
    ptdp::render_timeline_png(trace_json, png, width == 0 ? 1600 : width);
  });
}

ptdp_status ptdp_plot_log(const char *log_json, const char *png) {
  return guard([&] {
    require(log_json, "log_json");
    require(png, "png");
    ptdp::plot_metrics_png(log_json, png);
  });
}

ptdp_status ptdp_hold_input(const char *path, const char *what) {
  return guard([&] {
    require(path, "path");
    require(what, "what");
    ptdp::hold_input_file(path, what);
  });
}

ptdp_status ptdp_write_file(const char *path, const char *bytes, size_t n, const char *what) {
  return guard([&] {
    require(path, "path");
    require(what, "what");
    if (!bytes && n > 0) ptdp::fail(ptdp::Status::invalid_argument, "bytes is NULL but n is ", n);
    // A script's small file: as large as ptdp_read_file reads back (1 GiB).
    if (n > (size_t(1) << 30))
      ptdp::fail(ptdp::Status::invalid_argument, "write_file: n = ", n, " bytes; a script's file ",
                 "is at most 1073741824 bytes (1 GiB)");
    ptdp::write_file_atomic(path, std::string(bytes ? bytes : "", n), what, ptdp::OutputKind::any);
  });
}

ptdp_status ptdp_check_output_kind(const char *path, const char *what, const char *kind) {
  return guard([&] {
    require(path, "path");
    require(what, "what");
    require(kind, "kind");
    ptdp::check_output_file(path, what, ptdp::output_kind_of_key(kind));
  });
}

ptdp_status ptdp_one_line_text(const char *text, size_t len, char *buf, size_t cap, size_t *out_len) {
  return guard([&] {
    require(text, "text");
    copy_out(ptdp::one_line_text(std::string_view(text, len)), buf, cap, out_len);
  });
}

ptdp_status ptdp_same_output(const char *a, const char *b, int32_t *same) {
  return guard([&] {
    require(a, "a");
    require(b, "b");
    require(same, "same");
    if (!*a || !*b) ptdp::fail(ptdp::Status::invalid_argument, "same_output: ", !*a ? "a" : "b", " is an empty path");
    *same = ptdp::same_output(a, b) ? 1 : 0;
  });
}

ptdp_status ptdp_file_identity(const char *path, char *buf, size_t cap, size_t *out_len) {
  return guard([&] {
    require(path, "path");
    check_buffer(buf, cap);
    struct stat st;
    if (::lstat(path, &st) != 0)
      ptdp::fail(ptdp::Status::io_error, "'", path, "': ", std::strerror(errno));
    copy_out(std::to_string((unsigned long long)st.st_dev) + ":" + std::to_string((unsigned long long)st.st_ino) +
                 ":" + std::to_string((long long)st.st_size) + ":" +
                 std::to_string((long long)st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec),
             buf, cap, out_len);
  });
}

ptdp_status ptdp_check_output(const char *path, const char *what, int32_t directory) {
  return guard([&] {
    require(path, "path");
    require(what, "what");
    require_switch(directory, "directory");
    if (directory)
      ptdp::check_output_directory(path, what);
    else
      ptdp::check_output_file(path, what, ptdp::OutputKind::any);
  });
}

ptdp_status ptdp_read_file(const char *path, const char *what, char *buf, size_t cap,
                           size_t *out_len) {
  return guard([&] {
    require(path, "path");
    require(what, "what");
    check_buffer(buf, cap);
    copy_out(ptdp::read_small_file(path, std::string(what) + " '" + path + "'"), buf, cap, out_len);
  });
}

ptdp_status ptdp_hold_made_directory(const char *path, int32_t hold) {
  return guard([&] {
    require(path, "path");
    require_switch(hold, "hold");
    if (hold)
      ptdp::hold_made_directory(path);
    else
      ptdp::release_temp_directory(path, {});
  });
}

ptdp_status ptdp_make_temp_dir(const char *parent, const char *prefix, char *buf, size_t cap,
                               size_t *out_len) {
  return guard([&] {
    require(parent, "parent");
    require(prefix, "prefix");
    require(buf, "buf");
    // No size query: each call makes a directory, so the room is known first.
    const size_t need = std::strlen(parent) + 1 + std::strlen(prefix) + 6 + 1;
    if (cap < need)
      ptdp::fail(ptdp::Status::buffer_too_small, "buffer of ", cap, " bytes is too small for the new ",
                 "directory's path: ", need, " needed (nothing was made)");
    ptdp::check_output_directory(parent, "ptdp.make_temp_dir parent");
    copy_out(ptdp::make_temp_tree(parent, prefix), buf, cap, out_len);
  });
}

ptdp_status ptdp_remove_temp_dir(const char *path) {
  return guard([&] {
    require(path, "path");
    ptdp::remove_temp_tree(path);
  });
}

ptdp_status ptdp_remove_temp_files_on_signal(void) {
  return guard([] { ptdp::remove_temp_files_on_signal(); });
}

ptdp_status ptdp_benchmark_disk(const char *dir, int64_t bytes, double *write_gbps,
                                double *read_gbps) {
  return guard([&] {
    require(dir, "dir");
    require(write_gbps, "write_gbps");
    require(read_gbps, "read_gbps");
    const ptdp::DiskBandwidth bw = ptdp::measure_disk_bandwidth(dir, bytes);
    *write_gbps = bw.write_gbps;
    *read_gbps = bw.read_gbps;
  });
}

ptdp_status ptdp_benchmark_sgemm(int32_t n, int32_t repeats, double *gflops) {
  return guard([&] {
    require(gflops, "gflops");
    // Bounded work (2 n^3 flops a repeat): at most 1000 repeats, and 2^48
    // multiply-adds in all (minutes on one core), not hours.
    if (n <= 0 || n > 16384 || repeats <= 0 || repeats > 1000 ||
        (double)n * n * n * repeats > 281474976710656.0)
      ptdp::fail(ptdp::Status::invalid_argument, "need 0 < n <= 16384, 0 < repeats <= 1000 and ",
                 "n^3 x repeats <= 2^48, got n=", n, " repeats=", repeats);
    std::vector<float> a((size_t)n * n), b((size_t)n * n), c((size_t)n * n);
    for (size_t i = 0; i < a.size(); i++) {
      a[i] = (float)((i * 7 + 3) % 13) * 0.01f;
      b[i] = (float)((i * 5 + 1) % 11) * 0.01f;
    }
    ptdp::cpu::gemm<float>(false, false, n, n, n, 1.f, a.data(), n, b.data(), n, 0.f, c.data(), n);
    auto t0 = std::chrono::steady_clock::now();
    for (int r = 0; r < repeats; r++)
      ptdp::cpu::gemm<float>(false, false, n, n, n, 1.f, a.data(), n, b.data(), n, 0.f, c.data(),
                             n);
    double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    *gflops = 2.0 * n * (double)n * n * repeats / sec / 1e9;
  });
}

}  // extern "C"

extern "C" ptdp_status ptdp_plan(const char *const *options, int32_t num_options, char *buf,
                                 size_t cap, size_t *out_len) {
  return guard([&] {
    if (num_options > 4096)
      ptdp::fail(ptdp::Status::invalid_argument, "num_options must be in [0, 4096], got ", num_options);
    std::vector<std::pair<std::string, std::string>> kv;
    std::set<std::string> seen;
    for (const std::string &o : strings(options, num_options, "options", false)) {
      if (o == "help" || o == "--help") {
        kv.push_back({"help", ""});
        continue;
      }
      auto [key, value] = ptdp::split_key_value(
          o, "plan option", "Megatron's argument names, e.g. num_layers=24 (help lists them)", &seen);
      kv.push_back({std::move(key), std::move(value)});
    }
    copy_report(ptdp::plan::plan_report(kv), buf, cap, out_len);
  });
}
