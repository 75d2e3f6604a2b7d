// memsnap growth: the call site that keeps memory from step to step is found and measured; a
// site whose memory is freed every step is not; steps come from annotations, or without them
// from the most regular allocation site.
#include "viewer/growth.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "allocator/caching_allocator.h"
#include "allocator/simulated_backend.h"
#include "history/history_recorder.h"
#include "snapshot/snapshot_builder.h"

namespace growth_test {

using namespace memsnap;

constexpr size_t kMiB = 1 << 20;

struct Program {
  std::shared_ptr<SimulatedBackend> backend = std::make_shared<SimulatedBackend>();
  CachingAllocator allocator{backend};
  HistoryRecorder recorder{allocator};
  std::vector<void*> kept;
  Program() { recorder.configure({HistoryLevel::kAll, 100000, true}); }
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

void run(Program& program, bool annotate) {
  for (int step = 0; step < 10; ++step) {
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

TEST(Growth, TooFewStepsIsAClearError) {
  Program program;
  program.kept.push_back(program.allocator.allocate(kMiB));
  const Snapshot s = take_snapshot(program.allocator, &program.recorder);
  const auto g = compute_growth(s);
  ASSERT_FALSE(g);
  EXPECT_NE(g.error().find("fewer than 3 steps"), std::string::npos);
  GrowthOptions named;
  named.annotation = "ProfilerStep#";
  EXPECT_NE(compute_growth(s, named).error().find("fewer than 3 annotations named 'ProfilerStep#...'"), std::string::npos);
}

}  // namespace growth_test
