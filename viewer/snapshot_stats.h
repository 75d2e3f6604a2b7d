// The first summary a user needs from a snapshot: the peaks (memory_peaks.h), how much memory
// is reserved, allocated, active and requested, by device and stream, by block state and by pool; how fragmented
// it is (free bytes stranded in split segments, the largest free block); and what the
// trace holds. Rendered as text for people and as one JSON object (`memsnap stats --json`,
// the web API's /stats).
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "snapshot/snapshot.h"
#include "viewer/memory_peaks.h"

namespace memsnap {

struct MemoryTotals {
  uint64_t segments = 0;
  uint64_t blocks = 0;
  uint64_t reserved_bytes = 0;   // sum of segment sizes
  uint64_t allocated_bytes = 0;  // sums of the segments' own fields
  uint64_t active_bytes = 0;
  uint64_t requested_bytes = 0;
  std::array<uint64_t, 3> state_bytes{};   // by BlockState
  std::array<uint64_t, 3> state_blocks{};
  uint64_t small_pool_segments = 0, large_pool_segments = 0;
  uint64_t small_pool_blocks = 0, large_pool_blocks = 0;
  uint64_t inactive_split_bytes = 0;  // free bytes in segments that also hold live blocks
  uint64_t largest_free_block = 0;
  void add(const SnapshotSegment& segment);
};

struct StreamTotals {
  int64_t device = 0;
  uint64_t stream = 0;
  MemoryTotals totals;
};

// Memory of one pool: the global pools, or a CUDA graph's or MemPool's private pool.
struct PoolTotals {
  int64_t device = 0;
  MempoolId pool;
  MemoryTotals totals;
};

struct SnapshotStats {
  MemoryTotals totals;
  MemoryPeaks peaks;
  std::vector<StreamTotals> by_stream;  // ordered by device, then stream
  std::vector<PoolTotals> by_pool;      // ordered by device, then pool (global first)
  uint64_t devices = 0;
  uint64_t trace_entries = 0;
  std::map<std::string, uint64_t> trace_actions;
  std::vector<uint64_t> trace_entries_by_device;
  uint64_t stacks = 0, frames = 0, annotations = 0;
};

SnapshotStats compute_stats(const Snapshot& snapshot);
nlohmann::json stats_to_json(const SnapshotStats& stats, const Snapshot& snapshot);
std::string stats_to_text(const SnapshotStats& stats, const Snapshot& snapshot);

}  // namespace memsnap
