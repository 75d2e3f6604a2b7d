// Reconstructing the allocator state a recorded trace began in.
//
// Recording often starts after segments already exist, or its ring buffer wrapped, so a
// trace cannot be replayed from an empty device. Walking the trace against the snapshot's
// final segments gives the state at the first event (docs/DESIGN.md, "Replay simulator"):
//   - a segment whose first segment event in the trace is a segment_free, or that exists at
//     the end with no segment event at all, existed from the start;
//   - a block whose first event is a free (requested or completed), or that is live at the
//     end with no alloc in the trace, was live at the start;
//   - everything else in the starting segments was free.
// The sizes of blocks that were freed in the trace are their rounded requests, widened to
// the gap that follows when the split rules would not have cut that gap off. Expandable
// segments are replayed from nothing mapped; pages mapped before the trace began are
// reported, not rebuilt. Anything the
// trace and the final state disagree on is reported, never guessed around.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "allocator/allocator_config.h"
#include "allocator/allocator_state.h"
#include "snapshot/snapshot.h"

namespace memsnap {

struct StartState {
  std::vector<SegmentRecord> segments;  // in address order, blocks tiling each
  size_t reserved_bytes = 0;
  size_t live_blocks = 0;
  size_t live_bytes = 0;  // block sizes of the live blocks
  // Where the trace contradicts itself or the final state (each one line); a replay of an
  // inconsistent trace is reported as such.
  std::vector<std::string> problems;
  bool empty() const { return segments.empty(); }
};

// `recorded` is the configuration the run used (for rounding and the split rules).
StartState reconstruct_start_state(const Snapshot& snapshot, int device,
                                   const AllocatorConfig& recorded);

}  // namespace memsnap
