// The fast path: serve a request from a cached block, and return freed blocks to the pools.
// Nothing here talks to the device except through the slow path.
#include "allocator/device_caching_allocator.h"

#include <algorithm>

#include "allocator/policy.h"

namespace memsnap {

namespace {
int64_t max_split_size_stat(const AllocatorConfig& config) {
  return config.max_split_size == kNoMaxSplitSize ? -1 : static_cast<int64_t>(config.max_split_size);
}
}  // namespace

DeviceCachingAllocator::DeviceCachingAllocator(int device, DeviceBackend& backend,
                                               const AllocatorConfig& config)
    : device_(device), backend_(backend), config_(config) {
  stats_.max_split_size = max_split_size_stat(config);
}

void DeviceCachingAllocator::set_config(const AllocatorConfig& config, const std::string& request) {
  AllocatorLockGuard lock(mutex_);
  config_ = config;
  stats_.max_split_size = max_split_size_stat(config);
  if (observer_) observer_->on_settings_changed(device_, config_, request);
}

AllocatorConfig DeviceCachingAllocator::config() const {
  AllocatorLockGuard lock(mutex_);
  return config_;
}

DeviceCachingAllocator::~DeviceCachingAllocator() {
  AllocatorLockGuard lock(mutex_);
  for (auto& [event_stream, queue] : pending_events_)
    for (auto& [event, block] : queue) {
      try {
        backend_.release_event(event);
      } catch (const DeviceError&) {
        // The device may already be gone at process exit; nothing left to recover.
      }
    }
  release_expandable_segments_at_exit();
  for (auto& [address, segment] : segments_) {
    if (segment->expandable) continue;
    try {
      if (SegmentSource* source = segment_source_of(*segment))
        source->release(device_, segment->address, segment->size, segment->stream);
      else
        backend_.release(device_, segment->address, segment->size);
    } catch (const std::exception&) {
      // The device (or the pool's own allocator) may already be gone at process exit.
    }
  }
}

// (flatten: while no observer records, the cached-block path runs as one function, without
// the calls, prologues and epilogues of its pieces. With -fPIC, GCC inlines only under
// -fno-semantic-interposition: this folder's CMakeLists.txt.)
[[gnu::flatten]] uintptr_t DeviceCachingAllocator::allocate(size_t size, StreamId stream) {
  AllocatorLock lock(mutex_);
  Block* block = observer_ == nullptr ? malloc(size, stream, lock) : malloc_observed(size, stream, lock);
  live_blocks_.insert(block->address, block);
  return block->address;
}

[[gnu::flatten]] bool DeviceCachingAllocator::deallocate(uintptr_t address) {
  AllocatorLockGuard lock(mutex_);
  Block* block = live_blocks_.erase(address);
  if (block == nullptr) return false;
  if (observer_ == nullptr)
    free(block);
  else
    free_observed(block);
  return true;
}

uintptr_t DeviceCachingAllocator::allocate_reporting(size_t size, StreamId stream, MemoryReport& report) {
  AllocatorLock lock(mutex_);
  Block* block = observer_ == nullptr ? malloc(size, stream, lock) : malloc_observed(size, stream, lock);
  live_blocks_.insert(block->address, block);
  report = {block->size, DeviceStats::total(stats_.allocated_bytes), DeviceStats::total(stats_.reserved_bytes)};
  return block->address;
}

bool DeviceCachingAllocator::deallocate_reporting(uintptr_t address, MemoryReport& report) {
  AllocatorLockGuard lock(mutex_);
  Block* block = live_blocks_.erase(address);
  if (block == nullptr) return false;
  const size_t size = block->size;  // (free may merge the block with its neighbours)
  if (observer_ == nullptr)
    free(block);
  else
    free_observed(block);
  report = {size, DeviceStats::total(stats_.allocated_bytes), DeviceStats::total(stats_.reserved_bytes)};
  return true;
}

// Kept out of the flattened functions above: an observer walks the stack from in here, and
// its walks went slower through the merged frame.
[[gnu::noinline]] Block* DeviceCachingAllocator::malloc_observed(size_t size, StreamId stream, AllocatorLock& lock) {
  return malloc(size, stream, lock);
}

[[gnu::noinline]] void DeviceCachingAllocator::free_observed(Block* block) { free(block); }

bool DeviceCachingAllocator::record_stream(uintptr_t address, StreamId stream) {
  AllocatorLockGuard lock(mutex_);
  Block* block = live_blocks_.find(address);
  if (block == nullptr) return false;
  if (stream != block->stream &&
      std::find(block->stream_uses.begin(), block->stream_uses.end(), stream) ==
          block->stream_uses.end()) {
    block->stream_uses.push_back(stream);
    if (!allocating_to_.empty()) note_stream_use_in_capture(block, stream);
  }
  return true;
}

size_t DeviceCachingAllocator::allocated_size(uintptr_t address) const {
  AllocatorLockGuard lock(mutex_);
  const Block* block = live_blocks_.find(address);
  return block == nullptr ? 0 : block->size;
}

Block* DeviceCachingAllocator::malloc(size_t size, StreamId stream, AllocatorLock& lock) {
  if (size > kMaxRequestSize) report_out_of_memory(size, size, size, stream, nullptr, lock);
  const size_t rounded = round_size(size, config_);
  BlockPool* pool = nullptr;
  if (allocating_to_.empty()) {
    if (!frees_awaiting_events_.empty()) insert_deferred_events();
    if (!pending_events_.empty()) process_events();
    pool = is_small_request(rounded) ? &small_blocks_ : &large_blocks_;
  } else {
    // Querying events is illegal while a graph captures: PyTorch waits until no pool is being
    // allocated to, or the capture's graph says a block's uses are over.
    if (config_.graph_capture_record_stream_reuse && !frees_awaiting_events_.empty())
      free_blocks_safe_in_capture(stream);
    pool = &routed_pool_for(rounded, stream);
  }
  Block* block = config_.caching ? take_free_block(*pool, stream, rounded) : nullptr;
  if (block == nullptr) block = allocate_after_miss(*pool, stream, rounded, size, lock);
  return finish_allocation(block, rounded, size);
}

// Best fit: the smallest free block on `stream` that is large enough (lowest address on
// ties), subject to the max_split_size rules.
Block* DeviceCachingAllocator::take_free_block(BlockPool& pool, StreamId stream,
                                               size_t rounded_size) {
  if (gc_enabled()) pool.count_search();
  Block* block = pool.lower_bound(stream, rounded_size);
  if (block != nullptr && block->expandable) {
    if (config_.expandable_segments) {
      block = best_fit_by_expandable_size(pool, block);
    } else {
      // Expandable segments were turned off after some were made: as PyTorch, only blocks
      // of fixed segments are taken until they are turned on again.
      while (block != nullptr && block->expandable) block = pool.next_in_order(block);
    }
  }
  if (block == nullptr || !block_fits_split_rules(block->size, rounded_size, config_))
    return nullptr;
  pool.erase(block);
  return block;
}

// Marks a block taken from a pool (or fresh from a segment) allocated, splitting off the
// remainder when the split rules allow, and keeps the statistics in step.
Block* DeviceCachingAllocator::finish_allocation(Block* block, size_t rounded_size,
                                                 size_t requested_size, bool split_any_remainder) {
  BlockPool& pool = *block->pool;
  const bool small = pool.is_small();
  const bool already_split = block->is_split();
  // Expandable memory is left out of the split statistics, as in PyTorch.
  const bool counts_split = !block->expandable;
  // A pool with its own segment source never has expandable segments (PyTorch's
  // is_expandable_segments_active), so its blocks split by the fixed-segment rules.
  const bool expandable_active = config_.expandable_segments && segment_source_of(pool) == nullptr;
  if (split_any_remainder ? block->size > rounded_size
                          : should_split(block->size, rounded_size, small, expandable_active, config_) &&
                                (pool.owner() == nullptr || !pool.owner()->no_split)) {
    Block* remaining = split_block_at(block, rounded_size);
    pool.insert(remaining);
    if (counts_split && already_split) {
      // An inactive split block shrinks by the bytes now allocated.
      DeviceStats::decrease(stats_.inactive_split_bytes, small, static_cast<int64_t>(rounded_size));
    } else if (counts_split) {
      DeviceStats::increase(stats_.inactive_split_bytes, small, static_cast<int64_t>(remaining->size));
      DeviceStats::increase(stats_.inactive_split, small, 1);
    }
  } else if (counts_split && already_split) {
    DeviceStats::decrease(stats_.inactive_split_bytes, small, static_cast<int64_t>(block->size));
    DeviceStats::decrease(stats_.inactive_split, small, 1);
  }

  block->allocated = true;
  block->requested_size = requested_size;
  block->observer_tag = Block::kNoObserverTag;
  const auto bytes = static_cast<int64_t>(block->size);
  DeviceStats::increase(stats_.allocation, small, 1);
  DeviceStats::increase(stats_.allocated_bytes, small, bytes);
  DeviceStats::increase(stats_.active, small, 1);
  DeviceStats::increase(stats_.active_bytes, small, bytes);
  DeviceStats::increase(stats_.requested_bytes, small, static_cast<int64_t>(requested_size));
  block->counted_oversize = block->size >= config_.max_split_size;
  if (block->counted_oversize) stats_.oversize_allocations.increase(1);
  if (observer_) observer_->on_alloc(device_, *block);
  return block;
}

// Merges the block after `block` into it (the lower address survives, so a segment's head
// block never changes); the caller has taken both out of their pools.
void DeviceCachingAllocator::absorb_next(Block* block) {
  Block* next = block->next;
  block->size += next->size;
  block->next = next->next;
  if (block->next) block->next->prev = block;
  recycle_block(next);
}

// Splits `block` at `offset`, returning the new block for the upper part; both keep the
// block's segment, stream, pool and mapping. Neither is put in a pool.
Block* DeviceCachingAllocator::split_block_at(Block* block, size_t offset) {
  Block* upper = new_block();
  upper->address = block->address + offset;
  upper->size = block->size - offset;
  upper->stream = block->stream;
  upper->device = block->device;
  upper->pool = block->pool;
  upper->segment = block->segment;
  upper->expandable = block->expandable;
  upper->mapped = block->mapped;
  upper->prev = block;
  upper->next = block->next;
  if (upper->next) upper->next->prev = upper;
  block->next = upper;
  block->size = offset;
  return upper;
}

void DeviceCachingAllocator::free(Block* block) {
  const bool small = block->pool->is_small();
  block->allocated = false;
  DeviceStats::decrease(stats_.allocation, small, 1);
  DeviceStats::decrease(stats_.allocated_bytes, small, static_cast<int64_t>(block->size));
  if (block->counted_oversize) stats_.oversize_allocations.decrease(1);
  block->counted_oversize = false;
  if (observer_) observer_->on_free_requested(device_, *block);
  if (block->stream_uses.empty()) {
    free_block(block);
  } else if (allocating_to_.empty()) {
    capture_stream_uses_.erase(block);  // (a capture that ended; its events are recordable)
    insert_events(block);  // becomes reusable once the other streams catch up
  } else {
    defer_events(block);
  }
}

// Returns a block whose frees (and events) are complete to its pool, merged with its free
// neighbours, and moves it from "active" to cached in the statistics.
void DeviceCachingAllocator::free_block(Block* block) {
  if (observer_) observer_->on_free_completed(device_, *block);
  const bool small = block->pool->is_small();
  const auto original_size = static_cast<int64_t>(block->size);
  const auto requested_size = static_cast<int64_t>(block->requested_size);
  block->requested_size = 0;
  int64_t split_blocks_change = 0;
  int64_t split_bytes_change = 0;
  block = merge_free_neighbours(block, split_blocks_change, split_bytes_change);
  block->pool->insert(block);
  if (block->expandable) {
    split_blocks_change = 0;  // expandable memory is left out of the split statistics
    split_bytes_change = 0;
  } else if (block->is_split()) {
    split_blocks_change += 1;
    split_bytes_change += static_cast<int64_t>(block->size);
  }
  if (split_blocks_change > 0) DeviceStats::increase(stats_.inactive_split, small, split_blocks_change);
  if (split_blocks_change < 0) DeviceStats::decrease(stats_.inactive_split, small, -split_blocks_change);
  if (split_bytes_change > 0) DeviceStats::increase(stats_.inactive_split_bytes, small, split_bytes_change);
  if (split_bytes_change < 0) DeviceStats::decrease(stats_.inactive_split_bytes, small, -split_bytes_change);
  DeviceStats::decrease(stats_.active, small, 1);
  DeviceStats::decrease(stats_.active_bytes, small, original_size);
  DeviceStats::decrease(stats_.requested_bytes, small, requested_size);
  // Caching off: the memory goes straight back (not while a graph captures, when nothing may).
  if (!config_.caching && allocating_to_.empty() && !block->is_split()) release_segment(block);
}

// Merges `block` with each free neighbour; the block at the lower address survives, so a
// segment's head block never changes. Each neighbour absorbed was an inactive split block.
Block* DeviceCachingAllocator::merge_free_neighbours(Block* block, int64_t& split_blocks_change,
                                                     int64_t& split_bytes_change) {
  BlockPool& pool = *block->pool;
  if (Block* prev = block->prev; prev != nullptr && prev->is_free()) {
    pool.erase(prev);
    split_blocks_change -= 1;
    split_bytes_change -= static_cast<int64_t>(prev->size);
    absorb_next(prev);
    block = prev;
  }
  if (Block* next = block->next; next != nullptr && next->is_free()) {
    pool.erase(next);
    split_blocks_change -= 1;
    split_bytes_change -= static_cast<int64_t>(next->size);
    absorb_next(block);
  }
  return block;
}

Block* DeviceCachingAllocator::new_block() {
  if (spare_blocks_.empty()) {
    block_storage_.push_back(std::make_unique<Block>());
    return block_storage_.back().get();
  }
  Block* block = spare_blocks_.back();
  spare_blocks_.pop_back();
  return block;
}

void DeviceCachingAllocator::recycle_block(Block* block) {
  std::vector<StreamId> keep_capacity = std::move(block->stream_uses);
  *block = Block{};
  keep_capacity.clear();
  block->stream_uses = std::move(keep_capacity);
  spare_blocks_.push_back(block);
}

DeviceStats DeviceCachingAllocator::stats() const {
  AllocatorLockGuard lock(mutex_);
  return stats_.settled();
}

std::optional<DeviceMemoryFigures> DeviceCachingAllocator::figures_before_first_segment() const {
  AllocatorLockGuard lock(mutex_);
  return figures_before_first_segment_;
}

std::vector<SegmentRecord> DeviceCachingAllocator::segment_records() const {
  AllocatorLockGuard lock(mutex_);
  std::vector<SegmentRecord> records;
  records.reserve(segments_.size());
  // An expandable segment is reported as one segment per run of mapped pages, as PyTorch
  // does: that is the memory it holds.
  for (const auto& [address, segment] : segments_) {
    const Block* block = segment->head;
    while (block != nullptr) {
      if (!block->mapped) {
        block = block->next;
        continue;
      }
      SegmentRecord& record = records.emplace_back();
      record.device = device_;
      record.address = block->address;
      record.stream = segment->stream;
      record.small_pool = segment->small_pool;
      record.pool_id = segment->pool_id;
      record.expandable = segment->expandable;
      for (; block != nullptr && block->mapped; block = block->next) {
        const BlockState state = block->allocated   ? BlockState::kActiveAllocated
                                 : block->is_free() ? BlockState::kInactive
                                                    : BlockState::kActivePendingFree;
        record.blocks.push_back({block->address, block->size, block->requested_size, state});
        record.size += block->size;
      }
    }
  }
  return records;
}

void DeviceCachingAllocator::reset_peak_stats() {
  AllocatorLockGuard lock(mutex_);
  stats_.reset_peak();
}

void DeviceCachingAllocator::reset_accumulated_stats() {
  AllocatorLockGuard lock(mutex_);
  stats_.reset_accumulated();
}

void DeviceCachingAllocator::add_oom_observer(OomObserver observer) {
  AllocatorLockGuard lock(mutex_);
  oom_observers_.push_back(std::move(observer));
}

void DeviceCachingAllocator::add_free_memory_callback(FreeMemoryCallback callback) {
  AllocatorLockGuard lock(mutex_);
  free_memory_callbacks_.push_back(std::move(callback));
}

void DeviceCachingAllocator::set_observer(AllocatorObserver* observer) {
  AllocatorLockGuard lock(mutex_);
  observer_ = observer;
}

bool DeviceCachingAllocator::observed() const {
  AllocatorLockGuard lock(mutex_);
  return observer_ != nullptr;
}

}  // namespace memsnap
