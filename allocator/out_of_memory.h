// What the allocator reports when a request cannot be satisfied, and who hears about it.
#pragma once

#include <cstddef>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>

#include "allocator/device_backend.h"
#include "allocator/mempool_id.h"

namespace memsnap {

struct OomInfo {
  int device = 0;
  size_t requested_bytes = 0;   // what the caller asked for
  size_t rounded_bytes = 0;     // after the allocator's rounding
  size_t allocation_bytes = 0;  // the segment size it tried to reserve
  StreamId stream = 0;
  size_t device_total_bytes = 0;
  size_t device_free_bytes = 0;
  size_t allocated_bytes = 0;  // held by the program through this allocator
  size_t reserved_bytes = 0;   // held by this allocator in segments
  // Free cached bytes inside private pools (CUDA graphs, MemPool): reserved, not allocated, and
  // out of reach of requests outside those pools. PyTorch's message counts them as "allocated
  // in private pools".
  size_t private_pool_free_bytes = 0;
  MempoolId pool;  // the pool the request was routed to; (0,0) for the global pools

  // Reserved bytes cached free outside the private pools.
  size_t unallocated_bytes() const {
    const size_t held = allocated_bytes + private_pool_free_bytes;
    return reserved_bytes > held ? reserved_bytes - held : 0;
  }
  std::optional<size_t> allowed_bytes;  // the memory-fraction cap, when one is set
};

// Thrown by allocate() after every recovery step failed. The message follows PyTorch's
// ("Tried to allocate ... of which ... is free ...").
class OutOfMemoryError : public std::runtime_error {
 public:
  explicit OutOfMemoryError(const OomInfo& info);
  const OomInfo& info() const { return info_; }

 private:
  OomInfo info_;
};

// Called once per out-of-memory error, after the allocator's lock has been released (so an
// observer may take a snapshot, allocate or free memory) and before the error is thrown.
// An out-of-memory error raised inside an observer (by its own allocation) does not run the
// observers again; an exception an observer throws is reported on stderr and swallowed, so
// the caller still gets the original error.
using OomObserver = std::function<void(const OomInfo&)>;

// Called when no cached block fits, before any new segment is reserved; returns true when it
// freed memory through the allocator (then the pools are searched again). Runs without the
// allocator's lock held.
using FreeMemoryCallback = std::function<bool()>;

}  // namespace memsnap
