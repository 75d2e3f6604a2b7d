// A replay whose capacity comes from a recorded out-of-memory error follows what the process's
// other libraries held over the trace (DeviceReplay::capacity_over_time): where they held more
// than at the error, the device had less room, and settings that need more there fail there,
// as they would have; without the record of their calls, the capacity stays and nothing is
// claimed.
#include "replay/snapshot_replay.h"

#include <gtest/gtest.h>

#include "allocator/allocator_config.h"
#include "replay/recorded_config.h"
#include "replay/snapshot_replay_report.h"
#include "tests/test_snapshots.h"

namespace memsnap {
namespace {

constexpr uint64_t kGiB = uint64_t{1} << 30;
constexpr uint64_t kA = uint64_t{1} << 40, kB = kA + 8 * kGiB;

// A PyTorch-layout trace (times 10, 20, ...): 5 GiB allocated in its own segment, freed (the
// segment stays cached) and allocated again, then 4 GiB in a second segment, then a 2 GiB
// request fails with 1 GiB of the device free: 10 GiB for the allocator at the error. Another
// library held 4.5 GiB from before the trace until t=25, nothing at the error.
Snapshot step() {
  Snapshot s;
  s.source = "pytorch";
  DeviceTrace& t = s.device_traces.emplace_back();
  t.emplace_back(TraceAction::kSegmentAlloc, kA, 5 * kGiB, 0, 10);
  t.emplace_back(TraceAction::kAlloc, kA, 5 * kGiB, 0, 10);
  t.emplace_back(TraceAction::kFreeRequested, kA, 5 * kGiB, 0, 20);
  t.emplace_back(TraceAction::kFreeCompleted, kA, 5 * kGiB, 0, 20);
  t.emplace_back(TraceAction::kAlloc, kA, 5 * kGiB, 0, 30);
  t.emplace_back(TraceAction::kSegmentAlloc, kB, 4 * kGiB, 0, 40);
  t.emplace_back(TraceAction::kAlloc, kB, 4 * kGiB, 0, 40);
  t.emplace_back(TraceAction::kOom, 1 * kGiB, 2 * kGiB, 0, 50);  // address: the device's free bytes
  for (const auto& [address, size] : {std::pair{kA, 5 * kGiB}, std::pair{kB, 4 * kGiB}}) {
    SnapshotSegment segment;
    segment.address = address;
    segment.total_size = segment.allocated_size = segment.active_size = segment.requested_size = size;
    segment.segment_type = "large";
    SnapshotBlock block;
    block.address = address;
    block.size = block.requested_size = size;
    block.state = BlockState::kActiveAllocated;
    segment.blocks.push_back(block);
    s.segments.push_back(segment);
  }
  OutsideMemory& o = s.outside_memory.emplace();
  const OutsideAllocation nccl{0, 0x7000000000, 4 * kGiB + kGiB / 2, OutsideKind::kDevice, "cudaMalloc", "libnccl.so.2",
                               kNoStackIndex, 5};
  o.events = {{OutsideAction::kAlloc, nccl}, {OutsideAction::kFree, nccl}};
  o.events[1].allocation.time_us = 25;
  return s;
}

DeviceReplay replay(const Snapshot& s, const std::string& config) {
  SnapshotReplayOptions options;
  Result<AllocatorConfig> parsed = parse_allocator_config(config);
  EXPECT_TRUE(parsed.ok()) << parsed.error();
  if (parsed) options.config = parsed.value();
  Result<SnapshotReplay> done = replay_snapshot(s, options);
  EXPECT_TRUE(done.ok()) << done.error();
  return done.ok() && !done.value().devices.empty() ? done.value().devices[0] : DeviceReplay{};
}

TEST(CapacityOverTime, TheDeviceHadLessRoomWhileAnotherLibraryHeldMore) {
  const DeviceReplay recorded = replay(step(), "");
  EXPECT_EQ(recorded.capacity_source, "reserved + device free at the recorded OOM");
  EXPECT_EQ(recorded.capacity_bytes, 10 * kGiB);
  EXPECT_NE(recorded.capacity_over_time.find("other libraries"), std::string::npos) << recorded.capacity_over_time;
  EXPECT_EQ(recorded.least_capacity_bytes, 10 * kGiB - (4 * kGiB + kGiB / 2));
  EXPECT_EQ(recorded.most_capacity_bytes, 10 * kGiB);
  // The recorded run fitted the room it had, and the error happens again.
  EXPECT_EQ(recorded.failed_allocs, 0u);
  EXPECT_EQ(recorded.reproduced_ooms, 1u);
  EXPECT_EQ(recorded.replayed_segment_allocs, recorded.recorded_segment_allocs);
  SnapshotReplay whole;
  whole.devices = {recorded};
  EXPECT_NE(snapshot_replay_to_text(whole, "step").find("capacity over time: "), std::string::npos);

  // Rounding the first 5 GiB up to 6 GiB needs more than the 5.5 GiB the device had then.
  const DeviceReplay rounded = replay(step(), "roundup_power2_divisions:2");
  EXPECT_GE(rounded.failed_allocs, 1u);
  // Without the record of the library's calls, the replay cannot know, and does not follow it.
  Snapshot unrecorded = step();
  unrecorded.outside_memory.reset();
  const DeviceReplay blind = replay(unrecorded, "roundup_power2_divisions:2");
  EXPECT_EQ(blind.capacity_over_time, "");
  EXPECT_EQ(blind.least_capacity_bytes, 10 * kGiB);
  EXPECT_EQ(blind.failed_allocs, 0u);
}

TEST(CapacityOverTime, OnlyWhereTheRecordReachesAndTheCapacityCameFromTheError) {
  // The library's allocation dropped from the record: before its free, what it held is not known.
  Snapshot dropped = step();
  dropped.outside_memory->events.erase(dropped.outside_memory->events.begin());
  dropped.outside_memory->dropped_events = 1;
  const DeviceReplay d = replay(dropped, "");
  // Known from t=25 only, when it held nothing more than at the error: nothing moves.
  EXPECT_EQ(d.capacity_over_time, "");
  EXPECT_EQ(d.least_capacity_bytes, 10 * kGiB);
  // A capacity given by the user is the user's: kept whole.
  Snapshot s = step();
  SnapshotReplayOptions options;
  options.capacity_bytes = 12 * kGiB;
  Result<SnapshotReplay> given = replay_snapshot(s, options);
  ASSERT_TRUE(given.ok()) << given.error();
  EXPECT_EQ(given.value().devices[0].capacity_over_time, "");
  EXPECT_EQ(given.value().devices[0].least_capacity_bytes, 12 * kGiB);
}

// A real H200 run (tests/data/memsnap-h200/README.md): CuPy held 80 GiB while the first tensor
// lived and gave it back before the error; placed on the trace by the times of its calls, the
// room then was exactly 80 GiB less.
TEST(CapacityOverTime, ARealLibraryThatGaveItsMemoryBackBeforeTheError) {
  const Snapshot s = testing::load_test_snapshot("memsnap-h200/library_gave_back.msgpack");
  const DeviceReplay d = replay(s, "");
  EXPECT_EQ(d.capacity_source, "reserved + device free at the recorded OOM");
  EXPECT_EQ(d.capacity_bytes, 149'544'894'464u);  // 30 GiB reserved + 109.27 GiB free
  EXPECT_EQ(d.most_capacity_bytes, d.capacity_bytes);
  EXPECT_EQ(d.most_capacity_bytes - d.least_capacity_bytes, 80 * kGiB);
  EXPECT_EQ(d.failed_allocs, 0u);
  EXPECT_EQ(d.reproduced_ooms, 1u);
  EXPECT_EQ(d.replayed_segment_allocs, d.recorded_segment_allocs);
}

// Where the data cannot say, on real files: PyTorch's pickles record no other library's calls
// (and their real OOMs here were refused by a memory cap, whose capacity is not the device's);
// the H200 run above without its record of CuPy's calls, or with them not recorded, keeps the
// capacity at the error and claims nothing more.
TEST(CapacityOverTime, WithoutTheRecordOfOtherLibrariesCallsTheCapacityStays) {
  const DeviceReplay pickle = replay(testing::load_test_snapshot("pytorch-2.11-h100/frag_oom.pickle"), "");
  EXPECT_EQ(pickle.capacity_source, "memory cap at the recorded OOM");
  EXPECT_EQ(pickle.capacity_over_time, "");
  EXPECT_EQ(pickle.least_capacity_bytes, pickle.capacity_bytes);
  Snapshot without = testing::load_test_snapshot("memsnap-h200/library_gave_back.msgpack");
  without.outside_memory.reset();
  const DeviceReplay blind = replay(without, "");
  EXPECT_EQ(blind.capacity_bytes, 149'544'894'464u);
  EXPECT_EQ(blind.capacity_over_time, "");
  EXPECT_EQ(blind.least_capacity_bytes, blind.capacity_bytes);
  without.outside_memory = OutsideMemory{};
  without.outside_memory->unrecorded_reason = "another tool holds CUPTI's callbacks";
  EXPECT_EQ(replay(without, "").capacity_over_time, "");
}

}  // namespace
}  // namespace memsnap
