#include "snapshot/trace_history.h"

#include <algorithm>
#include <utility>

namespace memsnap {

// The trace is read once, newest entry first, and each allocation is placed by a binary search
// among the blocks still needing history (thousands, where the trace has hundreds of
// thousands of allocations: no sort of the trace).
void add_history_from_trace(Snapshot& snapshot) {
  std::vector<std::pair<uint64_t, SnapshotBlock*>> blocks;  // by address
  for (size_t d = 0; d < snapshot.device_traces.size(); ++d) {
    blocks.clear();
    for (SnapshotSegment& segment : snapshot.segments)
      if (segment.device == static_cast<int64_t>(d))
        for (SnapshotBlock& block : segment.blocks)
          if (block.history.empty() && block.size > 0) blocks.emplace_back(block.address, &block);
    if (blocks.empty()) continue;
    std::sort(blocks.begin(), blocks.end(),
              [](const auto& a, const auto& b) { return a.first < b.first; });
    const DeviceTrace& trace = snapshot.device_traces[d];
    for (size_t i = trace.size(); i-- > 0;) {
      const TraceEntry& e = trace[i];
      if (e.action != TraceAction::kAlloc) continue;
      auto after = std::upper_bound(blocks.begin(), blocks.end(), e.address,
                                    [](uint64_t address, const auto& b) { return address < b.first; });
      if (after == blocks.begin()) continue;
      SnapshotBlock& block = *std::prev(after)->second;
      if (e.address - block.address >= block.size || block.history.size() >= kTraceHistoryPerBlock) continue;
      block.history.push_back({e.address, e.size, e.stack});  // newest first, for now
    }
    for (const auto& [address, block] : blocks) std::reverse(block->history.begin(), block->history.end());
  }
}

}  // namespace memsnap
