// Which private pool (CUDA graph, MemPool) a device's memory belongs to, from a snapshot. PyTorch's
// trace does not name pools, but the snapshot's segments do: an address inside a segment alive at
// the end is that segment's pool's, and so is an allocation recorded there after the segment's
// last segment_alloc. Memory of segments freed before the snapshot (a pool released and emptied)
// cannot be told apart from the global pools'.
#pragma once

#include <cstdint>
#include <map>
#include <unordered_map>
#include <utility>
#include <vector>

#include "snapshot/snapshot.h"

namespace memsnap {

class SegmentPools {
 public:
  SegmentPools(const Snapshot& snapshot, int64_t device);

  // True when some segment of the device is in a private pool.
  bool any_private() const { return any_private_; }
  // The pool of the snapshot's segment holding `address`; (0,0) outside every segment.
  MempoolId at(uint64_t address) const;
  // For each alloc entry of `trace` that lay in a private pool's segment (alive at the end, and
  // allocated before that entry): its index and the pool.
  std::unordered_map<size_t, MempoolId> allocation_pools(const DeviceTrace& trace) const;

 private:
  std::map<uint64_t, std::pair<uint64_t, MempoolId>> segments_;  // address -> (end, pool)
  bool any_private_ = false;
};

}  // namespace memsnap
