// The timeline's whole-device mode (viewer/whole_device_timeline.h): the allocator's reserved
// bytes and each other library's device memory at every sample, placed by time; nothing drawn
// where the recorded calls cannot say (not recorded, kept events not reaching back, a trace
// without times); checked on a real H200 step against what the snapshot's figures say at its end.
#include "viewer/whole_device_timeline.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <string>

#include "tests/test_snapshots.h"
#include "viewer/device_memory_account.h"
#include "viewer/outside_holders.h"
#include "viewer/timeline.h"

namespace memsnap {
namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;

OutsideAllocation library_memory(uint64_t address, uint64_t size, const std::string& library, int64_t time_us) {
  return {0, address, size, OutsideKind::kDevice, "cudaMalloc", library, kNoStackIndex, time_us};
}

// Six alloc and free events on device 0 (times 10..90): a 100 MiB segment held throughout, a
// 200 MiB one from event 3 to event 4; NCCL takes 300 MiB at t=40 and keeps it, cuBLAS 50 MiB
// from t=55 to t=70.
Snapshot step() {
  Snapshot s;
  s.device_traces.resize(1);
  DeviceTrace& t = s.device_traces[0];
  t.emplace_back(TraceAction::kSegmentAlloc, 0x1000000, 100 * kMiB, 0, 10);
  t.emplace_back(TraceAction::kAlloc, 0x1000000, 60 * kMiB, 0, 10);
  t.emplace_back(TraceAction::kAlloc, 0x5000000, 20 * kMiB, 0, 30);
  t.emplace_back(TraceAction::kFreeCompleted, 0x5000000, 20 * kMiB, 0, 50);
  t.emplace_back(TraceAction::kSegmentAlloc, 0x9000000, 200 * kMiB, 0, 60);
  t.emplace_back(TraceAction::kAlloc, 0x9000000, 150 * kMiB, 0, 60);
  t.emplace_back(TraceAction::kFreeCompleted, 0x9000000, 150 * kMiB, 0, 80);
  t.emplace_back(TraceAction::kSegmentFree, 0x9000000, 200 * kMiB, 0, 85);
  t.emplace_back(TraceAction::kFreeCompleted, 0x1000000, 60 * kMiB, 0, 90);
  SnapshotSegment segment;
  segment.address = 0x1000000;
  segment.total_size = 100 * kMiB;
  s.segments.push_back(segment);
  OutsideMemory& o = s.outside_memory.emplace();
  const OutsideAllocation nccl = library_memory(0xa0000000, 300 * kMiB, "libnccl.so.2", 40);
  const OutsideAllocation cublas = library_memory(0xc0000000, 50 * kMiB, "libcublas.so.13", 55);
  o.live = {nccl};
  o.events = {{OutsideAction::kAlloc, nccl}, {OutsideAction::kAlloc, cublas}, {OutsideAction::kFree, cublas}};
  o.events[2].allocation.time_us = 70;
  return s;
}

const std::vector<uint64_t> kEverySample = {0, 1, 2, 3, 4, 5, 6};

TEST(WholeDeviceTimeline, ReservedAndEachLibraryAreThereAtEverySampleByTime) {
  const WholeDeviceTimeline w = whole_device_timeline(step(), 0, kEverySample, 0, 6);
  EXPECT_EQ(w.reserved_bytes, (std::vector<uint64_t>{100 * kMiB, 100 * kMiB, 100 * kMiB, 300 * kMiB, 300 * kMiB, 100 * kMiB, 100 * kMiB}));
  ASSERT_EQ(w.libraries, (std::vector<std::string>{"libnccl.so.2", "libcublas.so.13"}));
  EXPECT_FALSE(w.libraries_merged);
  const std::vector<std::vector<uint64_t>> expected = {
      {0, 0}, {0, 0}, {300 * kMiB, 0}, {300 * kMiB, 50 * kMiB}, {300 * kMiB, 0}, {300 * kMiB, 0}, {300 * kMiB, 0}};
  EXPECT_EQ(w.library_bytes, expected);
  EXPECT_EQ(w.libraries_known_from, 0u);
  EXPECT_EQ(w.libraries_note, "");
  // Together at their most after event 3 (trace entry 5): 300 MiB reserved, 350 MiB in libraries.
  EXPECT_EQ(w.peak_bytes, 650 * kMiB);
  EXPECT_EQ(w.peak_event, 3u);
  EXPECT_EQ(w.peak_entry, 5u);
  // Windowed: the peak of those events only.
  const WholeDeviceTimeline late = whole_device_timeline(step(), 0, {4, 5, 6}, 4, 6);
  EXPECT_EQ(late.peak_bytes, 600 * kMiB);
  EXPECT_EQ(late.peak_event, 4u);
  // No driver figures in this snapshot: said, not guessed.
  EXPECT_FALSE(w.device_total_bytes || w.context_bytes || w.other_processes_bytes);
  EXPECT_NE(w.snapshot_note.find("no driver figures"), std::string::npos) << w.snapshot_note;
}

TEST(WholeDeviceTimeline, BeforeTheOldestKeptEventTheLibrariesAreNotKnown) {
  Snapshot s = step();
  s.outside_memory->events.erase(s.outside_memory->events.begin());  // NCCL's alloc dropped
  s.outside_memory->dropped_events = 1;
  const WholeDeviceTimeline w = whole_device_timeline(s, 0, kEverySample, 0, 6);
  // Known from t=55, the oldest kept event: events 3 on (t=60).
  EXPECT_EQ(w.libraries_known_from, 3u);
  EXPECT_NE(w.libraries_note.find("newest events"), std::string::npos) << w.libraries_note;
  EXPECT_EQ(w.library_bytes[2], (std::vector<uint64_t>{0, 0}));  // not drawn, not claimed
  EXPECT_EQ(w.library_bytes[3], (std::vector<uint64_t>{300 * kMiB, 50 * kMiB}));
  EXPECT_EQ(w.library_bytes[6], (std::vector<uint64_t>{300 * kMiB, 0}));
  // Where the libraries are not known the peak is the allocator's alone, never a guess.
  EXPECT_EQ(w.peak_bytes, 650 * kMiB);
}

// A recording that began after the trace did (history turned on first, the calls outside the
// allocator recorded from later): before it began, nothing is claimed of the libraries.
TEST(WholeDeviceTimeline, BeforeTheRecordingBeganTheLibrariesAreNotKnown) {
  Snapshot s = step();
  s.outside_memory->recorded_since_us = 35;
  const WholeDeviceTimeline w = whole_device_timeline(s, 0, kEverySample, 0, 6);
  EXPECT_EQ(w.libraries_known_from, 2u);  // event 2 (t=50) is the first after t=35
  EXPECT_NE(w.libraries_note.find("recorded from a later moment on"), std::string::npos) << w.libraries_note;
  EXPECT_EQ(w.library_bytes[2], (std::vector<uint64_t>{300 * kMiB, 0}));
  // Recorded from before the trace: as if it had always been.
  s.outside_memory->recorded_since_us = 5;
  EXPECT_EQ(whole_device_timeline(s, 0, kEverySample, 0, 6).libraries_known_from, 0u);
}

TEST(WholeDeviceTimeline, WhatCannotBePlacedIsSaidAndNotDrawn) {
  Snapshot unrecorded = step();
  unrecorded.outside_memory = OutsideMemory{};
  unrecorded.outside_memory->unrecorded_reason = "another tool holds CUPTI's callbacks";
  WholeDeviceTimeline w = whole_device_timeline(unrecorded, 0, kEverySample, 0, 6);
  EXPECT_TRUE(w.libraries.empty());
  EXPECT_EQ(w.libraries_known_from, kEverySample.size());
  EXPECT_NE(w.libraries_note.find("another tool holds CUPTI's callbacks"), std::string::npos);
  EXPECT_EQ(w.peak_bytes, 300 * kMiB);

  Snapshot pytorch = step();
  pytorch.outside_memory.reset();
  w = whole_device_timeline(pytorch, 0, kEverySample, 0, 6);
  EXPECT_EQ(w.libraries_known_from, kEverySample.size());
  EXPECT_NE(w.libraries_note.find("no record"), std::string::npos) << w.libraries_note;
  EXPECT_EQ(w.reserved_bytes.back(), 100 * kMiB);

  // A trace whose events carry no times: the calls cannot be placed between them.
  Snapshot untimed = step();
  DeviceTrace& trace = untimed.device_traces[0];
  for (size_t i = 0; i < trace.size(); ++i) {
    TraceEntry e = trace[i];
    e.time_us = 0;
    trace.set(i, e);
  }
  w = whole_device_timeline(untimed, 0, kEverySample, 0, 6);
  EXPECT_EQ(w.libraries_known_from, kEverySample.size());
  EXPECT_NE(w.libraries_note.find("no times"), std::string::npos) << w.libraries_note;
  for (const std::vector<uint64_t>& row : w.library_bytes)
    EXPECT_EQ(std::accumulate(row.begin(), row.end(), uint64_t{0}), 0u);
}

TEST(WholeDeviceTimeline, PastEightLibrariesTheSmallestShareOneColumn) {
  Snapshot s = step();
  s.outside_memory->events.clear();
  s.outside_memory->live.clear();
  for (uint64_t k = 0; k < 11; ++k)
    s.outside_memory->live.push_back(library_memory(0x100000000 + k * 0x10000000, (k + 1) * kMiB, "lib" + std::to_string(k) + ".so", 1));
  // Another device's and host memory are not this device's.
  s.outside_memory->live.push_back({1, 0x1, 999 * kMiB, OutsideKind::kDevice, "cudaMalloc", "libother.so", kNoStackIndex, 1});
  s.outside_memory->live.push_back({-1, 0x2, 999 * kMiB, OutsideKind::kPinnedHost, "cudaHostAlloc", "libhost.so", kNoStackIndex, 1});
  const WholeDeviceTimeline w = whole_device_timeline(s, 0, kEverySample, 0, 6);
  ASSERT_EQ(w.libraries.size(), WholeDeviceTimeline::kMaxLibraries);
  EXPECT_TRUE(w.libraries_merged);
  EXPECT_EQ(w.libraries.front(), "lib10.so");
  EXPECT_EQ(w.libraries.back(), "4 other libraries");
  EXPECT_EQ(w.library_bytes[0].back(), (1 + 2 + 3 + 4) * kMiB);
  EXPECT_EQ(std::accumulate(w.library_bytes[0].begin(), w.library_bytes[0].end(), uint64_t{0}), 66 * kMiB);
}

// The real step on an H200 (tests/data/memsnap-h200/README.md): the timeline's last sample is
// the snapshot's moment, so its reserved bytes and libraries are what the account of that moment
// says; every sample's libraries are what the holders rebuilt for its time say.
TEST(WholeDeviceTimeline, ARealNcclStepEndsWhereTheSnapshotsAccountIs) {
  const Snapshot s = testing::load_test_snapshot("memsnap-h200/nccl_cudnn_step.msgpack");
  TimelineOptions options;
  options.whole_device = true;
  const Timeline timeline = compute_timeline(s, options);
  ASSERT_TRUE(timeline.whole_device);
  const WholeDeviceTimeline& w = *timeline.whole_device;
  const DeviceMemoryAccount account = account_device_memory(s).at(0);
  ASSERT_EQ(w.reserved_bytes.size(), timeline.samples.size());
  EXPECT_EQ(w.reserved_bytes.back(), account.reserved_bytes);
  EXPECT_EQ(w.libraries_known_from, 0u);
  ASSERT_GE(w.libraries.size(), 2u);
  EXPECT_EQ(w.libraries[0], "libnccl.so.2");
  EXPECT_EQ(w.library_bytes.back()[0], 406'847'488u);
  const auto cublas = std::find(w.libraries.begin(), w.libraries.end(), "libcublas.so.13") - w.libraries.begin();
  ASSERT_LT(static_cast<size_t>(cublas), w.libraries.size());
  EXPECT_EQ(w.library_bytes.back()[static_cast<size_t>(cublas)], 134'481'920u);
  ASSERT_TRUE(account.libraries_bytes);
  EXPECT_EQ(std::accumulate(w.library_bytes.back().begin(), w.library_bytes.back().end(), uint64_t{0}), *account.libraries_bytes);
  // NCCL's communicator was made by the first all_reduce, after the trace began.
  EXPECT_EQ(w.library_bytes.front()[0], 0u);
  ASSERT_TRUE(w.context_bytes && w.device_total_bytes);
  EXPECT_EQ(*w.context_bytes, 855'323'128u);
  EXPECT_EQ(*w.device_total_bytes, 150'109'880'320u);
  EXPECT_GE(w.peak_bytes, w.reserved_bytes.back() + *account.libraries_bytes);
  for (size_t i = 0; i < timeline.samples.size(); ++i) {
    std::string reason;
    const auto holders = outside_holders_at(s, 0, timeline.event_time_us[i], reason);
    ASSERT_TRUE(holders) << reason;
    uint64_t held = 0;
    for (const OutsideHolder& h : *holders) held += h.bytes;
    EXPECT_EQ(std::accumulate(w.library_bytes[i].begin(), w.library_bytes[i].end(), uint64_t{0}), held) << "sample " << i;
  }
}

// A real PyTorch pickle: no record of other libraries' calls and no driver figures. The allocator
// is drawn, the libraries are said to be not known (not drawn as nothing), and so are the
// context and the device's size.
TEST(WholeDeviceTimeline, APyTorchPickleSaysWhatItCannotKnow) {
  const Snapshot s = testing::load_test_snapshot("pytorch-2.11-h100/frag_oom.pickle");
  TimelineOptions options;
  options.whole_device = true;
  const Timeline timeline = compute_timeline(s, options);
  ASSERT_TRUE(timeline.whole_device);
  const WholeDeviceTimeline& w = *timeline.whole_device;
  EXPECT_TRUE(w.libraries.empty());
  EXPECT_EQ(w.libraries_known_from, timeline.samples.size());
  EXPECT_NE(w.libraries_note.find("no record"), std::string::npos) << w.libraries_note;
  EXPECT_FALSE(w.device_total_bytes || w.context_bytes || w.other_processes_bytes);
  EXPECT_NE(w.snapshot_note.find("no driver figures"), std::string::npos) << w.snapshot_note;
  // The allocator's reserved bytes end at the snapshot's segments, and the peak is theirs.
  uint64_t reserved = 0;
  for (const SnapshotSegment& segment : s.segments)
    if (segment.device == timeline.device) reserved += segment.total_size;
  EXPECT_EQ(w.reserved_bytes.back(), reserved);
  EXPECT_GE(w.peak_bytes, *std::max_element(w.reserved_bytes.begin(), w.reserved_bytes.end()));
}

}  // namespace
}  // namespace memsnap
