// Issue 53: replaying a trace whose every event is on a stream of its own took time quadratic
// in its events: the pools looked for a stream among all the streams they had met, one by one,
// and kept bins for each; a snapshot's frees that complete later, each waited for on a stream
// of its own, had every allocation ask each such stream's event whether it had completed.
// On the traces of tests/many_streams.h the allocator decides the same on many streams as on
// one (every allocation reserves a segment), so the replay on many streams must take at most
// a few times its time on one, whatever the length; the old code took 50 to 200 times as long
// at this length, and more the longer the trace. Under a sanitizer the replays run and are
// checked, but not timed (the sanitizers' own costs differ between the two).
#include <gtest/gtest.h>

#include "replay/snapshot_replay.h"
#include "replay/trace_replay.h"
#include "tests/many_streams.h"
#include "tests/test_scale.h"
#include "tests/timing.h"

namespace memsnap {
namespace {

constexpr size_t kEvents = 20000;

void expect_at_most_times(double ratio, const std::pair<double, double>& seconds, const std::string& what) {
#if !defined(MEMSNAP_TESTS_SANITIZED)
  EXPECT_LE(seconds.first, ratio * seconds.second)
      << kEvents << " events: " << seconds.first << " s " << what << ", " << seconds.second << " s on one stream";
#else
  (void)ratio, (void)seconds, (void)what;
#endif
}

TEST(ManyStreams, TraceReplayTakesAtMostFourTimesItsTimeOnOneStream) {
  const AllocationTrace many = testing::many_streams_trace(kEvents, /*one_stream=*/false);
  const AllocationTrace one = testing::many_streams_trace(kEvents, /*one_stream=*/true);
  ReplayOptions options;
  options.capacity_bytes = size_t{1} << 40;  // every allocation lives until the second half
  ReplayResult on_many, on_one;
  const auto seconds = testing::quickest_seconds_in_turns([&] { on_many = replay_trace(many, options); },
                                                          [&] { on_one = replay_trace(one, options); });
  EXPECT_EQ(on_many.events, kEvents);
  EXPECT_EQ(on_many.segment_alloc_sizes.size(), kEvents / 2);
  EXPECT_EQ(on_many.failed_allocs, 0u);
  EXPECT_EQ(on_many.invariant_problems, std::vector<std::string>{});
  EXPECT_EQ(on_many.segment_alloc_sizes, on_one.segment_alloc_sizes);  // the same decisions
  expect_at_most_times(4, seconds, "on as many streams");
}

DeviceReplay replay_device_0(const Snapshot& snapshot) {
  const Result<SnapshotReplay> replayed = replay_snapshot(snapshot, {});
  EXPECT_TRUE(replayed.ok()) << replayed.error();
  return replayed.ok() ? replayed->devices.at(0) : DeviceReplay{};
}

// Also the replay that `memsnap serve`'s /state stops after an entry.
TEST(ManyStreams, SnapshotReplayAndStateAfterAnEntryTakeAtMostFourTimesTheirTimeOnOneStream) {
  const Snapshot many = testing::many_streams_snapshot(kEvents, /*one_stream=*/false);
  const Snapshot one = testing::many_streams_snapshot(kEvents, /*one_stream=*/true);
  const auto replay_and_state = [](const Snapshot& snapshot) {
    const DeviceReplay replayed = replay_device_0(snapshot);
    const uint64_t last = snapshot.device_traces[0].size() - 1;
    const Result<StateAfterEntry> state = state_after_entry(snapshot, 0, last);
    EXPECT_TRUE(state.ok()) << state.error();
    return replayed;
  };
  DeviceReplay on_many, on_one;
  const auto seconds = testing::quickest_seconds_in_turns([&] { on_many = replay_and_state(many); },
                                                          [&] { on_one = replay_and_state(one); });
  EXPECT_EQ(on_many.failed_allocs, 0u);
  EXPECT_EQ(on_many.invariant_problems, std::vector<std::string>{});
  EXPECT_EQ(on_many.matched_segment_allocs, kEvents / 2);  // as recorded
  EXPECT_EQ(on_many.replayed_segment_allocs, on_one.replayed_segment_allocs);
  expect_at_most_times(4, seconds, "on as many streams");
}

// Every free completes at the end of the trace, so the replay waits for each on a stream of its
// own: against the same events on one stream with every free completed at once (the old code
// was as slow on one stream with frees completed later). Each free records an event and
// completes it besides, about twice the work, hence the wider margin.
TEST(ManyStreams, ReplayOfFreesCompletedLaterTakesAtMostSixTimesTheTimeOfFreesCompletedAtOnce) {
  const Snapshot many = testing::many_streams_snapshot(kEvents, /*one_stream=*/false, /*deferred=*/true);
  const Snapshot one = testing::many_streams_snapshot(kEvents, /*one_stream=*/true);
  DeviceReplay on_many;
  const auto seconds = testing::quickest_seconds_in_turns([&] { on_many = replay_device_0(many); },
                                                          [&] { replay_device_0(one); });
  EXPECT_EQ(on_many.deferred_frees, kEvents / 2);
  EXPECT_EQ(on_many.failed_allocs, 0u);
  EXPECT_EQ(on_many.invariant_problems, std::vector<std::string>{});
  expect_at_most_times(6, seconds, "with frees completed later on as many streams");
}

}  // namespace
}  // namespace memsnap
