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

// The label ids of each stack's visible frames (outermost first), or of a placeholder naming
// why there are none; worked out once per stack, as many blocks share a stack.
class StackLabels {
 public:
  StackLabels(FlameTree& tree, const Snapshot& snapshot, const FrameFilter& filter)
      : tree_(tree), snapshot_(snapshot), filter_(filter), paths_(snapshot.stacks.size()),
        known_(snapshot.stacks.size(), false) {}

  void append(StackIndex stack, std::vector<uint32_t>& path) {
    if (stack < 0 || static_cast<size_t>(stack) >= paths_.size()) {
      append_labels(stack, path);
      return;
    }
    const size_t index = static_cast<size_t>(stack);
    if (!known_[index]) {
      append_labels(stack, paths_[index]);
      known_[index] = true;
    }
    path.insert(path.end(), paths_[index].begin(), paths_[index].end());
  }

 private:
  void append_labels(StackIndex stack, std::vector<uint32_t>& path) {
    const std::vector<uint32_t> frames = visible_frames_outermost_first(snapshot_, stack, filter_);
    if (frames.empty()) {
      path.push_back(tree_.label_id(stack == kNoStackIndex ? "<no stack recorded>" : "<no visible frames>"));
      return;
    }
    for (uint32_t frame : frames) path.push_back(tree_.label_id(frame_label(snapshot_.frames[frame], filter_)));
  }

  FlameTree& tree_;
  const Snapshot& snapshot_;
  const FrameFilter& filter_;
  std::vector<std::vector<uint32_t>> paths_;
  std::vector<bool> known_;
};

// One block's contributions, under `prefix` (the grouping levels).
void add_block(FlameTree& tree, StackLabels& stacks, const SnapshotBlock& block,
               const std::vector<uint32_t>& prefix) {
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
      stacks.append(block.stack, path);
    tree.add(path, bytes, sample);
    accounted = bytes;
  } else {
    // A free block: what last lived in its bytes.
    for (const HistoryItem& item : block.history) {
      path.resize(base);
      path.push_back(tree.label_id("<free, last used by>"));
      stacks.append(item.stack, path);
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
  StackLabels stacks(tree, snapshot, options.frames);
  const std::vector<uint32_t> no_prefix;
  for (const SnapshotSegment& segment : snapshot.segments) {
    if (!wanted(segment, options)) continue;
    for (const SnapshotBlock& block : segment.blocks) add_block(tree, stacks, block, no_prefix);
  }
  tree.sort();
  return tree;
}

FlameTree segments_flamegraph(const Snapshot& snapshot, const ViewOptions& options) {
  FlameTree tree("all segments");
  StackLabels stacks(tree, snapshot, options.frames);
  bool several_devices = false;
  for (const SnapshotSegment& segment : snapshot.segments)
    several_devices |= segment.device != snapshot.segments.front().device;
  for (const SnapshotSegment& segment : snapshot.segments) {
    if (!wanted(segment, options)) continue;
    std::vector<uint32_t> prefix;
    if (several_devices) prefix.push_back(tree.label_id("device " + std::to_string(segment.device)));
    prefix.push_back(tree.label_id("stream " + hex(segment.stream)));
    prefix.push_back(tree.label_id("segment " + hex(segment.address) + " (" + segment.segment_type + ")"));
    for (const SnapshotBlock& block : segment.blocks) add_block(tree, stacks, block, prefix);
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
    StackLabels stacks(out.allocated_by_stack, s, options.frames);
    for (const SnapshotSegment& segment : s.segments) {
      if (!wanted(segment, options)) continue;
      (is_before ? out.before_reserved : out.after_reserved) += segment.total_size;
      const SegmentKey key{segment.device, segment.address, segment.total_size};
      if (is_before && !after_keys.count(key)) out.only_before.push_back(&segment);
      if (!is_before && !before_keys.count(key)) out.only_after.push_back(&segment);
      for (const SnapshotBlock& block : segment.blocks) {
        if (block.state != BlockState::kActiveAllocated) continue;
        std::vector<uint32_t> path;
        stacks.append(block.stack, path);
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
