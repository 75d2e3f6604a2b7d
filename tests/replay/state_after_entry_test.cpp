// The allocator's state at any event of a recorded trace, rebuilt by replay: at the last
// event it is the snapshot itself, and at every earlier event it is what the allocator held
// then (checked against a program whose statistics were read after each of its operations).
#include <gtest/gtest.h>

#include <algorithm>

#include <set>

#include <random>
#include <string>

#include "allocator/caching_allocator.h"
#include "allocator/simulated_backend.h"
#include "history/history_recorder.h"
#include "replay/snapshot_replay.h"
#include "snapshot/snapshot_builder.h"
#include "snapshot/snapshot_loader.h"

namespace memsnap {
namespace {

void expect_same_layout(const std::vector<SnapshotSegment>& got, const Snapshot& want, int64_t device) {
  std::vector<const SnapshotSegment*> segments;
  for (const SnapshotSegment& s : want.segments)
    if (s.device == device) segments.push_back(&s);
  ASSERT_EQ(got.size(), segments.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].address, segments[i]->address) << i;
    EXPECT_EQ(got[i].total_size, segments[i]->total_size) << i;
    EXPECT_EQ(got[i].allocated_size, segments[i]->allocated_size) << i;
    ASSERT_EQ(got[i].blocks.size(), segments[i]->blocks.size()) << i;
    for (size_t b = 0; b < got[i].blocks.size(); ++b) {
      EXPECT_EQ(got[i].blocks[b].address, segments[i]->blocks[b].address);
      EXPECT_EQ(got[i].blocks[b].size, segments[i]->blocks[b].size);
      EXPECT_EQ(got[i].blocks[b].state, segments[i]->blocks[b].state);
    }
  }
}

TEST(StateAfterEntry, AtTheLastEventItIsTheSnapshotOfAPyTorchRun) {
  const auto loaded = load_snapshot(std::string(MEMSNAP_TEST_DATA_DIR) + "/pytorch-2.11-h100/transformer_s0.pickle.gz");
  ASSERT_TRUE(loaded) << loaded.error();
  const Snapshot& s = loaded.value().snapshot;
  const auto state = state_after_entry(s, 0, s.device_traces[0].size() - 1);
  ASSERT_TRUE(state) << state.error();
  EXPECT_TRUE(state->exact);
  expect_same_layout(state->segments, s, 0);
  // Live blocks carry the stack that allocated them, as the snapshot's do.
  size_t with_stack = 0;
  for (const SnapshotSegment& segment : state->segments)
    for (const SnapshotBlock& block : segment.blocks)
      with_stack += block.state == BlockState::kActiveAllocated && block.stack != kNoStackIndex;
  EXPECT_GT(with_stack, 0u);
}

TEST(StateAfterEntry, AtEveryEventItHoldsWhatTheAllocatorHeldThen) {
  SimulatedBackend::Options options;
  options.capacity_bytes = size_t{2} << 30;
  auto backend = std::make_shared<SimulatedBackend>(options);
  CachingAllocator allocator(backend);
  HistoryRecorder recorder(allocator);
  recorder.configure({HistoryLevel::kAll, 100000, false});
  struct Checkpoint {
    size_t entries;
    int64_t reserved, allocated;
  };
  std::vector<Checkpoint> checkpoints;
  std::mt19937 random(7);
  std::vector<void*> live;
  for (int step = 0; step < 600; ++step) {
    if (live.empty() || random() % 3 != 0) {
      const size_t size = random() % 4 == 0 ? (random() % 40 + 1) << 20 : (random() % 200 + 1) * 4096;
      live.push_back(allocator.allocate(size));
    } else {
      const size_t victim = random() % live.size();
      allocator.deallocate(live[victim]);
      live.erase(live.begin() + static_cast<long>(victim));
    }
    if (step == 300) allocator.empty_cache();
    const DeviceStats stats = allocator.device_stats(0);
    checkpoints.push_back({recorder.trace(0).size(), stats.reserved_bytes[kAggregate].current,
                           stats.allocated_bytes[kAggregate].current});
  }
  const Snapshot s = take_snapshot(allocator, &recorder);
  for (size_t i = 0; i < checkpoints.size(); i += 37) {
    const auto state = state_after_entry(s, 0, checkpoints[i].entries - 1);
    ASSERT_TRUE(state) << state.error();
    EXPECT_TRUE(state->exact) << i;
    EXPECT_EQ(static_cast<int64_t>(state->reserved_bytes), checkpoints[i].reserved) << "after operation " << i;
    EXPECT_EQ(static_cast<int64_t>(state->allocated_bytes), checkpoints[i].allocated) << "after operation " << i;
  }
  const auto last = state_after_entry(s, 0, s.device_traces[0].size() - 1);
  ASSERT_TRUE(last);
  expect_same_layout(last->segments, s, 0);
  for (void* p : live) allocator.deallocate(p);
}

// Right after a segment_alloc the segment is reserved and still free: the state API answers
// with the state after the entry, not before it, and exactly.
TEST(StateAfterEntry, RightAfterASegmentAllocItsMemoryIsReservedAndFree) {
  auto backend = std::make_shared<SimulatedBackend>();
  CachingAllocator allocator(backend);
  HistoryRecorder recorder(allocator);
  recorder.configure({HistoryLevel::kAll, 100000, false});
  void* small = allocator.allocate(4096);
  void* medium = allocator.allocate(3 << 20);  // a 20 MiB segment
  const Snapshot s = take_snapshot(allocator, &recorder);
  const DeviceTrace& trace = s.device_traces[0];
  ASSERT_EQ(trace[2].action, TraceAction::kSegmentAlloc);
  const auto at_segment = state_after_entry(s, 0, 2);
  ASSERT_TRUE(at_segment) << at_segment.error();
  EXPECT_TRUE(at_segment->exact);
  EXPECT_EQ(at_segment->reserved_bytes, (uint64_t{2} << 20) + (uint64_t{20} << 20));
  EXPECT_EQ(at_segment->allocated_bytes, 4096u);
  const auto at_alloc = state_after_entry(s, 0, 3);
  ASSERT_TRUE(at_alloc);
  EXPECT_EQ(at_alloc->reserved_bytes, at_segment->reserved_bytes);
  EXPECT_EQ(at_alloc->allocated_bytes, 4096u + (3u << 20));
  allocator.deallocate(small);
  allocator.deallocate(medium);
}

// A graph's pool keeps its name at every event (two_graphs.pickle: two graphs, each its pool).
TEST(StateAfterEntry, SegmentsKeepTheirPrivatePools) {
  const auto loaded = load_snapshot(std::string(MEMSNAP_TEST_DATA_DIR) + "/pytorch-2.11-pools/two_graphs.pickle");
  ASSERT_TRUE(loaded) << loaded.error();
  const Snapshot& s = loaded.value().snapshot;
  const auto state = state_after_entry(s, 0, 19);
  ASSERT_TRUE(state) << state.error();
  std::set<MempoolId> pools;
  for (const SnapshotSegment& segment : state->segments) pools.insert(segment.segment_pool_id);
  EXPECT_GE(pools.size(), 2u) << "the global pools and at least one graph's";
  EXPECT_TRUE(std::any_of(state->segments.begin(), state->segments.end(),
                          [](const SnapshotSegment& segment) { return !segment.segment_pool_id.is_global(); }));
}

TEST(StateAfterEntry, EventsOutsideTheTraceAreClearErrors) {
  const auto loaded = load_snapshot(std::string(MEMSNAP_TEST_DATA_DIR) + "/pytorch-2.11/mlp_train.pickle");
  ASSERT_TRUE(loaded);
  const auto past = state_after_entry(loaded.value().snapshot, 0, 250);
  ASSERT_FALSE(past);
  EXPECT_EQ(past.error(), "event 250 is past the end of device 0's trace (250 entries)");
  EXPECT_FALSE(state_after_entry(loaded.value().snapshot, 3, 0));
}

}  // namespace
}  // namespace memsnap
