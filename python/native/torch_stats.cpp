#include "python/native/torch_stats.h"

namespace memsnap::pytorch {
namespace {

void copy_stat(const Stat& from, c10::CachingAllocator::Stat& to) {
  to.current = from.current;
  to.peak = from.peak;
  to.allocated = from.allocated;
  to.freed = from.freed;
}

void copy_array(const StatArray& from, c10::CachingAllocator::StatArray& to) {
  static_assert(kNumStatTypes == static_cast<size_t>(c10::CachingAllocator::StatType::NUM_TYPES));
  for (size_t i = 0; i < kNumStatTypes; ++i) copy_stat(from[i], to[i]);
}

}  // namespace

c10::CachingDeviceAllocator::DeviceStats to_torch_stats(const DeviceStats& stats) {
  c10::CachingDeviceAllocator::DeviceStats out;
  copy_array(stats.allocation, out.allocation);
  copy_array(stats.segment, out.segment);
  copy_array(stats.active, out.active);
  copy_array(stats.inactive_split, out.inactive_split);
  copy_array(stats.allocated_bytes, out.allocated_bytes);
  copy_array(stats.reserved_bytes, out.reserved_bytes);
  copy_array(stats.active_bytes, out.active_bytes);
  copy_array(stats.inactive_split_bytes, out.inactive_split_bytes);
  copy_array(stats.requested_bytes, out.requested_bytes);
  out.num_alloc_retries = stats.num_alloc_retries;
  out.num_ooms = stats.num_ooms;
  copy_stat(stats.oversize_allocations, out.oversize_allocations);
  copy_stat(stats.oversize_segments, out.oversize_segments);
  out.num_sync_all_streams = stats.num_sync_all_streams;
  out.num_device_alloc = stats.num_device_alloc;
  out.num_device_free = stats.num_device_free;
  out.max_split_size = stats.max_split_size;
  return out;
}

}  // namespace memsnap::pytorch
