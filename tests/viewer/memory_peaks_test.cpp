// The peaks Stats shows first: the allocator's statistics, and a trace's in-use and reserved
// peaks counting what was live before its first entry, named by the entry after which they held.
#include "viewer/memory_peaks.h"

#include <gtest/gtest.h>

#include "snapshot/snapshot_loader.h"
#include "tests/test_snapshots.h"
#include "viewer/snapshot_stats.h"
#include "viewer/timeline.h"

namespace memsnap {
namespace {

constexpr uint64_t kMiB = 1 << 20;


SnapshotBlock block(uint64_t address, uint64_t size, uint64_t requested, BlockState state) {
  SnapshotBlock b;
  b.address = address;
  b.size = size;
  b.requested_size = requested;
  b.state = state;
  return b;
}

// One 20 MiB segment made before the trace, holding a 4 MiB block live since before the trace
// and, at the snapshot, a 6 MiB block the trace allocated.
Snapshot wrapped_trace() {
  Snapshot snapshot;
  SnapshotSegment segment;
  segment.address = 0x1000000;
  segment.total_size = 20 * kMiB;
  segment.blocks = {block(0x1000000, 4 * kMiB, 4 * kMiB - 512, BlockState::kActiveAllocated),
                    block(0x1400000, 6 * kMiB, 6 * kMiB, BlockState::kActiveAllocated),
                    block(0x1a00000, 10 * kMiB, 0, BlockState::kInactive)};
  snapshot.segments.push_back(segment);
  DeviceTrace trace;
  trace.push_back({TraceAction::kAlloc, 0x1a00000, 8 * kMiB});         // 0: 4 MiB - 512 + 8 MiB
  trace.push_back({TraceAction::kSegmentAlloc, 0x9000000, 2 * kMiB});  // 1: reserved 22 MiB
  trace.push_back({TraceAction::kAlloc, 0x9000000, 2 * kMiB});         // 2: in use peaks here
  trace.push_back({TraceAction::kFreeRequested, 0x1a00000, 8 * kMiB});
  trace.push_back({TraceAction::kFreeCompleted, 0x1a00000, 8 * kMiB});
  trace.push_back({TraceAction::kFreeRequested, 0x9000000, 2 * kMiB});
  trace.push_back({TraceAction::kFreeCompleted, 0x9000000, 2 * kMiB});
  trace.push_back({TraceAction::kSegmentFree, 0x9000000, 2 * kMiB});
  trace.push_back({TraceAction::kAlloc, 0x1400000, 6 * kMiB});         // 8
  snapshot.device_traces.push_back(trace);
  return snapshot;
}

TEST(MemoryPeaks, TraceCountsWhatWasLiveBeforeItAndNamesTheEntry) {
  const MemoryPeaks peaks = compute_peaks(wrapped_trace());
  EXPECT_TRUE(peaks.statistics.empty());
  ASSERT_EQ(peaks.traces.size(), 1u);
  const TracePeaks& p = peaks.traces[0];
  EXPECT_EQ(p.entries, 9u);
  EXPECT_EQ(p.in_use_at_start, 4 * kMiB - 512);  // requested bytes, as the trace counts them
  EXPECT_EQ(p.reserved_at_start, 20 * kMiB);
  EXPECT_EQ(p.in_use_bytes, 14 * kMiB - 512);
  EXPECT_EQ(p.in_use_entry, 2u);
  EXPECT_EQ(p.reserved_bytes, 22 * kMiB);
  EXPECT_EQ(p.reserved_entry, 1u);
}

TEST(MemoryPeaks, APeakAtTheTraceStartNamesNoEntry) {
  Snapshot snapshot = wrapped_trace();
  snapshot.device_traces[0] = DeviceTrace();
  snapshot.device_traces[0].push_back({TraceAction::kFreeRequested, 0x1000000, 4 * kMiB - 512});
  snapshot.device_traces[0].push_back({TraceAction::kFreeCompleted, 0x1000000, 4 * kMiB - 512});
  snapshot.segments[0].blocks[0].state = BlockState::kInactive;
  snapshot.segments[0].blocks[0].requested_size = 0;
  const TracePeaks p = compute_peaks(snapshot).traces.at(0);
  EXPECT_EQ(p.in_use_at_start, 10 * kMiB - 512);
  EXPECT_EQ(p.in_use_bytes, 10 * kMiB - 512);
  EXPECT_FALSE(p.in_use_entry.has_value());
  EXPECT_FALSE(p.reserved_entry.has_value());
  EXPECT_EQ(p.reserved_bytes, 20 * kMiB);
}

TEST(MemoryPeaks, StatisticsAreTheProcesssPeaksAndNothingElse) {
  Snapshot snapshot;
  snapshot.statistics.push_back({{"allocated_bytes.all.peak", 7 * kMiB}, {"reserved_bytes.all.peak", 20 * kMiB},
                                 {"requested_bytes.all.peak", 7 * kMiB - 100}});
  snapshot.statistics.push_back({{"num_ooms", 1}});  // no peaks: not a device with statistics
  const MemoryPeaks peaks = compute_peaks(snapshot);
  ASSERT_EQ(peaks.statistics.size(), 1u);
  EXPECT_EQ(peaks.statistics[0].allocated_bytes, 7 * kMiB);
  EXPECT_EQ(peaks.statistics[0].reserved_bytes, 20 * kMiB);
  EXPECT_EQ(peaks.statistics[0].requested_bytes, 7 * kMiB - 100);
  EXPECT_FALSE(peaks.statistics[0].active_bytes.has_value());
  EXPECT_TRUE(peaks.traces.empty());
  const SnapshotStats stats = compute_stats(snapshot);
  const std::string text = stats_to_text(stats, snapshot);
  EXPECT_NE(text.find("device 0: reserved 20.00 MiB, allocated 7.00 MiB (block bytes"), std::string::npos) << text;
  EXPECT_EQ(text.find("peaks during the trace"), std::string::npos) << text;
}

TEST(MemoryPeaks, NoStatisticsAndNoTraceSaysSo) {
  Snapshot snapshot = wrapped_trace();
  snapshot.device_traces.clear();
  const std::string text = stats_to_text(compute_stats(snapshot), snapshot);
  EXPECT_NE(text.find("peaks: unknown (the snapshot holds neither allocator statistics nor a trace)"), std::string::npos)
      << text;
}

// On real PyTorch 2.11 pickles the trace's peaks are the Timeline's: the same bytes after the
// same entry for memory in use, and the segments timeline's peak for reserved memory.
TEST(MemoryPeaks, EqualTheTimelinesPeaksOnRealPickles) {
  for (const char* name : {"pytorch-2.11-h200/wrapped_decoder.pickle", "pytorch-2.11-h200/predating_segments.pickle",
                           "pytorch-2.11-h200/graph_pool_oom.pickle", "pytorch-2.11-h100/streams_wrapped.pickle",
                           "pytorch-2.11-h100/expandable_streams.pickle", "pytorch-2.11-pools/two_graphs.pickle",
                           "pytorch-2.11/mlp_train.pickle", "pytorch-2.11/expandable_segments.pickle"}) {
    SCOPED_TRACE(name);
    const Snapshot snapshot = testing::load_test_snapshot(name);
    const MemoryPeaks peaks = compute_peaks(snapshot);
    ASSERT_FALSE(peaks.traces.empty());
    EXPECT_TRUE(peaks.statistics.empty());  // PyTorch's pickles hold no allocator statistics
    for (const TracePeaks& p : peaks.traces) {
      TimelineOptions options;
      options.device = p.device;
      const Timeline active = compute_timeline(snapshot, options);
      EXPECT_EQ(p.in_use_bytes, active.peak_bytes);
      if (p.in_use_entry) {
        EXPECT_EQ(*p.in_use_entry, active.peak_entry);
      }
      options.kind = TimelineKind::kSegments;
      EXPECT_EQ(p.reserved_bytes, compute_timeline(snapshot, options).peak_bytes);
    }
  }
}

// What is known of these runs (tests/data/pytorch-2.11-h200/README.md): the decoder's trace
// wrapped with ~105 MiB live at each step's start, so its trace began with memory in use; every
// segment of predating_segments was made before the trace, which reserves nothing new.
TEST(MemoryPeaks, KnowWhatWasThereBeforeTheTraceOnRecordedRuns) {
  const TracePeaks wrapped = compute_peaks(testing::load_test_snapshot("pytorch-2.11-h200/wrapped_decoder.pickle")).traces.at(0);
  EXPECT_GE(wrapped.in_use_at_start, 104 * kMiB);
  EXPECT_GT(wrapped.in_use_bytes, wrapped.in_use_at_start);
  const Snapshot predating_snapshot = testing::load_test_snapshot("pytorch-2.11-h200/predating_segments.pickle");
  const TracePeaks predating = compute_peaks(predating_snapshot).traces.at(0);
  EXPECT_FALSE(predating.reserved_entry.has_value());
  EXPECT_EQ(predating.reserved_bytes, compute_stats(predating_snapshot).totals.reserved_bytes);
  EXPECT_EQ(predating.reserved_at_start, predating.reserved_bytes);
}

// A memsnap snapshot holds the process's statistics: its active peak (block bytes, all of the
// process's life) bounds the trace's in-use peak (requested bytes of the trace's window).
TEST(MemoryPeaks, StatisticsBoundTheTracesPeakInAMemsnapSnapshot) {
  const Snapshot snapshot = testing::load_test_snapshot("pytorch-2.11-h100/memsnap_plugin_transformer.msgpack.gz");
  const MemoryPeaks peaks = compute_peaks(snapshot);
  ASSERT_FALSE(peaks.statistics.empty());
  ASSERT_FALSE(peaks.traces.empty());
  const StatisticsPeaks& s = peaks.statistics[0];
  const TracePeaks& t = peaks.traces[0];
  ASSERT_TRUE(s.active_bytes.has_value());
  EXPECT_GE(*s.active_bytes, t.in_use_bytes);
  EXPECT_GE(s.reserved_bytes, t.reserved_bytes);
  EXPECT_GT(t.in_use_bytes, 0u);
  const std::string text = stats_to_text(compute_stats(snapshot), snapshot);
  EXPECT_NE(text.find("peaks (allocator statistics"), std::string::npos) << text;
  EXPECT_NE(text.find("peaks during the trace"), std::string::npos) << text;
}

}  // namespace
}  // namespace memsnap
