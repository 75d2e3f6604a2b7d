// `memsnap segments`: one tower per segment showing how its blocks pack into it, lowest
// address at the bottom, coloured by state (the flamegraph's colours). Tower heights grow
// with the log of the segment size so 2 MiB and 1 GiB segments are both readable; hovering
// a block shows its segment, address, sizes, state and the stack that allocated it.
#pragma once

#include <optional>
#include <string>

#include "snapshot/snapshot.h"
#include "viewer/frame_labels.h"

namespace memsnap::svg {

struct SegmentsOptions {
  std::string title = "Segments";
  int width = 1200;
  std::optional<int64_t> device;
  FrameFilter frames;
};

std::string render_segments(const Snapshot& snapshot, const SegmentsOptions& options);

}  // namespace memsnap::svg
