// Replaying snapshots (memsnap's and PyTorch's) must reproduce what the recorded allocator
// did: the same segment allocations in the same order, and at the end the same segments,
// block for block — also when the trace does not begin at an empty allocator.
#include "replay/snapshot_replay.h"

#include <gtest/gtest.h>

#include <iostream>
#include <random>

#include "allocator/caching_allocator.h"
#include "allocator/simulated_backend.h"
#include "history/history_recorder.h"
#include "snapshot/snapshot_builder.h"
#include "snapshot/snapshot_loader.h"
#include "tests/test_scale.h"
#include "tests/test_snapshots.h"
#include "tests/timing.h"
#include "replay/recorded_config.h"
#include "replay/snapshot_replay_report.h"

namespace memsnap {
namespace {

constexpr size_t kMiB = 1 << 20;


SnapshotReplay replay_recorded(const Snapshot& snapshot) {
  SnapshotReplayOptions options;
  Result<AllocatorConfig> recorded = recorded_allocator_config(snapshot);
  EXPECT_TRUE(recorded.ok()) << recorded.error();
  if (recorded) options.config = recorded.value();
  Result<SnapshotReplay> replay = replay_snapshot(snapshot, options);
  EXPECT_TRUE(replay.ok()) << replay.error();
  return replay.ok() ? replay.value() : SnapshotReplay{};
}

// Everything an exact replay promises, with `what` saying which replay failed.
void expect_exact(const SnapshotReplay& replay, const std::string& what) {
  ASSERT_FALSE(replay.devices.empty()) << what;
  EXPECT_TRUE(replay.recorded_settings) << what;
  EXPECT_TRUE(replay.consistent()) << what << "\n" << snapshot_replay_to_text(replay, what);
  for (const DeviceReplay& d : replay.devices) {
    EXPECT_EQ(d.replayed_segment_allocs, d.recorded_segment_allocs) << what;
    EXPECT_EQ(d.matched_segment_allocs, d.recorded_segment_allocs.size()) << what;
    EXPECT_EQ(d.final_segments_matched, d.final_segments_recorded) << what;
    EXPECT_EQ(d.reproduced_ooms, d.recorded_ooms) << what;
    EXPECT_EQ(d.failed_allocs, 0u) << what;
    EXPECT_TRUE(d.invariant_problems.empty()) << what;
  }
}

// The snapshot as it would look had recording begun `dropped` events later.
Snapshot without_first_events(Snapshot snapshot, size_t dropped) {
  auto& trace = snapshot.device_traces[0];
  trace.erase(trace.begin(), trace.begin() + static_cast<std::ptrdiff_t>(std::min(dropped, trace.size())));
  return snapshot;
}

TEST(SnapshotReplay, PyTorchRecordingsAreReproducedExactly) {
  for (const char* name : {"pytorch-2.11/mlp_train.pickle", "pytorch-2.11/two_streams.pickle",
                           "pytorch-2.11-h100/transformer_s0.pickle.gz",
                           "pytorch-2.11-h100/oom_all_stacks.pickle", "pytorch-2.11-h100/frag_oom.pickle"}) {
    const SnapshotReplay replay = replay_recorded(testing::load_test_snapshot(name));
    expect_exact(replay, name);
    EXPECT_TRUE(replay.devices[0].start.empty()) << name;  // these traces begin at an empty device
  }
}

// The CUDA-graphs guide's scenarios recorded by PyTorch 2.11 (bench/make_pytorch_pool_snapshots.py):
// graphs' private pools, a pool shared by two graphs, a MemPool, an OOM caused by pools. Each
// allocation goes to the pool of the segment it lay in, and the segments at the end are in the
// same pools as the snapshot's.
const char* const kPoolRecordings[] = {
    "two_graphs", "shared_pool", "after_capture", "cross_pool_fragmentation",
    "capture_keeps_freed_memory", "deferred_recycling", "mempool", "pool_oom", "expandable_capture"};

TEST(SnapshotReplay, PyTorchPrivatePoolsAreReproducedExactly) {
  for (const char* scenario : kPoolRecordings) {
    const std::string name = std::string("pytorch-2.11-pools/") + scenario + ".pickle";
    expect_exact(replay_recorded(testing::load_test_snapshot(name)), name);
  }
}

// Expandable pages mapped before a trace begins cannot be restored (the replay reports it), so
// expandable_capture is replayed whole only.
TEST(SnapshotReplay, PrivatePoolTracesCutAtEveryEventAreReplayedFromTheReconstructedState) {
  for (const char* scenario : kPoolRecordings) {
    if (std::string(scenario) == "expandable_capture") continue;
    const std::string name = std::string("pytorch-2.11-pools/") + scenario + ".pickle";
    const Snapshot full = testing::load_test_snapshot(name);
    for (size_t cut = 0; cut < full.device_traces[0].size(); ++cut) {
      expect_exact(replay_recorded(without_first_events(full, cut)),
                   name + " without its first " + std::to_string(cut) + " events");
      if (::testing::Test::HasFailure()) return;
    }
  }
}

TEST(SnapshotReplay, PyTorchRingBufferThatWrappedOverTwoStreamsIsReproduced) {
  // Recorded on the H100 with max_entries=700 over 120 steps: side stream, record_stream,
  // empty_cache. The trace begins mid-run, so the start state is rebuilt.
  const SnapshotReplay replay = replay_recorded(testing::load_test_snapshot("pytorch-2.11-h100/streams_wrapped.pickle"));
  expect_exact(replay, "streams_wrapped");
  ASSERT_EQ(replay.devices.size(), 1u);
  EXPECT_EQ(replay.devices[0].start.segments.size(), 10u);
  EXPECT_EQ(replay.devices[0].start.live_blocks, 20u);
  EXPECT_GT(replay.devices[0].deferred_frees, 10u);
  EXPECT_EQ(replay.devices[0].empty_cache_calls, 1u);
}

TEST(SnapshotReplay, PyTorchTrainingOnMemsnapsAllocatorIsReproduced) {
  // A transformer trained by PyTorch 2.11 on the H100 through libmemsnap_torch.so, recorded
  // with C++ stacks (bench/torch_training_compare.py --snapshot): 90,951 events.
  const SnapshotReplay replay =
      replay_recorded(testing::load_test_snapshot("pytorch-2.11-h100/memsnap_plugin_transformer.msgpack.gz"));
  expect_exact(replay, "memsnap_plugin_transformer");
  ASSERT_EQ(replay.devices.size(), 1u);
  EXPECT_EQ(replay.devices[0].events, 90951u);
  EXPECT_EQ(replay.devices[0].recorded_segment_allocs.size(), 125u);
}

TEST(SnapshotReplay, TheRecordedOutOfMemoryErrorHappensAgain) {
  const SnapshotReplay replay = replay_recorded(testing::load_test_snapshot("pytorch-2.11-h100/oom_all_stacks.pickle"));
  ASSERT_EQ(replay.devices.size(), 1u);
  EXPECT_EQ(replay.devices[0].recorded_ooms, 1u);
  EXPECT_EQ(replay.devices[0].reproduced_ooms, 1u);
  // The device had 74 GiB free: a memory cap refused the request, and the replay says so.
  EXPECT_EQ(replay.devices[0].capacity_source, "memory cap at the recorded OOM");
}

TEST(SnapshotReplay, TracesCutAtEveryEventAreReplayedFromTheReconstructedState) {
  for (const char* name : {"pytorch-2.11/mlp_train.pickle", "pytorch-2.11/two_streams.pickle"}) {
    const Snapshot full = testing::load_test_snapshot(name);
    size_t reconstructed = 0;
    for (size_t cut = 0; cut < full.device_traces[0].size(); ++cut) {
      const SnapshotReplay replay = replay_recorded(without_first_events(full, cut));
      expect_exact(replay, std::string(name) + " without its first " + std::to_string(cut) + " events");
      reconstructed += replay.devices[0].start.live_blocks;
      if (::testing::Test::HasFailure()) return;
    }
    EXPECT_GT(reconstructed, 100u) << name;  // the cuts did exercise the reconstruction
  }
}

TEST(SnapshotReplay, ALongTraceCutAnywhereIsStillExact) {
  const Snapshot full = testing::load_test_snapshot("pytorch-2.11-h100/transformer_s0.pickle.gz");
  const size_t events = full.device_traces[0].size();
  for (size_t i = 1; i < 40; ++i) {
    const size_t cut = events * i / 40 + i;  // odd places: mid-step, mid-free
    expect_exact(replay_recorded(without_first_events(full, cut)),
                 "transformer without its first " + std::to_string(cut) + " events");
    if (::testing::Test::HasFailure()) return;
  }
}

// A memsnap-recorded program with a second stream whose frees complete late, and a trace
// ring that wrapped many times.
struct Recording {
  std::shared_ptr<SimulatedBackend> backend;
  std::unique_ptr<CachingAllocator> allocator;
  std::unique_ptr<HistoryRecorder> recorder;

  explicit Recording(size_t max_entries, const std::string& config = "", bool caching = true) {
    SimulatedBackend::Options options;
    options.capacity_bytes = size_t{8} << 30;
    options.events_complete_immediately = false;
    backend = std::make_shared<SimulatedBackend>(options);
    AllocatorConfig settings = parse_allocator_config(config).value();
    settings.caching = caching;
    allocator = std::make_unique<CachingAllocator>(backend, settings);
    recorder = std::make_unique<HistoryRecorder>(*allocator);
    recorder->configure({HistoryLevel::kAll, max_entries, false});
  }

  Snapshot run(int steps) {
    std::mt19937 random(7);
    std::vector<void*> params;
    for (int i = 0; i < 8; ++i) params.push_back(allocator->allocate((i + 1) * 3 * kMiB));
    const StreamId side = backend->create_stream(0);
    std::vector<void*> held;
    for (int step = 0; step < steps; ++step) {
      std::vector<void*> activations;
      for (int layer = 0; layer < 6; ++layer) {
        const size_t bytes = (random() % 64 + 1) * (random() % 2 ? 4096 : 256 * 1024);
        activations.push_back(allocator->allocate(bytes));
      }
      void* on_side = allocator->allocate(2 * kMiB + random() % 4096, 0, side);
      void* shared = allocator->allocate(6 * kMiB);
      allocator->record_stream(shared, side);  // used by the side stream: its free waits
      allocator->deallocate(shared);
      for (void* p : activations) allocator->deallocate(p);
      allocator->deallocate(on_side);
      if (step % 3 == 0) backend->complete_events(side);
      if (step % 17 == 16) allocator->empty_cache();  // the program releases cached memory
      if (step % 5 == 0) held.push_back(allocator->allocate(kMiB / 2 + step * 512));
    }
    Snapshot snapshot = take_snapshot(*allocator, recorder.get());
    for (void* p : held) allocator->deallocate(p);
    for (void* p : params) allocator->deallocate(p);
    return snapshot;
  }
};

TEST(SnapshotReplay, MemsnapRecordingWithLateFreesAndEmptyCacheIsReproduced) {
  Recording recording(1'000'000);
  const Snapshot snapshot = recording.run(60);
  const SnapshotReplay replay = replay_recorded(snapshot);
  expect_exact(replay, "memsnap recording");
  EXPECT_GT(replay.devices[0].deferred_frees, 10u);
  EXPECT_GT(replay.devices[0].empty_cache_calls, 0u);
  EXPECT_TRUE(replay.devices[0].start.empty());
}

// MEMSNAP_NO_CACHING=1: the snapshot says so, and the replay allocates and frees as it did.
TEST(SnapshotReplay, MemsnapRecordingWithCachingOffIsReproduced) {
  Recording recording(1'000'000, "", /*caching=*/false);
  const Snapshot snapshot = recording.run(30);
  ASSERT_FALSE(recorded_allocator_config(snapshot)->caching);
  const SnapshotReplay replay = replay_recorded(snapshot);
  expect_exact(replay, "memsnap recording with caching off");
  EXPECT_EQ(replay.devices[0].replayed_segment_frees, replay.devices[0].recorded_segment_frees);
  EXPECT_GT(replay.devices[0].recorded_segment_frees, 200u);
}

TEST(SnapshotReplay, AWrappedTraceRingIsReplayedFromTheReconstructedState) {
  for (const size_t entries : {40, 150, 300, 777, 2000}) {  // all far fewer than the run makes
    Recording recording(entries);
    const Snapshot snapshot = recording.run(80);
    ASSERT_EQ(snapshot.device_traces[0].size(), entries);
    const SnapshotReplay replay = replay_recorded(snapshot);
    const std::string what = "memsnap recording wrapped at " + std::to_string(entries);
    expect_exact(replay, what);
    if (::testing::Test::HasFailure()) {
      std::cerr << snapshot_replay_to_text(replay, what);
      return;
    }
    EXPECT_FALSE(replay.devices[0].start.empty()) << what;
    EXPECT_GT(replay.devices[0].start.live_blocks, 0u) << what;
  }
}

TEST(SnapshotReplay, PyTorchExpandableSegmentsAreReproducedExactly) {
  for (const char* name : {"pytorch-2.11-h100/expandable_streams.pickle",
                           "pytorch-2.11-h100/expandable_frag.pickle",
                           "pytorch-2.11-h100/transformer_expandable.msgpack.gz"}) {
    const SnapshotReplay replay = replay_recorded(testing::load_test_snapshot(name));
    expect_exact(replay, name);
    EXPECT_EQ(replay.config, "expandable_segments:True") << name;
    EXPECT_GT(replay.devices[0].recorded_segment_allocs.size(), 1u) << name;
    EXPECT_EQ(replay.devices[0].replayed_segment_frees, replay.devices[0].recorded_segment_frees)
        << name;
  }
  const SnapshotReplay replay = replay_recorded(testing::load_test_snapshot("pytorch-2.11/expandable_segments.pickle"));
  expect_exact(replay, "expandable_segments");
  EXPECT_EQ(replay.config, "expandable_segments:True");
  const DeviceReplay& d = replay.devices[0];
  EXPECT_EQ(d.recorded_segment_allocs,
            (std::vector<uint64_t>{20 * kMiB, 20 * kMiB, 300 * kMiB, 100 * kMiB}));
  EXPECT_EQ(d.final_segments_replayed, 1u);  // one run of mapped pages, block for block
  EXPECT_EQ(d.stats.reserved_bytes[kAggregate].peak, static_cast<int64_t>(440 * kMiB));
}

TEST(SnapshotReplay, MemsnapRecordingWithExpandableSegmentsIsReproduced) {
  Recording recording(1'000'000, "expandable_segments:True");
  const Snapshot snapshot = recording.run(60);
  size_t maps = 0, unmaps = 0;
  for (const TraceEntry& e : snapshot.device_traces[0]) {
    maps += e.action == TraceAction::kSegmentMap;
    unmaps += e.action == TraceAction::kSegmentUnmap;
    EXPECT_NE(e.action, TraceAction::kSegmentAlloc);
  }
  EXPECT_GT(maps, 5u);
  EXPECT_GT(unmaps, 2u);  // the program's empty_cache unmaps free pages
  for (const SnapshotSegment& s : snapshot.segments) EXPECT_TRUE(s.is_expandable);
  const SnapshotReplay replay = replay_recorded(snapshot);
  expect_exact(replay, "memsnap recording with expandable segments");
  EXPECT_EQ(replay.devices[0].replayed_segment_frees, unmaps);
  EXPECT_GT(replay.devices[0].empty_cache_calls, 0u);
  // The same run under the usual segments reserves differently: the comparison is real.
  SnapshotReplayOptions usual;
  const SnapshotReplay other = replay_snapshot(snapshot, usual).value();
  EXPECT_NE(other.devices[0].replayed_segment_allocs, replay.devices[0].replayed_segment_allocs);
}

TEST(SnapshotReplay, ExpandablePagesMappedBeforeTheTraceBeganAreReported) {
  Recording recording(300, "expandable_segments:True");
  const SnapshotReplay replay = replay_recorded(recording.run(80));
  EXPECT_FALSE(replay.consistent());
  ASSERT_FALSE(replay.devices[0].start.problems.empty());
  EXPECT_NE(replay.devices[0].start.problems[0].find("mapped before the trace began"),
            std::string::npos)
      << replay.devices[0].start.problems[0];
}

TEST(SnapshotReplay, ALostEventIsReportedNotSilentlySimulated) {
  Snapshot snapshot = testing::load_test_snapshot("pytorch-2.11/mlp_train.pickle");
  auto& trace = snapshot.device_traces[0];
  // Drop an allocation from the middle: its free then frees nothing the replay knows.
  for (size_t i = trace.size() / 2; i < trace.size(); ++i)
    if (trace[i].action == TraceAction::kAlloc) {
      trace.erase(trace.begin() + static_cast<std::ptrdiff_t>(i));
      break;
    }
  const SnapshotReplay replay = replay_recorded(snapshot);
  EXPECT_FALSE(replay.consistent());
  EXPECT_NE(snapshot_replay_to_text(replay, "x").find("INCONSISTENT"), std::string::npos);
  EXPECT_FALSE(snapshot_replay_to_json(replay)["consistent"].get<bool>());
}

TEST(SnapshotReplay, OtherSettingsReplayAndReportTheRequiredFields) {
  const Snapshot snapshot = testing::load_test_snapshot("pytorch-2.11-h100/transformer_s0.pickle.gz");
  SnapshotReplayOptions options;
  options.config = parse_allocator_config("max_split_size_mb:64,roundup_power2_divisions:4").value();
  Result<SnapshotReplay> replay = replay_snapshot(snapshot, options);
  ASSERT_TRUE(replay.ok()) << replay.error();
  EXPECT_FALSE(replay->recorded_settings);
  EXPECT_TRUE(replay->devices[0].invariant_problems.empty());
  const nlohmann::json json = snapshot_replay_to_json(replay.value());
  for (const char* field : {"recorded_segment_allocs", "replayed_segment_allocs", "matched_segment_allocs",
                            "peak_reserved_bytes", "peak_allocated_bytes", "device_mallocs",
                            "num_alloc_retries", "num_ooms", "fragmentation"})
    EXPECT_TRUE(json.contains(field)) << field;
  EXPECT_EQ(json["recorded_segment_allocs"], 48);
  EXPECT_GT(json["peak_reserved_bytes"].get<int64_t>(), 0);
}

TEST(SnapshotReplay, RecordedSettingsAreReadFromPyTorchAndMemsnapFiles) {
  Snapshot pytorch;
  pytorch.source = "pytorch";
  pytorch.allocator_settings = {{"PYTORCH_CUDA_ALLOC_CONF", "max_split_size_mb:64"},
                                {"max_split_size", "67108864"},
                                {"garbage_collection_threshold", "0.0"},
                                {"expandable_segments", "False"},
                                {"roundup_power2_divisions", "{'1': 0, '2': 4, '4': 0, '8': 0}"}};
  Result<AllocatorConfig> config = recorded_allocator_config(pytorch);
  ASSERT_TRUE(config.ok()) << config.error();
  EXPECT_EQ(config->max_split_size, 64 * kMiB);
  EXPECT_EQ(config->roundup_power2_divisions[1], 4u);
  pytorch.allocator_settings[3].second = "maybe";
  EXPECT_FALSE(recorded_allocator_config(pytorch).ok());

  Recording recording(1000);
  const Snapshot memsnap_file = recording.run(1);
  config = recorded_allocator_config(memsnap_file);
  ASSERT_TRUE(config.ok()) << config.error();
  EXPECT_EQ(config.value(), recording.allocator->config());
}

// A trace whose program allocated and freed `cached` blocks, emptied the cache of them (or
// not), then freed and reallocated one other block `repeats` times (a PyTorch snapshot; each
// block a segment of its own, of 64 sizes from 10 MiB, so that no size bin of the pool holds
// thousands of them).
Snapshot cache_then_reuse(size_t cached, bool empty_cache, size_t repeats) {
  Snapshot snapshot;
  snapshot.source = "pytorch";
  DeviceTrace& trace = snapshot.device_traces.emplace_back();
  int64_t time = 0;
  const auto add = [&](TraceAction action, uint64_t address, uint64_t size) {
    trace.push_back(TraceEntry(action, address, size, 0, time++));
  };
  const auto size_of = [](uint64_t i) { return (10 + 2 * (i % 64)) * kMiB; };
  const uint64_t kept = uint64_t{1} << 40;  // in the simulated device's address space
  add(TraceAction::kSegmentAlloc, kept, size_of(0));
  add(TraceAction::kAlloc, kept, size_of(0));
  for (uint64_t i = 1; i <= cached; ++i) {
    add(TraceAction::kSegmentAlloc, kept + (i << 30), size_of(i));
    add(TraceAction::kAlloc, kept + (i << 30), size_of(i));
  }
  for (uint64_t i = 1; i <= cached; ++i) {
    add(TraceAction::kFreeRequested, kept + (i << 30), size_of(i));
    add(TraceAction::kFreeCompleted, kept + (i << 30), size_of(i));
  }
  for (uint64_t i = 1; empty_cache && i <= cached; ++i) add(TraceAction::kSegmentFree, kept + (i << 30), size_of(i));
  for (size_t i = 0; i < repeats; ++i) {
    add(TraceAction::kFreeRequested, kept, size_of(0));
    add(TraceAction::kFreeCompleted, kept, size_of(0));
    add(TraceAction::kAlloc, kept, size_of(0));
  }
  return snapshot;
}

// The replay matches its own releases with the recorded ones in a hash set that it empties
// before each event; emptying one that once held thousands of releases zeroed all its buckets,
// so after an empty_cache of 8,000 segments every later event cost as much as 8,000 (the old
// code took ten times as long as without the empty_cache).
TEST(SnapshotReplay, EventsAfterAnEmptyCacheOfThousandsOfSegmentsCostNoMoreThanWithoutIt) {
  const Snapshot emptied = cache_then_reuse(8000, /*empty_cache=*/true, 100000);
  const Snapshot kept = cache_then_reuse(8000, /*empty_cache=*/false, 100000);
  SnapshotReplay replayed;
  [[maybe_unused]] const auto seconds = testing::quickest_seconds_in_turns(
      [&] { replayed = replay_recorded(emptied); }, [&] { replay_recorded(kept); });
  expect_exact(replayed, "empty_cache of 8,000 segments");
  EXPECT_EQ(replayed.devices.at(0).empty_cache_calls, 1u);
#if !defined(MEMSNAP_TESTS_SANITIZED)
  EXPECT_LE(seconds.first, 2 * seconds.second)
      << seconds.first << " s with 8,000 segments released, " << seconds.second << " s with them kept";
#endif
}

}  // namespace
}  // namespace memsnap
