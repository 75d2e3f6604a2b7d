// The caching policy as the program sees it: which block a request gets, when segments are
// reserved, split, merged and reused. Every test ends with the invariant checker.
#include <algorithm>
#include <random>

#include "allocator_harness.h"
#include "forwarding_backend.h"

namespace memsnap::testing {
namespace {

TEST(CachingPolicy, SmallRequestReservesA2MiBSegmentAndSplitsIt) {
  Harness h;
  const uintptr_t a = h.alloc(1000);
  EXPECT_EQ(h.reserved(), static_cast<int64_t>(2 * kMiB));
  const uintptr_t b = h.alloc(1000);
  EXPECT_EQ(b, a + 1024);  // carved from the remainder of the same segment
  EXPECT_EQ(h.segments(), 1);
  EXPECT_EQ(h.stats().inactive_split_bytes[kSmallPool].current,
            static_cast<int64_t>(2 * kMiB - 2048));
  EXPECT_CONSISTENT(h);
}

TEST(CachingPolicy, MediumRequestReservesA20MiBSegment) {
  Harness h;
  const uintptr_t a = h.alloc(3 * kMiB);
  EXPECT_EQ(h.reserved(), static_cast<int64_t>(20 * kMiB));
  const uintptr_t b = h.alloc(5 * kMiB);
  EXPECT_EQ(b, a + 3 * kMiB);
  EXPECT_EQ(h.segments(), 1);
  EXPECT_CONSISTENT(h);
}

TEST(CachingPolicy, LargeRequestReservesItsSizeRoundedTo2MiB) {
  Harness h;
  h.alloc(15 * kMiB + 1);
  EXPECT_EQ(h.reserved(), static_cast<int64_t>(16 * kMiB));
  EXPECT_EQ(h.stats().inactive_split[kAggregate].current, 0);  // 1 MiB - 512 B left: no split
  EXPECT_CONSISTENT(h);
}

TEST(CachingPolicy, LargeBlockSplitsOnlyWhenRemainderExceeds1MiB) {
  Harness h;
  const uintptr_t a = h.alloc(19 * kMiB);  // 20 MiB segment, remainder exactly 1 MiB
  EXPECT_EQ(h.allocator.allocated_size(reinterpret_cast<void*>(a)), 20 * kMiB);
  h.free(a);
  const uintptr_t b = h.alloc(19 * kMiB - 512);  // remainder 1 MiB + 512 B: split
  EXPECT_EQ(h.allocator.allocated_size(reinterpret_cast<void*>(b)), 19 * kMiB - 512);
  EXPECT_EQ(h.segments(), 1);
  EXPECT_CONSISTENT(h);
}

TEST(CachingPolicy, BestFitTakesTheSmallestFreeBlockThatFits) {
  Harness h;
  const uintptr_t big = h.alloc(40 * kMiB);
  const uintptr_t small = h.alloc(12 * kMiB);
  const uintptr_t mid = h.alloc(24 * kMiB);
  h.free(big);
  h.free(small);
  h.free(mid);
  EXPECT_EQ(h.alloc(11 * kMiB), small);
  EXPECT_EQ(h.alloc(13 * kMiB), mid);
  EXPECT_CONSISTENT(h);
}

TEST(CachingPolicy, BestFitBreaksTiesByLowerAddress) {
  Harness h;
  std::vector<uintptr_t> blocks;
  for (int i = 0; i < 4; ++i) blocks.push_back(h.alloc(12 * kMiB));
  // Free in an order unrelated to address; the lowest address must win.
  h.free(blocks[2]);
  h.free(blocks[0]);
  h.free(blocks[3]);
  h.free(blocks[1]);
  const uintptr_t lowest = *std::min_element(blocks.begin(), blocks.end());
  EXPECT_EQ(h.alloc(12 * kMiB), lowest);
  EXPECT_CONSISTENT(h);
}

TEST(CachingPolicy, BlocksAreReusedOnlyOnTheStreamTheyWereAllocatedOn) {
  Harness h;
  const uintptr_t a = h.alloc(4096, /*stream=*/1);
  h.free(a);
  const uintptr_t b = h.alloc(4096, /*stream=*/2);
  EXPECT_NE(b, a);
  EXPECT_EQ(h.segments(), 2);  // stream 2 could not use stream 1's segment
  EXPECT_EQ(h.alloc(4096, /*stream=*/1), a);
  EXPECT_CONSISTENT(h);
}

TEST(CachingPolicy, FreedBlockMergesWithBothFreeNeighbours) {
  Harness h;
  const uintptr_t a = h.alloc(4 * kMiB);
  const uintptr_t b = h.alloc(4 * kMiB);
  const uintptr_t c = h.alloc(4 * kMiB);
  h.free(a);
  h.free(c);  // merges with the free tail of the segment
  EXPECT_EQ(h.stats().inactive_split[kAggregate].current, 2);
  h.free(b);  // merges with both: one free block spans the segment
  EXPECT_EQ(h.stats().inactive_split[kAggregate].current, 0);
  EXPECT_EQ(h.stats().inactive_split_bytes[kAggregate].current, 0);
  EXPECT_EQ(h.alloc(20 * kMiB), a);  // the whole segment is one block again
  EXPECT_CONSISTENT(h);
}

TEST(CachingPolicy, RequestBelowMaxSplitSizeDoesNotTakeAnOversizeBlock) {
  Harness h("max_split_size_mb:64");
  const uintptr_t big = h.alloc(100 * kMiB);
  h.free(big);
  const uintptr_t small = h.alloc(30 * kMiB);
  EXPECT_NE(small, big);
  EXPECT_EQ(h.segments(), 2);
  EXPECT_EQ(h.stats().oversize_segments.current, 1);
  EXPECT_CONSISTENT(h);
}

TEST(CachingPolicy, OversizeRequestTakesACachedBlockWithinTheRoundingLimit) {
  Harness h("max_split_size_mb:64");
  const uintptr_t big = h.alloc(100 * kMiB);
  h.free(big);
  EXPECT_EQ(h.alloc(90 * kMiB), big);  // 100 < 90 + 20: taken whole, not split
  EXPECT_EQ(h.stats().allocated_bytes[kAggregate].current, static_cast<int64_t>(100 * kMiB));
  EXPECT_EQ(h.stats().oversize_allocations.current, 1);
  h.free(big);
  EXPECT_NE(h.alloc(70 * kMiB), big);  // 100 >= 70 + 20: a new segment instead
  EXPECT_CONSISTENT(h);
}

TEST(CachingPolicy, RecordStreamDefersReuseUntilTheEventsComplete) {
  Harness h;
  const uintptr_t a = h.alloc(4096, 0);
  h.allocator.record_stream(reinterpret_cast<void*>(a), 7);
  h.free(a);
  EXPECT_EQ(h.stats().active[kAggregate].current, 1);  // active_pending_free
  EXPECT_EQ(h.stats().allocation[kAggregate].current, 0);
  EXPECT_EQ(h.backend->live_events(), 1u);
  EXPECT_CONSISTENT(h);
  EXPECT_NE(h.alloc(4096, 0), a);  // event on stream 7 still pending
  h.backend->complete_events(7);
  EXPECT_EQ(h.alloc(4096, 0), a);  // reusable again: the exact fit at the lowest address
  EXPECT_EQ(h.backend->live_events(), 0u);
  EXPECT_CONSISTENT(h);
}

TEST(CachingPolicy, RecordStreamOnTheAllocationStreamIsIgnored) {
  Harness h;
  const uintptr_t a = h.alloc(4096, 3);
  h.allocator.record_stream(reinterpret_cast<void*>(a), 3);
  h.free(a);
  EXPECT_EQ(h.backend->live_events(), 0u);
  EXPECT_EQ(h.alloc(4096, 3), a);
  EXPECT_CONSISTENT(h);
}

TEST(CachingPolicy, EmptyCacheWaitsForPendingFreesAndReleasesUnsplitSegments) {
  Harness h;
  const uintptr_t kept = h.alloc(4096);        // keeps its 2 MiB segment split and in use
  const uintptr_t pending = h.alloc(30 * kMiB);
  h.allocator.record_stream(reinterpret_cast<void*>(pending), 5);
  h.free(pending);
  const uintptr_t cached = h.alloc(12 * kMiB);
  h.free(cached);
  h.allocator.empty_cache();
  EXPECT_EQ(h.segments(), 1);
  EXPECT_EQ(h.reserved(), static_cast<int64_t>(2 * kMiB));
  EXPECT_EQ(h.stats().num_sync_all_streams, 1);
  EXPECT_EQ(h.stats().num_device_free, 2);
  EXPECT_EQ(h.backend->used_bytes(0), 2 * kMiB);
  h.free(kept);
  h.allocator.empty_cache();
  EXPECT_EQ(h.backend->used_bytes(0), 0u);
  EXPECT_CONSISTENT(h);
}

TEST(CachingPolicy, ZeroByteRequestReturnsNullAndNullFreeIsIgnored) {
  Harness h;
  EXPECT_EQ(h.allocator.allocate(0), nullptr);
  h.allocator.deallocate(nullptr);
  EXPECT_EQ(h.segments(), 0);
}

TEST(CachingPolicy, FreeingAnUnknownOrAlreadyFreedPointerThrows) {
  Harness h;
  const uintptr_t a = h.alloc(4096);
  h.free(a);
  EXPECT_THROW(h.free(a), std::invalid_argument);
  EXPECT_THROW(h.free(a + 512), std::invalid_argument);
  EXPECT_CONSISTENT(h);
}

TEST(CachingPolicy, WithSeveralDevicesUnknownPointersAreStillRejected) {
  Harness h("", size_t{80} << 30, /*devices=*/3);
  const uintptr_t a = h.alloc(4096, 0, 2);
  EXPECT_EQ(h.allocator.allocated_size(reinterpret_cast<void*>(a)), 4096u);
  h.free(a);
  EXPECT_THROW(h.free(a), std::invalid_argument);
  EXPECT_THROW(h.allocator.record_stream(reinterpret_cast<void*>(a), 1), std::invalid_argument);
  EXPECT_THROW(h.allocator.allocated_size(reinterpret_cast<void*>(a)), std::invalid_argument);
  EXPECT_CONSISTENT(h);
}

TEST(CachingPolicy, DevicesKeepSeparatePoolsAndStatistics) {
  Harness h("", size_t{80} << 30, /*devices=*/2);
  const uintptr_t a = h.alloc(4096, 0, 0);
  const uintptr_t b = h.alloc(4096, 0, 1);
  EXPECT_NE(a, b);
  EXPECT_EQ(h.segments(0), 1);
  EXPECT_EQ(h.segments(1), 1);
  h.free(b);
  EXPECT_EQ(h.stats(1).allocated_bytes[kAggregate].current, 0);
  EXPECT_EQ(h.stats(0).allocated_bytes[kAggregate].current, 512 * 8);
  EXPECT_THROW(h.alloc(4096, 0, 2), std::out_of_range);
  EXPECT_CONSISTENT(h);
}

// The simulated device, but unable to say on which streams events completed: the allocator
// then asks every stream's oldest pending event on each allocation, as it does on CUDA.
class AskingEveryStream final : public ForwardingBackend {
 public:
  using ForwardingBackend::ForwardingBackend;
};

// Looking only at the streams whose events completed frees the same blocks at the same moments
// as asking every stream: random requests on 60 streams, frees after uses on others, events
// completed a stream at a time or all at once, empty_cache, with the usual segments and with
// expandable ones (whose unmapping completes a stream's events).
TEST(CachingPolicy, PendingFreesComeBackAsWhenEveryStreamIsAsked) {
  for (const char* config : {"", "expandable_segments:True,max_split_size_mb:64"}) {
    SimulatedBackend::Options options{1, size_t{4} << 30, /*events_complete_immediately=*/false};
    auto telling = std::make_shared<SimulatedBackend>(options);
    auto asked = std::make_shared<SimulatedBackend>(options);
    CachingAllocator told(telling, config_from(config));
    CachingAllocator asking(std::make_shared<AskingEveryStream>(asked), config_from(config));
    std::mt19937_64 rng(53);
    std::vector<std::pair<void*, void*>> live;
    for (int step = 0; step < 20000; ++step) {
      const uint64_t roll = rng() % 100;
      if (roll < 45 || live.empty()) {
        const size_t bytes = roll % 3 == 0 ? (1 + rng() % 64) * 512 : (1 + rng() % 48) * kMiB;
        const StreamId stream = rng() % 60;
        void* a = nullptr;
        void* b = nullptr;
        try {
          a = told.allocate(bytes, 0, stream);
        } catch (const OutOfMemoryError&) {
        }
        try {
          b = asking.allocate(bytes, 0, stream);
        } catch (const OutOfMemoryError&) {
        }
        ASSERT_EQ(a, b) << config << ", step " << step;
        if (a != nullptr) live.emplace_back(a, b);
      } else if (roll < 85) {
        const size_t index = rng() % live.size();
        const auto [a, b] = live[index];
        for (uint64_t uses = rng() % 3; uses > 0; --uses) {
          const StreamId other = rng() % 60;
          told.record_stream(a, other);
          asking.record_stream(b, other);
        }
        told.deallocate(a);
        asking.deallocate(b);
        live[index] = live.back();
        live.pop_back();
      } else if (roll < 97) {
        const StreamId stream = rng() % 60;
        telling->complete_events(stream);
        asked->complete_events(stream);
      } else if (roll < 99) {
        telling->complete_all_events();
        asked->complete_all_events();
      } else {
        told.empty_cache();
        asking.empty_cache();
      }
    }
    const DeviceStats a = told.device_stats(0), b = asking.device_stats(0);
    EXPECT_EQ(a.reserved_bytes[kAggregate].peak, b.reserved_bytes[kAggregate].peak) << config;
    EXPECT_EQ(a.num_alloc_retries, b.num_alloc_retries) << config;
    EXPECT_EQ(a.num_device_alloc, b.num_device_alloc) << config;
    EXPECT_EQ(told.device(0).segment_records().size(), asking.device(0).segment_records().size()) << config;
    EXPECT_EQ(told.check_invariants(), std::vector<std::string>{}) << config;
  }
}

}  // namespace
}  // namespace memsnap::testing
