// memsnap tune: every candidate is a valid setting, the ranking puts settings that work first
// and then by peak reserved, its figures are those of an independent replay, and it finds the
// setting that avoids a recorded fragmentation OOM. When every replay starts from segments
// that predate the trace and needs no new one, it cannot judge, and says so.
#include <algorithm>
#include "viewer/settings_advisor.h"

#include <gtest/gtest.h>

#include <set>

#include "allocator/caching_allocator.h"
#include "allocator/simulated_backend.h"
#include "history/history_recorder.h"
#include "replay/snapshot_replay.h"
#include "snapshot/snapshot_builder.h"
#include "snapshot/snapshot_loader.h"
#include "tests/many_streams.h"
#include "tests/test_scale.h"
#include "tests/test_snapshots.h"
#include "tests/timing.h"

namespace memsnap {
namespace {


TEST(SettingsAdvisor, CandidatesAreDistinctValidSettings) {
  const std::vector<std::string> candidates = tune_candidates();
  EXPECT_EQ(std::set<std::string>(candidates.begin(), candidates.end()).size(), candidates.size());
  for (const std::string& c : candidates) EXPECT_TRUE(parse_allocator_config(c)) << c;
  EXPECT_GE(candidates.size(), 90u);
}

TEST(SettingsAdvisor, RanksWorkingSettingsByPeakReservedWithReplayedFigures) {
  const Snapshot s = testing::load_test_snapshot("pytorch-2.11-h100/transformer_s0.pickle.gz");
  const auto advice = tune_settings(s);
  ASSERT_TRUE(advice) << advice.error();
  ASSERT_TRUE(advice->recorded);
  EXPECT_TRUE(advice->recorded->ok);
  EXPECT_LE(advice->ranked.front().peak_reserved_bytes, advice->recorded->peak_reserved_bytes);
  for (size_t i = 1; i < advice->ranked.size(); ++i) {
    const TunedSetting &a = advice->ranked[i - 1], &b = advice->ranked[i];
    EXPECT_TRUE(a.ok || !b.ok) << i;
    if (a.ok == b.ok) {
      EXPECT_LE(a.peak_reserved_bytes, b.peak_reserved_bytes) << i;
    }
  }
  // Spot check against a replay of our own.
  for (size_t i : {size_t{0}, advice->ranked.size() / 2, advice->ranked.size() - 1}) {
    SnapshotReplayOptions options;
    options.config = parse_allocator_config(advice->ranked[i].config).value();
    const auto replay = replay_snapshot(s, options);
    ASSERT_TRUE(replay);
    EXPECT_EQ(replay->devices.at(0).stats.reserved_bytes[kAggregate].peak, advice->ranked[i].peak_reserved_bytes)
        << advice->ranked[i].config;
  }
}

TEST(SettingsAdvisor, FindsTheSettingThatAvoidsARecordedFragmentationOom) {
  const auto advice = tune_settings(testing::load_test_snapshot("pytorch-2.11-h100/frag_oom.pickle"));
  ASSERT_TRUE(advice) << advice.error();
  EXPECT_TRUE(advice->recorded_oom);
  ASSERT_TRUE(advice->recorded);
  EXPECT_FALSE(advice->recorded->ok) << "the recorded settings run out of memory again";
  EXPECT_TRUE(advice->ranked.front().ok);
  EXPECT_NE(advice->ranked.front().config.find("expandable_segments:True"), std::string::npos);
  const std::string text = settings_advice_to_text(advice.value());
  EXPECT_NE(text.find("avoids the recorded out-of-memory error"), std::string::npos) << text;
  const nlohmann::json json = settings_advice_to_json(advice.value());
  EXPECT_EQ(json["best"]["config"], advice->ranked.front().config);
  EXPECT_EQ(json["ranked"].size(), advice->ranked.size());
}

TEST(SettingsAdvisor, EverySegmentFromBeforeTheTraceCannotBeJudged) {
  // The program reserves its segments, then history starts: its steps reuse the cached blocks,
  // so every replay starts from the recorded segments and makes no device allocation. What
  // other settings would have reserved, nothing here shows.
  constexpr size_t kMiB = 1 << 20;
  auto backend = std::make_shared<SimulatedBackend>();
  CachingAllocator allocator(backend);
  HistoryRecorder recorder(allocator);
  std::vector<void*> warm;
  for (size_t size : {30 * kMiB, 50 * kMiB, 3 * kMiB, kMiB / 2}) warm.push_back(allocator.allocate(size));
  for (void* p : warm) allocator.deallocate(p);
  recorder.configure({HistoryLevel::kAll, 100000, true});
  for (int step = 0; step < 8; ++step) {
    void* a = allocator.allocate(29 * kMiB);
    void* b = allocator.allocate(3 * kMiB);
    void* c = allocator.allocate(kMiB / 4);
    allocator.deallocate(b);
    allocator.deallocate(a);
    allocator.deallocate(c);
  }
  const Snapshot s = take_snapshot(allocator, &recorder);
  const auto advice = tune_settings(s);
  ASSERT_TRUE(advice) << advice.error();
  ASSERT_TRUE(advice->recorded);
  EXPECT_EQ(advice->recorded->device_mallocs, 0);
  EXPECT_EQ(advice->answer, TuneVerdict::kCannotJudge);
  EXPECT_EQ(advice->reserved_before_trace_bytes, static_cast<uint64_t>(advice->recorded->peak_reserved_bytes));
  const std::string text = settings_advice_to_text(advice.value());
  EXPECT_EQ(text.find("keep the recorded settings"), std::string::npos) << text;
  EXPECT_NE(text.find("Cannot judge which settings reserve least, because no replay needed a segment beyond the"),
            std::string::npos)
      << text;
  const nlohmann::json json = settings_advice_to_json(advice.value());
  EXPECT_EQ(json["verdict"], "cannot_judge");
  EXPECT_TRUE(json["best"].is_null());
}

TEST(SettingsAdvisor, ARealRunWhoseSegmentsPredateTheTraceCannotBeJudged) {
  // Recorded on an H200 with PyTorch's allocator: the trace reuses segments made before it and
  // needs none. Some settings would need one on top of those segments; none can look better,
  // so "keep" would be a verdict the data cannot support.
  const auto advice = tune_settings(testing::load_test_snapshot("pytorch-2.11-h200/predating_segments.pickle"));
  ASSERT_TRUE(advice) << advice.error();
  ASSERT_TRUE(advice->recorded);
  EXPECT_EQ(advice->recorded->device_mallocs, 0);
  EXPECT_TRUE(std::any_of(advice->ranked.begin(), advice->ranked.end(),
                          [](const TunedSetting& t) { return t.device_mallocs > 0; }));
  EXPECT_EQ(advice->answer, TuneVerdict::kCannotJudge);
  const std::string text = settings_advice_to_text(advice.value());
  EXPECT_EQ(text.find("keep the recorded settings"), std::string::npos) << text;
  EXPECT_NE(text.find("the trace needed no new one"), std::string::npos) << text;
}

TEST(SettingsAdvisor, AVerdictOnATraceThatBeganMidRunSaysWhatItCovers) {
  // streams_wrapped.pickle: 154 of its 158 MiB peak was reserved before the trace began;
  // every replay keeps those segments as recorded, so the comparison covers the other 4 MiB.
  const auto advice = tune_settings(testing::load_test_snapshot("pytorch-2.11-h100/streams_wrapped.pickle"));
  ASSERT_TRUE(advice) << advice.error();
  EXPECT_EQ(advice->reserved_before_trace_bytes, 154u << 20);
  EXPECT_EQ(advice->answer, TuneVerdict::kKeep);
  const std::string text = settings_advice_to_text(advice.value());
  EXPECT_NE(text.find("keep the recorded settings: none tried reserves less for what the trace allocated "
                      "(4.00 MiB of the 158.00 MiB peak; the 154.00 MiB reserved before the trace began is kept "
                      "as recorded in every replay)"),
            std::string::npos)
      << text;
}

TEST(SettingsAdvisor, UnderACapTheFileDoesNotRecordNoSettingIsSaidToFail) {
  // Real out-of-memory errors under memory caps PyTorch's pickles do not record: the replays run
  // under the least the cap can have been (the reserved bytes when it refused), where a setting
  // that fails may still work under the real cap. "No setting works" would claim more than the
  // recording shows; "needs less memory" too.
  for (const char* file : {"pytorch-2.11-h100/oom_all_stacks.pickle", "pytorch-2.11-h200/graph_pool_oom.pickle",
                           "pytorch-2.11-pools/pool_oom.pickle"}) {
    const auto advice = tune_settings(testing::load_test_snapshot(file));
    ASSERT_TRUE(advice) << file << ": " << advice.error();
    EXPECT_EQ(advice->capacity_source, "memory cap at the recorded OOM") << file;
    ASSERT_EQ(advice->answer, TuneVerdict::kCannotJudge) << file << ": " << settings_advice_conclusion(advice.value());
    const std::string conclusion = settings_advice_conclusion(advice.value());
    EXPECT_NE(conclusion.find("the least the memory cap can have been"), std::string::npos) << file << ": " << conclusion;
    EXPECT_EQ(conclusion.find("needs less"), std::string::npos) << file << ": " << conclusion;
  }
}

TEST(SettingsAdvisor, ASnapshotWithoutATraceIsAClearError) {
  Snapshot s;
  const auto advice = tune_settings(s);
  ASSERT_FALSE(advice);
  EXPECT_NE(advice.error().find("no trace to replay"), std::string::npos);
}

// Issue 53: tuning a trace whose every event is on a stream of its own took time quadratic in
// its events (each of the settings tried replays it). On tests/many_streams.h's trace the
// allocator decides the same on many streams as on one under the usual segments; with
// expandable segments each stream reserves address space of its own (9/8 of the device), which
// 2,800 events leave room for. The old code took over ten times as long at this length.
TEST(SettingsAdvisor, TuneOfATraceOnManyStreamsTakesAtMostFourTimesItsTimeOnOne) {
  constexpr size_t kEvents = 2800 / (testing::kWorkDivisor == 1 ? 1 : 4);
  const Snapshot many = testing::many_streams_snapshot(kEvents, /*one_stream=*/false);
  const Snapshot one = testing::many_streams_snapshot(kEvents, /*one_stream=*/true);
  TuneOptions options;
  options.threads = 1;
  Result<SettingsAdvice> on_many = Result<SettingsAdvice>::failure("not run"), on_one = on_many;
  [[maybe_unused]] const auto [many_seconds, one_seconds] = testing::quickest_seconds_in_turns(
      [&] { on_many = tune_settings(many, options); }, [&] { on_one = tune_settings(one, options); }, 2);
  ASSERT_TRUE(on_many) << on_many.error();
  ASSERT_TRUE(on_one) << on_one.error();
  EXPECT_EQ(on_many->ranked.size(), on_one->ranked.size());
  for (const TunedSetting& t : on_many->ranked) EXPECT_TRUE(t.ok) << t.config;  // no replay runs out
#if !defined(MEMSNAP_TESTS_SANITIZED)
  EXPECT_LE(many_seconds, 4 * one_seconds)
      << kEvents << " events: " << many_seconds << " s on as many streams, " << one_seconds << " s on one";
#endif
}

}  // namespace
}  // namespace memsnap
