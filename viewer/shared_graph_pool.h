// What a recorded run would have reserved had its CUDA graphs shared one private pool
// (torch.cuda.graph(g2, pool=g1.pool())), as a replay shows it: the snapshot's graph pools
// ((n,0) ids; a user's MemPool is left alone) are taken as one, by naming every graph pool's
// segments as the first graph's, and the trace is replayed up to a chosen entry under the
// recorded settings, beside the same replay with the pools apart. Allocations go to the pool
// the recorded run used (segment_pools.h), so graph 2's capture can reuse what graph 1's freed.
#pragma once

#include <cstdint>
#include <optional>

#include "allocator/allocator_config.h"
#include "snapshot/snapshot.h"

namespace memsnap {

struct SharedGraphPool {
  size_t graphs = 0;               // graph pools taken as one
  uint64_t apart_reserved_bytes = 0;   // reserved right before the entry, pools apart (as recorded)
  uint64_t shared_reserved_bytes = 0;  // the same with one pool
};

// Nothing when the device has fewer than two graph pools, `entry` is 0, or a replay fails.
std::optional<SharedGraphPool> replay_with_one_graph_pool(const Snapshot& snapshot, int64_t device, size_t entry,
                                                          const AllocatorConfig& config);

}  // namespace memsnap
