// Allocator statistics with PyTorch's memory_stats() names and semantics.
//
// Each Stat tracks current, peak, and the running totals of increases (`allocated`) and
// decreases (`freed`). Array stats are kept for all/small_pool/large_pool.
//
// While the allocator runs, an array's aggregate ("all") keeps only its peak: its current,
// allocated and freed are the sums of the two pools', which settled() fills in. Every
// change then touches one pool's Stat and, on an increase, the aggregate's peak, instead of
// two whole Stats (the allocator's fast path changes five arrays per allocation). A pool's
// `allocated` is not raised on each increase either: it holds allocated - current - freed,
// which changes only when the accumulated counts are reset, and settled() adds the two back.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace memsnap {

// What PyTorch's profiler is told of one allocation or free (c10::reportMemoryUsageToProfiler):
// the block's bytes and the device's allocated and reserved bytes right after it.
struct MemoryReport {
  size_t block_bytes = 0;
  int64_t allocated_bytes = 0;
  int64_t reserved_bytes = 0;
};

struct Stat {
  int64_t current = 0;
  int64_t peak = 0;
  int64_t allocated = 0;
  int64_t freed = 0;

  void increase(int64_t amount) {
    current += amount;
    allocated += amount;
    if (current > peak) peak = current;
  }
  void decrease(int64_t amount) {
    current -= amount;
    freed += amount;
  }
  void reset_peak() { peak = current; }
  void reset_accumulated() { allocated = freed = 0; }
  bool operator==(const Stat&) const = default;
};

enum StatType : size_t { kAggregate = 0, kSmallPool = 1, kLargePool = 2, kNumStatTypes = 3 };
using StatArray = std::array<Stat, kNumStatTypes>;

struct DeviceStats {
  StatArray allocation;            // number of allocated blocks
  StatArray segment;               // number of reserved segments
  StatArray active;                // allocated or pending-free blocks
  StatArray inactive_split;        // free blocks inside split segments
  StatArray allocated_bytes;
  StatArray reserved_bytes;
  StatArray active_bytes;
  StatArray inactive_split_bytes;
  StatArray requested_bytes;       // bytes asked for (before rounding) by active blocks
  int64_t num_alloc_retries = 0;   // allocations that had to release every cached block
  int64_t num_ooms = 0;
  int64_t num_sync_all_streams = 0;
  int64_t num_device_alloc = 0;
  int64_t num_device_free = 0;
  Stat oversize_allocations;       // allocations of blocks >= max_split_size
  Stat oversize_segments;
  int64_t max_split_size = 0;      // the setting, as PyTorch reports it (-1: unlimited)

  // Adds to the block's pool, and raises the aggregate's peak to the pools' sum if above it.
  static void increase(StatArray& stat, bool small_pool, int64_t amount) {
    Stat& pool = stat[small_pool ? kSmallPool : kLargePool];
    pool.current += amount;  // (and so its allocated, which is kept as allocated - current - freed)
    if (pool.current > pool.peak) pool.peak = pool.current;
    if (const int64_t sum = total(stat); sum > stat[kAggregate].peak) stat[kAggregate].peak = sum;
  }
  static void decrease(StatArray& stat, bool small_pool, int64_t amount) {
    stat[small_pool ? kSmallPool : kLargePool].decrease(amount);
  }
  // The aggregate's current value, while unsettled.
  static int64_t total(const StatArray& stat) {
    return stat[kSmallPool].current + stat[kLargePool].current;
  }

  // These statistics with every aggregate's current, allocated and freed filled in.
  DeviceStats settled() const;
  void reset_peak();
  void reset_accumulated();
};

// Flattened as PyTorch's memory_stats(): "allocated_bytes.all.current", ..., in sorted order.
std::vector<std::pair<std::string, int64_t>> to_memory_stats(const DeviceStats& stats);

// A text table like torch.cuda.memory_summary().
std::string memory_summary(const DeviceStats& stats, int device);

// "1.50 MiB": sizes for people.
std::string format_bytes(int64_t bytes);
// "0x7f00001a2000": how addresses appear in messages.
std::string format_hex(uint64_t value);

}  // namespace memsnap
