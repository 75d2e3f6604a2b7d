// What other libraries held at a moment, rebuilt from a snapshot's recorded calls outside the
// allocator: live allocations made by then, allocations freed since that were made before, and
// nothing the record cannot reach back to.
#include "viewer/outside_holders.h"

#include <gtest/gtest.h>

namespace memsnap {
namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;

OutsideAllocation device_memory(uint64_t address, uint64_t size, const std::string& library, int64_t time_us) {
  return {0, address, size, OutsideKind::kDevice, "cudaMalloc", library, kNoStackIndex, time_us};
}

OutsideEvent at(OutsideAction action, OutsideAllocation a, int64_t time_us) {
  a.time_us = time_us;
  return {action, a};
}

TEST(OutsideHolders, TheMomentIsRebuiltFromTheLiveAllocationsAndTheEvents) {
  const int64_t t = 1000;
  const OutsideAllocation early = device_memory(0x1000000, 100 * kMiB, "libnccl.so.2", t - 50);
  const OutsideAllocation freed_after = device_memory(0x2000000, 30 * kMiB, "libnccl.so.2", t - 40);
  const OutsideAllocation made_after = device_memory(0x3000000, 70 * kMiB, "libcublas.so.13", t + 10);
  // An address used twice: freed before the moment, made again after it, freed again.
  const OutsideAllocation reused_first = device_memory(0x4000000, 5 * kMiB, "libcupy.so", t - 30);
  const OutsideAllocation reused_again = device_memory(0x4000000, 9 * kMiB, "libcupy.so", t + 20);
  Snapshot s;
  OutsideMemory& o = s.outside_memory.emplace();
  o.live = {early, made_after,
            {-1, 0x9000000, 64 * kMiB, OutsideKind::kPinnedHost, "cudaHostAlloc", "libtorch_cuda.so", kNoStackIndex, t - 60},
            {1, 0xa000000, 64 * kMiB, OutsideKind::kDevice, "cudaMalloc", "libnccl.so.2", kNoStackIndex, t - 60}};
  o.events = {at(OutsideAction::kAlloc, early, t - 50),        at(OutsideAction::kAlloc, freed_after, t - 40),
              at(OutsideAction::kAlloc, reused_first, t - 30), at(OutsideAction::kFree, reused_first, t - 20),
              at(OutsideAction::kAlloc, made_after, t + 10),   at(OutsideAction::kAlloc, reused_again, t + 20),
              at(OutsideAction::kFree, freed_after, t + 30),   at(OutsideAction::kFree, reused_again, t + 40)};
  std::string reason;
  const auto held = outside_holders_at(s, 0, t, reason);
  ASSERT_TRUE(held.has_value()) << reason;
  ASSERT_EQ(held->size(), 1u);  // device 0's, at t: NCCL's two; not cuBLAS's, CuPy's, host or device 1
  EXPECT_EQ((*held)[0].library, "libnccl.so.2");
  EXPECT_EQ((*held)[0].bytes, 130 * kMiB);
  EXPECT_EQ((*held)[0].allocations, 2u);
  // Later, cuBLAS's is held too, largest first.
  const auto later = outside_holders_at(s, 0, t + 15, reason);
  ASSERT_TRUE(later.has_value());
  ASSERT_EQ(later->size(), 2u);
  EXPECT_EQ((*later)[0].library, "libnccl.so.2");
  EXPECT_EQ((*later)[1].library, "libcublas.so.13");
}

TEST(OutsideHolders, ARecordThatCannotSayGivesNothingAndSaysWhy) {
  Snapshot none;
  std::string reason;
  EXPECT_FALSE(outside_holders_at(none, 0, 5, reason).has_value());
  EXPECT_TRUE(reason.empty());  // no record of such calls: nothing to say

  Snapshot unrecorded;
  unrecorded.outside_memory = OutsideMemory{"another tool holds CUPTI's callbacks", {}, {}, 0, {}};
  EXPECT_FALSE(outside_holders_at(unrecorded, 0, 5, reason).has_value());
  EXPECT_NE(reason.find("not recorded: another tool holds CUPTI's callbacks"), std::string::npos);

  Snapshot cut;
  OutsideMemory& o = cut.outside_memory.emplace();
  o.events = {at(OutsideAction::kAlloc, device_memory(0x1000, kMiB, "libnccl.so.2", 0), 500)};
  o.dropped_events = 10;
  reason.clear();
  EXPECT_FALSE(outside_holders_at(cut, 0, 100, reason).has_value());  // the kept events start after it
  EXPECT_NE(reason.find("no longer reach back"), std::string::npos);
  EXPECT_TRUE(outside_holders_at(cut, 0, 600, reason).has_value());
}

}  // namespace
}  // namespace memsnap
