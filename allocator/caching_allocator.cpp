#include "allocator/caching_allocator.h"

#include <stdexcept>

#include "allocator/invariant_checker.h"

namespace memsnap {
namespace {
std::string hex(uintptr_t address) { return format_hex(address); }

// The errors of the fast paths, out of line so that those paths stay short.
[[noreturn, gnu::cold, gnu::noinline]] void throw_no_device(int index, int count) {
  throw std::out_of_range("no device " + std::to_string(index) + " (the backend has " +
                          std::to_string(count) + ")");
}
[[noreturn, gnu::cold, gnu::noinline]] void throw_not_allocated(uintptr_t address) {
  throw std::invalid_argument("deallocate: " + hex(address) +
                              " was not allocated by this allocator or was already freed");
}
}  // namespace

namespace {
void check_backend_can_honour(const AllocatorConfig& config, DeviceBackend& backend) {
  for (int d = 0; config.expandable_segments && d < backend.device_count(); ++d)
    if (!backend.supports_expandable_segments(d))
      throw std::invalid_argument("allocator config: expandable_segments:True needs a device that " +
                                  std::string("can map memory into reserved address space; the ") +
                                  backend.name() + " backend's device " + std::to_string(d) +
                                  " cannot");
}
}  // namespace

CachingAllocator::CachingAllocator(std::shared_ptr<DeviceBackend> backend, AllocatorConfig config)
    : backend_(std::move(backend)), config_(std::move(config)) {
  if (!backend_) throw std::invalid_argument("CachingAllocator needs a device backend");
  check_backend_can_honour(config_, *backend_);
  const int count = backend_->device_count();
  for (int d = 0; d < count; ++d) {
    devices_.push_back(std::make_unique<DeviceCachingAllocator>(d, *backend_, config_));
    // As PyTorch 2.11 applies per_process_memory_fraction: once, to each device as it is made.
    if (config_.per_process_memory_fraction < 1.0)
      devices_.back()->set_memory_fraction(config_.per_process_memory_fraction,
                                           cap_source_of_settings(config_.origin));
  }
}

void CachingAllocator::set_config(AllocatorConfig config, const std::string& request) {
  check_backend_can_honour(config, *backend_);
  std::lock_guard<std::mutex> lock(config_mutex_);
  for (auto& device : devices_) device->set_config(config, request);
  config_ = std::move(config);
}

AllocatorConfig CachingAllocator::config() const {
  std::lock_guard<std::mutex> lock(config_mutex_);
  return config_;
}

CachingAllocator::~CachingAllocator() = default;

DeviceCachingAllocator& CachingAllocator::device(int index) const {
  if (index < 0 || index >= device_count()) throw_no_device(index, device_count());
  return *devices_[static_cast<size_t>(index)];
}

// With one device, allocate and deallocate end in a tail call to that device's: the
// directory's bookkeeping (and its destructor) is in functions of its own.
void* CachingAllocator::allocate(size_t bytes, int device_index, StreamId stream) {
  if (bytes == 0) return nullptr;
  DeviceCachingAllocator& owner = device(device_index);
  if (!uses_directory()) return reinterpret_cast<void*>(owner.allocate(bytes, stream));
  return allocate_listed(owner, bytes, stream);
}

void* CachingAllocator::allocate_listed(DeviceCachingAllocator& owner, size_t bytes, StreamId stream) {
  DirectoryOperation counted(*this);
  const uintptr_t address = owner.allocate(bytes, stream);
  Shard& shard = shard_for(address);
  AllocatorLockGuard lock(shard.mutex);
  shard.owners.insert(address, &owner);
  return reinterpret_cast<void*>(address);
}

void* CachingAllocator::allocate_reporting(size_t bytes, int device_index, StreamId stream,
                                           MemoryReport& report) {
  if (bytes == 0) return nullptr;
  DeviceCachingAllocator& owner = device(device_index);
  DirectoryOperation counted(*this);
  const uintptr_t address = owner.allocate_reporting(bytes, stream, report);
  if (uses_directory()) {
    Shard& shard = shard_for(address);
    AllocatorLockGuard lock(shard.mutex);
    shard.owners.insert(address, &owner);
  }
  return reinterpret_cast<void*>(address);
}

int CachingAllocator::deallocate_reporting(void* ptr, MemoryReport& report) {
  const auto address = reinterpret_cast<uintptr_t>(ptr);
  DirectoryOperation counted(*this);
  DeviceCachingAllocator* owner = owner_of(address, /*forget=*/true);
  if (owner == nullptr || !owner->deallocate_reporting(address, report)) throw_not_allocated(address);
  return owner->device();
}

std::vector<void*> CachingAllocator::restore_segment(const SegmentRecord& layout) {
  DeviceCachingAllocator& owner = device(layout.device);
  DirectoryOperation counted(*this);
  std::vector<void*> live;
  for (const uintptr_t address : owner.restore_segment(layout)) {
    if (uses_directory()) {
      Shard& shard = shard_for(address);
      AllocatorLockGuard lock(shard.mutex);
      shard.owners.insert(address, &owner);
    }
    live.push_back(reinterpret_cast<void*>(address));
  }
  return live;
}

bool CachingAllocator::release_cached_segment(int device_index, void* address) {
  return device(device_index).release_cached_segment(reinterpret_cast<uintptr_t>(address));
}

DeviceCachingAllocator* CachingAllocator::owner_of(uintptr_t address, bool forget) const {
  if (!uses_directory()) return devices_.empty() ? nullptr : devices_.front().get();
  Shard& shard = shard_for(address);
  AllocatorLockGuard lock(shard.mutex);
  return forget ? shard.owners.erase(address) : shard.owners.find(address);
}

void CachingAllocator::deallocate(void* ptr) {
  if (ptr == nullptr) return;
  const auto address = reinterpret_cast<uintptr_t>(ptr);
  if (!uses_directory()) {
    if (devices_.empty() || !devices_.front()->deallocate(address)) throw_not_allocated(address);
    return;
  }
  deallocate_listed(address);
}

void CachingAllocator::deallocate_listed(uintptr_t address) {
  DirectoryOperation counted(*this);
  DeviceCachingAllocator* owner = owner_of(address, /*forget=*/true);
  if (owner == nullptr || !owner->deallocate(address)) throw_not_allocated(address);
}

void CachingAllocator::record_stream(void* ptr, StreamId stream) {
  if (ptr == nullptr) return;
  const auto address = reinterpret_cast<uintptr_t>(ptr);
  DeviceCachingAllocator* owner = owner_of(address, /*forget=*/false);
  if (owner == nullptr || !owner->record_stream(address, stream))
    throw std::invalid_argument("record_stream: " + hex(address) +
                                " is not a live allocation of this allocator");
}

size_t CachingAllocator::allocated_size(void* ptr) const {
  const auto address = reinterpret_cast<uintptr_t>(ptr);
  DeviceCachingAllocator* owner = owner_of(address, /*forget=*/false);
  const size_t size = owner == nullptr ? 0 : owner->allocated_size(address);
  if (size == 0)
    throw std::invalid_argument("allocated_size: " + hex(address) +
                                " is not a live allocation of this allocator");
  return size;
}

void CachingAllocator::empty_cache() {
  for (auto& d : devices_) d->empty_cache();
}

void CachingAllocator::set_memory_fraction(double fraction, int device_index, std::string source) {
  device(device_index).set_memory_fraction(fraction, std::move(source));
}

DeviceStats CachingAllocator::device_stats(int device_index) const {
  return device(device_index).stats();
}

void CachingAllocator::reset_peak_stats(int device_index) { device(device_index).reset_peak_stats(); }

void CachingAllocator::reset_accumulated_stats(int device_index) {
  device(device_index).reset_accumulated_stats();
}

std::string CachingAllocator::memory_summary(int device_index) const {
  return memsnap::memory_summary(device_stats(device_index), device_index);
}

void CachingAllocator::add_oom_observer(OomObserver observer) {
  for (auto& d : devices_) d->add_oom_observer(observer);
}

void CachingAllocator::add_free_memory_callback(FreeMemoryCallback callback) {
  for (auto& d : devices_) d->add_free_memory_callback(callback);
}

void CachingAllocator::set_observer(AllocatorObserver* observer) {
  for (auto& d : devices_) d->set_observer(observer);
}

std::vector<std::string> CachingAllocator::check_invariants() const {
  std::vector<std::string> problems;
  size_t allocated = 0;
  const uint64_t started_before = directory_ops_started_.load();
  const bool idle_before = directory_ops_finished_.load() == started_before;
  for (const auto& d : devices_) {
    InvariantReport report = InvariantChecker::check(*d);
    allocated += report.allocated_blocks;
    for (std::string& problem : report.problems)
      problems.push_back("device " + std::to_string(d->device()) + ": " + problem);
  }
  if (!uses_directory()) return problems;
  // The directory must name, for every live pointer, the device that holds it.
  size_t listed = 0;
  for (const Shard& shard : shards_) {
    AllocatorLockGuard lock(shard.mutex);
    listed += shard.owners.size();
    shard.owners.for_each([&](uintptr_t address, DeviceCachingAllocator* owner) {
      if (owner->allocated_size(address) == 0)
        problems.push_back("directory: " + hex(address) + " is listed for device " +
                           std::to_string(owner->device()) + ", which does not hold it");
    });
  }
  const bool quiet = idle_before && directory_ops_started_.load() == started_before;
  if (quiet && listed != allocated)
    problems.push_back("directory lists " + std::to_string(listed) + " pointers but " +
                       std::to_string(allocated) + " blocks are allocated");
  return problems;
}

}  // namespace memsnap
