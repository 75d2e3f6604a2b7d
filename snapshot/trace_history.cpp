#include "snapshot/trace_history.h"

#include <algorithm>

namespace memsnap {

void add_history_from_trace(Snapshot& snapshot) {
  // Each device's allocations by address (then time), to find those inside a block quickly.
  std::vector<std::vector<std::pair<uint64_t, size_t>>> allocs(snapshot.device_traces.size());
  for (size_t d = 0; d < snapshot.device_traces.size(); ++d) {
    const std::vector<TraceEntry>& trace = snapshot.device_traces[d];
    for (size_t i = 0; i < trace.size(); ++i)
      if (trace[i].action == TraceAction::kAlloc) allocs[d].push_back({trace[i].address, i});
    std::sort(allocs[d].begin(), allocs[d].end());
  }
  std::vector<size_t> inside;
  for (SnapshotSegment& segment : snapshot.segments) {
    if (segment.device < 0 || static_cast<size_t>(segment.device) >= allocs.size()) continue;
    const auto& by_address = allocs[static_cast<size_t>(segment.device)];
    const std::vector<TraceEntry>& trace = snapshot.device_traces[static_cast<size_t>(segment.device)];
    for (SnapshotBlock& block : segment.blocks) {
      if (!block.history.empty()) continue;
      inside.clear();
      for (auto it = std::lower_bound(by_address.begin(), by_address.end(), std::make_pair(block.address, size_t{0}));
           it != by_address.end() && it->first - block.address < block.size; ++it)
        inside.push_back(it->second);
      if (inside.empty()) continue;
      const size_t keep = std::min(inside.size(), kTraceHistoryPerBlock);
      std::partial_sort(inside.begin(), inside.begin() + static_cast<std::ptrdiff_t>(keep), inside.end(),
                        std::greater<size_t>());
      for (size_t k = keep; k-- > 0;) {
        const TraceEntry& e = trace[inside[k]];
        block.history.push_back({e.address, e.size, e.stack});
      }
    }
  }
}

}  // namespace memsnap
