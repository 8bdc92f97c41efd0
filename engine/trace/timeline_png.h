// Renders a Chrome trace (as written by write_chrome_trace, or any trace whose
// "X" events carry a numeric tid) as a PNG picture of the pipeline schedule:
//
//   - one horizontal lane per tid, sorted top to bottom; x = time, from the
//     earliest event start to the latest event end;
//   - cat "forward" spans in a light colour, cat "backward" in a darker shade of
//     the same hue, cat "backward_weight" (a zero-bubble W) in the hue itself;
//     the hue is picked by args.microbatch from 12 cycling hues;
//   - cat "send"/"recv"/"comm" as a thin grey band at the bottom of the lane;
//   - any other cat (e.g. "optimizer") in a neutral colour;
//   - a black 1-px line between touching spans of different micro-batches.
//
// Layout: a margin of kTimelinePngMargin px on every side; lanes share the rest
// of the height equally. No text is drawn. The PNG is written atomically
// (engine/core/canvas.h draws and encodes it).
#pragma once
#include <string>

namespace ptdp {

constexpr int kTimelinePngMargin = 20;

// Throws io_error (unreadable trace, unwritable png), corrupt_data (not JSON,
// not a trace, no X events) or invalid_argument (width out of range).
void render_timeline_png(const std::string &trace_json_path, const std::string &png_path,
                         int width = 1600);

}  // namespace ptdp
