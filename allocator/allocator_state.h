// A copy of a device's segments and blocks at one moment: what snapshots are built from.
// Plain data, taken under the device's lock and then free of it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "allocator/device_backend.h"
#include "allocator/mempool_id.h"

namespace memsnap {

enum class BlockState : uint8_t {
  kActiveAllocated,    // held by the program
  kActivePendingFree,  // freed, waiting for other streams' work (record_stream)
  kInactive,           // free, cached
};

struct BlockRecord {
  uintptr_t address = 0;
  size_t size = 0;
  size_t requested_size = 0;  // 0 unless active
  BlockState state = BlockState::kInactive;
};

struct SegmentRecord {
  int device = 0;
  uintptr_t address = 0;
  size_t size = 0;
  StreamId stream = 0;
  bool small_pool = false;
  MempoolId pool_id;  // (0,0): the global pools; else the private pool that holds it
  // Part of an expandable segment: one record per contiguous run of mapped pages, as
  // PyTorch reports them.
  bool expandable = false;
  std::vector<BlockRecord> blocks;  // in address order, tiling the segment
};

}  // namespace memsnap
