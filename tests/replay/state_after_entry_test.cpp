// The allocator's state at any event of a recorded trace, rebuilt by replay: at the last
// event it is the snapshot itself, and at every earlier event it is what the allocator held
// then (checked against a program whose statistics were read after each of its operations).
#include <gtest/gtest.h>

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
