// The timeline analysis: bands pair allocs with frees, the outline is the memory in use, and a
// window (the web UI's zoom) samples only its events and picks bands among what lives there.
#include <gtest/gtest.h>

#include <algorithm>

#include "replay/recorded_config.h"
#include "replay/snapshot_replay.h"
#include "snapshot/snapshot_loader.h"
#include "viewer/timeline.h"

namespace memsnap {
namespace {

Snapshot trace_of(const std::vector<std::tuple<TraceAction, uint64_t, uint64_t>>& events) {
  Snapshot s;
  s.device_traces.resize(1);
  int64_t time = 0;
  for (const auto& [action, address, size] : events) s.device_traces[0].push_back({action, address, size, 0, time++, kNoStackIndex});
  return s;
}

// Bytes live just after event `index`, by brute force over the trace.
uint64_t live_after(const Snapshot& s, uint64_t index) {
  uint64_t live = 0, counted = 0;
  for (const TraceEntry& e : s.device_traces[0]) {
    if (e.action == TraceAction::kAlloc) live += e.size;
    else if (e.action == TraceAction::kFreeCompleted) live -= e.size;
    else continue;
    if (counted++ == index) break;
  }
  return live;
}

TEST(Timeline, OutlineIsTheMemoryInUse) {
  std::vector<std::tuple<TraceAction, uint64_t, uint64_t>> events;
  for (uint64_t i = 0; i < 200; ++i) {
    events.push_back({TraceAction::kAlloc, 0x1000 * (i + 1), 512 * (1 + i % 7)});
    if (i >= 3) events.push_back({TraceAction::kFreeCompleted, 0x1000 * (i - 2), 512 * (1 + (i - 3) % 7)});
  }
  const Snapshot s = trace_of(events);
  TimelineOptions options;
  options.max_bands = 5;
  options.max_samples = 1000;
  const Timeline t = compute_timeline(s, options);
  EXPECT_EQ(t.events, events.size());
  EXPECT_LE(t.bands.size(), 5u);
  for (size_t i = 0; i < t.samples.size(); ++i) {
    if (t.samples[i] == 0 || t.samples[i] >= t.events) continue;
    // At sample k, allocations started at or before k and not yet freed are stacked.
    EXPECT_EQ(t.total_bytes[i], live_after(s, t.samples[i])) << "sample " << t.samples[i];
  }
}

TEST(Timeline, WindowSamplesOnlyItsEventsAndPicksItsOwnBands) {
  // One huge allocation early (freed at event 3), then small ones: zoomed past it, the bands
  // must be the small ones alive there.
  std::vector<std::tuple<TraceAction, uint64_t, uint64_t>> events = {
      {TraceAction::kAlloc, 0x100000, 1 << 30}, {TraceAction::kAlloc, 0x1000, 4096}, {TraceAction::kAlloc, 0x2000, 8192},
      {TraceAction::kFreeCompleted, 0x100000, 1 << 30}};
  for (uint64_t i = 0; i < 50; ++i) events.push_back({TraceAction::kAlloc, 0x10000 + 0x1000 * i, 1024});
  const Snapshot s = trace_of(events);
  TimelineOptions options;
  options.max_bands = 1;
  options.window_begin = 10;
  options.window_end = 30;
  const Timeline t = compute_timeline(s, options);
  EXPECT_EQ(t.window_begin, 10u);
  EXPECT_EQ(t.window_end, 30u);
  for (uint64_t sample : t.samples) {
    EXPECT_GE(sample, 10u);
    EXPECT_LE(sample, 30u);
  }
  ASSERT_EQ(t.bands.size(), 1u);
  EXPECT_EQ(t.bands[0].size, 8192u) << "the largest allocation alive in the window, not the freed 1 GiB";
  // Past the end: clamped to an empty window at the end.
  options.window_begin = 1000;
  options.window_end.reset();
  const Timeline past = compute_timeline(s, options);
  EXPECT_EQ(past.window_begin, past.events);
  EXPECT_EQ(past.window_end, past.events);
}

// A spike of many small allocations between evenly spaced samples (no band marks its top):
// the peak is still exact, in value and event, at every zoom.
TEST(Timeline, PeakIsExactWhateverTheSampling) {
  std::vector<std::tuple<TraceAction, uint64_t, uint64_t>> events;
  for (uint64_t i = 0; i < 5000; ++i) {
    events.push_back({TraceAction::kAlloc, 0x1000 * (i + 1), 1024});
    events.push_back({TraceAction::kFreeCompleted, 0x1000 * (i + 1), 1024});
    if (i == 3001) {
      for (uint64_t k = 0; k < 100; ++k) events.push_back({TraceAction::kAlloc, 0x9000000 + 0x10000 * k, 65536});
      for (uint64_t k = 0; k < 100; ++k) events.push_back({TraceAction::kFreeCompleted, 0x9000000 + 0x10000 * k, 65536});
    }
  }
  const Snapshot s = trace_of(events);
  uint64_t want_bytes = 0, want_event = 0;
  for (uint64_t i = 0; i < events.size(); ++i)
    if (live_after(s, i) > want_bytes) want_bytes = live_after(s, i), want_event = i;
  for (auto [begin, end] : {std::pair<uint64_t, uint64_t>{0, events.size()}, {5000, 7000}, {6050, 6150}}) {
    TimelineOptions options;
    options.max_samples = 50;
    options.max_bands = 2;
    options.window_begin = begin;
    options.window_end = end;
    const Timeline t = compute_timeline(s, options);
    EXPECT_EQ(t.peak_bytes, want_bytes) << begin << ".." << end;
    EXPECT_EQ(t.peak_event, want_event) << begin << ".." << end;
    const auto at = std::find(t.samples.begin(), t.samples.end(), t.peak_event);
    ASSERT_NE(at, t.samples.end()) << "the peak's event is drawn";
    EXPECT_EQ(t.total_bytes[static_cast<size_t>(at - t.samples.begin())], want_bytes);
  }
}

// The peak is also named by the trace's own numbering (every entry counts, segment events
// too), the one Trace, Segments' "at event" and the state API use: there the state holds the peak.
TEST(Timeline, ThePeaksEntryIsTheTracesNumbering) {
  const auto loaded = load_snapshot(std::string(MEMSNAP_TEST_DATA_DIR) + "/pytorch-2.11/mlp_train.pickle");
  ASSERT_TRUE(loaded) << loaded.error();
  const Snapshot& s = loaded.value().snapshot;
  const Timeline t = compute_timeline(s);
  const DeviceTrace& trace = s.device_traces.at(static_cast<size_t>(t.device));
  ASSERT_LT(t.peak_entry, trace.size());
  EXPECT_TRUE(trace[t.peak_entry].action == TraceAction::kAlloc ||
              trace[t.peak_entry].action == TraceAction::kFreeCompleted);
  uint64_t before = 0;
  for (uint64_t i = 0; i < t.peak_entry; ++i)
    before += trace[i].action == TraceAction::kAlloc || trace[i].action == TraceAction::kFreeCompleted;
  EXPECT_EQ(before, t.peak_event);
  EXPECT_GT(t.peak_entry, t.peak_event) << "segment events count in the trace's numbering";
  const auto state = state_after_entry(s, t.device, t.peak_entry);
  ASSERT_TRUE(state) << state.error();
  uint64_t requested = 0;
  for (const SnapshotSegment& segment : state->segments)
    for (const SnapshotBlock& block : segment.blocks)
      if (block.state == BlockState::kActiveAllocated) requested += block.requested_size;
  EXPECT_EQ(requested, t.peak_bytes);
}

// Every number the timeline shows is a trace entry: each sample, band end, marker and the
// window are named by the entry of their alloc or free event (the axis's end by the last
// entry), in a zoomed window too; an out-of-memory marker by its own entry.
TEST(Timeline, EveryNumberShownIsATraceEntry) {
  const auto loaded = load_snapshot(std::string(MEMSNAP_TEST_DATA_DIR) + "/pytorch-2.11-h200/graph_pool_oom.pickle");
  ASSERT_TRUE(loaded) << loaded.error();
  const Snapshot& s = loaded.value().snapshot;
  const DeviceTrace& trace = s.device_traces.at(static_cast<size_t>(busiest_device(s)));
  std::vector<uint64_t> entry_of_event;
  for (uint64_t i = 0; i < trace.size(); ++i)
    if (trace[i].action == TraceAction::kAlloc || trace[i].action == TraceAction::kFreeCompleted) entry_of_event.push_back(i);
  const auto entry_of = [&](uint64_t event) { return event < entry_of_event.size() ? entry_of_event[event] : trace.size() - 1; };
  for (const bool zoom : {false, true}) {
    SCOPED_TRACE(zoom ? "zoomed" : "whole");
    TimelineOptions options;
    if (zoom) {
      options.window_begin = entry_of_event.size() / 3;
      options.window_end = entry_of_event.size() / 2;
    }
    const Timeline t = compute_timeline(s, options);
    EXPECT_EQ(t.entries, trace.size());
    ASSERT_EQ(t.sample_entries.size(), t.samples.size());
    for (size_t i = 0; i < t.samples.size(); ++i) EXPECT_EQ(t.sample_entries[i], entry_of(t.samples[i]));
    EXPECT_TRUE(std::is_sorted(t.sample_entries.begin(), t.sample_entries.end()));
    EXPECT_EQ(t.window_begin_entry, entry_of(t.window_begin));
    EXPECT_EQ(t.window_end_entry, entry_of(t.window_end));
    EXPECT_EQ(t.peak_entry, entry_of(t.peak_event));
    ASSERT_FALSE(t.bands.empty());
    for (const TimelineBand& b : t.bands) {
      EXPECT_EQ(b.start_entry, entry_of(b.start));
      EXPECT_EQ(b.end_entry, entry_of(b.end));
    }
    size_t ooms = 0;
    for (const TimelineMarker& m : t.markers) {
      ASSERT_TRUE(m.entry.has_value());
      if (m.kind != "oom") continue;
      ++ooms;
      EXPECT_EQ(trace[*m.entry].action, TraceAction::kOom) << "an out-of-memory marker names its own entry";
    }
    if (!zoom) {
      EXPECT_EQ(ooms, 1u) << "the pickle's one out-of-memory error";
    }
  }
}

// Bands go to what makes the picture: a long-lived allocation is drawn before a larger one that
// lives for an event, and what is alive at the peak is drawn.
TEST(Timeline, BandsGoToWhatMakesThePicture) {
  std::vector<std::tuple<TraceAction, uint64_t, uint64_t>> events = {{TraceAction::kAlloc, 0x100000, 64 << 20}};
  for (uint64_t i = 0; i < 100; ++i) {  // a burst of short-lived large allocations
    events.push_back({TraceAction::kAlloc, 0x9000000, 200 << 20});
    events.push_back({TraceAction::kFreeCompleted, 0x9000000, 200 << 20});
  }
  events.push_back({TraceAction::kFreeCompleted, 0x100000, 64 << 20});
  const Snapshot s = trace_of(events);
  TimelineOptions options;
  options.max_bands = 2;
  const Timeline t = compute_timeline(s, options);
  ASSERT_EQ(t.bands.size(), 2u);
  bool long_lived = false;
  for (const TimelineBand& b : t.bands) long_lived |= b.address == 0x100000;
  EXPECT_TRUE(long_lived) << "64 MiB for 200 events makes more of the picture than 200 MiB for one";
  EXPECT_EQ(t.peak_bytes, (64u << 20) + (200u << 20));
}

TEST(Timeline, OutOfMemoryErrorsAndAnnotationsAreMarkersOnTheEventAxis) {
  Snapshot s = trace_of({{TraceAction::kAlloc, 0x1000, 512},
                         {TraceAction::kAlloc, 0x2000, 512},
                         {TraceAction::kOom, 1 << 20, 1 << 30},
                         {TraceAction::kFreeCompleted, 0x1000, 512}});
  // Times are 0, 1, 2, 3 by trace_of: the annotation at time 1 marks event 1.
  s.external_annotations.push_back({0, "START", "forward", 1});
  const Timeline t = compute_timeline(s);
  ASSERT_EQ(t.markers.size(), 2u);
  EXPECT_EQ(t.markers[0].kind, "START");
  EXPECT_EQ(t.markers[0].label, "forward");
  EXPECT_EQ(t.markers[0].event, 1u);
  EXPECT_EQ(t.markers[1].kind, "oom");
  EXPECT_EQ(t.markers[1].event, 2u) << "the oom precedes the third alloc/free event";
  EXPECT_NE(t.markers[1].label.find("1.00 GiB"), std::string::npos) << t.markers[1].label;
  TimelineOptions zoomed;
  zoomed.window_begin = 0;
  zoomed.window_end = 1;
  EXPECT_EQ(compute_timeline(s, zoomed).markers.size(), 1u) << "only the window's markers";
}

// A run annotated at every step has more annotations than the axis has pixels: the window keeps
// at most one of each kind per sample interval, out-of-memory errors apart from annotations.
TEST(Timeline, DenseMarkersKeepOneOfEachKindPerSampleInterval) {
  std::vector<std::tuple<TraceAction, uint64_t, uint64_t>> events;
  for (uint64_t i = 0; i < 10000; ++i) {
    events.push_back({TraceAction::kAlloc, 0x1000, 512});
    events.push_back({TraceAction::kFreeCompleted, 0x1000, 512});
  }
  events.insert(events.begin() + 5001, {TraceAction::kOom, 1 << 20, 1 << 30});
  Snapshot s = trace_of(events);
  for (int64_t time = 0; time < 20000; time += 2) s.external_annotations.push_back({0, "START", "step", time});
  TimelineOptions options;
  options.max_samples = 100;
  const Timeline t = compute_timeline(s, options);
  EXPECT_EQ(t.marker_count, 10001u);
  EXPECT_EQ(t.markers.size(), 101u) << "100 annotation ticks and the out-of-memory error";
  EXPECT_EQ(std::count_if(t.markers.begin(), t.markers.end(), [](const TimelineMarker& m) { return m.kind == "oom"; }), 1);
  EXPECT_TRUE(std::is_sorted(t.markers.begin(), t.markers.end(),
                             [](const TimelineMarker& a, const TimelineMarker& b) { return a.event < b.event; }));
  TimelineOptions zoomed = options;
  zoomed.window_begin = 100;
  zoomed.window_end = 199;
  const Timeline z = compute_timeline(s, zoomed);
  EXPECT_EQ(z.marker_count, 50u);
  EXPECT_EQ(z.markers.size(), 50u) << "zoomed in, every annotation has room";
}

// Reserved memory by segment (and expandable mapping): at the end it is the snapshot's
// segments, and its peak is the recorded run's peak reserved.
TEST(Timeline, SegmentsKindIsReservedMemory) {
  for (const char* name : {"pytorch-2.11/two_streams.pickle", "pytorch-2.11-h100/expandable_streams.pickle",
                           "pytorch-2.11-h100/transformer_s0.pickle.gz", "pytorch-2.11-h100/frag_oom.pickle"}) {
    const auto loaded = load_snapshot(std::string(MEMSNAP_TEST_DATA_DIR) + "/" + name);
    ASSERT_TRUE(loaded) << loaded.error();
    const Snapshot& s = loaded.value().snapshot;
    TimelineOptions options;
    options.kind = TimelineKind::kSegments;
    options.max_samples = 5000;
    const Timeline t = compute_timeline(s, options);
    uint64_t final_reserved = 0;
    for (const SnapshotSegment& segment : s.segments) final_reserved += segment.device == t.device ? segment.total_size : 0;
    EXPECT_EQ(t.total_bytes.back(), final_reserved) << name;
    SnapshotReplayOptions replay_options;
    replay_options.config = recorded_allocator_config(s).value();
    const auto replay = replay_snapshot(s, replay_options);
    ASSERT_TRUE(replay) << replay.error();
    EXPECT_EQ(t.peak_bytes, replay->devices.at(0).recorded_peak_reserved) << name;
  }
}

// Odd traces keep every allocation: one allocated again at its address without a free lives
// to the end; an unmap of the middle of a mapping ends it and leaves two; an unmap of what was
// never mapped was mapped before the trace began.
TEST(Timeline, OddTracesKeepEveryAllocation) {
  const Snapshot twice = trace_of({{TraceAction::kAlloc, 0x1000, 512},
                                   {TraceAction::kAlloc, 0x1000, 1024},
                                   {TraceAction::kFreeCompleted, 0x1000, 1024},
                                   {TraceAction::kAlloc, 0x9000, 2048}});
  TimelineOptions options;
  const Timeline t = compute_timeline(twice, options);
  EXPECT_EQ(t.allocations, 3u);
  EXPECT_EQ(t.peak_bytes, 2048u + 512u);
  EXPECT_EQ(t.total_bytes.back(), 2048u + 512u);  // the first of the two never freed
  ASSERT_EQ(t.bands.size(), 3u);
  EXPECT_EQ(t.bands[0].size, 512u);
  EXPECT_EQ(t.bands[0].end, t.events);

  Snapshot mapped = trace_of({{TraceAction::kSegmentMap, 0x100000, 6 << 20},
                              {TraceAction::kAlloc, 0x100000, 512},
                              {TraceAction::kSegmentUnmap, 0x300000, 2 << 20},
                              {TraceAction::kFreeCompleted, 0x100000, 512},
                              {TraceAction::kSegmentUnmap, 0x900000, 2 << 20},
                              {TraceAction::kAlloc, 0x200000, 512}});
  options.kind = TimelineKind::kSegments;
  const Timeline segments = compute_timeline(mapped, options);
  // The mapping, what its unmap left below and above the hole, and the unmap from before.
  EXPECT_EQ(segments.allocations, 4u);
  EXPECT_EQ(segments.total_bytes.back(), uint64_t{4} << 20);
  EXPECT_EQ(segments.peak_bytes, uint64_t{8} << 20);  // 6 MiB mapped and 2 MiB from before
}

// Memory by role on a PyTorch transformer trained with Adam: the roles add up to the memory in
// use at every sample, and Adam's state is about twice the parameters.
TEST(Timeline, RolesAddUpAndReadAsATrainingStep) {
  const auto loaded = load_snapshot(std::string(MEMSNAP_TEST_DATA_DIR) + "/pytorch-2.11-h100/transformer_s0.pickle.gz");
  ASSERT_TRUE(loaded) << loaded.error();
  TimelineOptions options;
  options.roles = true;
  const Timeline t = compute_timeline(loaded.value().snapshot, options);
  ASSERT_EQ(t.role_bytes.size(), t.samples.size());
  for (size_t i = 0; i < t.samples.size(); ++i) {
    uint64_t sum = 0;
    for (uint64_t bytes : t.role_bytes[i]) sum += bytes;
    EXPECT_EQ(sum, t.total_bytes[i]) << "sample " << t.samples[i];
  }
  const RoleBytes& last = t.role_bytes.back();
  const auto role = [&](MemoryRole r) { return static_cast<double>(last[static_cast<size_t>(r)]); };
  EXPECT_GT(role(MemoryRole::kParameters), 0);
  EXPECT_GT(role(MemoryRole::kOptimizerState), 1.8 * role(MemoryRole::kParameters));
  EXPECT_LT(role(MemoryRole::kOptimizerState), 3.0 * role(MemoryRole::kParameters));
  EXPECT_GT(role(MemoryRole::kActivations) + role(MemoryRole::kBackward), 0);
}

// memory_viz's "Allocated Memory (incl. Private Pools)": two CUDA graphs' pools beside the
// global pools, each graph holding its 128 MiB output at the end and 512 MiB while it captured.
TEST(Timeline, PoolsAddUpAndShowWhatEachPrivatePoolHolds) {
  const auto loaded = load_snapshot(std::string(MEMSNAP_TEST_DATA_DIR) + "/pytorch-2.11-pools/pool_oom.pickle");
  ASSERT_TRUE(loaded) << loaded.error();
  TimelineOptions options;
  options.pools = true;
  const Timeline t = compute_timeline(loaded.value().snapshot, options);
  ASSERT_EQ(t.pools, (std::vector<MempoolId>{{0, 0}, {1, 0}, {2, 0}}));
  ASSERT_EQ(t.pool_bytes.size(), t.samples.size());
  uint64_t graph1_peak = 0;
  for (size_t i = 0; i < t.samples.size(); ++i) {
    EXPECT_EQ(t.pool_bytes[i][0] + t.pool_bytes[i][1] + t.pool_bytes[i][2], t.total_bytes[i]) << "sample " << t.samples[i];
    graph1_peak = std::max(graph1_peak, t.pool_bytes[i][1]);
  }
  constexpr uint64_t kMiB = 1 << 20;
  EXPECT_EQ(graph1_peak, 512 * kMiB);
  EXPECT_EQ(t.pool_bytes.back()[1], 128 * kMiB);
  EXPECT_EQ(t.pool_bytes.back()[2], 128 * kMiB);
  options.pools = false;
  EXPECT_TRUE(compute_timeline(loaded.value().snapshot, options).pools.empty());
}

}  // namespace
}  // namespace memsnap
