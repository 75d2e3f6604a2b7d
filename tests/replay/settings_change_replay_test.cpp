// A run whose settings changed while it ran (torch.cuda.memory._set_allocator_settings):
// replayed under the recorded settings it reproduces every segment, because the replay applies
// each change at the event it came before; under other settings, the program's request is
// applied to them as PyTorch would.
#include <gtest/gtest.h>

#include "allocator/caching_allocator.h"
#include "allocator/simulated_backend.h"
#include "history/history_recorder.h"
#include "replay/recorded_config.h"
#include "replay/snapshot_replay.h"
#include "snapshot/snapshot_builder.h"

namespace memsnap {
namespace {

constexpr size_t kMiB = 1 << 20;

// Frees and reallocates around two changes: rounding, then max_split_size and expandable
// segments, each of which changes what the next requests reserve.
Snapshot run_with_changes() {
  auto backend = std::make_shared<SimulatedBackend>();
  CachingAllocator allocator(backend);
  HistoryRecorder recorder(allocator);
  recorder.configure({HistoryLevel::kAll, 100000, false});
  std::vector<void*> kept;
  auto take = [&](size_t mib) { kept.push_back(allocator.allocate(mib * kMiB + 4096)); };
  for (size_t n : {84, 84, 30, 12}) take(n);
  allocator.deallocate(kept[1]);
  kept.erase(kept.begin() + 1);
  const std::string first = "roundup_power2_divisions:4";
  allocator.set_config(update_allocator_config(allocator.config(), first).value(), first);
  for (size_t n : {70, 84, 5, 130}) take(n);
  allocator.deallocate(kept[0]);
  kept.erase(kept.begin());
  const std::string second = "max_split_size_mb:64,expandable_segments:True";
  allocator.set_config(update_allocator_config(allocator.config(), second).value(), second);
  for (size_t n : {60, 84, 3, 200}) take(n);
  Snapshot snapshot = take_snapshot(allocator, &recorder);
  for (void* p : kept) allocator.deallocate(p);
  return snapshot;
}

TEST(SettingsChangeReplay, UnderTheRecordedSettingsEverySegmentIsReproduced) {
  const Snapshot snapshot = run_with_changes();
  ASSERT_EQ(snapshot.trace_state_changes.at(0).size(), 4u);  // the settings at the start, the cap (none), two changes
  SnapshotReplayOptions options;
  options.config = recorded_allocator_config(snapshot).value();
  const Result<SnapshotReplay> replay = replay_snapshot(snapshot, options);
  ASSERT_TRUE(replay.ok()) << replay.error();
  ASSERT_TRUE(replay.value().recorded_settings);
  const DeviceReplay& d = replay.value().devices.at(0);
  EXPECT_EQ(d.settings_changes, 2u);
  EXPECT_EQ(d.replayed_segment_allocs, d.recorded_segment_allocs);
  EXPECT_EQ(d.matched_segment_allocs, d.recorded_segment_allocs.size());
  EXPECT_EQ(d.final_segments_matched, d.final_segments_recorded);
  EXPECT_TRUE(d.invariant_problems.empty());
}

TEST(SettingsChangeReplay, WithoutTheChangesTheReplayWouldDiffer) {
  Snapshot snapshot = run_with_changes();
  SnapshotReplayOptions options;
  options.config = recorded_allocator_config(snapshot).value();
  snapshot.trace_state_changes.clear();  // as if the changes had not been recorded
  const Result<SnapshotReplay> replay = replay_snapshot(snapshot, options);
  ASSERT_TRUE(replay.ok()) << replay.error();
  const DeviceReplay& d = replay.value().devices.at(0);
  EXPECT_NE(d.replayed_segment_allocs, d.recorded_segment_allocs);
}

TEST(SettingsChangeReplay, OtherSettingsTakeTheProgramsRequestsToo) {
  const Snapshot snapshot = run_with_changes();
  SnapshotReplayOptions options;
  options.config = parse_allocator_config("garbage_collection_threshold:0.5,release_lock_on_cudamalloc:True").value();
  const Result<SnapshotReplay> replay = replay_snapshot(snapshot, options);
  ASSERT_TRUE(replay.ok()) << replay.error();
  EXPECT_FALSE(replay.value().recorded_settings);
  const DeviceReplay& d = replay.value().devices.at(0);
  EXPECT_EQ(d.settings_changes, 2u);
  // The second request turned expandable segments on, whatever the replay started with.
  EXPECT_GT(d.stats.num_device_alloc, 0);
  EXPECT_EQ(d.stats.max_split_size, int64_t{64} * static_cast<int64_t>(kMiB));
  EXPECT_TRUE(d.invariant_problems.empty());
}

}  // namespace
}  // namespace memsnap
