// expandable_segments:True on the simulated device: where memory is mapped, which block a
// request gets, what empty_cache gives back, and how the statistics and snapshots count it.
// The random differential test against a naive model is in reference_model_test.cpp.
#include "allocator_harness.h"

namespace memsnap::testing {
namespace {

constexpr const char* kExpandable = "expandable_segments:True";

struct Mapping {
  uintptr_t address;
  size_t bytes;
  bool mapped;  // false: unmapped
  bool operator==(const Mapping&) const = default;
};

class MappingLog final : public AllocatorObserver {
 public:
  void on_segment_map(int, const Segment&, uintptr_t address, size_t bytes) override {
    events.push_back({address, bytes, true});
  }
  void on_segment_unmap(int, const Segment&, uintptr_t address, size_t bytes) override {
    events.push_back({address, bytes, false});
  }
  void on_segment_alloc(int, const Segment&) override { ++segment_allocs; }
  std::vector<Mapping> events;
  int segment_allocs = 0;
};

// The sequence PyTorch 2.11 recorded in ../shared/data/pytorch-2.11/expandable_segments.pickle
// (maps of 20, 20, 300 and 100 MiB at these offsets, allocations at these addresses).
TEST(ExpandableSegments, GrowLikeTheRecordedPyTorchRun) {
  Harness h(kExpandable);
  MappingLog log;
  h.allocator.set_observer(&log);
  const uintptr_t a = h.alloc(3 * kMiB);
  const uintptr_t base = a;
  const uintptr_t b = h.alloc(30 * kMiB);
  const uintptr_t c = h.alloc(300 * kMiB);
  const uintptr_t d = h.alloc(7 * kMiB);
  h.free(b);
  const uintptr_t e = h.alloc(100 * kMiB);
  EXPECT_EQ(b, base + 3 * kMiB);
  EXPECT_EQ(c, base + 33 * kMiB);
  EXPECT_EQ(d, base + 333 * kMiB);
  EXPECT_EQ(e, base + 340 * kMiB);
  const std::vector<Mapping> expected = {{base, 20 * kMiB, true},
                                         {base + 20 * kMiB, 20 * kMiB, true},
                                         {base + 40 * kMiB, 300 * kMiB, true},
                                         {base + 340 * kMiB, 100 * kMiB, true}};
  EXPECT_EQ(log.events, expected);
  EXPECT_EQ(log.segment_allocs, 0);
  // Only mapped bytes are reserved; expandable memory is neither a segment nor split.
  EXPECT_EQ(h.reserved(), static_cast<int64_t>(440 * kMiB));
  EXPECT_EQ(h.backend->used_bytes(0), 440 * kMiB);
  EXPECT_EQ(h.segments(), 0);
  EXPECT_EQ(h.stats().num_device_alloc, 4);
  EXPECT_EQ(h.stats().inactive_split[kAggregate].current, 0);
  EXPECT_EQ(h.stats().inactive_split_bytes[kAggregate].current, 0);
  h.allocator.set_observer(nullptr);
  EXPECT_CONSISTENT(h);
}

TEST(ExpandableSegments, AddressSpaceIsNineEighthsOfTheDeviceInWholePages) {
  Harness h(kExpandable, size_t{1} << 30);
  const uintptr_t small = h.alloc(1000);
  const uintptr_t large = h.alloc(2 * kMiB);
  EXPECT_EQ(h.backend->address_spaces(0), 2u);
  EXPECT_EQ(h.reserved(), static_cast<int64_t>(22 * kMiB));  // one 2 MiB and one 20 MiB page
  EXPECT_EQ(h.stats().reserved_bytes[kSmallPool].current, static_cast<int64_t>(2 * kMiB));
  // 1 GiB * 9/8 = 1152 MiB: 576 small pages; 57.6 -> 58 large pages (1160 MiB).
  const std::vector<SegmentRecord> records = h.allocator.device(0).segment_records();
  ASSERT_EQ(records.size(), 2u);
  EXPECT_GE(std::max(small, large) - std::min(small, large), 1152 * kMiB);
  h.free(small);
  h.free(large);
  h.allocator.empty_cache();
  EXPECT_EQ(h.backend->address_spaces(0), 0u);
  EXPECT_EQ(h.backend->used_bytes(0), 0u);
  EXPECT_CONSISTENT(h);
}

TEST(ExpandableSegments, SmallRequestsFillOneGrowingRangeOf2MiBPages) {
  Harness h(kExpandable);
  std::vector<uintptr_t> blocks;
  for (int i = 0; i < 5; ++i) blocks.push_back(h.alloc(kMiB));  // 1 MiB each: 2 per page
  for (int i = 1; i < 5; ++i) EXPECT_EQ(blocks[static_cast<size_t>(i)], blocks[0] + i * kMiB);
  EXPECT_EQ(h.reserved(), static_cast<int64_t>(6 * kMiB));
  EXPECT_EQ(h.stats().num_device_alloc, 3);
  const std::vector<SegmentRecord> records = h.allocator.device(0).segment_records();
  ASSERT_EQ(records.size(), 1u);  // one run of mapped pages
  EXPECT_TRUE(records[0].expandable);
  EXPECT_EQ(records[0].address, blocks[0]);
  EXPECT_EQ(records[0].size, 6 * kMiB);
  EXPECT_EQ(records[0].blocks.size(), 6u);  // five allocations and the free tail
  EXPECT_CONSISTENT(h);
}

TEST(ExpandableSegments, EmptyCacheUnmapsOnlyWholeFreePages) {
  Harness h(kExpandable);
  MappingLog log;
  const uintptr_t a = h.alloc(15 * kMiB);   // page 0
  const uintptr_t b = h.alloc(10 * kMiB);   // pages 0-1
  const uintptr_t c = h.alloc(50 * kMiB);   // pages 1-3
  const uintptr_t d = h.alloc(5 * kMiB);    // page 3
  EXPECT_EQ(h.reserved(), static_cast<int64_t>(80 * kMiB));
  h.free(c);
  h.allocator.set_observer(&log);
  h.allocator.empty_cache();
  // The 50 MiB hole spans pages 1-3; only page 2 lies wholly inside it.
  const std::vector<Mapping> expected = {{a + 40 * kMiB, 20 * kMiB, false}};
  EXPECT_EQ(log.events, expected);
  EXPECT_EQ(h.reserved(), static_cast<int64_t>(60 * kMiB));
  EXPECT_EQ(h.stats().num_device_free, 1);
  EXPECT_EQ(h.allocator.device(0).segment_records().size(), 2u);  // two mapped runs now
  EXPECT_CONSISTENT(h);
  // Growing again maps the hole back first: it is the lowest-addressed room.
  const uintptr_t e = h.alloc(40 * kMiB);
  EXPECT_EQ(e, a + 25 * kMiB);
  EXPECT_EQ(log.events.back(), (Mapping{a + 40 * kMiB, 20 * kMiB, true}));
  h.allocator.set_observer(nullptr);
  for (uintptr_t p : {a, b, d, e}) h.free(p);
  h.allocator.empty_cache();
  EXPECT_EQ(h.reserved(), 0);
  EXPECT_EQ(h.backend->address_spaces(0), 0u);
  EXPECT_CONSISTENT(h);
}

// A free block that could grow counts as the size it could grow to: a request goes to a
// fixed-size free block that fits before it takes the growable one.
TEST(ExpandableSegments, BestFitPrefersABlockThatCannotGrow) {
  Harness h(kExpandable);
  const uintptr_t a = h.alloc(5 * kMiB);
  const uintptr_t keep = h.alloc(1 * kMiB + 512 * kKiB);  // keeps a's bytes from merging
  h.alloc(10 * kMiB);
  // Pages 0: a (5) keep (1.5) 10 MiB ends at 16.5 MiB, leaving 3.5 MiB free and growable.
  h.free(a);
  EXPECT_EQ(h.alloc(2 * kMiB), a);  // 3.5 MiB growable tail is smaller, but a cannot grow
  (void)keep;
  EXPECT_CONSISTENT(h);
}

TEST(ExpandableSegments, DoNotGrowOverMemoryStillUsedOnAnotherStream) {
  Harness h(kExpandable);
  const uintptr_t a = h.alloc(5 * kMiB);
  const uintptr_t b = h.alloc(15 * kMiB);  // fills page 0
  h.allocator.record_stream(reinterpret_cast<void*>(b), 7);
  h.free(b);  // pending until stream 7 catches up
  const uintptr_t c = h.alloc(30 * kMiB);
  EXPECT_EQ(c, a + 20 * kMiB);  // grows after the pending block, not over it
  EXPECT_CONSISTENT(h);
  h.backend->complete_all_events();
  h.free(a);
  h.free(c);
  h.allocator.empty_cache();
  EXPECT_EQ(h.reserved(), 0);
  EXPECT_CONSISTENT(h);
}

TEST(ExpandableSegments, RunningOutOfPagesUnmapsCachedOnesAndRetries) {
  Harness h(kExpandable, 100 * kMiB);
  const uintptr_t small = h.alloc(kMiB);           // small pool: one 2 MiB page
  const uintptr_t a = h.alloc(60 * kMiB);          // large: 60 MiB
  h.free(a);                                       // cached, mapped
  h.free(small);
  const uintptr_t b = h.alloc(2 * kMiB, /*stream=*/3);  // another stream: its own range
  EXPECT_EQ(h.reserved(), static_cast<int64_t>(82 * kMiB));
  // 80 MiB on stream 3 needs pages stream 0 holds: the retry unmaps them.
  const uintptr_t c = h.alloc(78 * kMiB, 3);
  EXPECT_EQ(h.stats().num_alloc_retries, 1);
  EXPECT_EQ(h.reserved(), static_cast<int64_t>(80 * kMiB));
  EXPECT_THROW(h.alloc(40 * kMiB), OutOfMemoryError);
  EXPECT_EQ(h.stats().num_ooms, 1);
  EXPECT_CONSISTENT(h);
  h.free(b);
  h.free(c);
  h.allocator.empty_cache();
  EXPECT_EQ(h.backend->used_bytes(0), 0u);
  // The range the failed request reserved has nothing mapped, so nothing unmapping could
  // release: it stays, as in PyTorch, and the next request on stream 0 grows into it.
  EXPECT_EQ(h.backend->address_spaces(0), 1u);
  h.free(h.alloc(40 * kMiB));
  EXPECT_EQ(h.backend->address_spaces(0), 1u);
  h.allocator.empty_cache();
  EXPECT_EQ(h.backend->address_spaces(0), 0u);
  EXPECT_CONSISTENT(h);
}

TEST(ExpandableSegments, AFailedMapIsAnOutOfMemoryAfterTheCacheIsUnmapped) {
  Harness h(kExpandable);
  const uintptr_t a = h.alloc(10 * kMiB);
  h.free(a);  // 20 MiB page cached
  h.backend->fail_next_reserves(0, 2);  // the next map fails, and the one after the retry
  EXPECT_THROW(h.alloc(50 * kMiB), OutOfMemoryError);
  EXPECT_EQ(h.stats().num_alloc_retries, 1);
  EXPECT_EQ(h.reserved(), 0);  // the retry unmapped the cached page
  EXPECT_CONSISTENT(h);
  EXPECT_EQ(h.alloc(50 * kMiB), a);  // grows from the same base once the device allows
  EXPECT_CONSISTENT(h);
}

TEST(ExpandableSegments, NeedADeviceThatCanMapPages) {
  SimulatedBackend::Options options;
  options.supports_expandable_segments = false;
  auto backend = std::make_shared<SimulatedBackend>(options);
  try {
    CachingAllocator allocator(backend, config_from(kExpandable));
    FAIL() << "expected std::invalid_argument";
  } catch (const std::invalid_argument& error) {
    EXPECT_NE(std::string(error.what()).find("expandable_segments:True"), std::string::npos);
  }
  CachingAllocator plain(backend, config_from(""));  // the usual segments still work
  EXPECT_NE(plain.allocate(1000, 0, 0), nullptr);
}

TEST(ExpandableSegments, DestroyingTheAllocatorReturnsPagesAndAddressSpace) {
  auto backend = std::make_shared<SimulatedBackend>();
  {
    CachingAllocator allocator(backend, config_from(kExpandable));
    allocator.allocate(30 * kMiB, 0, 0);
    allocator.allocate(1000, 0, 0);
    allocator.deallocate(allocator.allocate(50 * kMiB, 0, 0));
    EXPECT_EQ(backend->address_spaces(0), 2u);
  }
  EXPECT_EQ(backend->used_bytes(0), 0u);
  EXPECT_EQ(backend->address_spaces(0), 0u);
}

}  // namespace
}  // namespace memsnap::testing
