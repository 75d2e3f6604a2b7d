// The public allocator: one DeviceCachingAllocator per device behind a drop-in
// allocate/deallocate.
//
// Each device keeps its own live allocations under its own lock, so with one device a call
// takes exactly one lock. With several, deallocate must first learn which device owns a
// pointer: a directory from address to device, sharded (one lock per shard, held briefly)
// so threads freeing different addresses rarely meet.
//
//   auto backend = std::make_shared<memsnap::SimulatedBackend>();
//   memsnap::CachingAllocator allocator(backend, config);
//   void* p = allocator.allocate(4096, /*device=*/0, stream);
//   allocator.deallocate(p);
#pragma once

#include <array>
#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "allocator/allocator_config.h"
#include "allocator/allocator_mutex.h"
#include "allocator/device_caching_allocator.h"
#include "allocator/pointer_map.h"

namespace memsnap {

class CachingAllocator {
 public:
  // Throws std::invalid_argument for settings memsnap cannot honour yet.
  explicit CachingAllocator(std::shared_ptr<DeviceBackend> backend, AllocatorConfig config = {});
  ~CachingAllocator();
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  // Returns nullptr for 0 bytes; throws OutOfMemoryError, or std::out_of_range for a device
  // that does not exist.
  void* allocate(size_t bytes, int device = 0, StreamId stream = 0);
  // Frees a pointer from allocate(); nullptr is ignored. Throws std::invalid_argument for a
  // pointer this allocator does not own (including a second free of the same pointer).
  void deallocate(void* ptr);
  // allocate and deallocate (of a pointer that is not nullptr), telling what PyTorch's profiler
  // is told of each: the block's bytes and the device's totals right after (MemoryReport).
  // deallocate_reporting returns the pointer's device.
  void* allocate_reporting(size_t bytes, int device, StreamId stream, MemoryReport& report);
  int deallocate_reporting(void* ptr, MemoryReport& report);
  void record_stream(void* ptr, StreamId stream);
  // The block size (after rounding) behind a live pointer.
  size_t allocated_size(void* ptr) const;

  // Installs a recorded segment layout on layout.device (DeviceCachingAllocator::
  // restore_segment); its live blocks are then freed with deallocate like any other.
  std::vector<void*> restore_segment(const SegmentRecord& layout);
  // DeviceCachingAllocator::release_cached_segment on `device`.
  bool release_cached_segment(int device, void* address);
  void empty_cache();  // every device
  // `source`: who set it, for snapshots (memory_cap.h).
  void set_memory_fraction(double fraction, int device, std::string source = std::string(kCapFromCode));
  DeviceStats device_stats(int device) const;
  void reset_peak_stats(int device);
  void reset_accumulated_stats(int device);
  std::string memory_summary(int device) const;

  void add_oom_observer(OomObserver observer);               // every device
  void add_free_memory_callback(FreeMemoryCallback callback);  // every device
  void set_observer(AllocatorObserver* observer);              // every device

  // Changes the settings while the program runs (PyTorch's _set_allocator_settings): every
  // device applies them from its next request on (DeviceCachingAllocator::set_config).
  // `request` is the string the program gave, when there was one (recorded with the change).
  // Throws std::invalid_argument, changing nothing, for settings the devices cannot honour.
  void set_config(AllocatorConfig config, const std::string& request = {});

  int device_count() const { return static_cast<int>(devices_.size()); }
  DeviceCachingAllocator& device(int index) const;
  DeviceBackend& backend() const { return *backend_; }
  AllocatorConfig config() const;  // the settings in effect (a copy: they may change)

  // Every violated invariant, as readable lines (empty when all hold). Takes each lock in
  // turn; for tests and debugging, not the hot path. Safe while other threads allocate: the
  // per-block checks always hold; the count of the pointer directory (several devices) is
  // compared only when no allocation or free ran during the check, since one in flight has
  // changed its device but not yet the directory.
  std::vector<std::string> check_invariants() const;

 private:
  static constexpr size_t kShards = 16;
  struct alignas(64) Shard {
    mutable AllocatorMutex mutex;
    AddressMap<DeviceCachingAllocator> owners;
  };
  Shard& shard_for(uintptr_t address) const {
    return shards_[(address >> 9) % kShards];
  }
  bool uses_directory() const { return devices_.size() > 1; }
  // Counts an allocation or free on the directory path from before its device changes until
  // after the directory does (check_invariants reads the pair).
  class DirectoryOperation {
   public:
    explicit DirectoryOperation(const CachingAllocator& allocator) : allocator_(allocator) {
      allocator_.directory_ops_started_.fetch_add(1);
    }
    ~DirectoryOperation() { allocator_.directory_ops_finished_.fetch_add(1); }
    DirectoryOperation(const DirectoryOperation&) = delete;
    DirectoryOperation& operator=(const DirectoryOperation&) = delete;

   private:
    const CachingAllocator& allocator_;
  };
  // allocate and deallocate with several devices, where the directory tells which owns what.
  [[gnu::noinline]] void* allocate_listed(DeviceCachingAllocator& owner, size_t bytes, StreamId stream);
  [[gnu::noinline]] void deallocate_listed(uintptr_t address);
  // The device that owns a live pointer (nullptr when none does); with several devices,
  // `forget` also drops it from the directory.
  DeviceCachingAllocator* owner_of(uintptr_t address, bool forget) const;

  std::shared_ptr<DeviceBackend> backend_;
  mutable std::mutex config_mutex_;  // config_; set_config holds it until every device has its copy
  AllocatorConfig config_;
  std::vector<std::unique_ptr<DeviceCachingAllocator>> devices_;
  mutable std::array<Shard, kShards> shards_;
  alignas(64) mutable std::atomic<uint64_t> directory_ops_started_{0};
  alignas(64) mutable std::atomic<uint64_t> directory_ops_finished_{0};
};

}  // namespace memsnap
