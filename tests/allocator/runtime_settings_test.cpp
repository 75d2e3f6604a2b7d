// Settings changed while a program runs (PyTorch's torch.cuda.memory._set_allocator_settings):
// they apply from the next request on, blocks and segments already made keep what they are, and
// the statistics stay true to the blocks.
#include "allocator_harness.h"

#include <string>
#include <vector>

#include "allocator/allocator_observer.h"

namespace memsnap::testing {
namespace {

TEST(RuntimeSettings, RoundingChangesFromTheNextRequest) {
  Harness h;
  const size_t bytes = 4 * 21 * kMiB;  // 84 MiB: plain rounding keeps it, 4 divisions make it 96
  const uintptr_t before = h.alloc(bytes);
  h.allocator.set_config(config_from("roundup_power2_divisions:4"));
  const uintptr_t after = h.alloc(bytes);
  EXPECT_EQ(h.allocator.allocated_size(reinterpret_cast<void*>(before)), bytes);
  EXPECT_EQ(h.allocator.allocated_size(reinterpret_cast<void*>(after)), 96 * kMiB);
  EXPECT_EQ(h.allocator.config().roundup_power2_divisions[6], 4u);
  EXPECT_CONSISTENT(h);
}

TEST(RuntimeSettings, ExpandableBlocksAreSkippedWhileExpandableSegmentsAreOff) {
  Harness h("expandable_segments:True");
  const uintptr_t grown = h.alloc(40 * kMiB);
  h.free(grown);  // a free block of an expandable segment, still mapped
  h.allocator.set_config(config_from("expandable_segments:False"));
  const uintptr_t fixed = h.alloc(40 * kMiB);
  EXPECT_NE(fixed, grown) << "best fit took an expandable block while expandable segments are off";
  for (const SegmentRecord& s : h.allocator.device(0).segment_records()) {
    if (s.address == fixed) {
      EXPECT_FALSE(s.expandable);
    }
  }
  h.allocator.set_config(config_from("expandable_segments:True"));
  const uintptr_t again = h.alloc(40 * kMiB);
  EXPECT_EQ(again, grown) << "the expandable block serves again once they are on";
  h.free(fixed);
  h.free(again);
  h.allocator.empty_cache();  // releases fixed and expandable memory alike
  EXPECT_EQ(h.reserved(), 0);
  EXPECT_CONSISTENT(h);
}

TEST(RuntimeSettings, OversizeCountsStayTrueWhenMaxSplitSizeChanges) {
  Harness h("max_split_size_mb:40");
  const uintptr_t big = h.alloc(60 * kMiB);
  EXPECT_EQ(h.stats().oversize_allocations.current, 1);
  EXPECT_EQ(h.stats().oversize_segments.current, 1);
  EXPECT_EQ(h.stats().max_split_size, int64_t{40} * static_cast<int64_t>(kMiB));
  h.allocator.set_config(config_from(""));
  EXPECT_EQ(h.stats().max_split_size, -1);
  h.free(big);
  h.allocator.empty_cache();
  EXPECT_EQ(h.stats().oversize_allocations.current, 0);
  EXPECT_EQ(h.stats().oversize_segments.current, 0);
  EXPECT_CONSISTENT(h);
}

TEST(RuntimeSettings, ObserversHearTheChangeAndTheRequest) {
  struct Watcher : AllocatorObserver {
    void on_settings_changed(int, const AllocatorConfig& config, const std::string& request) override {
      seen.push_back(to_config_string(config) + " <- " + request);
    }
    std::vector<std::string> seen;
  } watcher;
  Harness h;
  h.allocator.set_observer(&watcher);
  h.allocator.set_config(config_from("max_split_size_mb:64"), "max_split_size_mb:64");
  h.allocator.set_observer(nullptr);
  EXPECT_EQ(watcher.seen, std::vector<std::string>{"max_split_size_mb:64 <- max_split_size_mb:64"});
}

TEST(RuntimeSettings, SettingsTheDeviceCannotHonourChangeNothing) {
  auto backend = std::make_shared<SimulatedBackend>(
      SimulatedBackend::Options{1, size_t{80} << 30, true, /*supports_expandable_segments=*/false});
  CachingAllocator allocator(backend, config_from("max_split_size_mb:64"));
  EXPECT_THROW(allocator.set_config(config_from("expandable_segments:True")), std::invalid_argument);
  EXPECT_EQ(allocator.config().max_split_size, 64 * kMiB);
}

TEST(RuntimeSettings, PerProcessMemoryFractionCapsEveryDeviceFromTheStart) {
  Harness h("per_process_memory_fraction:0.5", 200 * kMiB, /*devices=*/2);
  EXPECT_THROW(h.alloc(120 * kMiB, 0, 1), OutOfMemoryError);
  const uintptr_t fits = h.alloc(80 * kMiB);
  h.free(fits);
  EXPECT_CONSISTENT(h);
}

TEST(RuntimeSettings, AFractionOfOneRemovesTheCap) {
  Harness h("garbage_collection_threshold:0.5", 200 * kMiB);
  h.allocator.set_memory_fraction(0.5, 0);
  EXPECT_THROW(h.alloc(120 * kMiB), OutOfMemoryError);
  h.allocator.set_memory_fraction(1.0, 0);
  h.free(h.alloc(60 * kMiB));
  // With no cap there is no garbage collection either (PyTorch 2.11): the cached 60 MiB stay.
  const uintptr_t more = h.alloc(80 * kMiB);
  EXPECT_EQ(h.reserved(), static_cast<int64_t>(140 * kMiB));
  h.free(more);
  EXPECT_CONSISTENT(h);
}

TEST(RuntimeSettings, ReportingVariantsTellTheTotalsAfterEachCall) {
  Harness h;
  MemoryReport report;
  void* ptr = h.allocator.allocate_reporting(3 * kMiB, 0, 0, report);
  EXPECT_EQ(report.block_bytes, 3 * kMiB);
  EXPECT_EQ(report.allocated_bytes, static_cast<int64_t>(3 * kMiB));
  EXPECT_EQ(report.reserved_bytes, static_cast<int64_t>(20 * kMiB));
  EXPECT_EQ(h.allocator.deallocate_reporting(ptr, report), 0);
  EXPECT_EQ(report.block_bytes, 3 * kMiB);
  EXPECT_EQ(report.allocated_bytes, 0);
  EXPECT_EQ(report.reserved_bytes, static_cast<int64_t>(20 * kMiB));
  EXPECT_THROW(h.allocator.deallocate_reporting(ptr, report), std::invalid_argument);
  EXPECT_CONSISTENT(h);
}

}  // namespace
}  // namespace memsnap::testing
