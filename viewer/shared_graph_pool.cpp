#include "viewer/shared_graph_pool.h"

#include <set>

#include "allocator/device_stats.h"
#include "replay/snapshot_replay.h"

namespace memsnap {
namespace {

std::optional<uint64_t> reserved_before(const Snapshot& snapshot, int64_t device, size_t entry,
                                        const AllocatorConfig& config) {
  SnapshotReplayOptions options;
  options.config = config;
  options.check_invariants = false;
  options.stop_after_entry = entry - 1;
  const Result<SnapshotReplay> replay = replay_snapshot(snapshot, options);
  if (!replay) return std::nullopt;
  for (const DeviceReplay& d : replay->devices)
    if (d.device == device && d.failed_allocs == 0) return static_cast<uint64_t>(d.stats.reserved_bytes[kAggregate].current);
  return std::nullopt;
}

}  // namespace

std::optional<SharedGraphPool> replay_with_one_graph_pool(const Snapshot& snapshot, int64_t device, size_t entry,
                                                          const AllocatorConfig& config) {
  std::set<MempoolId> graph_pools;
  for (const SnapshotSegment& segment : snapshot.segments)
    if (segment.device == device && segment.segment_pool_id.first > 0 && segment.segment_pool_id.second == 0)
      graph_pools.insert(segment.segment_pool_id);
  if (graph_pools.size() < 2 || entry == 0) return std::nullopt;
  Snapshot shared = snapshot;
  for (SnapshotSegment& segment : shared.segments)
    if (segment.device == device && graph_pools.count(segment.segment_pool_id))
      segment.segment_pool_id = *graph_pools.begin();
  const std::optional<uint64_t> apart = reserved_before(snapshot, device, entry, config);
  const std::optional<uint64_t> one = reserved_before(shared, device, entry, config);
  if (!apart || !one) return std::nullopt;
  return SharedGraphPool{graph_pools.size(), *apart, *one};
}

}  // namespace memsnap
