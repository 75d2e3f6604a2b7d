// The caching policy for one device: PyTorch's CUDA caching allocator, rule for rule.
//
// A request is rounded (policy.h), served from the best-fitting cached block of its pool and
// stream (split if the rules say so), and only when none fits does the slow path run:
// free-memory callbacks, garbage collection, a new segment, releasing oversize cached
// blocks, releasing every cached segment (a "retry"), and finally an out-of-memory error.
// Freed blocks merge with free neighbours; blocks used on other streams wait for events.
//
// Files: device_caching_allocator.cpp holds the fast path (malloc/free and their block
// bookkeeping), device_slow_path.cpp everything that touches the device or recovers memory,
// device_expandable.cpp expandable segments (expandable_segments:True), device_private_pools.cpp
// private pools (CUDA graphs, MemPool; private_pool.h), device_pool_checkpoint.cpp a pool's state
// saved and put back (CUDA graph trees), device_restore.cpp what replay needs to start from a
// recorded state.
// Thread-safe: one mutex per device guards all state below it, the map of live allocations
// included, so allocate and deallocate each take a single lock.
#pragma once

#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <unordered_set>
#include <vector>

#include "allocator/allocator_config.h"
#include "allocator/allocator_mutex.h"
#include "allocator/allocator_observer.h"
#include "allocator/allocator_state.h"
#include "allocator/block.h"
#include "allocator/block_pool.h"
#include "allocator/device_backend.h"
#include "allocator/device_stats.h"
#include "allocator/memory_cap.h"
#include "allocator/out_of_memory.h"
#include "allocator/pointer_map.h"
#include "allocator/policy.h"
#include "allocator/private_pool.h"

namespace memsnap {

class DeviceCachingAllocator {
 public:
  DeviceCachingAllocator(int device, DeviceBackend& backend, const AllocatorConfig& config);
  ~DeviceCachingAllocator();  // returns every segment to the backend
  DeviceCachingAllocator(const DeviceCachingAllocator&) = delete;
  DeviceCachingAllocator& operator=(const DeviceCachingAllocator&) = delete;

  // Allocates at least `size` bytes and returns their address; throws OutOfMemoryError.
  uintptr_t allocate(size_t size, StreamId stream);
  // Frees a live allocation of this device. Returns false, changing nothing, when `address`
  // is not one (never allocated here, or already freed).
  bool deallocate(uintptr_t address);
  // The same, telling what PyTorch's profiler is told of each (MemoryReport): the block's
  // bytes and this device's totals right after, read under the same lock.
  uintptr_t allocate_reporting(size_t size, StreamId stream, MemoryReport& report);
  bool deallocate_reporting(uintptr_t address, MemoryReport& report);
  // Marks a live allocation as used on `stream`: its memory is reused only after the work
  // queued on `stream` at the time of the free has completed. False when not live here.
  bool record_stream(uintptr_t address, StreamId stream);
  // The block size (after rounding) of a live allocation, or 0 when `address` is not one.
  size_t allocated_size(uintptr_t address) const;
  // Waits for pending frees, then returns every unsplit cached segment to the device, and the
  // free segments of private pools no longer in use. While a pool is being allocated to (a
  // graph capturing), the global pools keep their memory: PyTorch frees nothing then.
  void empty_cache();
  // The same for one private pool alone, when it is no longer in use.
  void empty_cache(MempoolId pool);

  // --- private pools (private_pool.h) ---
  // Creates the pool with one use, or adds a use to it (PyTorch's createOrIncrefPool: a MemPool
  // made, a graph sharing another's pool). A pool made with a segment source gets its segments
  // from it; giving one for a pool that exists throws std::invalid_argument.
  void create_or_incref_pool(MempoolId pool, std::shared_ptr<SegmentSource> source = nullptr);
  // From now until end_allocate_to_pool(pool), requests whose stream `filter` accepts are
  // served from the pool (created, or given one more use, here). Throws
  // std::invalid_argument for the global pool or a pool already being allocated to.
  void begin_allocate_to_pool(MempoolId pool, PoolFilter filter);
  // Requests go back to the global pools (or another pool being allocated to). Throws
  // std::invalid_argument when `pool` is not being allocated to.
  void end_allocate_to_pool(MempoolId pool);
  // Ends one use of the pool; at none, its free segments go back at the next empty_cache.
  // Throws std::invalid_argument for a pool that does not exist or has no use left.
  void release_pool(MempoolId pool);
  // The pool's uses, 0 for a pool that does not exist (or is released and waiting).
  int pool_use_count(MempoolId pool) const;
  // True while some pool is being allocated to.
  bool allocating_to_pool() const;
  // torch.cuda.MemPool(use_on_oom=True): when the device cannot give a global request a new
  // segment, a free block of this pool may serve it. Throws std::invalid_argument for no pool.
  void set_use_on_oom(MempoolId pool, bool use_on_oom);
  // torch.cuda.MemPool(no_split=True): the pool's blocks are never split.
  void set_no_split(MempoolId pool);
  // The pool's segments and blocks now (PyTorch's getCheckpointState).
  PoolCheckpoint checkpoint_pool(MempoolId pool) const;
  // Puts a checkpoint back (PyTorch's setCheckpointPoolState): every allocation in the pool
  // ends, then the checkpoint's segments are cut into its blocks again and its allocated blocks
  // become live allocations. Throws std::invalid_argument, changing nothing, when the pool is
  // gone or released, has expandable segments, or a checkpointed segment is not one of its own.
  PoolRestore restore_pool(const PoolCheckpoint& checkpoint);
  // Installs a segment with a given layout, as a recorded run had it (replay starts from the
  // state a trace began in). The layout must tile the segment with no two free blocks
  // adjacent; the backend must place it at layout.address (the simulated backend does when
  // asked with prefer_address_for_next_reserve). Active and pending blocks become live
  // allocations, returned by address. Counts no device allocation and tells no observer:
  // the segment predates what is being watched. Throws std::invalid_argument otherwise.
  std::vector<uintptr_t> restore_segment(const SegmentRecord& layout);
  // Returns the segment at `address` to the device if it is cached whole (one free,
  // unsplit block); false, changing nothing, otherwise. In an expandable segment `address`
  // names the start of unmapped pages: the whole free pages of the free block holding it are
  // unmapped (false when it is not in a free block or the block holds no whole page). Replay
  // uses it to release exactly the memory a recorded run released.
  bool release_cached_segment(uintptr_t address);
  // Returns the blocks whose pending frees' events have completed to the pools now, rather
  // than at the next allocation (replay: a recorded free_completed happened at this point).
  void collect_completed_frees();
  // Caps reserved memory at `fraction` of the device's total (0 <= fraction <= 1; 1 removes
  // the cap); `source` says who set it (memory_cap.h).
  void set_memory_fraction(double fraction, std::string source = std::string(kCapFromCode));
  // Sets the cap in bytes as it was (a replay of a recorded run), or removes it.
  void set_memory_cap(std::optional<MemoryCap> cap);
  std::optional<MemoryCap> memory_cap() const;
  // The cap, for a caller that holds this device's lock (inside with_lock).
  const std::optional<MemoryCap>& memory_cap_while_locked() const { return memory_cap_; }

  DeviceStats stats() const;
  // The device's figures (DeviceBackend::memory_info and device_processes) taken once, just
  // before this allocator first asked the device for a segment: what the process held there
  // besides the allocator then, its CUDA context as created and whatever it had allocated
  // before. Unset before that, or where the backend could not say.
  std::optional<DeviceMemoryFigures> figures_before_first_segment() const;
  // Every segment and its blocks, in address order.
  std::vector<SegmentRecord> segment_records() const;
  void reset_peak_stats();
  void reset_accumulated_stats();

  void add_oom_observer(OomObserver observer);
  void add_free_memory_callback(FreeMemoryCallback callback);
  void set_observer(AllocatorObserver* observer);
  // Whether an observer is set (with none, allocate and deallocate take the fastest path).
  bool observed() const;
  // Runs `fn` holding this device's lock. An observer's hooks run under that same lock, so
  // the observer can guard its own per-device state with it instead of taking a second lock
  // on every event. `fn` must not call back into the allocator.
  template <typename Fn>
  decltype(auto) with_lock(Fn&& fn) const {
    AllocatorLockGuard lock(mutex_);
    return fn();
  }

  // Changes the settings from the next request on, as PyTorch applies
  // torch.cuda.memory._set_allocator_settings: segments and blocks already made keep what they
  // are (an expandable segment stays expandable; with expandable_segments off, best fit passes
  // over its blocks). The observer is told under the lock, between the events it falls between.
  void set_config(const AllocatorConfig& config, const std::string& request = {});

  int device() const { return device_; }
  AllocatorConfig config() const;  // a copy: settings may change while others read them
  // The settings, for a caller that holds this device's lock (inside with_lock).
  const AllocatorConfig& config_while_locked() const { return config_; }

 private:
  friend class InvariantChecker;
  using PendingEvents = std::map<StreamId, std::deque<std::pair<EventHandle, Block*>>>;

  // --- fast path (device_caching_allocator.cpp); the caller holds mutex_ ---
  Block* malloc(size_t size, StreamId stream, AllocatorLock& lock);
  void free(Block* block);
  // The same, called while an observer records (allocate and deallocate inline every call the
  // file can see otherwise).
  Block* malloc_observed(size_t size, StreamId stream, AllocatorLock& lock);
  void free_observed(Block* block);
  // While some pool is being allocated to: the pool that serves a request on `stream`.
  BlockPool& routed_pool_for(size_t rounded_size, StreamId stream);
  PrivatePool* find_pool(MempoolId pool) const;
  std::pair<PrivatePool*, bool> find_or_make_pool(MempoolId pool, std::shared_ptr<SegmentSource> source = nullptr);
  PrivatePool& add_pool_use(MempoolId pool);
  Block* take_from_fallback_pools(bool small, StreamId stream, size_t rounded_size);
  size_t private_pool_free_bytes() const;
  Block* take_free_block(BlockPool& pool, StreamId stream, size_t rounded_size);
  // `split_any_remainder`: split off whatever the block holds beyond the request (a restored
  // checkpoint's layout), whatever the split rules say.
  Block* finish_allocation(Block* block, size_t rounded_size, size_t requested_size,
                           bool split_any_remainder = false);
  void free_block(Block* block);
  // The pool's own segment source, when it has one (a MemPool with its own allocator).
  static SegmentSource* segment_source_of(const BlockPool& pool) {
    return pool.owner() != nullptr ? pool.owner()->segment_source.get() : nullptr;
  }
  SegmentSource* segment_source_of(const Segment& segment) const {
    const PrivatePool* pool = segment.pool_id.is_global() ? nullptr : find_pool(segment.pool_id);
    return pool != nullptr ? pool->segment_source.get() : nullptr;
  }
  Block* merge_free_neighbours(Block* block, int64_t& inactive_split_blocks_change,
                               int64_t& inactive_split_bytes_change);
  Block* split_block_at(Block* block, size_t offset);
  void absorb_next(Block* block);
  Block* new_block();
  void recycle_block(Block* block);
  bool gc_enabled() const {
    return memory_cap_ && config_.garbage_collection_threshold > 0.0;
  }

  // --- slow path (device_slow_path.cpp) ---
  Block* allocate_after_miss(BlockPool& pool, StreamId stream, size_t rounded_size,
                             size_t requested_size, AllocatorLock& lock);
  bool run_free_memory_callbacks(AllocatorLock& lock);
  Block* reserve_segment(BlockPool& pool, StreamId stream, size_t rounded_size, bool is_retry,
                         AllocatorLock& lock);
  Block* add_segment(BlockPool& pool, StreamId stream, uintptr_t address, size_t size,
                     size_t page_size);
  bool release_oversize_cached_blocks(BlockPool& pool, StreamId stream, size_t rounded_size);
  void release_cached_memory(MempoolId target);
  void release_cached_blocks(BlockPool& pool);
  void release_segment(Block* head);
  void erase_segment(std::map<uintptr_t, std::unique_ptr<Segment>>::iterator found);
  void garbage_collect_cached_blocks();
  void insert_events(Block* block);
  void process_events();
  // --- frees during a CUDA graph capture (device_capture_reuse.cpp) ---
  void defer_events(Block* block);
  void insert_deferred_events();
  void note_stream_use_in_capture(Block* block, StreamId stream);
  std::vector<uintptr_t> free_markers(const Block* block);
  void free_blocks_safe_in_capture(StreamId stream);
  void forget_capture_of(MempoolId pool);
  // Waits for the pending frees (of one private pool's blocks alone, when given).
  void synchronize_and_free_events(const PrivatePool* only = nullptr);
  [[noreturn]] void report_out_of_memory(size_t requested_size, size_t rounded_size,
                                         size_t allocation_size, StreamId stream,
                                         const BlockPool* pool, AllocatorLock& lock);

  // --- expandable segments (device_expandable.cpp) ---
  Block* allocate_expandable(BlockPool& pool, StreamId stream, size_t rounded_size);
  Block* find_expandable_room(BlockPool& pool, StreamId stream, size_t rounded_size);
  Block* new_expandable_segment(BlockPool& pool, StreamId stream);
  Block* map_block(Block* unmapped, size_t bytes);
  Block* unmap_free_pages(Block* block);
  void release_expandable_segment(Block* whole);
  Block* best_fit_by_expandable_size(BlockPool& pool, Block* first);
  void release_expandable_segments_at_exit();

  void note_figures_before_first_segment();

  size_t reserved_bytes() const {
    return static_cast<size_t>(DeviceStats::total(stats_.reserved_bytes));
  }

  const int device_;
  DeviceBackend& backend_;
  AllocatorConfig config_;  // under mutex_, as everything below

  mutable AllocatorMutex mutex_;
  // Live allocations by address, under the same lock as the policy, so a call takes one lock.
  PointerMap live_blocks_;
  BlockPool small_blocks_{true};  // free blocks of requests <= 1 MiB
  BlockPool large_blocks_{false};
  std::map<uintptr_t, std::unique_ptr<Segment>> segments_;  // by address
  PendingEvents pending_events_;  // per stream, in the order recorded
  // The backend's completion count when process_events last asked it which streams' events
  // completed (DeviceBackend::streams_completed_since), and a buffer for its answer.
  uint64_t completions_seen_ = 0;
  std::vector<StreamId> completed_streams_;
  // Private pools by id, and those being allocated to, in the order begun (the last begun
  // whose filter accepts a request's stream serves it: routed_pool_for).
  std::map<MempoolId, std::unique_ptr<PrivatePool>> private_pools_;
  std::vector<std::pair<PrivatePool*, PoolFilter>> allocating_to_;
  // Blocks freed while a pool was being allocated to, used on other streams: events cannot
  // be recorded and queried during a capture, so theirs wait until no pool is.
  struct DeferredFree {
    Block* block;
    std::vector<uintptr_t> markers;  // graph nodes after its last uses; none: wait for the end
  };
  std::vector<DeferredFree> frees_awaiting_events_;
  // Streams a block was used on (record_stream) during a capture: their uses end with it.
  std::map<Block*, std::vector<StreamId>> capture_stream_uses_;
  // graph_capture_record_stream_reuse: by capture, by stream, the graph nodes known to be
  // ancestors of (or to be) the stream's terminals; and the capture each pool's graph is.
  std::map<uint64_t, std::map<StreamId, std::unordered_set<uintptr_t>>> capture_reuse_;
  std::map<MempoolId, uint64_t> pool_capture_ids_;
  DeviceStats stats_;  // unsettled (device_stats.h): stats() settles a copy
  bool segment_asked_ = false;  // ever: the figures before the first are taken once
  std::optional<DeviceMemoryFigures> figures_before_first_segment_;
  std::optional<MemoryCap> memory_cap_;  // reserved memory never exceeds its bytes

  std::vector<std::unique_ptr<Block>> block_storage_;  // owns every Block object
  std::vector<Block*> spare_blocks_;                   // recycled, ready for reuse

  std::vector<OomObserver> oom_observers_;
  std::vector<FreeMemoryCallback> free_memory_callbacks_;
  AllocatorObserver* observer_ = nullptr;
};

}  // namespace memsnap
