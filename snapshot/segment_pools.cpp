#include "snapshot/segment_pools.h"

namespace memsnap {

SegmentPools::SegmentPools(const Snapshot& snapshot, int64_t device) {
  for (const SnapshotSegment& s : snapshot.segments) {
    if (s.device != device) continue;
    segments_[s.address] = {s.address + s.total_size, s.segment_pool_id};
    any_private_ = any_private_ || !s.segment_pool_id.is_global();
  }
}

MempoolId SegmentPools::at(uint64_t address) const {
  auto it = segments_.upper_bound(address);
  if (it == segments_.begin()) return {};
  --it;
  return address < it->second.first ? it->second.second : MempoolId{};
}

std::unordered_map<size_t, MempoolId> SegmentPools::allocation_pools(
    const DeviceTrace& trace) const {
  std::unordered_map<size_t, MempoolId> pools;
  if (!any_private_) return pools;
  // The snapshot's segment at an address lives from the last segment_alloc there on.
  std::unordered_map<uint64_t, size_t> born_at;
  for (size_t i = 0; i < trace.size(); ++i)
    if (trace[i].action == TraceAction::kSegmentAlloc) born_at[trace[i].address] = i;
  for (size_t i = 0; i < trace.size(); ++i) {
    const TraceEntry& e = trace[i];
    if (e.action != TraceAction::kAlloc) continue;
    auto it = segments_.upper_bound(e.address);
    if (it == segments_.begin()) continue;
    --it;
    if (e.address >= it->second.first || it->second.second.is_global()) continue;
    const auto born = born_at.find(it->first);
    if (born != born_at.end() && born->second > i) continue;  // an earlier segment there
    pools[i] = it->second.second;
  }
  return pools;
}

}  // namespace memsnap
