// Per-rank timelines of pipeline training (ARCHITECTURE §8): each rank records
// spans (forward/backward passes, sends, receives, collectives, optimizer) into
// its own Timeline; at the end one rank writes them all as one Chrome trace
// (JSON, opens in Perfetto / chrome://tracing), one track per rank.
#pragma once
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace ptdp {

struct Span {
  std::string name;                   // e.g. "F" "B" "send_forward" "all_reduce"
  std::string cat;                    // "forward", "backward", "send", "recv", "comm", "optimizer", ...
  int64_t start_ns = 0, end_ns = 0;   // steady_clock ns
  int microbatch = -1, chunk = -1;    // -1 = not applicable
  std::string group;                  // communicator group of comm spans ("tp","pp","dp","embedding")
  int64_t bytes = -1;                 // payload of comm spans, -1 = n/a
};

// One per rank. add() may also come from the rank's gradient-reduction
// thread (an overlapped all-reduce), so it locks; clear() and spans() are
// for the rank's own thread between steps, when that thread is idle.
class Timeline {
 public:
  static int64_t now_ns();  // steady_clock
  void set_enabled(bool on) { enabled_ = on; }
  bool enabled() const { return enabled_; }
  void add(Span s);  // no-op when disabled
  void clear() { spans_.clear(); }
  const std::vector<Span> &spans() const { return spans_; }

 private:
  bool enabled_ = false;
  std::mutex mu_;
  std::vector<Span> spans_;
};

struct RankTimeline {
  int rank;            // world rank: the track (tid) of its spans
  std::string label;   // e.g. "tp 0, pp 1, dp 0": the track is named "rank 3 (tp 0, pp 1, dp 0)"
  const Timeline *timeline;
};

// Writes a Chrome trace: "X" events with ts/dur in microseconds since origin_ns,
// pid 0, tid = rank, args {microbatch, chunk, group, bytes} where set, plus "M"
// metadata naming and ordering the tracks. Atomic; throws io_error naming the path.
void write_chrome_trace(const std::string &path, const std::vector<RankTimeline> &ranks,
                        int64_t origin_ns);


}  // namespace ptdp
