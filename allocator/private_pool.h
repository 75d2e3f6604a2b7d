// Private memory pools: the memory of a CUDA graph or a torch.cuda.MemPool, kept apart from the
// global pools.
//
// While a pool is being allocated to (begin_allocate_to_pool until
// end_allocate_to_pool), requests whose stream its filter accepts are served only from the
// pool's own free blocks and new segments of its own; freed blocks return to the pool they came
// from. A pool lives while its use count is above zero (each graph and MemPool using it holds
// one); after that its free segments go back to the device at the next empty_cache, and the
// pool is forgotten once it holds none.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "allocator/allocator_state.h"
#include "allocator/block_pool.h"
#include "allocator/device_backend.h"
#include "allocator/mempool_id.h"

namespace memsnap {

// Which requests go to a pool while it is being allocated to: PyTorch passes "the stream is
// capturing into this graph" for a capture and "the calling thread is the one that entered
// use_mem_pool" for a MemPool.
using PoolFilter = std::function<bool(StreamId)>;

// Where a pool's segments come from when not from the device backend: a torch.cuda.MemPool
// made with its own allocator (NCCL's memory for symmetric collectives, a
// CUDAPluggableAllocator) has every segment reserved and released through it, as PyTorch does.
// Such a pool never has expandable segments. Called with the device's allocator lock held
// (unless release_lock_on_cudamalloc lets it go around reserve), so it must not call back
// into memsnap's allocator.
class SegmentSource {
 public:
  virtual ~SegmentSource() = default;
  // `size` bytes for use on `stream`, or nothing when it has none to give (out of memory).
  virtual std::optional<uintptr_t> reserve(int device, size_t size, StreamId stream) = 0;
  virtual void release(int device, uintptr_t address, size_t size, StreamId stream) = 0;
};

struct PrivatePool {
  explicit PrivatePool(MempoolId pool_id) : id(pool_id) {
    small_blocks.set_owner(this);
    large_blocks.set_owner(this);
  }
  PrivatePool(const PrivatePool&) = delete;
  PrivatePool& operator=(const PrivatePool&) = delete;

  const MempoolId id;
  int use_count = 1;      // graphs and MemPools holding the pool
  int segment_count = 0;  // segments reserved for it and not yet returned
  bool use_on_oom = false;  // a global request the device cannot serve may take its free blocks
  bool no_split = false;    // its blocks are never split
  // Its own source of segments (nullptr: the device backend). The pool keeps it alive until
  // the pool is gone, after its last segment went back: tensors outlive a MemPool object.
  std::shared_ptr<SegmentSource> segment_source;
  BlockPool small_blocks{true};
  BlockPool large_blocks{false};
};

// A private pool's layout at one moment: CUDA graph trees (torch.compile mode="reduce-overhead")
// save it after recording a graph and put it back before running a graph of another path.
struct PoolCheckpoint {
  MempoolId pool;
  std::vector<SegmentRecord> segments;  // in address order, each block allocated or free
};

// What putting a checkpoint back changed: the allocations that ended (their owners must forget
// them) and those that begin again, as the checkpoint had them.
struct PoolRestore {
  std::vector<uintptr_t> freed;
  std::vector<std::pair<uintptr_t, size_t>> allocated;  // address, size
};

}  // namespace memsnap
