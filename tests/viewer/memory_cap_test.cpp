// A memory cap is part of the record: the snapshot says its size and who set it (the program, the
// settings string, an environment variable), every format keeps it, explain-oom names it, and
// replays run under it, so a verdict under a cap is the cap's and not the device's.
#include <gtest/gtest.h>

#include <cstdlib>

#include "allocator/caching_allocator.h"
#include "allocator/simulated_backend.h"
#include "history/history_recorder.h"
#include "replay/snapshot_replay.h"
#include "snapshot/snapshot_builder.h"
#include "tests/snapshot_formats.h"
#include "viewer/oom_explanation.h"
#include "viewer/settings_advisor.h"

namespace memsnap {
namespace {

constexpr size_t kMiB = size_t{1} << 20;
constexpr size_t kGiB = size_t{1} << 30;

struct Program {
  std::shared_ptr<SimulatedBackend> backend;
  std::unique_ptr<CachingAllocator> allocator;
  std::unique_ptr<HistoryRecorder> recorder;
  std::vector<void*> held;

  explicit Program(AllocatorConfig config = {}, size_t capacity = 8 * kGiB) {
    SimulatedBackend::Options options;
    options.capacity_bytes = capacity;
    backend = std::make_shared<SimulatedBackend>(options);
    allocator = std::make_unique<CachingAllocator>(backend, config);
    recorder = std::make_unique<HistoryRecorder>(*allocator);
    recorder->configure({HistoryLevel::kAll, 100000, false});
  }
  ~Program() {
    for (void* p : held) allocator->deallocate(p);
  }
  Snapshot fail_with(size_t bytes) {
    EXPECT_THROW(allocator->allocate(bytes, 0, 0), OutOfMemoryError);
    return take_snapshot(*allocator, recorder.get());
  }
  // Sixteen 32 MiB blocks cut from one 512 MiB segment, every other one freed: 256 MiB live,
  // 256 MiB cached in 32 MiB holes.
  void fragment() {
    allocator->deallocate(allocator->allocate(512 * kMiB));
    std::vector<void*> blocks;
    for (int i = 0; i < 16; ++i) blocks.push_back(allocator->allocate(32 * kMiB));
    for (int i = 0; i < 16; ++i) {
      if (i % 2 == 0)
        held.push_back(blocks[static_cast<size_t>(i)]);
      else
        allocator->deallocate(blocks[static_cast<size_t>(i)]);
    }
  }
};

Snapshot round_trip(const Snapshot& s, const std::string& format) {
  Result<Snapshot> back = testing::converted(s, format);
  EXPECT_TRUE(back.ok()) << back.error();
  return back.ok() ? std::move(back).value() : Snapshot{};
}

std::vector<TraceStateChange> cap_changes(const Snapshot& s) {
  std::vector<TraceStateChange> out;
  if (!s.trace_state_changes.empty())
    for (const TraceStateChange& c : s.trace_state_changes[0])
      if (c.kind == TraceStateKind::kMemoryCap) out.push_back(c);
  return out;
}

// memsnap-demo --oom: a 4 GiB request under a 1 GiB cap set from C++. The cap, its size and
// where it came from are in the snapshot, and the cause is the request alone against the cap:
// no fragmentation, other streams or pools are listed beside it.
TEST(MemoryCap, ACapSetByTheProgramIsInTheSnapshotAndExplainsTheError) {
  Program program;
  program.allocator->set_memory_fraction(0.125, 0);  // 1 GiB of 8
  program.held.push_back(program.allocator->allocate(100 * kMiB));
  const Snapshot s = program.fail_with(4 * kGiB);
  ASSERT_EQ(s.devices.size(), 1u);
  ASSERT_TRUE(s.devices[0].memory_cap.has_value());
  EXPECT_EQ(s.devices[0].memory_cap->bytes, kGiB);
  EXPECT_EQ(s.devices[0].memory_cap->source, "set_memory_fraction");
  ASSERT_EQ(cap_changes(s).size(), 1u);
  const OomExplanation x = explain_oom(s).value();
  ASSERT_TRUE(x.cap_known);
  ASSERT_TRUE(x.cap.has_value());
  EXPECT_EQ(x.diagnosis.cause, OomCause::kTooLarge);
  EXPECT_EQ(x.diagnosis.reasons.size(), 1u) << "nothing but the request and the cap matters";
  EXPECT_NE(x.diagnosis.verdict.sentence.find("larger than a memory cap of 1.00 GiB (0.125 of the device, set by "
                                              "set_memory_fraction)"),
            std::string::npos)
      << x.diagnosis.verdict.sentence;
  ASSERT_TRUE(x.advice.has_value());
  EXPECT_EQ(x.advice->answer, TuneVerdict::kNoSettingWorks);
}

TEST(MemoryCap, ACapFromTheSettingsSaysWhereItCameFrom) {
  {
    Program program(parse_allocator_config("per_process_memory_fraction:0.25").value());
    const Snapshot s = take_snapshot(*program.allocator, program.recorder.get());
    ASSERT_TRUE(s.devices.at(0).memory_cap.has_value());
    EXPECT_EQ(s.devices[0].memory_cap->bytes, 2 * kGiB);
    EXPECT_EQ(s.devices[0].memory_cap->source, "per_process_memory_fraction in the settings string");
    // Set before recording began: the trace starts with it.
    ASSERT_EQ(cap_changes(s).size(), 1u);
    EXPECT_EQ(cap_changes(s)[0].event_index, 0u);
  }
  ::setenv("MEMSNAP_ALLOC_CONF", "per_process_memory_fraction:0.5", 1);
  const Result<AllocatorConfig> from_environment = allocator_config_from_environment();
  ::unsetenv("MEMSNAP_ALLOC_CONF");
  ASSERT_TRUE(from_environment.ok()) << from_environment.error();
  Program program(from_environment.value());
  const Snapshot s = take_snapshot(*program.allocator, program.recorder.get());
  ASSERT_TRUE(s.devices.at(0).memory_cap.has_value());
  EXPECT_EQ(s.devices[0].memory_cap->source, "per_process_memory_fraction in MEMSNAP_ALLOC_CONF");
}

// Recorded with no cap, the trace says so: a file that records caps is told apart from one that
// does not (PyTorch's, older memsnap files), where a cap can only be inferred.
TEST(MemoryCap, NoCapIsRecordedAsNone) {
  Program program;
  program.held.push_back(program.allocator->allocate(kMiB));
  const Snapshot s = take_snapshot(*program.allocator, program.recorder.get());
  EXPECT_FALSE(s.devices.at(0).memory_cap.has_value());
  ASSERT_EQ(cap_changes(s).size(), 1u);
  EXPECT_EQ(cap_changes(s)[0].value, "none");
}

// History off (the default), as dump_snapshot_on_oom writes the error: the trace holds the error
// alone, and the cap it met (or none) is stated with it, so explain-oom and memsnap.torch's error
// message name the cap instead of inferring a range.
TEST(MemoryCap, AnOomSnapshotWithoutHistoryStatesTheCapItMet) {
  for (const bool capped : {true, false}) {
    Program program({}, capped ? 8 * kGiB : 1 * kGiB);
    program.recorder->configure({HistoryLevel::kOff, 100000, false});
    if (capped) program.allocator->set_memory_fraction(0.125, 0);  // 1 GiB of 8
    program.held.push_back(program.allocator->allocate(600 * kMiB));
    SnapshotOptions at_error;
    try {
      program.allocator->allocate(600 * kMiB);
      FAIL() << "expected an out-of-memory error";
    } catch (const OutOfMemoryError& error) {
      at_error.oom = error.info();
    }
    for (HistoryRecorder* recorder : {program.recorder.get(), static_cast<HistoryRecorder*>(nullptr)}) {
      for (const std::string format : {"msgpack", "json", "pickle"}) {
        const Snapshot s = round_trip(take_snapshot(*program.allocator, recorder, at_error), format);
        ASSERT_EQ(s.device_traces.at(0).size(), 1u) << format;
        ASSERT_EQ(cap_changes(s).size(), 1u) << format;
        EXPECT_EQ(cap_changes(s)[0].value, capped ? memory_cap_text(program.allocator->device(0).memory_cap()) : "none");
        const OomExplanation x = explain_oom(s).value();
        ASSERT_TRUE(x.cap_known) << format;
        EXPECT_FALSE(x.cap_range.has_value()) << format;
        EXPECT_EQ(x.diagnosis.cause, OomCause::kExhaustion) << format;
        const std::string limit = capped ? "more than a memory cap of 1.00 GiB" : "more than the 1.00 GiB the allocator could have had";
        EXPECT_NE(x.diagnosis.verdict.sentence.find(limit), std::string::npos) << format << ": " << x.diagnosis.verdict.sentence;
      }
    }
  }
}

TEST(MemoryCap, EveryFormatKeepsTheCapAndItsChanges) {
  Program program;
  program.held.push_back(program.allocator->allocate(10 * kMiB));
  program.allocator->set_memory_fraction(0.5, 0);
  program.held.push_back(program.allocator->allocate(10 * kMiB));
  program.allocator->set_memory_fraction(0.25, 0);
  const Snapshot s = program.fail_with(3 * kGiB);
  ASSERT_EQ(cap_changes(s).size(), 3u);
  for (const char* format : {"msgpack", "json", "pickle"}) {
    const Snapshot back = round_trip(s, format);
    ASSERT_EQ(back.devices.size(), 1u) << format;
    EXPECT_EQ(back.devices[0].memory_cap, s.devices[0].memory_cap) << format;
    EXPECT_EQ(cap_changes(back).size(), cap_changes(s).size()) << format;
    for (size_t i = 0; i < cap_changes(s).size() && i < cap_changes(back).size(); ++i) {
      EXPECT_EQ(cap_changes(back)[i].event_index, cap_changes(s)[i].event_index) << format;
      EXPECT_EQ(cap_changes(back)[i].value, cap_changes(s)[i].value) << format;
    }
    const OomExplanation x = explain_oom(back).value();
    EXPECT_EQ(x.diagnosis.verdict.sentence, explain_oom(s).value().diagnosis.verdict.sentence) << format;
  }
}

// A fragmentation error under a cap: the live blocks and the request fit under the cap, the
// cached holes do not serve the request. The replay under the recorded settings and cap
// reproduces it exactly, and the setting tune recommends does avoid it when the program runs
// again under it and the same cap (the truth, not a replay).
TEST(MemoryCap, ReplaysRunUnderTheRecordedCapAndTheirAdviceHoldsWhenRunAgain) {
  Program program;
  program.allocator->set_memory_fraction(double(512 * kMiB) / double(8 * kGiB), 0);
  program.fragment();
  const Snapshot s = program.fail_with(64 * kMiB);
  const OomExplanation x = explain_oom(s).value();
  EXPECT_EQ(x.diagnosis.cause, OomCause::kFragmentation) << x.diagnosis.verdict.sentence;
  ASSERT_TRUE(x.advice.has_value());
  EXPECT_TRUE(x.advice->reproduced) << x.advice->fidelity;
  ASSERT_TRUE(x.advice->memory_cap.has_value());
  EXPECT_EQ(x.advice->memory_cap->bytes, 512 * kMiB);
  ASSERT_EQ(x.advice->answer, TuneVerdict::kChange) << x.advice->verdict.sentence;
  const std::string best = x.advice->ranked.front().config;
  Program again(parse_allocator_config(best).value());
  again.allocator->set_memory_fraction(double(512 * kMiB) / double(8 * kGiB), 0);
  again.fragment();
  void* p = nullptr;
  EXPECT_NO_THROW(p = again.allocator->allocate(64 * kMiB)) << best << " was said to avoid it";
  if (p != nullptr) again.allocator->deallocate(p);
}

// The cap set through the settings string is applied by the recording, not again by the replay
// as a fraction of the simulated device (the recorded row once read "peak reserved 0 B").
TEST(MemoryCap, ASettingsStringCapIsNotAppliedTwice) {
  Program program(parse_allocator_config("per_process_memory_fraction:0.0625").value());  // 512 MiB
  program.fragment();
  const Snapshot s = program.fail_with(64 * kMiB);
  const SettingsAdvice advice = tune_settings(s).value();
  ASSERT_TRUE(advice.recorded.has_value());
  EXPECT_EQ(advice.recorded->peak_reserved_bytes, static_cast<int64_t>(512 * kMiB));
  EXPECT_TRUE(advice.reproduced) << advice.fidelity;
}

// A cap lifted mid-run: the replay lifts it at the same event, and the segments it makes after
// are the recording's.
TEST(MemoryCap, ACapChangedWhileRecordingAppliesFromItsEvent) {
  Program program;
  program.allocator->set_memory_fraction(double(256 * kMiB) / double(8 * kGiB), 0);
  program.held.push_back(program.allocator->allocate(200 * kMiB));
  EXPECT_THROW(program.allocator->allocate(100 * kMiB), OutOfMemoryError);
  program.allocator->set_memory_fraction(1.0, 0);
  program.held.push_back(program.allocator->allocate(100 * kMiB));
  const Snapshot s = take_snapshot(*program.allocator, program.recorder.get());
  SnapshotReplayOptions options;
  options.config = AllocatorConfig{};
  const SnapshotReplay replay = replay_snapshot(s, options).value();
  ASSERT_EQ(replay.devices.size(), 1u);
  const DeviceReplay& d = replay.devices[0];
  EXPECT_EQ(d.memory_cap_changes, 2u);
  EXPECT_EQ(d.reproduced_ooms, 1u);
  EXPECT_EQ(d.failed_allocs, 0u);
  EXPECT_EQ(d.matched_segment_allocs, d.recorded_segment_allocs.size());
}

}  // namespace
}  // namespace memsnap
