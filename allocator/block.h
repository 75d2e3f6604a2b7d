// Blocks and segments: the allocator's bookkeeping of device memory.
//
// A segment is one reservation from the device. It is tiled, in address order, by blocks
// linked through prev/next; a block is either allocated, free (then it sits in exactly one
// pool), or waiting for events after a free on a stream it was used on ("pending free").
// Invariants (checked by InvariantChecker):
//   - a segment's blocks cover it exactly, without gaps or overlap;
//   - two free blocks are never neighbours (a freed block merges with free neighbours);
//   - a pool holds exactly the free blocks of its kind (small/large);
//   - a block is only reused on the stream it was allocated on.
//
// An expandable segment is a range of reserved address space, mostly without memory behind
// it. Its blocks tile the whole range; the unmapped ones (mapped == false) sit in their
// pool's unmapped set, never in its free blocks, start and end on page boundaries and never
// neighbour each other; mapping pages turns unmapped bytes into a free block, unmapping
// whole free pages turns them back.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "allocator/device_backend.h"
#include "allocator/mempool_id.h"

namespace memsnap {

class BlockPool;
struct Block;
struct Segment;

struct Block {
  uintptr_t address = 0;
  size_t size = 0;            // bytes this block covers (a multiple of kMinBlockSize)
  size_t requested_size = 0;  // bytes asked for, while allocated
  StreamId stream = 0;        // the stream it was allocated on; reuse only there
  int device = 0;
  uint16_t pool_bin = 0;  // its size bin (size_bins.h) while in its pool's free blocks
  BlockPool* pool = nullptr;
  Segment* segment = nullptr;
  Block* prev = nullptr;  // neighbours in the same segment, in address order
  Block* next = nullptr;
  bool allocated = false;
  bool expandable = false;  // lies in an expandable segment (segment->expandable, kept here
                            // because the fast path asks on every allocation and free)
  bool mapped = true;  // false: address space of an expandable segment with no memory yet
  // Counted in oversize_allocations while allocated (it was at or above max_split_size when it
  // was allocated). Kept so the count stays true when max_split_size changes while it lives.
  bool counted_oversize = false;
  // Outstanding events before a pending free completes; 1, with no event yet, while a block
  // freed during a capture waits for the capture to end to record its events
  // (DeviceCachingAllocator::frees_awaiting_events_, which keeps its stream_uses until then).
  int event_count = 0;
  std::vector<StreamId> stream_uses;  // other streams it was used on (record_stream)
  uint64_t gc_count_base = 0;         // pool's search count when it became free (GC age)
  // A value an observer may attach to the block while it is allocated (history keeps the
  // allocation's stack id here, so a free needs no lookup). The allocator never reads it and
  // resets it on every allocation, so a tag never outlives the allocation it was set for.
  static constexpr uint32_t kNoObserverTag = ~uint32_t{0};
  mutable uint32_t observer_tag = kNoObserverTag;
  // A guess an observer may keep with the block across allocations (history: where the
  // block's last allocation sits in its tables). Never read or reset by the allocator; an
  // observer must check it before trusting it, since blocks are recycled.
  mutable uint32_t observer_hint = 0;

  bool is_split() const { return prev != nullptr || next != nullptr; }
  // Free memory, ready for reuse (unmapped address space is not memory).
  bool is_free() const { return !allocated && event_count == 0 && mapped; }
};

struct Segment {
  int device = 0;
  uintptr_t address = 0;
  size_t size = 0;
  StreamId stream = 0;
  bool small_pool = false;
  MempoolId pool_id;      // the private pool it was reserved for; (0,0): the global pools
  Block* head = nullptr;  // the block at `address`; stable for the segment's life
  // Expandable: `size` bytes of address space, mapped `page_size` bytes at a time from
  // `address`; reserved bytes are only the mapped ones.
  bool expandable = false;
  size_t page_size = 0;
  bool counted_oversize = false;  // counted in oversize_segments (as Block::counted_oversize)
  mutable uint32_t observer_hint = 0;  // as Block::observer_hint
};

}  // namespace memsnap
