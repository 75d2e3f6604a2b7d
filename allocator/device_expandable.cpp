// Expandable segments (expandable_segments:True), as PyTorch's CUDA caching allocator has
// them: instead of one cudaMalloc per segment, each (stream, pool) reserves address space
// for 9/8 of the device's memory once and maps physical pages into it as it needs memory —
// 2 MiB pages for the small pool, 20 MiB for the large one. An allocation that fits no
// cached block grows the lowest-addressed room on its stream that is large enough (free
// bytes followed by unmapped ones), so a run's memory stays in one contiguous range and
// does not fragment into segments of fixed sizes; releasing memory unmaps the whole free
// pages of cached blocks.
//
// The rules here follow PyTorch rule for rule, since replay must predict what PyTorch
// would do: how room is found, how much is mapped, how mapped bytes merge with free
// neighbours, the best-fit adjustment for blocks that could grow, and that split and
// segment statistics leave expandable memory out (a whole free page can always be
// returned, so it is not "inactive split"; only mapped bytes count as reserved).
#include <algorithm>

#include "allocator/device_caching_allocator.h"
#include "allocator/policy.h"

namespace memsnap {
namespace {

// Free or unmapped, with no pending events: bytes an expandable allocation may grow over.
bool can_grow_over(const Block* block) {
  return block != nullptr && !block->allocated && block->event_count == 0;
}

// PyTorch: address space for 1 1/8 of the device's memory, so that pages unmapped early in
// the range can be mapped again at its end.
size_t address_space_bytes(size_t device_total, size_t page_size) {
  const size_t wanted = device_total + device_total / 8;
  return std::max<size_t>((wanted + page_size - 1) / page_size, 1) * page_size;
}

}  // namespace

// The request could not be served from cached blocks: grow an expandable segment by it.
// Returns the block (out of the pool, at least rounded_size bytes) or nullptr when the
// device cannot map the pages.
Block* DeviceCachingAllocator::allocate_expandable(BlockPool& pool, StreamId stream,
                                                   size_t rounded_size) {
  Block* candidate = find_expandable_room(pool, stream, rounded_size);
  if (candidate == nullptr) return nullptr;
  // The room is either unmapped bytes, or a free block followed by unmapped bytes.
  if (!candidate->mapped) {
    candidate = map_block(candidate, std::min(candidate->size, rounded_size));
    if (candidate == nullptr) return nullptr;
  }
  while (candidate->size < rounded_size) {
    Block* unmapped = candidate->next;
    // The room found is contiguous, so unmapped bytes follow; the end of the address space
    // is only reached by a request larger than it, which no device can map.
    if (unmapped == nullptr || unmapped->mapped) return nullptr;
    candidate = map_block(unmapped, std::min(rounded_size - candidate->size, unmapped->size));
    if (candidate == nullptr) return nullptr;  // pages mapped so far stay cached
  }
  pool.erase(candidate);
  return candidate;
}

// The lowest-addressed unmapped range on `stream` that, with the free block just before it,
// starts enough contiguous free-or-unmapped room; a new expandable segment when none does.
Block* DeviceCachingAllocator::find_expandable_room(BlockPool& pool, StreamId stream,
                                                    size_t rounded_size) {
  for (Block* unmapped = pool.unmapped_at_or_after(stream, 0); unmapped != nullptr;
       unmapped = pool.unmapped_at_or_after(stream, unmapped->address + 1)) {
    Block* start = can_grow_over(unmapped->prev) ? unmapped->prev : unmapped;
    size_t room = 0;
    for (const Block* b = start; room < rounded_size && can_grow_over(b); b = b->next)
      room += b->size;
    if (room >= rounded_size) return start;
  }
  return new_expandable_segment(pool, stream);
}

// Reserves the address space of a new expandable segment: one unmapped block covering it.
Block* DeviceCachingAllocator::new_expandable_segment(BlockPool& pool, StreamId stream) {
  const size_t page = pool.is_small() ? kSmallBuffer : kLargeBuffer;
  const size_t bytes = address_space_bytes(backend_.memory_info(device_).total_bytes, page);
  const std::optional<uintptr_t> address = backend_.reserve_address_space(device_, bytes);
  if (!address) return nullptr;
  Block* block = add_segment(pool, stream, *address, bytes, page);
  pool.insert_unmapped(block);
  return block;
}

// Maps the pages that cover the first `bytes` of an unmapped block (which starts on a page
// boundary), merges them with free neighbours, and returns the resulting free block (in the
// pool); nullptr, changing nothing, when the device is out of memory.
Block* DeviceCachingAllocator::map_block(Block* unmapped, size_t bytes) {
  const Segment& segment = *unmapped->segment;
  const size_t page = segment.page_size;
  const size_t mapped_bytes = (bytes + page - 1) / page * page;
  if (!backend_.map_pages(device_, unmapped->address, mapped_bytes, page)) return nullptr;
  BlockPool& pool = *unmapped->pool;
  pool.erase_unmapped(unmapped);
  if (mapped_bytes < unmapped->size) pool.insert_unmapped(split_block_at(unmapped, mapped_bytes));
  unmapped->mapped = true;
  const uintptr_t address = unmapped->address;
  int64_t split_blocks_change = 0;  // expandable memory is left out of the split statistics
  int64_t split_bytes_change = 0;
  Block* block = merge_free_neighbours(unmapped, split_blocks_change, split_bytes_change);
  pool.insert(block);
  DeviceStats::increase(stats_.reserved_bytes, pool.is_small(), static_cast<int64_t>(mapped_bytes));
  stats_.num_device_alloc += 1;
  if (observer_) observer_->on_segment_map(device_, segment, address, mapped_bytes);
  return block;
}

// Unmaps the whole pages inside a free block of an expandable segment; what is left of the
// block on either side stays free and cached. Returns the unmapped block (merged with
// unmapped neighbours), or nullptr when the block holds no whole page.
Block* DeviceCachingAllocator::unmap_free_pages(Block* block) {
  const Segment& segment = *block->segment;
  const size_t page = segment.page_size;
  const uintptr_t offset = block->address - segment.address;
  const uintptr_t first = (offset + page - 1) / page * page;
  const uintptr_t last = (offset + block->size) / page * page;
  if (first >= last) return nullptr;
  const uintptr_t address = segment.address + first;
  const size_t bytes = last - first;
  backend_.unmap_pages(device_, address, bytes, page, segment.stream);

  BlockPool& pool = *block->pool;
  pool.erase(block);
  Block* middle = block;
  if (address > block->address) {
    middle = split_block_at(block, address - block->address);
    pool.insert(block);  // the free bytes before the first whole page
  }
  if (middle->size > bytes) pool.insert(split_block_at(middle, bytes));
  middle->mapped = false;
  if (Block* prev = middle->prev; prev != nullptr && !prev->mapped) {
    pool.erase_unmapped(prev);
    absorb_next(prev);
    middle = prev;
  }
  if (Block* next = middle->next; next != nullptr && !next->mapped) {
    pool.erase_unmapped(next);
    absorb_next(middle);
  }
  pool.insert_unmapped(middle);
  DeviceStats::decrease(stats_.reserved_bytes, pool.is_small(), static_cast<int64_t>(bytes));
  stats_.num_device_free += 1;
  if (observer_) observer_->on_segment_unmap(device_, segment, address, bytes);
  return middle;
}

// A segment with no page mapped any more gives its address space back.
void DeviceCachingAllocator::release_expandable_segment(Block* whole) {
  auto found = segments_.find(whole->address);
  const Segment& segment = *found->second;
  backend_.release_address_space(device_, segment.address, segment.size);
  whole->pool->erase_unmapped(whole);
  recycle_block(whole);
  erase_segment(found);
}

// Best fit among blocks that may grow: a free block followed by unmapped bytes counts as
// the size it could grow to, so a request goes to a fixed-size block that fits before it
// takes the growable one (PyTorch's get_free_block). `first` is the plain best fit.
Block* DeviceCachingAllocator::best_fit_by_expandable_size(BlockPool& pool, Block* first) {
  auto growable_size = [](const Block* b) {
    return b->size + (b->next != nullptr && !b->next->mapped ? b->next->size : 0);
  };
  Block* block = first;
  for (Block* next = pool.next_in_order(block);
       block->expandable && next != nullptr && growable_size(next) < growable_size(block);
       next = pool.next_in_order(next))
    block = next;
  return block;
}

// At destruction: every mapped run of every expandable segment is unmapped and the address
// space released (the device may already be gone at process exit; then nothing is left to do).
void DeviceCachingAllocator::release_expandable_segments_at_exit() {
  for (auto& [address, segment] : segments_) {
    if (!segment->expandable) continue;
    try {
      const Block* block = segment->head;
      while (block != nullptr) {
        if (!block->mapped) {
          block = block->next;
          continue;
        }
        const uintptr_t start = block->address;
        size_t bytes = 0;
        for (; block != nullptr && block->mapped; block = block->next) bytes += block->size;
        backend_.unmap_pages(device_, start, bytes, segment->page_size, segment->stream);
      }
      backend_.release_address_space(device_, segment->address, segment->size);
    } catch (const DeviceError&) {
    }
  }
}

}  // namespace memsnap
