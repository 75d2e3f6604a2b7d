#include "allocator/invariant_checker.h"

#include <map>
#include <set>

#include "allocator/device_caching_allocator.h"
#include "allocator/policy.h"

namespace memsnap {
namespace {

// The statistics as recomputed from the blocks.
struct Expected {
  DeviceStats stats;
  void add(StatArray& array, bool small, int64_t amount) {
    DeviceStats::increase(array, small, amount);
  }
};

void compare(std::vector<std::string>& problems, const char* name, const StatArray& actual,
             const StatArray& expected) {
  static const char* kTypes[] = {"all", "small_pool", "large_pool"};
  for (size_t t = 0; t < kNumStatTypes; ++t) {
    if (actual[t].current != expected[t].current)
      problems.push_back(std::string(name) + "." + kTypes[t] + ".current is " +
                         std::to_string(actual[t].current) + " but the blocks say " +
                         std::to_string(expected[t].current));
    if (actual[t].peak < actual[t].current)
      problems.push_back(std::string(name) + "." + kTypes[t] + ".peak is below current");
  }
}

// Unmapped address space: whole pages, in its pool's unmapped set, never allocated or
// waiting, never next to another unmapped range (they merge), only in expandable segments.
void check_unmapped(std::vector<std::string>& problems, const std::string& at,
                    const Segment& segment, const Block& block, const Block* previous) {
  if (!segment.expandable) {
    problems.push_back(at + ": unmapped, but its segment is not expandable");
    return;
  }
  if ((block.address - segment.address) % segment.page_size != 0 ||
      block.size % segment.page_size != 0)
    problems.push_back(at + ": unmapped range not on page boundaries");
  if (block.allocated || block.event_count != 0)
    problems.push_back(at + ": unmapped but allocated or waiting for events");
  if (previous != nullptr && !previous->mapped)
    problems.push_back(at + ": two adjacent unmapped ranges (missed merge)");
  if (!block.pool->holds_unmapped(&block))
    problems.push_back(at + ": unmapped but not in its pool's unmapped set");
}

}  // namespace

InvariantReport InvariantChecker::check(const DeviceCachingAllocator& allocator) {
  AllocatorLockGuard lock(allocator.mutex_);
  InvariantReport report;
  auto& problems = report.problems;
  Expected expected;
  std::set<const Block*> free_blocks;
  std::map<const Block*, int> pending;  // block -> events expected
  std::map<MempoolId, int> segments_per_pool;
  size_t unmapped_blocks = 0;

  for (const auto& [address, segment_ptr] : allocator.segments_) {
    const Segment& segment = *segment_ptr;
    const std::string where = "segment " + std::to_string(address);
    const bool small = segment.small_pool;
    if (!segment.pool_id.is_global()) {
      segments_per_pool[segment.pool_id] += 1;
      if (!allocator.private_pools_.count(segment.pool_id))
        problems.push_back(where + ": its pool " + to_string(segment.pool_id) + " does not exist");
    }
    // An expandable segment counts its mapped bytes as reserved, and is not a "segment" in
    // the statistics (PyTorch's accounting).
    if (!segment.expandable) {
      expected.add(expected.stats.segment, small, 1);
      expected.add(expected.stats.reserved_bytes, small, static_cast<int64_t>(segment.size));
      if (segment.counted_oversize) expected.stats.oversize_segments.increase(1);
    } else if (segment.page_size == 0 || segment.size % segment.page_size != 0) {
      problems.push_back(where + ": expandable segment size is not whole pages");
      continue;
    }
    if (segment.head == nullptr || segment.head->address != segment.address ||
        segment.head->prev != nullptr) {
      problems.push_back(where + ": head block missing or misplaced");
      continue;
    }
    uintptr_t cursor = segment.address;
    const Block* previous = nullptr;
    size_t steps = 0;
    for (const Block* block = segment.head; block != nullptr; block = block->next) {
      if (++steps > segment.size / kMinBlockSize + 1) {
        problems.push_back(where + ": block list loops");
        break;
      }
      const std::string at = where + ", block " + std::to_string(block->address);
      if (block->address != cursor) problems.push_back(at + ": gap or overlap before it");
      if (block->prev != previous) problems.push_back(at + ": prev link broken");
      if (block->segment != &segment) problems.push_back(at + ": points to another segment");
      if (block->stream != segment.stream) problems.push_back(at + ": stream differs from segment");
      if (block->device != allocator.device_) problems.push_back(at + ": wrong device");
      if (block->pool->is_small() != small) problems.push_back(at + ": in the wrong pool kind");
      const PrivatePool* owner = block->pool->owner();
      if ((owner == nullptr ? MempoolId{} : owner->id) != segment.pool_id)
        problems.push_back(at + ": belongs to another pool than its segment");
      if (block->size == 0 || block->size % kMinBlockSize != 0)
        problems.push_back(at + ": size not a positive multiple of 512");
      if (block->allocated && block->event_count != 0)
        problems.push_back(at + ": allocated with pending events");
      if (block->counted_oversize && !block->allocated)
        problems.push_back(at + ": counted as an oversize allocation while not allocated");
      if (block->expandable != segment.expandable)
        problems.push_back(at + ": disagrees with its segment on being expandable");
      if (!block->mapped) {
        check_unmapped(problems, at, segment, *block, previous);
        ++unmapped_blocks;
        cursor += block->size;
        previous = block;
        continue;
      }
      if (segment.expandable)
        expected.add(expected.stats.reserved_bytes, small, static_cast<int64_t>(block->size));
      const bool is_free = block->is_free();
      if (is_free && previous != nullptr && previous->is_free())
        problems.push_back(at + ": two adjacent free blocks (missed merge)");
      const auto size = static_cast<int64_t>(block->size);
      if (block->allocated) {
        ++report.allocated_blocks;
        if (allocator.live_blocks_.find(block->address) != block)
          problems.push_back(at + ": allocated but missing from the live-allocation map");
        expected.add(expected.stats.allocation, small, 1);
        expected.add(expected.stats.allocated_bytes, small, size);
        if (block->counted_oversize) expected.stats.oversize_allocations.increase(1);
      }
      if (!is_free) {
        expected.add(expected.stats.active, small, 1);
        expected.add(expected.stats.active_bytes, small, size);
        expected.add(expected.stats.requested_bytes, small,
                     static_cast<int64_t>(block->requested_size));
        if (!block->allocated) pending[block] = block->event_count;
      } else {
        free_blocks.insert(block);
        if (!block->pool->contains(block))
          problems.push_back(at + ": free but not in its pool");
        if (block->is_split() && !segment.expandable) {
          expected.add(expected.stats.inactive_split, small, 1);
          expected.add(expected.stats.inactive_split_bytes, small, size);
        }
      }
      cursor += block->size;
      previous = block;
    }
    if (cursor != segment.address + segment.size)
      problems.push_back(where + ": blocks cover " + std::to_string(cursor - segment.address) +
                         " of " + std::to_string(segment.size) + " bytes");
  }

  std::vector<const BlockPool*> pools = {&allocator.small_blocks_, &allocator.large_blocks_};
  for (const auto& [id, pool] : allocator.private_pools_) {
    pools.push_back(&pool->small_blocks);
    pools.push_back(&pool->large_blocks);
    const auto counted = segments_per_pool.find(id);
    const int segments = counted == segments_per_pool.end() ? 0 : counted->second;
    if (pool->segment_count != segments)
      problems.push_back("pool " + to_string(id) + " counts " + std::to_string(pool->segment_count) +
                         " segments but holds " + std::to_string(segments));
    if (pool->use_count < 0) problems.push_back("pool " + to_string(id) + " has a negative use count");
  }
  size_t pooled_blocks = 0;
  size_t pooled_unmapped = 0;
  for (const BlockPool* pool : pools) {
    for (std::string& problem : pool->structure_problems()) problems.push_back(std::move(problem));
    for (const Block* block : pool->ordered_blocks())
      if (!free_blocks.count(block))
        problems.push_back("pool holds block " + std::to_string(block->address) +
                           " that is not a free block of any segment");
    pooled_blocks += pool->size();
    pooled_unmapped += pool->unmapped_count();
  }
  if (free_blocks.size() != pooled_blocks)
    problems.push_back("pools and segments disagree on the number of free blocks");
  if (unmapped_blocks != pooled_unmapped)
    problems.push_back("pools and segments disagree on the number of unmapped ranges");

  allocator.live_blocks_.for_each([&](uintptr_t address, const Block* block) {
    if (block->address != address || !block->allocated)
      problems.push_back("live-allocation map: " + std::to_string(address) +
                         " maps to a block that is not allocated there");
  });
  if (allocator.live_blocks_.size() != report.allocated_blocks)
    problems.push_back("live-allocation map holds " + std::to_string(allocator.live_blocks_.size()) +
                       " entries for " + std::to_string(report.allocated_blocks) +
                       " allocated blocks");

  std::map<const Block*, int> queued;
  for (const auto& [stream, queue] : allocator.pending_events_)
    for (const auto& [event, block] : queue) queued[block] += 1;
  // A block freed during a capture holds one event to come, recorded when the capture ends.
  for (const auto& [block, markers] : allocator.frees_awaiting_events_) {
    queued[block] += 1;
    if (block->stream_uses.empty())
      problems.push_back("block " + std::to_string(block->address) +
                         " awaits events but was used on no other stream");
  }
  if (queued != pending) problems.push_back("pending frees and queued events disagree");

  const DeviceStats actual = allocator.stats_.settled();
  expected.stats = expected.stats.settled();
  compare(problems, "allocation", actual.allocation, expected.stats.allocation);
  compare(problems, "segment", actual.segment, expected.stats.segment);
  compare(problems, "active", actual.active, expected.stats.active);
  compare(problems, "inactive_split", actual.inactive_split, expected.stats.inactive_split);
  compare(problems, "allocated_bytes", actual.allocated_bytes, expected.stats.allocated_bytes);
  compare(problems, "reserved_bytes", actual.reserved_bytes, expected.stats.reserved_bytes);
  compare(problems, "active_bytes", actual.active_bytes, expected.stats.active_bytes);
  compare(problems, "inactive_split_bytes", actual.inactive_split_bytes,
          expected.stats.inactive_split_bytes);
  compare(problems, "requested_bytes", actual.requested_bytes, expected.stats.requested_bytes);
  if (actual.oversize_allocations.current != expected.stats.oversize_allocations.current)
    problems.push_back("oversize_allocations.current disagrees with the blocks");
  if (actual.oversize_segments.current != expected.stats.oversize_segments.current)
    problems.push_back("oversize_segments.current disagrees with the blocks");
  return report;
}

}  // namespace memsnap
