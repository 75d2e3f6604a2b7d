// Statistics: PyTorch's names, its current/peak/allocated/freed semantics, resets and the
// summary table.
#include <map>

#include "allocator_harness.h"

namespace memsnap::testing {
namespace {

std::map<std::string, int64_t> as_map(const DeviceStats& stats) {
  auto flat = to_memory_stats(stats);
  return {flat.begin(), flat.end()};
}

TEST(Statistics, KeysFollowPyTorchMemoryStatsNames) {
  Harness h;
  h.alloc(1000);
  const auto stats = as_map(h.stats());
  for (const char* key :
       {"allocation.all.current", "allocated_bytes.all.current", "allocated_bytes.small_pool.peak",
        "allocated_bytes.large_pool.freed", "reserved_bytes.all.allocated", "active.all.current",
        "active_bytes.all.peak", "inactive_split.all.current", "inactive_split_bytes.all.current",
        "requested_bytes.all.current", "segment.all.current", "num_alloc_retries", "num_ooms",
        "num_device_alloc", "num_device_free", "num_sync_all_streams",
        "oversize_allocations.current", "oversize_segments.peak", "max_split_size"})
    EXPECT_TRUE(stats.count(key)) << key;
  EXPECT_EQ(stats.at("allocated_bytes.all.current"), 1024);
  EXPECT_EQ(stats.at("requested_bytes.all.current"), 1000);
  EXPECT_EQ(stats.at("reserved_bytes.small_pool.current"), static_cast<int64_t>(2 * kMiB));
  EXPECT_EQ(stats.at("reserved_bytes.large_pool.current"), 0);
  EXPECT_EQ(stats.at("max_split_size"), -1);
  EXPECT_EQ(stats.size(), 9u * 3 * 4 + 2 * 4 + 6);
}

TEST(Statistics, CurrentPeakAllocatedAndFreedTrackEveryChange) {
  Harness h;
  const uintptr_t a = h.alloc(3 * kMiB);
  const uintptr_t b = h.alloc(2 * kMiB);
  h.free(a);
  const Stat bytes = h.stats().allocated_bytes[kLargePool];
  EXPECT_EQ(bytes.current, static_cast<int64_t>(2 * kMiB));
  EXPECT_EQ(bytes.peak, static_cast<int64_t>(5 * kMiB));
  EXPECT_EQ(bytes.allocated, static_cast<int64_t>(5 * kMiB));
  EXPECT_EQ(bytes.freed, static_cast<int64_t>(3 * kMiB));
  h.free(b);
  EXPECT_EQ(h.stats().allocation[kAggregate].allocated, 2);
  EXPECT_EQ(h.stats().allocation[kAggregate].freed, 2);
  EXPECT_EQ(h.stats().num_device_alloc, 1);
  EXPECT_CONSISTENT(h);
}

// "all" is the pools' sum, and its peak the highest that sum reached: not the sum of the
// pools' peaks, which came at different times.
TEST(Statistics, TheAggregateIsThePoolsSumWithAPeakOfItsOwn) {
  Harness h;
  const uintptr_t small = h.alloc(kMiB / 2);
  h.free(small);
  const uintptr_t large = h.alloc(4 * kMiB);
  const DeviceStats stats = h.stats();
  const StatArray& bytes = stats.allocated_bytes;
  EXPECT_EQ(bytes[kSmallPool].peak, static_cast<int64_t>(kMiB / 2));
  EXPECT_EQ(bytes[kLargePool].peak, static_cast<int64_t>(4 * kMiB));
  EXPECT_EQ(bytes[kAggregate].peak, static_cast<int64_t>(4 * kMiB));
  EXPECT_EQ(bytes[kAggregate].current, bytes[kSmallPool].current + bytes[kLargePool].current);
  EXPECT_EQ(bytes[kAggregate].allocated, static_cast<int64_t>(kMiB / 2 + 4 * kMiB));
  EXPECT_EQ(bytes[kAggregate].freed, static_cast<int64_t>(kMiB / 2));
  EXPECT_EQ(stats.allocation[kAggregate].current, 1);
  // Both pools at once: the sum sets the peak.
  const uintptr_t both = h.alloc(kMiB / 2);
  EXPECT_EQ(h.stats().allocated_bytes[kAggregate].peak, static_cast<int64_t>(kMiB / 2 + 4 * kMiB));
  h.free(both);
  h.free(large);
  h.allocator.reset_peak_stats(0);
  EXPECT_EQ(h.stats().allocated_bytes[kAggregate].peak, 0);
  EXPECT_EQ(h.stats().reserved_bytes[kAggregate].peak, h.reserved());
  EXPECT_CONSISTENT(h);
}

TEST(Statistics, ResetPeakSetsPeaksToCurrent) {
  Harness h;
  h.free(h.alloc(30 * kMiB));
  h.allocator.reset_peak_stats(0);
  EXPECT_EQ(h.stats().allocated_bytes[kAggregate].peak, 0);
  EXPECT_EQ(h.stats().reserved_bytes[kAggregate].peak, static_cast<int64_t>(30 * kMiB));
}

TEST(Statistics, ResetAccumulatedClearsTotalsAndCounters) {
  Harness h;
  h.free(h.alloc(30 * kMiB));
  h.allocator.reset_accumulated_stats(0);
  EXPECT_EQ(h.stats().allocated_bytes[kAggregate].allocated, 0);
  EXPECT_EQ(h.stats().allocated_bytes[kAggregate].freed, 0);
  EXPECT_EQ(h.stats().num_device_alloc, 0);
  EXPECT_EQ(h.stats().reserved_bytes[kAggregate].current, static_cast<int64_t>(30 * kMiB));
  EXPECT_CONSISTENT(h);
}

// After a reset of the totals, blocks allocated before it still count as current, and their
// frees count as freed: allocated - freed is no longer current, in each pool and in "all".
TEST(Statistics, TotalsCountFromTheirResetWhileBlocksStayLive) {
  Harness h;
  const uintptr_t kept = h.alloc(4 * kMiB);
  h.alloc(1000);
  h.allocator.reset_accumulated_stats(0);
  h.alloc(2 * kMiB);
  h.free(kept);
  const DeviceStats stats = h.stats();
  const Stat large = stats.allocated_bytes[kLargePool];
  EXPECT_EQ(large.current, static_cast<int64_t>(2 * kMiB));
  EXPECT_EQ(large.allocated, static_cast<int64_t>(2 * kMiB));
  EXPECT_EQ(large.freed, static_cast<int64_t>(4 * kMiB));
  const Stat small = stats.allocated_bytes[kSmallPool];
  EXPECT_EQ(small.current, 1024);
  EXPECT_EQ(small.allocated, 0);
  EXPECT_EQ(small.freed, 0);
  const Stat all = stats.allocated_bytes[kAggregate];
  EXPECT_EQ(all.current, static_cast<int64_t>(2 * kMiB) + 1024);
  EXPECT_EQ(all.allocated, static_cast<int64_t>(2 * kMiB));
  EXPECT_EQ(all.freed, static_cast<int64_t>(4 * kMiB));
  EXPECT_EQ(stats.allocation[kAggregate].allocated, 1);
  EXPECT_EQ(stats.allocation[kAggregate].freed, 1);
  EXPECT_EQ(stats.allocation[kAggregate].current, 2);
  EXPECT_EQ(stats.reserved_bytes[kAggregate].allocated, 0);  // the 2 MiB came from the cache
  // A second reset starts the totals again from there.
  h.allocator.reset_accumulated_stats(0);
  h.alloc(6 * kMiB);
  EXPECT_EQ(h.stats().allocated_bytes[kLargePool].allocated, static_cast<int64_t>(6 * kMiB));
  EXPECT_EQ(h.stats().allocated_bytes[kLargePool].freed, 0);
  EXPECT_CONSISTENT(h);
}

TEST(Statistics, RequestedBytesCountWhatWasAskedNotWhatWasRounded) {
  Harness h;
  h.alloc(1);
  h.alloc(700);
  EXPECT_EQ(h.stats().requested_bytes[kAggregate].current, 701);
  EXPECT_EQ(h.stats().allocated_bytes[kAggregate].current, 512 + 1024);
}

TEST(Statistics, SummaryTableShowsTheMainRows) {
  Harness h;
  h.alloc(3 * kMiB);
  const std::string table = h.allocator.memory_summary(0);
  for (const char* row : {"memsnap memory summary, device ID 0", "Allocated memory",
                          "from large pool", "GPU reserved memory", "Non-releasable memory",
                          "Allocations", "3.00 MiB", "20.00 MiB"})
    EXPECT_NE(table.find(row), std::string::npos) << row << "\n" << table;
  // Every line of the table has the same width.
  size_t width = table.find('\n');
  for (size_t start = 0; start < table.size();) {
    const size_t end = table.find('\n', start);
    EXPECT_EQ(end - start, width) << table.substr(start, end - start);
    start = end + 1;
  }
}

TEST(Statistics, FormatsBytesForPeople) {
  EXPECT_EQ(format_bytes(0), "0 B");
  EXPECT_EQ(format_bytes(1023), "1023 B");
  EXPECT_EQ(format_bytes(1536), "1.50 KiB");
  EXPECT_EQ(format_bytes(int64_t{3} << 30), "3.00 GiB");
  EXPECT_EQ(format_bytes(-2048), "-2.00 KiB");
}

}  // namespace
}  // namespace memsnap::testing
