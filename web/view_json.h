// The viewer's analyses as the JSON the web UI draws from. Each answer is shaped for one view
// and bounded in size whatever the snapshot holds: flamegraph nodes too small to see are left
// out, the timeline is downsampled, the trace comes a page at a time, and stacks are sent on
// demand (by index) instead of inside every block or event.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "replay/snapshot_replay.h"
#include "viewer/flame_tree.h"
#include "viewer/frame_labels.h"
#include "viewer/memory_views.h"
#include "viewer/timeline.h"
#include "web/snapshot_store.h"

namespace memsnap::web {

nlohmann::json snapshot_summary_json(const StoredSnapshot& stored);

// Nodes in preorder, children largest first; a node is [parent, label, category, bytes,
// before_bytes, samples]. Nodes under `min_share` of the total are dropped with their subtrees
// (their bytes stay in their parent's).
nlohmann::json flamegraph_json(const FlameTree& tree, double min_share);

// Every segment with its blocks as [offset, size, requested_size, state, stack, history_count,
// last_holder]; `sites`: the call site of each stack that holds a live block, by stack index.
nlohmann::json segments_json(const Snapshot& snapshot, std::optional<int64_t> device);
nlohmann::json segments_json(const std::vector<SnapshotSegment>& segments, std::optional<int64_t> device);
// The allocator's state after one trace entry: its segments as segments_json gives them, the
// entry itself, reserved/allocated/active bytes then, and whether the replay was exact.
nlohmann::json state_json(const Snapshot& snapshot, const StateAfterEntry& state);

// Search across views: an address (the block holding it, the events covering it) and frame
// text (the stacks whose shown frames contain it, case-insensitive, with the live blocks and
// bytes they hold and the trace events they made).
struct SearchQuery {
  static constexpr size_t kMaxStacks = 20000;
  std::string text;                 // frame text; may be empty when searching an address
  std::optional<uint64_t> address;  // set when the query reads as an address
  std::optional<int64_t> device;
};
nlohmann::json search_json(const Snapshot& snapshot, const SearchQuery& query, const FrameFilter& filter);

// One block in full: its history with each allocation's visible frames. Empty when the
// indices are out of range.
std::optional<nlohmann::json> block_json(const Snapshot& snapshot, size_t segment, size_t block,
                                         const FrameFilter& filter);

// A stack's visible frames, innermost first. Empty when the index is out of range.
std::optional<nlohmann::json> stack_json(const Snapshot& snapshot, int64_t stack, const FrameFilter& filter);

// As JSON text.
std::string timeline_json(const Snapshot& snapshot, const Timeline& timeline, const FrameFilter& filter);

struct TraceQuery {
  std::optional<int64_t> device;
  std::vector<bool> actions;  // by TraceAction; empty = all
  uint64_t min_size = 0;
  std::optional<uint64_t> address;  // events whose [address, address + size) holds it
  std::string frame;                // events whose visible frames contain this text
  uint64_t offset = 0;
  uint64_t limit = 100;
  static constexpr uint64_t kMaxLimit = 1000;
};
nlohmann::json trace_page_json(const Snapshot& snapshot, const TraceQuery& query, const FrameFilter& filter);

nlohmann::json compare_json(const StoredSnapshot& before, const StoredSnapshot& after,
                            const Comparison& comparison, double min_share);

}  // namespace memsnap::web
