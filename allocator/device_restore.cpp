// What replay needs beyond the ordinary API: restoring a recorded segment layout (the state
// a recorded program had when its trace began: segments that already existed, allocations
// already live), and releasing one named cached segment as the recorded run did.
#include <stdexcept>
#include <string>

#include "allocator/device_caching_allocator.h"
#include "allocator/policy.h"

namespace memsnap {
namespace {

// The layout must be something this allocator could itself have produced; anything else
// would corrupt its bookkeeping, so it is refused with the reason.
void check_layout(const SegmentRecord& layout) {
  auto fail = [&](const std::string& why) {
    throw std::invalid_argument("restore_segment at " + std::to_string(layout.address) + ": " +
                                why);
  };
  if (layout.expandable) fail("an expandable segment's pages cannot be restored this way");
  if (layout.size == 0 || layout.size % kMinBlockSize != 0)
    fail("segment size must be a positive multiple of 512");
  if (layout.blocks.empty()) fail("a segment needs at least one block");
  uintptr_t expected = layout.address;
  bool previous_free = false;
  for (const BlockRecord& block : layout.blocks) {
    if (block.address != expected) fail("blocks must tile the segment without gaps");
    if (block.size == 0 || block.size % kMinBlockSize != 0)
      fail("block sizes must be positive multiples of 512");
    if (block.size > layout.size - (block.address - layout.address))
      fail("a block runs past the segment's end");
    const bool free = block.state == BlockState::kInactive;
    if (free && previous_free) fail("two free blocks may not be neighbours");
    if (!free && block.requested_size > block.size)
      fail("a block's requested size exceeds its size");
    previous_free = free;
    expected = block.address + block.size;
  }
  if (expected != layout.address + layout.size) fail("blocks must cover the whole segment");
}

}  // namespace

std::vector<uintptr_t> DeviceCachingAllocator::restore_segment(const SegmentRecord& layout) {
  check_layout(layout);
  AllocatorLockGuard lock(mutex_);
  if (memory_cap_ && reserved_bytes() + layout.size > memory_cap_->bytes)
    throw std::invalid_argument("restore_segment: over the memory fraction");
  const std::optional<uintptr_t> address = backend_.reserve(device_, layout.size);
  if (!address) throw std::invalid_argument("restore_segment: the device has no room for it");
  if (*address != layout.address) {
    backend_.release(device_, *address, layout.size);
    throw std::invalid_argument("restore_segment: the device placed the segment elsewhere");
  }
  // A private pool the recorded run had before its trace began exists here with one use.
  PrivatePool* owner = nullptr;
  if (!layout.pool_id.is_global()) {
    owner = find_or_make_pool(layout.pool_id).first;
    owner->segment_count += 1;
  }
  BlockPool& pool = owner != nullptr ? (layout.small_pool ? owner->small_blocks : owner->large_blocks)
                                     : (layout.small_pool ? small_blocks_ : large_blocks_);
  const bool small = pool.is_small();
  auto segment = std::make_unique<Segment>();
  segment->device = device_;
  segment->address = layout.address;
  segment->size = layout.size;
  segment->stream = layout.stream;
  segment->small_pool = small;
  segment->pool_id = layout.pool_id;

  std::vector<uintptr_t> live;
  const bool split = layout.blocks.size() > 1;
  Block* previous = nullptr;
  for (const BlockRecord& record : layout.blocks) {
    Block* block = new_block();
    block->address = record.address;
    block->size = record.size;
    block->stream = layout.stream;
    block->device = device_;
    block->pool = &pool;
    block->segment = segment.get();
    block->prev = previous;
    if (previous) previous->next = block;
    if (previous == nullptr) segment->head = block;
    previous = block;
    const auto bytes = static_cast<int64_t>(block->size);
    if (record.state == BlockState::kInactive) {
      pool.insert(block);
      if (split) {
        DeviceStats::increase(stats_.inactive_split, small, 1);
        DeviceStats::increase(stats_.inactive_split_bytes, small, bytes);
      }
      continue;
    }
    // A pending free is restored as allocated: the replay frees it when the trace says so.
    block->allocated = true;
    block->requested_size = record.requested_size;
    live_blocks_.insert(block->address, block);
    live.push_back(block->address);
    DeviceStats::increase(stats_.allocation, small, 1);
    DeviceStats::increase(stats_.allocated_bytes, small, bytes);
    DeviceStats::increase(stats_.active, small, 1);
    DeviceStats::increase(stats_.active_bytes, small, bytes);
    DeviceStats::increase(stats_.requested_bytes, small, static_cast<int64_t>(record.requested_size));
    block->counted_oversize = block->size >= config_.max_split_size;
    if (block->counted_oversize) stats_.oversize_allocations.increase(1);
  }
  segment->counted_oversize = layout.size >= config_.max_split_size;
  if (segment->counted_oversize) stats_.oversize_segments.increase(1);
  segments_.emplace(layout.address, std::move(segment));
  DeviceStats::increase(stats_.segment, small, 1);
  DeviceStats::increase(stats_.reserved_bytes, small, static_cast<int64_t>(layout.size));
  return live;
}

bool DeviceCachingAllocator::release_cached_segment(uintptr_t address) {
  AllocatorLockGuard lock(mutex_);
  auto found = segments_.upper_bound(address);
  if (found == segments_.begin()) return false;
  --found;
  const Segment& segment = *found->second;
  if (segment.expandable) {
    if (address - segment.address >= segment.size) return false;
    Block* block = segment.head;
    while (block != nullptr && address - block->address >= block->size) block = block->next;
    if (block == nullptr || !block->is_free()) return false;
    Block* unmapped = unmap_free_pages(block);
    if (unmapped == nullptr) return false;
    if (!unmapped->is_split()) release_expandable_segment(unmapped);
    return true;
  }
  if (found->first != address) return false;
  Block* head = segment.head;
  if (!head->is_free() || head->is_split()) return false;
  release_segment(head);
  return true;
}

void DeviceCachingAllocator::collect_completed_frees() {
  AllocatorLockGuard lock(mutex_);
  if (!pending_events_.empty()) process_events();
}

}  // namespace memsnap
