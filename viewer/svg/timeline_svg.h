// `memsnap timeline`: the Timeline as an SVG: stacked bands per large allocation (colour by
// stack), the merged small ones in grey at the bottom, a byte axis, event/time ticks, the
// peak marked, and labels on the largest bands. Hover a band for its size, address,
// lifetime and stack.
#pragma once

#include <string>

#include "snapshot/snapshot.h"
#include "viewer/frame_labels.h"
#include "viewer/timeline.h"

namespace memsnap::svg {

struct TimelineSvgOptions {
  std::string title = "Active memory timeline";
  int width = 1200;
  int plot_height = 460;
  FrameFilter frames;
};

std::string render_timeline(const Snapshot& snapshot, const Timeline& timeline,
                            const TimelineSvgOptions& options);

}  // namespace memsnap::svg
