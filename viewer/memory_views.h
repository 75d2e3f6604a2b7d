// The flamegraph views of a snapshot, as PyTorch's _memory_viz.py defines them (and fixed
// where it breaks on PyTorch 2.x snapshots):
//   memory    bytes by block state, then by the stack that allocated them;
//   segments  the same under stream and segment, one subtree per segment;
//   compare   allocated bytes by stack in two snapshots, for a differential flamegraph,
//             plus the segments found only before or only after.
// A block's bytes go to its stack (requested bytes) and to <gaps> (what rounding added); a
// block that keeps history (old PyTorch layouts, memsnap's merged free blocks) splits its
// bytes among the allocations that lived there.
#pragma once

#include <optional>
#include <vector>

#include "snapshot/snapshot.h"
#include "viewer/flame_tree.h"
#include "viewer/frame_labels.h"

namespace memsnap {

struct ViewOptions {
  FrameFilter frames;
  std::optional<int64_t> device;  // only this device's segments
};

// The colour family a block state gets in every view.
FlameCategory flame_category(BlockState state);

FlameTree memory_flamegraph(const Snapshot& snapshot, const ViewOptions& options = {});
FlameTree segments_flamegraph(const Snapshot& snapshot, const ViewOptions& options = {});

struct SegmentKey {
  int64_t device;
  uint64_t address;
  uint64_t total_size;
  auto operator<=>(const SegmentKey&) const = default;
};

struct Comparison {
  FlameTree allocated_by_stack{"all"};  // bytes = after, before_bytes = before
  std::vector<const SnapshotSegment*> only_before;
  std::vector<const SnapshotSegment*> only_after;
  uint64_t before_allocated = 0, after_allocated = 0;
  uint64_t before_reserved = 0, after_reserved = 0;
};
Comparison compare_snapshots(const Snapshot& before, const Snapshot& after,
                             const ViewOptions& options = {});

}  // namespace memsnap
