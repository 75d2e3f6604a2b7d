// memsnap estimate: a capture (requests only, "estimate step N" annotations) replayed on a
// device of a given size: the steps' peaks, the first allocation that fails with its Python
// line and what the program would need, a setting that fits where the defaults do not, and
// device names.
#include "viewer/fit_estimate.h"

#include <gtest/gtest.h>

#include "allocator/caching_allocator.h"
#include "allocator/simulated_backend.h"
#include "history/history_recorder.h"
#include "replay/snapshot_replay.h"
#include "snapshot/snapshot_builder.h"
#include "tests/test_snapshots.h"

namespace memsnap {
namespace {

constexpr uint64_t kMiB = 1 << 20;

// Builds a snapshot in the layout memsnap.estimate.capture writes.
class CaptureBuilder {
 public:
  CaptureBuilder() {
    snapshot_.source = "pytorch";
    snapshot_.frames = {{"aten::empty", "", 0},          {"setup", "/work/model.py", 8},
                        {"aten::mm", "", 0},             {"forward", "/work/model.py", 12},
                        {"aten::zeros_like", "", 0},     {"step", "/work/train.py", 20}};
    snapshot_.stacks = {{0, 1}, {2, 3}, {4, 5}};
    snapshot_.device_traces.resize(1);
  }
  static constexpr StackIndex kSetup = 0, kForward = 1, kStep = 2;

  uint64_t alloc(uint64_t bytes, StackIndex stack) {
    const uint64_t address = next_address_;
    next_address_ += bytes + 2 * kMiB;
    trace().push_back(TraceEntry(TraceAction::kAlloc, address, bytes, 0, ++clock_, stack));
    return address;
  }
  void free(uint64_t address, uint64_t bytes) {
    ++clock_;
    trace().push_back(TraceEntry(TraceAction::kFreeRequested, address, bytes, 0, clock_));
    trace().push_back(TraceEntry(TraceAction::kFreeCompleted, address, bytes, 0, clock_));
  }
  void annotate(const std::string& name, const std::string& stage) {
    snapshot_.external_annotations.push_back({0, stage, name, ++clock_});
  }
  const Snapshot& snapshot() const { return snapshot_; }

 private:
  DeviceTrace& trace() { return snapshot_.device_traces[0]; }
  Snapshot snapshot_;
  uint64_t next_address_ = uint64_t{1} << 44;
  int64_t clock_ = 0;
};

// 256 MiB of parameters, then three steps that each hold 512 MiB of activations at once.
Snapshot three_steps() {
  CaptureBuilder b;
  for (int i = 0; i < 4; ++i) b.alloc(64 * kMiB, CaptureBuilder::kSetup);
  for (int step = 1; step <= 3; ++step) {
    const std::string name = "estimate step " + std::to_string(step);
    b.annotate(name, "START");
    std::vector<uint64_t> activations;
    for (int i = 0; i < 4; ++i) activations.push_back(b.alloc(128 * kMiB, CaptureBuilder::kForward));
    for (uint64_t a : activations) b.free(a, 128 * kMiB);
    b.annotate(name, "END");
  }
  return b.snapshot();
}

TEST(FitEstimate, EachStepsPeaksComeFromItsOwnEntries) {
  FitOptions options;
  options.capacity_bytes = 2048 * kMiB;
  options.capacity_source = "given";
  const auto estimate = estimate_fit(three_steps(), options);
  ASSERT_TRUE(estimate) << estimate.error();
  EXPECT_TRUE(estimate->fits());
  ASSERT_EQ(estimate->steps.size(), 4u);
  EXPECT_EQ(estimate->steps[0].name, "setup");
  EXPECT_EQ(estimate->steps[0].peak_allocated_bytes, 256 * kMiB);
  for (size_t i = 1; i < 4; ++i) {
    const StepFit& step = estimate->steps[i];
    EXPECT_EQ(step.name, "estimate step " + std::to_string(i));
    EXPECT_EQ(step.allocated_at_start_bytes, 256 * kMiB) << i;
    EXPECT_EQ(step.peak_allocated_bytes, 768 * kMiB) << i;
    EXPECT_EQ(step.peak_reserved_bytes, 768 * kMiB) << i;
    EXPECT_TRUE(step.completed);
  }
  EXPECT_EQ(estimate->peak_requested_bytes, 768 * kMiB);
  EXPECT_EQ(estimate->peak_reserved_bytes, 768 * kMiB);
  EXPECT_DOUBLE_EQ(estimate->free_at_reserved_peak, 0.0);
  ASSERT_TRUE(estimate->advice);
  EXPECT_EQ(estimate->advice->answer, TuneVerdict::kKeep);
  EXPECT_TRUE(estimate->advice->baseline_given);
  EXPECT_NE(settings_advice_conclusion(*estimate->advice).find("Keep these settings"), std::string::npos);
  const std::string text = fit_estimate_to_text(estimate.value());
  EXPECT_EQ(text.rfind("Fits: peak reserved 768.00 MiB of 2.00 GiB (1.25 GiB to spare)", 0), 0u) << text;
  EXPECT_NE(text.find("estimate step 3"), std::string::npos) << text;
  const nlohmann::json json = fit_estimate_to_json(estimate.value());
  EXPECT_TRUE(json["fits"].get<bool>());
  EXPECT_EQ(json["steps"].size(), 4u);
  EXPECT_TRUE(json["failure"].is_null());
}

TEST(FitEstimate, ATooSmallDeviceFailsAtTheUsersLineAndSaysWhatItNeeds) {
  FitOptions options;
  options.capacity_bytes = 600 * kMiB;
  const auto estimate = estimate_fit(three_steps(), options);
  ASSERT_TRUE(estimate) << estimate.error();
  ASSERT_FALSE(estimate->fits());
  const FitFailure& failure = *estimate->failure;
  EXPECT_EQ(failure.step, "estimate step 1");
  EXPECT_EQ(failure.requested_bytes, 128 * kMiB);
  EXPECT_EQ(failure.site, "forward (model.py:12)");
  ASSERT_FALSE(failure.frames.empty());
  EXPECT_EQ(failure.frames.front(), "aten::mm");  // innermost first: the operation, then the line
  EXPECT_EQ(failure.allocated_bytes, 512 * kMiB);
  EXPECT_EQ(failure.unlimited_peak_requested_bytes, 768 * kMiB);
  EXPECT_EQ(failure.unlimited_peak_reserved_bytes, 768 * kMiB);
  // The replay ends where the program would have raised: the steps after it never ran.
  ASSERT_EQ(estimate->steps.size(), 2u);
  EXPECT_FALSE(estimate->steps[1].completed);
  const std::string verdict = fit_estimate_verdict(estimate.value());
  EXPECT_NE(verdict.find("Does not fit: it runs out of memory in estimate step 1 at forward (model.py:12)"),
            std::string::npos) << verdict;
  EXPECT_EQ(failure.cause.cause, OomCause::kExhaustion);
  EXPECT_NE(verdict.find("The live allocations (512.00 MiB) and the request (128.00 MiB) come to 640.00 MiB, more than "
                         "the 600.00 MiB the device gives the allocator: the program needs less live memory"),
            std::string::npos)
      << verdict;
  EXPECT_NE(verdict.find("no allocator setting can make it fit"), std::string::npos) << verdict;
  EXPECT_EQ(estimate->verdict.answer, "does_not_fit");
  ASSERT_TRUE(estimate->advice);
  EXPECT_EQ(estimate->advice->answer, TuneVerdict::kNoSettingWorks);
}

// Blocks of 6 MiB fill 20 MiB segments three at a time; two of each three are freed, so every
// segment keeps a live block and none can be released; then 100 MiB is asked for. Live bytes
// never pass 360 MiB, under the 400 MiB device, but the cached holes are all too small, and
// no setting helps (expandable segments map 20 MiB pages in the large pool: a 12 MiB hole
// holds none to unmap). That is not "the program needs less memory".
Snapshot fragmented() {
  CaptureBuilder b;
  b.annotate("estimate step 1", "START");
  std::vector<uint64_t> blocks;
  for (int i = 0; i < 60; ++i) blocks.push_back(b.alloc(6 * kMiB, CaptureBuilder::kForward));
  for (size_t i = 0; i < blocks.size(); ++i)
    if (i % 3 != 0) b.free(blocks[i], 6 * kMiB);
  b.alloc(100 * kMiB, CaptureBuilder::kStep);
  b.annotate("estimate step 1", "END");
  return b.snapshot();
}

TEST(FitEstimate, FragmentationIsNotCalledTooLittleMemory) {
  FitOptions options;
  options.capacity_bytes = 400 * kMiB;
  for (const char* settings : {"", "expandable_segments:True"}) {
    options.settings = settings;
    const auto estimate = estimate_fit(fragmented(), options);
    ASSERT_TRUE(estimate) << estimate.error();
    ASSERT_FALSE(estimate->fits()) << settings;
    EXPECT_EQ(estimate->failure->site, "step (train.py:20)");
    EXPECT_EQ(estimate->failure->unlimited_peak_requested_bytes, 360 * kMiB) << settings;
    const std::string verdict = fit_estimate_verdict(estimate.value());
    EXPECT_NE(verdict.find("Without a limit it would peak at 360.00 MiB allocated"), std::string::npos) << verdict;
    EXPECT_EQ(estimate->failure->cause.cause, OomCause::kFragmentation) << verdict;
    EXPECT_EQ(verdict.find("needs less live memory"), std::string::npos) << verdict;
    ASSERT_TRUE(estimate->advice);
    EXPECT_EQ(estimate->advice->answer, TuneVerdict::kNoSettingWorks);
    const std::string conclusion = settings_advice_conclusion(*estimate->advice);
    EXPECT_EQ(conclusion.find("needs less"), std::string::npos) << conclusion;
    // The same cause, from the same failure, in both sentences.
    EXPECT_NE(conclusion.find("The live allocations (120.00 MiB) and the request (100.00 MiB) come to 220.00 MiB, "
                              "which fits in the 400.00 MiB the device gives the allocator: not too much live memory"),
              std::string::npos) << conclusion;
    EXPECT_NE(verdict.find(estimate->failure->cause.verdict.sentence), std::string::npos) << verdict;
  }
}

TEST(FitEstimate, TheSettingsGivenAreTheOnesReplayed) {
  FitOptions options;
  options.capacity_bytes = 2048 * kMiB;
  options.settings = "expandable_segments:True";
  options.tune = false;
  const auto estimate = estimate_fit(three_steps(), options);
  ASSERT_TRUE(estimate) << estimate.error();
  EXPECT_EQ(estimate->settings, "expandable_segments:True");
  EXPECT_NE(fit_estimate_to_text(estimate.value()).find("Settings: expandable_segments:True"), std::string::npos);
}

TEST(FitEstimate, ARecordingWithoutStepAnnotationsIsOneStep) {
  const Snapshot s = testing::load_test_snapshot("pytorch-2.11-h100/transformer_s0.pickle.gz");
  FitOptions options;
  options.capacity_bytes = uint64_t{80} << 30;
  options.tune = false;
  const auto estimate = estimate_fit(s, options);
  ASSERT_TRUE(estimate) << estimate.error();
  EXPECT_TRUE(estimate->fits());
  ASSERT_EQ(estimate->steps.size(), 1u);
  EXPECT_EQ(estimate->steps[0].name, "trace");
  EXPECT_GT(estimate->peak_reserved_bytes, 0u);
  EXPECT_FALSE(estimate->advice);
}

TEST(FitEstimate, ARecordedOutOfMemoryErrorThatRecursDoesNotFit) {
  // A real run that ran out of memory: its failed request is an `oom` entry, not an alloc. On
  // the device it had, the replay fails there again, and that is where the program raised.
  const Snapshot s = testing::load_test_snapshot("pytorch-2.11-h100/frag_oom.pickle");
  const auto replay = replay_snapshot(s, {});
  ASSERT_TRUE(replay) << replay.error();
  ASSERT_EQ(replay->devices.at(0).reproduced_ooms, 1u);
  FitOptions options;
  options.capacity_bytes = replay->devices.at(0).capacity_bytes;
  options.tune = false;
  const auto estimate = estimate_fit(s, options);
  ASSERT_TRUE(estimate) << estimate.error();
  ASSERT_FALSE(estimate->fits()) << fit_estimate_to_text(estimate.value());
  EXPECT_EQ(s.device_traces[0][estimate->failure->entry].action, TraceAction::kOom);
  // Twice the memory: the request is served.
  options.capacity_bytes *= 2;
  const auto roomy = estimate_fit(s, options);
  ASSERT_TRUE(roomy) << roomy.error();
  EXPECT_TRUE(roomy->fits()) << fit_estimate_to_text(roomy.value());
}

// Memory live before the trace's first entry (a ring that wrapped) is live at the first step's
// start; and the free share at the reserved peak is the least over the peak, not the share at
// the moment the peak was first reached (a fresh segment, mostly free then).
TEST(FitEstimate, WhatTheTraceBeganWithIsLiveAtTheStartAndTheFreeShareIsTheLeastAtThePeak) {
  auto backend = std::make_shared<SimulatedBackend>();
  CachingAllocator allocator(backend);
  HistoryRecorder recorder(allocator);
  recorder.configure({HistoryLevel::kAll, 40, false});
  void* before = allocator.allocate(65 * kMiB);
  std::vector<void*> small;
  for (int i = 0; i < 10; ++i) small.push_back(allocator.allocate(2 * kMiB));  // one 20 MiB segment, filled
  for (int round = 0; round < 20; ++round) allocator.deallocate(allocator.allocate(kMiB / 2));
  const Snapshot s = take_snapshot(allocator, &recorder);
  FitOptions options;
  options.capacity_bytes = 80 * (kMiB << 10);
  options.tune = false;
  const auto estimate = estimate_fit(s, options);
  ASSERT_TRUE(estimate) << estimate.error();
  ASSERT_FALSE(estimate->steps.empty());
  EXPECT_GE(estimate->steps.front().allocated_at_start_bytes, 65 * kMiB) << fit_estimate_to_text(estimate.value());
  for (void* p : small) allocator.deallocate(p);
  allocator.deallocate(before);

  // A 20 MiB segment made by a 2 MiB request (90% of it free at that moment), then filled.
  CaptureBuilder b;
  std::vector<uint64_t> blocks;
  for (int i = 0; i < 10; ++i) blocks.push_back(b.alloc(2 * kMiB, CaptureBuilder::kForward));
  FitOptions roomy;
  roomy.capacity_bytes = 1024 * kMiB;
  roomy.tune = false;
  const auto filled = estimate_fit(b.snapshot(), roomy);
  ASSERT_TRUE(filled) << filled.error();
  EXPECT_EQ(filled->peak_reserved_bytes, 20 * kMiB);
  EXPECT_DOUBLE_EQ(filled->free_at_reserved_peak, 0.0);
}

TEST(FitEstimate, RefusesWhatItCannotEstimate) {
  FitOptions options;
  EXPECT_FALSE(estimate_fit(three_steps(), options));  // no capacity
  options.capacity_bytes = kMiB;
  EXPECT_FALSE(estimate_fit(Snapshot{}, options));  // no trace
  options.settings = "expandable_segments:maybe";
  const auto bad = estimate_fit(three_steps(), options);
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().find("expandable_segments"), std::string::npos) << bad.error();
}

TEST(FitEstimate, DevicesByName) {
  for (const char* name : {"H200", "h200", "H-200", " h 200 "}) {
    const auto preset = find_device_preset(name);
    ASSERT_TRUE(preset) << name;
    EXPECT_EQ(preset->name, "H200");
    EXPECT_LT(preset->capacity_bytes(), preset->total_bytes);
  }
  const auto unknown = find_device_preset("A100");
  ASSERT_FALSE(unknown);
  EXPECT_NE(unknown.error().find("known: H200"), std::string::npos) << unknown.error();
}

}  // namespace
}  // namespace memsnap
