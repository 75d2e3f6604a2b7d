// The slow path: what happens when no cached block fits, how cached memory goes back to the
// device, deferred frees on events, and the out-of-memory report. The order of the recovery
// steps is docs/DESIGN.md's "When no cached block fits", (a) to (f).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <exception>

#include "allocator/device_caching_allocator.h"
#include "allocator/policy.h"

namespace memsnap {
namespace {

// Releases a unique_lock for a scope (callbacks, device calls) and always retakes it.
class ScopedUnlock {
 public:
  explicit ScopedUnlock(AllocatorLock& lock) : lock_(lock) { lock_.unlock(); }
  ~ScopedUnlock() { lock_.lock(); }
  ScopedUnlock(const ScopedUnlock&) = delete;
  ScopedUnlock& operator=(const ScopedUnlock&) = delete;

 private:
  AllocatorLock& lock_;
};

// True while this thread runs OOM observers. An observer that allocates and runs out of
// memory itself gets its OutOfMemoryError, but the observers are not run again for it:
// otherwise an observer that always allocates would recurse until the stack overflows.
thread_local bool running_oom_observers = false;

// Runs each observer once. Observers are callers' code inside the error path: one that throws
// is reported on stderr and the others still run, so the caller always gets the original
// OutOfMemoryError rather than whatever the observer threw.
void notify_oom_observers(const std::vector<OomObserver>& observers, const OomInfo& info) {
  if (running_oom_observers) return;
  running_oom_observers = true;
  for (const OomObserver& observer : observers) {
    try {
      observer(info);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "memsnap: an out-of-memory observer threw: %s\n", e.what());
    } catch (...) {
      std::fprintf(stderr, "memsnap: an out-of-memory observer threw a non-standard exception\n");
    }
  }
  running_oom_observers = false;
}

}  // namespace

Block* DeviceCachingAllocator::allocate_after_miss(BlockPool& pool, StreamId stream,
                                                   size_t rounded_size, size_t requested_size,
                                                   AllocatorLock& lock) {
  // (a) let registered callbacks free memory, then search again
  if (run_free_memory_callbacks(lock)) {
    if (Block* block = take_free_block(pool, stream, rounded_size)) return block;
  }
  // (b) garbage-collect old cached blocks when above the threshold
  if (gc_enabled()) garbage_collect_cached_blocks();
  // (c) a new segment; a free block of a pool made with use_on_oom; (d) after releasing
  // oversize cached blocks; (e) after releasing all, except while a pool is being allocated
  // to (PyTorch frees nothing then)
  Block* block = reserve_segment(pool, stream, rounded_size, false, lock);
  if (block == nullptr && pool.owner() == nullptr)
    block = take_from_fallback_pools(pool.is_small(), stream, rounded_size);
  if (block == nullptr && release_oversize_cached_blocks(pool, stream, rounded_size))
    block = reserve_segment(pool, stream, rounded_size, false, lock);
  if (block == nullptr && allocating_to_.empty()) {
    release_cached_memory(MempoolId{});
    block = reserve_segment(pool, stream, rounded_size, true, lock);
  }
  // (f)
  if (block == nullptr)
    report_out_of_memory(requested_size, rounded_size, segment_size_for(rounded_size, config_),
                         stream, &pool, lock);
  return block;
}

bool DeviceCachingAllocator::run_free_memory_callbacks(AllocatorLock& lock) {
  if (free_memory_callbacks_.empty()) return false;
  const std::vector<FreeMemoryCallback> callbacks = free_memory_callbacks_;
  bool freed = false;
  ScopedUnlock unlocked(lock);  // callbacks free memory through this allocator
  for (const FreeMemoryCallback& callback : callbacks) freed = callback() || freed;
  return freed;
}

// Reserves a new segment for the request and returns its single (unsplit) block, or
// nullptr when the device or the memory fraction says no.
Block* DeviceCachingAllocator::reserve_segment(BlockPool& pool, StreamId stream,
                                               size_t rounded_size, bool is_retry,
                                               AllocatorLock& lock) {
  const size_t size = segment_size_for(rounded_size, config_);
  if (is_retry) stats_.num_alloc_retries += 1;
  if (memory_cap_ && reserved_bytes() + size > memory_cap_->bytes) return nullptr;
  if (!segment_asked_) note_figures_before_first_segment();
  // A pool with its own segment source takes fixed segments from it, expandable segments or not.
  const std::shared_ptr<SegmentSource> source =
      pool.owner() != nullptr ? pool.owner()->segment_source : nullptr;
  if (config_.expandable_segments && config_.caching && source == nullptr)
    return allocate_expandable(pool, stream, rounded_size);
  const auto reserve = [&] {
    return source != nullptr ? source->reserve(device_, size, stream) : backend_.reserve(device_, size);
  };
  std::optional<uintptr_t> address;
  if (config_.release_lock_on_cudamalloc) {
    ScopedUnlock unlocked(lock);
    address = reserve();
  } else {
    address = reserve();
  }
  if (!address) return nullptr;

  Block* block = add_segment(pool, stream, *address, size, /*page_size=*/0);
  Segment& added = *block->segment;
  DeviceStats::increase(stats_.segment, pool.is_small(), 1);
  DeviceStats::increase(stats_.reserved_bytes, pool.is_small(), static_cast<int64_t>(size));
  added.counted_oversize = size >= config_.max_split_size;
  if (added.counted_oversize) stats_.oversize_segments.increase(1);
  stats_.num_device_alloc += 1;
  if (observer_) observer_->on_segment_alloc(device_, added);
  return block;
}

// Once, before the first segment: what the device and its processes held (one NVML query, under
// the lock, in the life of the allocator). A backend that cannot answer leaves it unset, and so
// does a first segment made for a CUDA graph being captured (no call beside the capture's own);
// the allocation goes on either way.
void DeviceCachingAllocator::note_figures_before_first_segment() {
  segment_asked_ = true;
  if (!allocating_to_.empty()) return;
  try {
    DeviceMemoryFigures figures;
    figures.memory = backend_.memory_info(device_);
    figures.processes = backend_.device_processes(device_);
    figures.time_us = std::chrono::duration_cast<std::chrono::microseconds>(
                          std::chrono::steady_clock::now().time_since_epoch())
                          .count();
    figures_before_first_segment_ = std::move(figures);
  } catch (const std::exception&) {
    figures_before_first_segment_.reset();
  }
}

// Records a segment the device just gave, covered by one block (not yet in any pool); a
// page size makes it expandable, with nothing mapped yet.
Block* DeviceCachingAllocator::add_segment(BlockPool& pool, StreamId stream, uintptr_t address,
                                           size_t size, size_t page_size) {
  auto segment = std::make_unique<Segment>();
  segment->device = device_;
  segment->address = address;
  segment->size = size;
  segment->stream = stream;
  segment->small_pool = pool.is_small();
  if (PrivatePool* owner = pool.owner()) {
    segment->pool_id = owner->id;
    owner->segment_count += 1;
  }
  segment->expandable = page_size != 0;
  segment->page_size = page_size;
  Block* block = new_block();
  block->address = address;
  block->size = size;
  block->stream = stream;
  block->device = device_;
  block->pool = &pool;
  block->segment = segment.get();
  block->expandable = segment->expandable;
  block->mapped = !segment->expandable;
  segment->head = block;
  segments_.emplace(address, std::move(segment));
  return block;
}

// (d) Frees cached oversize blocks (>= max_split_size) on the request's pool and stream: the
// smallest single one that is large enough, else the largest ones until enough is freed.
// Expandable blocks are never released here (their free pages go back in step (e)).
bool DeviceCachingAllocator::release_oversize_cached_blocks(BlockPool& pool, StreamId stream,
                                                            size_t rounded_size) {
  if (config_.max_split_size == kNoMaxSplitSize) return false;
  const size_t wanted = std::max(rounded_size, config_.max_split_size);
  Block* fit = pool.lower_bound(stream, wanted);
  if (fit != nullptr && !fit->expandable) {
    // A split block cannot go back to the device on its own; PyTorch would free it anyway,
    // which corrupts its segment, so memsnap declines instead.
    if (fit->is_split()) return false;
    release_segment(fit);
    return true;
  }
  // None is large enough alone (or the one that is, is expandable): release the largest
  // oversize blocks below it, largest first.
  std::vector<Block*> blocks = pool.ordered_blocks(stream);
  if (fit != nullptr) blocks.erase(std::find(blocks.begin(), blocks.end(), fit), blocks.end());
  size_t released = 0;
  for (auto it = blocks.rbegin(); it != blocks.rend() && released < wanted; ++it) {
    Block* block = *it;
    if (block->size < config_.max_split_size) break;
    if (!block->is_split() && !block->expandable) {
      released += block->size;
      release_segment(block);
    }
  }
  return released >= wanted;
}

// (e) and empty_cache(), as PyTorch's release_cached_blocks: unless a pool is being allocated
// to, wait for every pending free, then release every unsplit segment and unmap the whole free
// pages of expandable segments; then the same for each private pool no longer in use (only
// `target` when it names one), forgetting a pool once it holds no segment.
void DeviceCachingAllocator::release_cached_memory(MempoolId target) {
  if (target.is_global() && allocating_to_.empty()) {
    synchronize_and_free_events();
    release_cached_blocks(large_blocks_);
    release_cached_blocks(small_blocks_);
  }
  for (auto it = private_pools_.begin(); it != private_pools_.end();) {
    PrivatePool& pool = *it->second;
    if (pool.use_count > 0 || (!target.is_global() && pool.id != target)) {
      ++it;
      continue;
    }
    if (!target.is_global()) synchronize_and_free_events(&pool);
    release_cached_blocks(pool.small_blocks);
    release_cached_blocks(pool.large_blocks);
    it = pool.segment_count == 0 ? private_pools_.erase(it) : std::next(it);
  }
}

// In pool order, as PyTorch's release_blocks: unsplit segments go back as they are met;
// expandable blocks are gathered first and unmapped afterwards, and an expandable segment
// left with nothing mapped releases its address space.
//
// PyTorch walks every free block; this walks those inserted since the last pass. The others
// are blocks the last pass left alone, and it would again: whether a block goes back (it is
// unsplit) or is unmapped (it holds a whole page) changes only with its size, address or
// neighbours, and every such change takes the block out of its pool and puts it back. The
// skipped blocks are ones PyTorch's walk passes over, so the order of what is done is the
// same, and a trace of frees on many streams that each end in a retry is not walked whole
// at every retry (issue 53).
void DeviceCachingAllocator::release_cached_blocks(BlockPool& pool) {
  std::vector<Block*> to_unmap;
  for (Block* block : pool.take_inserted_since_last_look()) {
    if (block->expandable)
      to_unmap.push_back(block);
    else if (!block->is_split())
      release_segment(block);
  }
  // Unmapping merges only unmapped blocks, so the free blocks gathered stay valid.
  for (Block* block : to_unmap) {
    Block* unmapped = unmap_free_pages(block);
    if (unmapped != nullptr && !unmapped->is_split()) release_expandable_segment(unmapped);
  }
}

// Returns a free, unsplit block's whole segment to the device.
void DeviceCachingAllocator::release_segment(Block* head) {
  auto found = segments_.find(head->address);
  Segment& segment = *found->second;
  const bool small = head->pool->is_small();
  if (observer_) observer_->on_segment_free(device_, segment);
  if (SegmentSource* source = segment_source_of(segment))
    source->release(device_, segment.address, segment.size, segment.stream);
  else
    backend_.release(device_, segment.address, segment.size);
  DeviceStats::decrease(stats_.segment, small, 1);
  DeviceStats::decrease(stats_.reserved_bytes, small, static_cast<int64_t>(segment.size));
  if (segment.counted_oversize) stats_.oversize_segments.decrease(1);
  stats_.num_device_free += 1;
  head->pool->erase(head);
  recycle_block(head);
  erase_segment(found);
}

// Forgets a segment whose memory went back to the device, and its place in a private pool.
void DeviceCachingAllocator::erase_segment(
    std::map<uintptr_t, std::unique_ptr<Segment>>::iterator found) {
  if (PrivatePool* pool = find_pool(found->second->pool_id)) pool->segment_count -= 1;
  segments_.erase(found);
}

// (b) Frees unsplit cached large blocks, oldest first (older than the average age of the
// candidates, repeatedly), until reserved memory is back under the threshold.
void DeviceCachingAllocator::garbage_collect_cached_blocks() {
  const auto threshold = static_cast<size_t>(config_.garbage_collection_threshold *
                                             static_cast<double>(memory_cap_->bytes));
  if (reserved_bytes() <= threshold) return;
  const size_t target = reserved_bytes() - threshold;
  uint64_t total_age = 0;
  size_t candidates = 0;
  for (const Block* block : large_blocks_.ordered_blocks()) {
    if (!block->is_split()) {
      total_age += large_blocks_.age_of(block);
      ++candidates;
    }
  }
  size_t reclaimed = 0;
  bool freed_any = true;
  while (reclaimed < target && freed_any && candidates > 0) {
    const double age_threshold = static_cast<double>(total_age) / static_cast<double>(candidates);
    freed_any = false;
    for (Block* block : large_blocks_.ordered_blocks()) {
      const uint64_t age = large_blocks_.age_of(block);
      if (!block->is_split() && !block->expandable && static_cast<double>(age) >= age_threshold) {
        freed_any = true;
        reclaimed += block->size;
        total_age -= age;
        --candidates;
        release_segment(block);
      }
    }
  }
}

void DeviceCachingAllocator::insert_events(Block* block) {
  std::vector<StreamId> streams = std::move(block->stream_uses);
  block->stream_uses.clear();
  for (StreamId stream : streams) {
    const EventHandle event = backend_.record_event(device_, stream);
    block->event_count += 1;
    pending_events_[stream].emplace_back(event, block);
  }
}

// Frees the blocks whose events have all completed. Each stream's events are checked in
// the order recorded, stopping at the first that is still pending; streams in stream order.
// When the backend can tell on which streams events completed since the last look, only
// those are checked: the others' oldest events are still pending, so checking them would
// change nothing (and freeing blocks completes no event, so no stream joins them meanwhile).
// A replay that waits for each deferred free on a stream of its own has as many streams as
// frees pending; asking each of them on every allocation would cost time quadratic in them.
void DeviceCachingAllocator::process_events() {
  const auto process = [&](std::deque<std::pair<EventHandle, Block*>>& queue) {
    while (!queue.empty()) {
      auto [event, block] = queue.front();
      if (!backend_.event_completed(event)) break;
      backend_.release_event(event);
      queue.pop_front();
      if (--block->event_count == 0) free_block(block);
    }
  };
  completed_streams_.clear();
  uint64_t count = 0;
  if (!backend_.streams_completed_since(device_, completions_seen_, count, completed_streams_)) {
    for (auto it = pending_events_.begin(); it != pending_events_.end();) {
      process(it->second);
      it = it->second.empty() ? pending_events_.erase(it) : std::next(it);
    }
    return;
  }
  completions_seen_ = count;
  std::sort(completed_streams_.begin(), completed_streams_.end());
  for (StreamId stream : completed_streams_) {
    auto it = pending_events_.find(stream);
    if (it == pending_events_.end()) continue;
    process(it->second);
    if (it->second.empty()) pending_events_.erase(it);
  }
}

void DeviceCachingAllocator::synchronize_and_free_events(const PrivatePool* only) {
  stats_.num_sync_all_streams += 1;
  if (allocating_to_.empty() && !frees_awaiting_events_.empty()) insert_deferred_events();
  for (auto it = pending_events_.begin(); it != pending_events_.end();) {
    auto& queue = it->second;
    for (auto event_it = queue.begin(); event_it != queue.end();) {
      auto [event, block] = *event_it;
      if (only != nullptr && block->pool->owner() != only) {
        ++event_it;
        continue;
      }
      backend_.synchronize_event(event);
      backend_.release_event(event);
      event_it = queue.erase(event_it);
      if (--block->event_count == 0) free_block(block);
    }
    it = queue.empty() ? pending_events_.erase(it) : std::next(it);
  }
}

void DeviceCachingAllocator::report_out_of_memory(size_t requested_size, size_t rounded_size,
                                                  size_t allocation_size, StreamId stream,
                                                  const BlockPool* pool, AllocatorLock& lock) {
  const DeviceMemoryInfo memory = backend_.memory_info(device_);
  stats_.num_ooms += 1;
  OomInfo info;
  info.device = device_;
  info.requested_bytes = requested_size;
  info.rounded_bytes = rounded_size;
  info.allocation_bytes = allocation_size;
  info.stream = stream;
  info.device_total_bytes = memory.total_bytes;
  info.device_free_bytes = memory.free_bytes;
  info.allocated_bytes = static_cast<size_t>(DeviceStats::total(stats_.allocated_bytes));
  info.reserved_bytes = reserved_bytes();
  info.private_pool_free_bytes = private_pool_free_bytes();
  if (pool != nullptr && pool->owner() != nullptr) info.pool = pool->owner()->id;
  if (memory_cap_) info.allowed_bytes = memory_cap_->bytes;
  if (observer_) observer_->on_oom(device_, info);
  const std::vector<OomObserver> observers = oom_observers_;
  lock.unlock();  // observers may snapshot or free memory through the allocator
  notify_oom_observers(observers, info);
  throw OutOfMemoryError(info);
}

void DeviceCachingAllocator::empty_cache() {
  AllocatorLockGuard lock(mutex_);
  release_cached_memory(MempoolId{});
}

// As PyTorch 2.11: a fraction below 1 caps reserved memory (and lets garbage collection run,
// garbage_collection_threshold being a fraction of that cap); 1 removes the cap.
// The observer hears of the cap, so snapshots and replays know it (memory_cap.h).
void DeviceCachingAllocator::set_memory_fraction(double fraction, std::string source) {
  if (!(fraction >= 0.0 && fraction <= 1.0))
    throw std::invalid_argument("memory fraction must be between 0 and 1, got " +
                                std::to_string(fraction));
  const DeviceMemoryInfo memory = backend_.memory_info(device_);
  std::optional<MemoryCap> cap;
  if (fraction < 1.0)
    cap = MemoryCap{static_cast<uint64_t>(fraction * static_cast<double>(memory.total_bytes)), fraction, std::move(source)};
  set_memory_cap(std::move(cap));
}

void DeviceCachingAllocator::set_memory_cap(std::optional<MemoryCap> cap) {
  AllocatorLockGuard lock(mutex_);
  memory_cap_ = std::move(cap);
  if (observer_) observer_->on_memory_cap_changed(device_, memory_cap_);
}

std::optional<MemoryCap> DeviceCachingAllocator::memory_cap() const {
  AllocatorLockGuard lock(mutex_);
  return memory_cap_;
}

}  // namespace memsnap
