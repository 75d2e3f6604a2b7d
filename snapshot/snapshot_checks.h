// What a snapshot must say consistently before any view believes it: each segment tiled by
// its blocks (in address order, from the segment's start, no gap or overlap, sizes adding up
// to the segment's), its allocated and active sizes equal to its blocks', no two segments of
// a device overlapping, and every stack and frame index in range. A file that breaks one is
// refused with a line naming the segment, rather than shown with figures that disagree.
#pragma once

#include <optional>
#include <string>

#include "snapshot/snapshot.h"

namespace memsnap {

// The first inconsistency found, or nothing.
std::optional<std::string> check_snapshot(const Snapshot& snapshot);

}  // namespace memsnap
