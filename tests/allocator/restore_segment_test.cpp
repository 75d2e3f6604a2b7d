// Restoring a recorded segment layout (what replay starts from): the allocator must end up
// exactly as if it had made that layout itself, statistics included, and refuse layouts it
// could never have made.
#include <gtest/gtest.h>

#include "allocator_harness.h"

namespace memsnap::testing {
namespace {

constexpr uintptr_t kBase = uintptr_t{0x7f0000000000};

SegmentRecord large_segment(uintptr_t address, int device = 0) {
  SegmentRecord r;
  r.device = device;
  r.address = address;
  r.size = 20 * kMiB;
  r.small_pool = false;
  r.blocks = {{address, 4 * kMiB, 4 * kMiB - 100, BlockState::kActiveAllocated},
              {address + 4 * kMiB, 6 * kMiB, 0, BlockState::kInactive},
              {address + 10 * kMiB, 10 * kMiB, 10 * kMiB, BlockState::kActiveAllocated}};
  return r;
}

std::vector<void*> restore(Harness& h, const SegmentRecord& layout) {
  h.backend->prefer_address_for_next_reserve(layout.device, layout.address);
  return h.allocator.restore_segment(layout);
}

TEST(RestoreSegment, TheAllocatorHoldsTheLayoutAndItsStatisticsAgree) {
  Harness h;
  const SegmentRecord layout = large_segment(kBase);
  const std::vector<void*> live = restore(h, layout);
  ASSERT_EQ(live.size(), 2u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(live[0]), kBase);
  const std::vector<SegmentRecord> records = h.allocator.device(0).segment_records();
  ASSERT_EQ(records.size(), 1u);
  ASSERT_EQ(records[0].blocks.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(records[0].blocks[i].address, layout.blocks[i].address);
    EXPECT_EQ(records[0].blocks[i].size, layout.blocks[i].size);
    EXPECT_EQ(records[0].blocks[i].state, layout.blocks[i].state);
  }
  const DeviceStats s = h.stats();
  EXPECT_EQ(s.reserved_bytes[kAggregate].current, static_cast<int64_t>(20 * kMiB));
  EXPECT_EQ(s.allocated_bytes[kAggregate].current, static_cast<int64_t>(14 * kMiB));
  EXPECT_EQ(s.inactive_split_bytes[kAggregate].current, static_cast<int64_t>(6 * kMiB));
  EXPECT_EQ(s.requested_bytes[kAggregate].current, static_cast<int64_t>(14 * kMiB - 100));
  EXPECT_EQ(s.num_device_alloc, 0);  // the segment predates what is watched
  EXPECT_TRUE(h.allocator.check_invariants().empty());
}

TEST(RestoreSegment, RestoredBlocksAreFreedMergedAndReusedLikeAnyOther) {
  Harness h;
  const std::vector<void*> live = restore(h, large_segment(kBase));
  // The 6 MiB hole is reused by best fit.
  EXPECT_EQ(h.alloc(5 * kMiB), kBase + 4 * kMiB);
  for (void* p : live) h.allocator.deallocate(p);
  EXPECT_TRUE(h.allocator.check_invariants().empty());
  // A 1 MiB remainder is not split off in the large pool: the whole hole is allocated.
  EXPECT_EQ(h.stats().allocated_bytes[kAggregate].current, static_cast<int64_t>(6 * kMiB));
  h.free(kBase + 4 * kMiB);
  h.allocator.empty_cache();  // one free block again: the whole segment goes back
  EXPECT_EQ(h.reserved(), 0);
  EXPECT_EQ(h.backend->live_segments(0), 0u);
  EXPECT_TRUE(h.allocator.check_invariants().empty());
}

TEST(RestoreSegment, WorksOnEveryDeviceOfASeveralDeviceAllocator) {
  Harness h("", size_t{80} << 30, 2);
  const std::vector<void*> on0 = restore(h, large_segment(kBase, 0));
  const std::vector<void*> on1 = restore(h, large_segment(kBase + (1ull << 36), 1));
  for (void* p : on1) h.allocator.deallocate(p);  // found through the device directory
  for (void* p : on0) h.allocator.deallocate(p);
  EXPECT_EQ(h.stats(0).allocated_bytes[kAggregate].current, 0);
  EXPECT_EQ(h.stats(1).allocated_bytes[kAggregate].current, 0);
  EXPECT_TRUE(h.allocator.check_invariants().empty());
}

TEST(RestoreSegment, RefusesLayoutsTheAllocatorCouldNotHaveMade) {
  Harness h;
  auto refused = [&](SegmentRecord layout) {
    h.backend->prefer_address_for_next_reserve(0, layout.address);
    EXPECT_THROW(h.allocator.restore_segment(layout), std::invalid_argument);
    EXPECT_EQ(h.reserved(), 0);  // nothing half-installed
    EXPECT_EQ(h.backend->live_segments(0), 0u);
  };
  SegmentRecord gap = large_segment(kBase);
  gap.blocks[1].size -= 512;
  refused(gap);
  SegmentRecord adjacent_free = large_segment(kBase);
  adjacent_free.blocks[2].state = BlockState::kInactive;
  refused(adjacent_free);
  SegmentRecord past_end = large_segment(kBase);
  past_end.blocks[2].size += 512;
  refused(past_end);
  SegmentRecord unaligned = large_segment(kBase);
  unaligned.blocks[0].size += 1;
  unaligned.blocks[1].address += 1;
  unaligned.blocks[1].size -= 1;
  refused(unaligned);
  SegmentRecord requested_too_big = large_segment(kBase);
  requested_too_big.blocks[0].requested_size = 5 * kMiB;
  refused(requested_too_big);
  SegmentRecord empty = large_segment(kBase);
  empty.blocks.clear();
  refused(empty);
  // Placed elsewhere (the address is taken): refused, and the reservation given back.
  restore(h, large_segment(kBase));
  const int64_t before = h.reserved();
  h.backend->prefer_address_for_next_reserve(0, kBase);
  EXPECT_THROW(h.allocator.restore_segment(large_segment(kBase)), std::invalid_argument);
  EXPECT_EQ(h.reserved(), before);
  EXPECT_EQ(h.backend->live_segments(0), 1u);
  EXPECT_TRUE(h.allocator.check_invariants().empty());
}

}  // namespace
}  // namespace memsnap::testing
