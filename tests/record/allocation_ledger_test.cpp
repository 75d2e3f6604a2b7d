#include "record/allocation_ledger.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <thread>
#include <vector>

#include "history/stack_capture.h"
#include "replay/snapshot_replay.h"
#include "snapshot/snapshot_checks.h"
#include "viewer/oom_explanation.h"

namespace memsnap {
namespace {

constexpr uintptr_t kBase = 0x7f0000000000;
constexpr size_t kMiB = size_t{1} << 20;

int64_t stat(const Snapshot& snapshot, int device, const std::string& key) {
  for (const auto& [name, value] : snapshot.statistics.at(static_cast<size_t>(device)))
    if (name == key) return value;
  ADD_FAILURE() << "no statistic " << key;
  return -1;
}

std::vector<TraceAction> actions(const Snapshot& snapshot, int device) {
  std::vector<TraceAction> out;
  for (const TraceEntry& entry : snapshot.device_traces.at(static_cast<size_t>(device))) out.push_back(entry.action);
  return out;
}

TEST(AllocationLedger, EachAllocationIsASegmentOfOneBlockOfExactlyItsBytes) {
  AllocationLedger ledger;
  ledger.allocated(0, kBase, 1000, 0, {});
  ledger.allocated(0, kBase + 4 * kMiB, 3 * kMiB + 5, 7, {});
  const Snapshot snapshot = ledger.snapshot();
  ASSERT_EQ(check_snapshot(snapshot), std::nullopt);
  ASSERT_EQ(snapshot.segments.size(), 2u);
  const SnapshotSegment& small = snapshot.segments[0];
  EXPECT_EQ(small.address, kBase);
  EXPECT_EQ(small.total_size, 1000u);
  EXPECT_EQ(small.segment_type, "small");
  ASSERT_EQ(small.blocks.size(), 1u);
  EXPECT_EQ(small.blocks[0].size, 1000u);
  EXPECT_EQ(small.blocks[0].requested_size, 1000u);
  EXPECT_EQ(small.blocks[0].state, BlockState::kActiveAllocated);
  EXPECT_EQ(snapshot.segments[1].segment_type, "large");
  EXPECT_EQ(snapshot.segments[1].stream, 7u);
  EXPECT_EQ(stat(snapshot, 0, "allocated_bytes.all.current"), static_cast<int64_t>(1000 + 3 * kMiB + 5));
  EXPECT_EQ(stat(snapshot, 0, "reserved_bytes.all.current"), static_cast<int64_t>(1000 + 3 * kMiB + 5));
  EXPECT_EQ(stat(snapshot, 0, "segment.all.current"), 2);
  EXPECT_EQ(stat(snapshot, 0, "num_device_alloc"), 2);
}

TEST(AllocationLedger, AFreeEndsItsAllocationWithTheEntriesOfACachingAllocatorWithCachingOff) {
  AllocationLedger ledger;
  ledger.allocated(0, kBase, 4 * kMiB, 0, {});
  ASSERT_TRUE(ledger.freed(kBase, 0, {}));
  const Snapshot snapshot = ledger.snapshot();
  EXPECT_TRUE(snapshot.segments.empty());
  EXPECT_EQ(actions(snapshot, 0),
            (std::vector<TraceAction>{TraceAction::kSegmentAlloc, TraceAction::kAlloc,
                                      TraceAction::kFreeRequested, TraceAction::kFreeCompleted,
                                      TraceAction::kSegmentFree}));
  for (const TraceEntry& entry : snapshot.device_traces[0]) EXPECT_EQ(entry.size, 4 * kMiB);
  EXPECT_EQ(stat(snapshot, 0, "allocated_bytes.all.current"), 0);
  EXPECT_EQ(stat(snapshot, 0, "allocated_bytes.all.peak"), static_cast<int64_t>(4 * kMiB));
  EXPECT_EQ(stat(snapshot, 0, "num_device_free"), 1);
}

TEST(AllocationLedger, AFreeOfAnAddressNeverAllocatedRecordsNothing) {
  AllocationLedger ledger;
  EXPECT_FALSE(ledger.freed(kBase, 0, {}));
  ledger.allocated(0, kBase, 100, 0, {});
  EXPECT_FALSE(ledger.freed(kBase + 1, 0, {}));
  EXPECT_EQ(ledger.counts().unknown_frees, 2u);
  EXPECT_EQ(ledger.snapshot().segments.size(), 1u);
}

TEST(AllocationLedger, AFreeBelongsToTheDeviceThatMadeTheAllocation) {
  AllocationLedger ledger;
  ledger.allocated(1, kBase, 100, 0, {});
  ASSERT_TRUE(ledger.freed(kBase, 0, {}));
  const Snapshot snapshot = ledger.snapshot();
  ASSERT_EQ(snapshot.device_traces.size(), 2u);
  EXPECT_TRUE(snapshot.device_traces[0].empty());
  EXPECT_EQ(snapshot.device_traces[1].size(), 5u);
}

TEST(AllocationLedger, AnUnmappedRangeFreesEveryAllocationStartingInIt) {
  AllocationLedger ledger;
  for (int page = 0; page < 4; ++page) ledger.allocated(0, kBase + page * 2 * kMiB, 2 * kMiB, 0, {});
  EXPECT_EQ(ledger.freed_range(kBase + 2 * kMiB, 4 * kMiB, 0, {}), 2u);
  const Snapshot snapshot = ledger.snapshot();
  ASSERT_EQ(snapshot.segments.size(), 2u);
  EXPECT_EQ(snapshot.segments[0].address, kBase);
  EXPECT_EQ(snapshot.segments[1].address, kBase + 6 * kMiB);
}

TEST(AllocationLedger, AnAddressHandedOutAgainEndsTheAllocationTheLedgerStillHeld) {
  AllocationLedger ledger;
  ledger.allocated(0, kBase, 100, 0, {});
  ledger.allocated(0, kBase, 200, 0, {});
  const Snapshot snapshot = ledger.snapshot();
  ASSERT_EQ(snapshot.segments.size(), 1u);
  EXPECT_EQ(snapshot.segments[0].total_size, 200u);
  EXPECT_EQ(stat(snapshot, 0, "allocated_bytes.all.current"), 200);
}

TEST(AllocationLedger, AnOutOfMemoryEntryCarriesTheRequestAndTheDevicesFreeBytes) {
  AllocationLedger ledger;
  ledger.out_of_memory(0, 5 * kMiB, 3 * kMiB, 0, {});
  const Snapshot snapshot = ledger.snapshot();
  ASSERT_EQ(snapshot.device_traces[0].size(), 1u);
  const TraceEntry& oom = snapshot.device_traces[0][0];
  EXPECT_EQ(oom.action, TraceAction::kOom);
  EXPECT_EQ(oom.size, 5 * kMiB);
  EXPECT_EQ(oom.address, 3 * kMiB);
  EXPECT_EQ(stat(snapshot, 0, "num_ooms"), 1);
}

TEST(AllocationLedger, TheTraceKeepsTheNewestCallsAndTheLiveAllocationsStayWhole) {
  AllocationLedger ledger(LedgerSettings{4});
  for (uintptr_t i = 0; i < 10; ++i) ledger.allocated(0, kBase + i * kMiB, 100, 0, {});
  const Snapshot snapshot = ledger.snapshot();
  EXPECT_EQ(snapshot.segments.size(), 10u);
  EXPECT_EQ(snapshot.device_traces[0].size(), 8u);  // 4 calls, 2 entries each
  EXPECT_EQ(snapshot.device_traces[0].front().address, kBase + 6 * kMiB);
}

TEST(AllocationLedger, DevicesOutOfRangeAreNotRecorded) {
  AllocationLedger ledger;
  ledger.allocated(-1, kBase, 100, 0, {});
  ledger.allocated(AllocationLedger::kMaxDevices, kBase, 100, 0, {});
  EXPECT_EQ(ledger.counts().allocations, 0u);
  EXPECT_TRUE(ledger.snapshot().segments.empty());
}

TEST(AllocationLedger, TheDeviceDescriptionReachesTheSnapshot) {
  AllocationLedger ledger;
  EXPECT_FALSE(ledger.has_description(0));
  ledger.describe_device(0, "NVIDIA H100", 80 * (uint64_t{1} << 30));
  EXPECT_TRUE(ledger.has_description(0));
  const Snapshot snapshot = ledger.snapshot();
  ASSERT_EQ(snapshot.devices.size(), 1u);
  EXPECT_EQ(snapshot.devices[0].name, "NVIDIA H100");
  EXPECT_EQ(snapshot.devices[0].total_memory, 80 * (uint64_t{1} << 30));
}

__attribute__((noinline)) void allocate_from_a_named_function(AllocationLedger& ledger) {
  uintptr_t frames[kMaxStackDepth];
  const size_t count = capture_stack(frames, kMaxStackDepth);
  ledger.allocated(0, kBase, 100, 0, {frames, count});
  asm volatile("" ::: "memory");
}

TEST(AllocationLedger, StacksAreSymbolizedIntoTheSnapshot) {
  AllocationLedger ledger;
  allocate_from_a_named_function(ledger);
  const Snapshot snapshot = ledger.snapshot();
  ASSERT_EQ(snapshot.segments.size(), 1u);
  const StackIndex stack = snapshot.segments[0].blocks[0].stack;
  ASSERT_NE(stack, kNoStackIndex);
  bool named = false;
  for (uint32_t frame : snapshot.stacks.at(static_cast<size_t>(stack)))
    named = named || snapshot.frames[frame].function.find("TestBody") != std::string::npos;
  EXPECT_TRUE(named) << "the test's own frame is on the allocation's stack";
  EXPECT_EQ(snapshot.device_traces[0][1].stack, stack);
}

TEST(AllocationLedger, ThreadsRecordingAtOnceLoseNothing) {
  AllocationLedger ledger;
  constexpr int kThreads = 8;
  constexpr int kCalls = 2000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&ledger, t] {
      for (int i = 0; i < kCalls; ++i) {
        const uintptr_t address = kBase + (static_cast<uintptr_t>(t) << 32) + static_cast<uintptr_t>(i) * 4096;
        ledger.allocated(t % 2, address, 512, 0, {});
        if (i % 2 == 0) {
          EXPECT_TRUE(ledger.freed(address, 0, {}));
        }
      }
    });
  for (std::thread& thread : threads) thread.join();
  const Snapshot snapshot = ledger.snapshot();
  EXPECT_EQ(check_snapshot(snapshot), std::nullopt);
  EXPECT_EQ(snapshot.segments.size(), static_cast<size_t>(kThreads * kCalls / 2));
  EXPECT_EQ(ledger.counts().allocations, static_cast<uint64_t>(kThreads * kCalls));
  EXPECT_EQ(stat(snapshot, 0, "allocation.all.current") + stat(snapshot, 1, "allocation.all.current"),
            kThreads * kCalls / 2);
}

TEST(AllocationLedger, ItsSnapshotReplaysUnderPyTorchsPolicy) {
  // Requests a caching allocator would round and pack: 100 allocations of 300 KiB, all live.
  AllocationLedger ledger;
  for (uintptr_t i = 0; i < 100; ++i) ledger.allocated(0, kBase + i * kMiB, 300 * 1024, 0, {});
  for (uintptr_t i = 0; i < 100; i += 2) ledger.freed(kBase + i * kMiB, 0, {});
  const Result<SnapshotReplay> replay = replay_snapshot(ledger.snapshot(), {});
  ASSERT_TRUE(replay) << replay.error();
  EXPECT_TRUE(replay.value().consistent());
  const DeviceReplay& device = replay.value().devices.at(0);
  EXPECT_EQ(device.allocs, 100u);
  EXPECT_EQ(device.frees, 50u);
  EXPECT_EQ(device.unknown_frees, 0u);
  EXPECT_EQ(device.empty_cache_calls, 0u) << "its releases were its frees, not empty_cache";
  // The recording reserved each request on its own; PyTorch packs six 300 KiB blocks into each
  // 2 MiB small-pool segment: 17 segments.
  EXPECT_EQ(device.recorded_peak_reserved, 100u * 300 * 1024);
  EXPECT_EQ(replay.value().device_mallocs(), 17);
  EXPECT_EQ(replay.value().peak_reserved_bytes(), static_cast<int64_t>(17 * 2 * kMiB));
}

TEST(AllocationLedger, ExplainOomOfALaterSnapshotSeesTheMemoryAsItStoodAtTheError) {
  // Three odd-sized allocations live at the error, then freed: the snapshot taken at exit
  // holds none of them, the explanation all three, to the byte.
  AllocationLedger ledger;
  ledger.describe_device(0, "GPU", 80 * (uint64_t{1} << 30));
  const uint64_t sizes[] = {25344, 3 * kMiB + 100, 40 * (uint64_t{1} << 30) + 7};
  for (uintptr_t i = 0; i < 3; ++i) ledger.allocated(0, kBase + i * (uint64_t{64} << 30), sizes[i], 0, {});
  ledger.out_of_memory(0, 50 * (uint64_t{1} << 30), 30 * (uint64_t{1} << 30), 0, {});
  for (uintptr_t i = 0; i < 3; ++i) ledger.freed(kBase + i * (uint64_t{64} << 30), 0, {});
  const Snapshot snapshot = ledger.snapshot();
  ASSERT_TRUE(snapshot.segments.empty());
  const Result<OomExplanation> explanation = explain_oom(snapshot, std::nullopt);
  ASSERT_TRUE(explanation) << explanation.error();
  EXPECT_TRUE(explanation.value().state_rebuilt);
  EXPECT_EQ(explanation.value().events_after_oom, 9u);
  EXPECT_EQ(explanation.value().allocated_blocks, 3u);
  EXPECT_EQ(explanation.value().reserved_bytes, sizes[0] + sizes[1] + sizes[2]);
  EXPECT_EQ(explanation.value().allocated_bytes, sizes[0] + sizes[1] + sizes[2]);
  EXPECT_EQ(explanation.value().diagnosis.cause, OomCause::kExhaustion);
  // No setting can change that: the settings advice says so with the same sentence.
  ASSERT_TRUE(explanation.value().advice) << explanation.value().advice_error;
  EXPECT_EQ(explanation.value().advice->answer, TuneVerdict::kNoSettingWorks);
  EXPECT_NE(explanation.value().advice->verdict.sentence.find(explanation.value().diagnosis.verdict.sentence.substr(1)),
            std::string::npos);
}

}  // namespace
}  // namespace memsnap
