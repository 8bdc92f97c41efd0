#include "engine/trace/timeline.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>

#include "engine/core/json_text.h"
#include "engine/core/output_file.h"
#include "engine/core/status.h"

namespace ptdp {

int64_t Timeline::now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void Timeline::add(Span s) {
  if (!enabled_) return;
  std::lock_guard<std::mutex> lk(mu_);
  spans_.push_back(std::move(s));
}

void write_chrome_trace(const std::string &path, const std::vector<RankTimeline> &ranks,
                        int64_t origin_ns) {
  using nlohmann::json;
  json events = json::array();
  events.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", 0}, {"args", {{"name", "ptdp"}}}});
  for (const RankTimeline &r : ranks) {
    std::string track = "rank " + std::to_string(r.rank);
    if (!r.label.empty()) track += " (" + r.label + ")";
    events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", 0}, {"tid", r.rank},
                      {"args", {{"name", track}}}});
    // Without a sort index, viewers order tracks by first event, not by rank.
    events.push_back({{"name", "thread_sort_index"}, {"ph", "M"}, {"pid", 0}, {"tid", r.rank},
                      {"args", {{"sort_index", r.rank}}}});
    if (!r.timeline) continue;
    for (const Span &s : r.timeline->spans()) {
      json args = json::object();
      if (s.microbatch >= 0) args["microbatch"] = s.microbatch;
      if (s.chunk >= 0) args["chunk"] = s.chunk;
      if (!s.group.empty()) args["group"] = s.group;
      if (s.bytes >= 0) args["bytes"] = s.bytes;
      // Chrome traces count in microseconds; fractions keep the ns resolution.
      events.push_back({{"name", s.name},
                        {"cat", s.cat},
                        {"ph", "X"},
                        {"ts", (double)(s.start_ns - origin_ns) / 1e3},
                        {"dur", (double)(s.end_ns - s.start_ns) / 1e3},
                        {"pid", 0},
                        {"tid", r.rank},
                        {"args", args}});
    }
  }
  json trace = {{"traceEvents", events}, {"displayTimeUnit", "ms"}};
  // replace: a stray non-UTF-8 byte in a name must not lose the whole trace.
  write_file_atomic(path, json_file_text(trace) + "\n",
                    "--timeline", OutputKind::trace);
}

}  // namespace ptdp
