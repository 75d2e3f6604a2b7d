#include "viewer/memory_views.h"

#include <set>

namespace memsnap {
FlameCategory flame_category(BlockState state) {
  switch (state) {
    case BlockState::kActiveAllocated: return FlameCategory::kActiveAllocated;
    case BlockState::kActivePendingFree: return FlameCategory::kActivePendingFree;
    case BlockState::kInactive: return FlameCategory::kInactive;
  }
  return FlameCategory::kInactive;
}

namespace {

// Appends the stack's frame labels (outermost first) to `path`, or a placeholder naming why
// there are none.
void append_stack(FlameTree& tree, const Snapshot& snapshot, StackIndex stack,
                  const FrameFilter& filter, std::vector<uint32_t>& path) {
  const std::vector<uint32_t> frames = visible_frames_outermost_first(snapshot, stack, filter);
  if (frames.empty()) {
    path.push_back(tree.label_id(stack == kNoStackIndex ? "<no stack recorded>" : "<no visible frames>"));
    return;
  }
  for (uint32_t frame : frames) path.push_back(tree.label_id(frame_label(snapshot.frames[frame])));
}

// One block's contributions, under `prefix` (the grouping levels).
void add_block(FlameTree& tree, const Snapshot& snapshot, const SnapshotBlock& block,
               const std::vector<uint32_t>& prefix, const FrameFilter& filter) {
  FlameTree::Sample sample;
  sample.category = flame_category(block.state);
  sample.grouping_levels = prefix.size();
  sample.address = block.address;
  std::vector<uint32_t> path = prefix;
  path.push_back(tree.label_id(block_state_name(block.state)));
  const size_t base = path.size();
  uint64_t accounted = 0;
  if (block.state != BlockState::kInactive || block.history.empty()) {
    const uint64_t bytes = block.state == BlockState::kInactive
                               ? block.size
                               : std::min(block.requested_size, block.size);
    if (block.state == BlockState::kInactive)
      path.push_back(tree.label_id("<free>"));
    else
      append_stack(tree, snapshot, block.stack, filter, path);
    tree.add(path, bytes, sample);
    accounted = bytes;
  } else {
    // A free block: what last lived in its bytes.
    for (const HistoryItem& item : block.history) {
      path.resize(base);
      path.push_back(tree.label_id("<free, last used by>"));
      append_stack(tree, snapshot, item.stack, filter, path);
      const uint64_t bytes = std::min(item.size, block.size - accounted);
      sample.address = item.address;
      tree.add(path, bytes, sample);
      accounted += bytes;
    }
  }
  if (block.size > accounted) {
    path.resize(base);
    path.push_back(tree.label_id(block.state == BlockState::kInactive ? "<free>" : "<gaps>"));
    sample.gaps_leaf = block.state != BlockState::kInactive;
    sample.address = block.address;
    tree.add(path, block.size - accounted, sample);
  }
}

std::string hex(uint64_t value) {
  char text[32];
  std::snprintf(text, sizeof text, "0x%llx", static_cast<unsigned long long>(value));
  return text;
}

bool wanted(const SnapshotSegment& segment, const ViewOptions& options) {
  return !options.device || segment.device == *options.device;
}

}  // namespace

FlameTree memory_flamegraph(const Snapshot& snapshot, const ViewOptions& options) {
  FlameTree tree("all memory");
  for (const SnapshotSegment& segment : snapshot.segments) {
    if (!wanted(segment, options)) continue;
    for (const SnapshotBlock& block : segment.blocks) add_block(tree, snapshot, block, {}, options.frames);
  }
  tree.sort();
  return tree;
}

FlameTree segments_flamegraph(const Snapshot& snapshot, const ViewOptions& options) {
  FlameTree tree("all segments");
  bool several_devices = false;
  for (const SnapshotSegment& segment : snapshot.segments)
    several_devices |= segment.device != snapshot.segments.front().device;
  for (const SnapshotSegment& segment : snapshot.segments) {
    if (!wanted(segment, options)) continue;
    std::vector<uint32_t> prefix;
    if (several_devices) prefix.push_back(tree.label_id("device " + std::to_string(segment.device)));
    prefix.push_back(tree.label_id("stream " + hex(segment.stream)));
    prefix.push_back(tree.label_id("segment " + hex(segment.address) + " (" + segment.segment_type + ")"));
    for (const SnapshotBlock& block : segment.blocks) add_block(tree, snapshot, block, prefix, options.frames);
  }
  tree.sort();
  return tree;
}

Comparison compare_snapshots(const Snapshot& before, const Snapshot& after, const ViewOptions& options) {
  Comparison out;
  auto keys = [&](const Snapshot& s) {
    std::set<SegmentKey> k;
    for (const SnapshotSegment& segment : s.segments)
      if (wanted(segment, options)) k.insert({segment.device, segment.address, segment.total_size});
    return k;
  };
  const std::set<SegmentKey> before_keys = keys(before);
  const std::set<SegmentKey> after_keys = keys(after);
  auto add_allocated = [&](const Snapshot& s, bool is_before) {
    for (const SnapshotSegment& segment : s.segments) {
      if (!wanted(segment, options)) continue;
      (is_before ? out.before_reserved : out.after_reserved) += segment.total_size;
      const SegmentKey key{segment.device, segment.address, segment.total_size};
      if (is_before && !after_keys.count(key)) out.only_before.push_back(&segment);
      if (!is_before && !before_keys.count(key)) out.only_after.push_back(&segment);
      for (const SnapshotBlock& block : segment.blocks) {
        if (block.state != BlockState::kActiveAllocated) continue;
        std::vector<uint32_t> path;
        append_stack(out.allocated_by_stack, s, block.stack, options.frames, path);
        FlameTree::Sample sample;
        sample.before = is_before;
        sample.address = block.address;
        out.allocated_by_stack.add(path, block.size, sample);
        (is_before ? out.before_allocated : out.after_allocated) += block.size;
      }
    }
  };
  add_allocated(before, true);
  add_allocated(after, false);
  out.allocated_by_stack.sort();
  return out;
}

}  // namespace memsnap
