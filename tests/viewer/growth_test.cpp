// memsnap growth: the call site that keeps memory from step to step is found and measured; a
// site whose memory is freed every step is not; steps come from annotations, or without them
// from the most regular allocation site. Where the data cannot support a verdict (too few
// steps, a trace that begins mid-run, steps shorter than the clock's tick, no frees recorded)
// it says so instead of naming a leak.
#include "viewer/growth.h"

#include <gtest/gtest.h>

#include <chrono>
#include <deque>
#include <thread>

#include "allocator/caching_allocator.h"
#include "allocator/simulated_backend.h"
#include "history/history_recorder.h"
#include "snapshot/snapshot_builder.h"
#include "snapshot/snapshot_loader.h"

namespace growth_test {

using namespace memsnap;

constexpr size_t kMiB = 1 << 20;

struct Program {
  std::shared_ptr<SimulatedBackend> backend = std::make_shared<SimulatedBackend>();
  CachingAllocator allocator{backend};
  HistoryRecorder recorder{allocator};
  std::vector<void*> kept;
  explicit Program(size_t max_entries = 100000, HistoryLevel level = HistoryLevel::kAll) {
    recorder.configure({level, max_entries, true});
  }
  ~Program() {
    for (void* p : kept) allocator.deallocate(p);
  }
};

__attribute__((noinline)) void* leaky_cache(CachingAllocator& allocator) {
  void* p = allocator.allocate(kMiB);
  asm volatile("" ::: "memory");
  return p;
}

__attribute__((noinline)) void temporaries(CachingAllocator& allocator) {
  void* a = allocator.allocate(8 * kMiB);
  void* b = allocator.allocate(3 * kMiB);
  allocator.deallocate(a);
  allocator.deallocate(b);
  asm volatile("" ::: "memory");
}

__attribute__((noinline)) void* load_batch(CachingAllocator& allocator) {
  void* p = allocator.allocate(2 * kMiB);
  asm volatile("" ::: "memory");
  return p;
}

void run(Program& program, bool annotate, int steps = 10) {
  for (int step = 0; step < steps; ++step) {
    // Annotations and events are timed in microseconds: a real step lasts far longer than one,
    // so that a step's start falls between the events of two steps.
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    std::optional<ScopedAnnotation> named;
    if (annotate) named.emplace(program.recorder, "step " + std::to_string(step));
    void* batch = load_batch(program.allocator);
    temporaries(program.allocator);
    program.kept.push_back(leaky_cache(program.allocator));
    program.allocator.deallocate(batch);
  }
}

void expect_the_leak(const Snapshot& s, const Growth& g) {
  EXPECT_EQ(g.answer, GrowthVerdict::kGrowing) << g.reason;
  ASSERT_FALSE(g.sites.empty());
  const GrowthSite& site = g.sites.front();
  EXPECT_NEAR(site.bytes_per_step, static_cast<double>(kMiB), 1.0);
  const std::string text = growth_to_text(s, g);
  EXPECT_NE(text.find("leaky_cache"), std::string::npos) << text;
  EXPECT_EQ(text.find("temporaries"), std::string::npos) << "freed every step: not growing\n" << text;
  EXPECT_EQ(g.sites.size(), 1u) << text;
}

TEST(Growth, FindsTheSiteThatKeepsMemoryStepOverStep) {
  Program program;
  run(program, /*annotate=*/true);
  const Snapshot s = take_snapshot(program.allocator, &program.recorder);
  const auto g = compute_growth(s);
  ASSERT_TRUE(g) << g.error();
  EXPECT_EQ(g->steps_from, "annotation 'step '");
  EXPECT_EQ(g->step_events.size(), 10u);
  expect_the_leak(s, g.value());
}

TEST(Growth, WithoutAnnotationsStepsComeFromTheMostRegularSite) {
  Program program;
  run(program, /*annotate=*/false);
  const Snapshot s = take_snapshot(program.allocator, &program.recorder);
  const auto g = compute_growth(s);
  ASSERT_TRUE(g) << g.error();
  EXPECT_EQ(g->step_events.size(), 10u) << g->steps_from;
  expect_the_leak(s, g.value());
}

TEST(Growth, NoStepsCannotBeJudgedAndAnAnnotationNotThereIsAClearError) {
  Program program;
  program.kept.push_back(program.allocator.allocate(kMiB));
  const Snapshot s = take_snapshot(program.allocator, &program.recorder);
  const auto g = compute_growth(s);
  ASSERT_TRUE(g) << g.error();
  EXPECT_EQ(g->answer, GrowthVerdict::kCannotJudge);
  EXPECT_NE(growth_to_text(s, g.value()).find("Cannot judge whether memory grows, because fewer than 3 steps were found"),
            std::string::npos)
      << growth_to_text(s, g.value());
  GrowthOptions named;
  named.annotation = "ProfilerStep#";
  EXPECT_NE(compute_growth(s, named).error().find("fewer than 3 annotations named 'ProfilerStep#...'"), std::string::npos);
}

TEST(Growth, TooFewStepsToCompareCannotBeJudged) {
  // Four steps leak 1 MiB each; the first warms up, three are left: not enough to call a leak.
  Program program;
  run(program, /*annotate=*/true, /*steps=*/4);
  const Snapshot s = take_snapshot(program.allocator, &program.recorder);
  const auto g = compute_growth(s);
  ASSERT_TRUE(g) << g.error();
  EXPECT_EQ(g->answer, GrowthVerdict::kCannotJudge);
  EXPECT_TRUE(g->sites.empty());
  const std::string text = growth_to_text(s, g.value());
  EXPECT_NE(text.find("Cannot judge whether memory grows, because only 3 steps can be compared"), std::string::npos)
      << text;
  EXPECT_EQ(growth_to_json(s, g.value())["verdict"], "cannot_judge");
}

__attribute__((noinline)) void* prefetch(CachingAllocator& allocator) {
  void* p = allocator.allocate(4 * kMiB);
  asm volatile("" ::: "memory");
  return p;
}

TEST(Growth, AWrappedTraceCountsMemoryFromBeforeItAndFindsNoLeakWhereNoneIs) {
  // A pipeline keeps the last three prefetched batches: flat memory. The ring holds the last
  // ~20 of 40 steps, so the trace begins with three batches allocated before it, which its
  // first steps free while the same site allocates their successors.
  Program program(/*max_entries=*/180);
  std::deque<void*> in_flight;
  for (int step = 0; step < 40; ++step) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    ScopedAnnotation named(program.recorder, "step " + std::to_string(step));
    in_flight.push_back(prefetch(program.allocator));
    temporaries(program.allocator);
    if (in_flight.size() > 3) {
      program.allocator.deallocate(in_flight.front());
      in_flight.pop_front();
    }
  }
  program.kept.assign(in_flight.begin(), in_flight.end());
  const Snapshot s = take_snapshot(program.allocator, &program.recorder);
  const auto g = compute_growth(s);
  ASSERT_TRUE(g) << g.error();
  EXPECT_GE(g->step_events.size(), 15u);
  EXPECT_LT(g->step_events.size(), 30u) << "the ring must have dropped the first steps";
  EXPECT_EQ(g->answer, GrowthVerdict::kNothingGrows) << growth_to_text(s, g.value());
  EXPECT_GT(g->first_compared_step, 1u) << "the steps that free memory from before the trace are not compared";
  EXPECT_GE(g->before_trace_bytes.front(), 3 * 4 * kMiB) << "three or four batches, by where the ring begins";
  for (size_t step = g->first_compared_step; step < g->live_bytes.size(); ++step)
    EXPECT_EQ(g->live_bytes[step], 3 * 4 * kMiB) << "step " << step + 1;
  EXPECT_NE(growth_to_text(s, g.value()).find("The trace begins mid-run"), std::string::npos);
}

TEST(Growth, AWrappedPyTorchTraceOfThreeStepsCannotBeJudged) {
  // streams_wrapped.pickle: 120 steps recorded with max_entries=700; the trace holds three
  // recurrences of its most regular site. It once "grew 683.69 KiB per step" from two.
  Result<LoadedSnapshot> loaded = load_snapshot(std::string(MEMSNAP_TEST_DATA_DIR) + "/pytorch-2.11-h100/streams_wrapped.pickle");
  ASSERT_TRUE(loaded) << loaded.error();
  const auto g = compute_growth(loaded->snapshot);
  ASSERT_TRUE(g) << g.error();
  EXPECT_EQ(g->answer, GrowthVerdict::kCannotJudge);
  EXPECT_TRUE(g->sites.empty());
  EXPECT_GT(g->before_trace_bytes.front(), 0u);
  EXPECT_NE(g->reason.find("can be compared"), std::string::npos) << g->reason;
}

TEST(Growth, ARealWrappedTraceOfATrainingRunThatDoesNotLeakIsNotCalledALeak) {
  // Recorded on an H200: 60 steps of a transformer with max_entries=4000, live memory flat at
  // each step's start. The trace keeps the last steps only; memory from before it is counted.
  Result<LoadedSnapshot> loaded = load_snapshot(std::string(MEMSNAP_TEST_DATA_DIR) + "/pytorch-2.11-h200/wrapped_decoder.pickle");
  ASSERT_TRUE(loaded) << loaded.error();
  const auto g = compute_growth(loaded->snapshot);
  ASSERT_TRUE(g) << g.error();
  EXPECT_NE(g->answer, GrowthVerdict::kGrowing) << g->reason;
  EXPECT_TRUE(g->sites.empty());
  EXPECT_GT(g->before_trace_bytes.front(), uint64_t{100} << 20);
}

TEST(Growth, ATraceWithoutFreesCannotBeJudged) {
  // History at level 'alloc' records allocations only: every site would look as if it grew.
  Program program(100000, HistoryLevel::kAlloc);
  run(program, /*annotate=*/true);
  const Snapshot s = take_snapshot(program.allocator, &program.recorder);
  const auto g = compute_growth(s);
  ASSERT_TRUE(g) << g.error();
  EXPECT_EQ(g->answer, GrowthVerdict::kCannotJudge);
  EXPECT_NE(g->reason.find("no frees"), std::string::npos) << g->reason;
}

// A program that frees nothing, recorded at level 'all' (which would have recorded its frees):
// its memory does grow, and is judged so; "history kept only allocations" would be a cause
// stated without evidence.
TEST(Growth, AProgramThatFreesNothingIsJudged) {
  Program program;
  for (int step = 0; step < 10; ++step) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    ScopedAnnotation named(program.recorder, "step " + std::to_string(step));
    program.kept.push_back(leaky_cache(program.allocator));
  }
  const Snapshot s = take_snapshot(program.allocator, &program.recorder);
  const auto g = compute_growth(s);
  ASSERT_TRUE(g) << g.error();
  EXPECT_EQ(g->answer, GrowthVerdict::kGrowing) << g->reason;
  EXPECT_EQ(g->verdict.sentence.find("no frees"), std::string::npos) << g->verdict.sentence;
}

// Snapshots written event by event, for timings a real run cannot promise.
struct WrittenTrace {
  Snapshot s;
  enum : StackIndex { kLeak, kTemporary, kGrewOnce };
  WrittenTrace() {
    s.source = "pytorch";
    s.device_traces.resize(1);
    s.frames = {{"leak", "model.py", 10}, {"temporary", "model.py", 20}, {"grew_once", "model.py", 30}};
    s.stacks = {{0}, {1}, {2}};
  }
  void step(int number, int64_t time_us) {
    s.external_annotations.push_back({0, "START", "ProfilerStep#" + std::to_string(number), time_us});
  }
  void alloc(uint64_t address, uint64_t size, StackIndex stack, int64_t time_us) {
    s.device_traces[0].push_back(TraceEntry(TraceAction::kAlloc, address, size, 0, time_us, stack));
  }
  void free(uint64_t address, uint64_t size, StackIndex stack, int64_t time_us) {
    s.device_traces[0].push_back(TraceEntry(TraceAction::kFreeRequested, address, size, 0, time_us, stack));
    s.device_traces[0].push_back(TraceEntry(TraceAction::kFreeCompleted, address, size, 0, time_us, stack));
  }
};

TEST(Growth, StepsShorterThanTheClockTickCannotBeJudged) {
  // Two steps a microsecond, each leaking 24 MiB: which events belong to which step of a
  // microsecond, the trace cannot say.
  WrittenTrace w;
  for (int step = 0; step < 40; ++step) {
    const int64_t t = 1000 + step / 2;
    w.step(step, t);
    w.alloc(0x10000000 + step * 0x2000000ull, 24 * kMiB, WrittenTrace::kLeak, t);
    w.alloc(0x90000000, kMiB, WrittenTrace::kTemporary, t);
    w.free(0x90000000, kMiB, WrittenTrace::kTemporary, t);
  }
  const auto g = compute_growth(w.s);
  ASSERT_TRUE(g) << g.error();
  EXPECT_EQ(g->answer, GrowthVerdict::kCannotJudge);
  EXPECT_NE(g->reason.find("microsecond"), std::string::npos) << g->reason;
  EXPECT_NE(g->reason.find("a step lasts 0 µs at the median"), std::string::npos) << g->reason;
}

TEST(Growth, StepStartsThatShareTheirMicrosecondStillConcludeWhenEitherSideGivesTheSameAnswer) {
  // Each step's first allocation falls in its start's microsecond: placed before or after it,
  // the leak is the same 1 MiB a step.
  WrittenTrace w;
  for (int step = 0; step < 12; ++step) {
    const int64_t t = 1000 + step * 100;
    w.step(step, t);
    w.alloc(0x90000000, kMiB, WrittenTrace::kTemporary, t);
    w.alloc(0x10000000 + step * 0x200000ull, kMiB, WrittenTrace::kLeak, t + 10);
    w.free(0x90000000, kMiB, WrittenTrace::kTemporary, t + 20);
  }
  const auto g = compute_growth(w.s);
  ASSERT_TRUE(g) << g.error();
  EXPECT_EQ(g->answer, GrowthVerdict::kGrowing) << g->reason;
  ASSERT_EQ(g->sites.size(), 1u);
  EXPECT_EQ(g->sites[0].stack, WrittenTrace::kLeak);
  EXPECT_NEAR(g->sites[0].bytes_per_step, static_cast<double>(kMiB), 1.0);
  EXPECT_EQ(g->sites[0].growth_bytes, static_cast<int64_t>(10 * kMiB)) << "steps 2 to 12: ten steps of 1 MiB";
}

TEST(Growth, MemoryThatRoseOnceIsNotALeak) {
  // A cache filled once at step 5 and kept: more memory afterwards, but no growth per step.
  WrittenTrace w;
  for (int step = 0; step < 12; ++step) {
    const int64_t t = 1000 + step * 100;
    w.step(step, t);
    w.alloc(0x90000000, kMiB, WrittenTrace::kTemporary, t + 10);
    if (step == 4) w.alloc(0x10000000, 64 * kMiB, WrittenTrace::kGrewOnce, t + 20);
    w.free(0x90000000, kMiB, WrittenTrace::kTemporary, t + 30);
  }
  const auto g = compute_growth(w.s);
  ASSERT_TRUE(g) << g.error();
  EXPECT_EQ(g->answer, GrowthVerdict::kNothingGrows) << growth_to_text(w.s, g.value());
  EXPECT_TRUE(g->sites.empty());
}

}  // namespace growth_test
