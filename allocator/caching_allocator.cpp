#include "allocator/caching_allocator.h"

#include <stdexcept>

#include "allocator/invariant_checker.h"

namespace memsnap {
namespace {
std::string hex(uintptr_t address) {
  char text[32];
  std::snprintf(text, sizeof text, "0x%llx", static_cast<unsigned long long>(address));
  return text;
}
}  // namespace

CachingAllocator::CachingAllocator(std::shared_ptr<DeviceBackend> backend, AllocatorConfig config)
    : backend_(std::move(backend)), config_(std::move(config)) {
  if (!backend_) throw std::invalid_argument("CachingAllocator needs a device backend");
  if (config_.expandable_segments)
    throw std::invalid_argument(
        "allocator config: expandable_segments:True is not supported by memsnap yet");
  const int count = backend_->device_count();
  for (int d = 0; d < count; ++d)
    devices_.push_back(std::make_unique<DeviceCachingAllocator>(d, *backend_, config_));
}

CachingAllocator::~CachingAllocator() = default;

DeviceCachingAllocator& CachingAllocator::device(int index) const {
  if (index < 0 || index >= device_count())
    throw std::out_of_range("no device " + std::to_string(index) + " (the backend has " +
                            std::to_string(device_count()) + ")");
  return *devices_[static_cast<size_t>(index)];
}

void* CachingAllocator::allocate(size_t bytes, int device_index, StreamId stream) {
  if (bytes == 0) return nullptr;
  Block* block = device(device_index).malloc(bytes, stream);
  Shard& shard = shard_for(block->address);
  {
    std::lock_guard<std::mutex> lock(shard.mutex);
    shard.blocks.insert(block->address, block);
  }
  return reinterpret_cast<void*>(block->address);
}

void CachingAllocator::deallocate(void* ptr) {
  if (ptr == nullptr) return;
  const auto address = reinterpret_cast<uintptr_t>(ptr);
  Block* block;
  {
    Shard& shard = shard_for(address);
    std::lock_guard<std::mutex> lock(shard.mutex);
    block = shard.blocks.erase(address);
  }
  if (block == nullptr)
    throw std::invalid_argument("deallocate: " + hex(address) +
                                " was not allocated by this allocator or was already freed");
  devices_[static_cast<size_t>(block->device)]->free(block);
}

Block* CachingAllocator::find_block(void* ptr, const char* operation) const {
  const auto address = reinterpret_cast<uintptr_t>(ptr);
  Shard& shard = shard_for(address);
  std::lock_guard<std::mutex> lock(shard.mutex);
  Block* block = shard.blocks.find(address);
  if (block == nullptr)
    throw std::invalid_argument(std::string(operation) + ": " + hex(address) +
                                " is not a live allocation of this allocator");
  return block;
}

void CachingAllocator::record_stream(void* ptr, StreamId stream) {
  if (ptr == nullptr) return;
  Block* block = find_block(ptr, "record_stream");
  devices_[static_cast<size_t>(block->device)]->record_stream(block, stream);
}

size_t CachingAllocator::allocated_size(void* ptr) const {
  return find_block(ptr, "allocated_size")->size;
}

void CachingAllocator::empty_cache() {
  for (auto& d : devices_) d->empty_cache();
}

void CachingAllocator::set_memory_fraction(double fraction, int device_index) {
  device(device_index).set_memory_fraction(fraction);
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
  size_t mapped = 0;
  std::vector<const Block*> live;
  for (const Shard& shard : shards_) {
    std::lock_guard<std::mutex> lock(shard.mutex);
    mapped += shard.blocks.size();
    shard.blocks.for_each([&](uintptr_t address, Block* block) {
      if (block->address != address)
        problems.push_back("pointer map: " + hex(address) + " maps to a block at " +
                           hex(block->address));
      live.push_back(block);
    });
  }
  size_t allocated = 0;
  for (const auto& d : devices_) {
    InvariantReport report = InvariantChecker::check(*d);
    allocated += report.allocated_blocks;
    for (std::string& problem : report.problems)
      problems.push_back("device " + std::to_string(d->device()) + ": " + problem);
  }
  for (const Block* block : live)
    if (!block->allocated)
      problems.push_back("pointer map: " + hex(block->address) + " maps to a block that is not allocated");
  if (mapped != allocated)
    problems.push_back("pointer map holds " + std::to_string(mapped) + " pointers but " +
                       std::to_string(allocated) + " blocks are allocated");
  return problems;
}

}  // namespace memsnap
