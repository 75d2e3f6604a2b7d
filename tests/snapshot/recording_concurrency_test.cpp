// History recording while threads allocate on two devices and another thread snapshots,
// clears, reconfigures and annotates: nothing crashes or races (this test also runs under
// ThreadSanitizer), the allocator's invariants hold, and every snapshot is coherent.
#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "tests/test_scale.h"
#include "allocator/caching_allocator.h"
#include "allocator/simulated_backend.h"
#include "history/history_recorder.h"
#include "snapshot/snapshot_builder.h"

namespace recording_concurrency_test {

using memsnap::HistoryLevel;

// Every stack and history index a snapshot holds points into its tables.
void expect_coherent(const memsnap::Snapshot& s) {
  const auto stacks = static_cast<int64_t>(s.stacks.size());
  for (const auto& frames : s.stacks)
    for (uint32_t frame : frames) ASSERT_LT(frame, s.frames.size());
  for (const auto& segment : s.segments) {
    uint64_t covered = 0;
    for (const auto& block : segment.blocks) {
      covered += block.size;
      ASSERT_LT(block.stack, stacks);
      for (const auto& item : block.history) ASSERT_LT(item.stack, stacks);
    }
    ASSERT_EQ(covered, segment.total_size);
  }
  for (const auto& trace : s.device_traces)
    for (const auto& entry : trace) ASSERT_LT(entry.stack, stacks);
}

TEST(Concurrency, RecordingWhileThreadsAllocateSnapshotAndReconfigure) {
  memsnap::SimulatedBackend::Options options;
  options.device_count = 2;
  auto backend = std::make_shared<memsnap::SimulatedBackend>(options);
  memsnap::CachingAllocator allocator(backend);
  memsnap::HistoryRecorder recorder(allocator);
  recorder.configure({HistoryLevel::kAll, 5000, /*cpp_stacks=*/true});
  constexpr int kThreads = 4;
  constexpr int kOperationsPerThread = 40000 / memsnap::testing::kWorkDivisor;
  std::atomic<bool> stop{false};
  std::atomic<int> snapshots{0};

  std::thread control([&] {
    std::mt19937_64 rng(1);
    while (!stop.load()) {
      const memsnap::Snapshot s = memsnap::take_snapshot(allocator, &recorder);
      expect_coherent(s);
      ++snapshots;
      switch (rng() % 5) {
        case 0: recorder.clear(); break;
        case 1: recorder.configure({HistoryLevel::kAlloc, 100, true, memsnap::StackUnwinder::kFramePointers}); break;
        case 2: recorder.configure({HistoryLevel::kAll, 5000, /*cpp_stacks=*/false}, 1); break;
        case 3: recorder.configure({HistoryLevel::kAll, 5000, true}); break;
        default: { memsnap::ScopedAnnotation phase(recorder, "step"); } break;
      }
    }
  });

  std::vector<std::thread> workers;
  for (int t = 0; t < kThreads; ++t) {
    workers.emplace_back([&, t] {
      std::mt19937_64 rng(10 + t);
      std::vector<void*> live;
      for (int i = 0; i < kOperationsPerThread; ++i) {
        if (live.empty() || rng() % 2 == 0) {
          const size_t bytes = (size_t{1} << (rng() % 22)) + rng() % 1000;
          live.push_back(allocator.allocate(bytes, static_cast<int>(rng() % 2), rng() % 2));
        } else {
          const size_t k = rng() % live.size();
          allocator.deallocate(live[k]);
          live[k] = live.back();
          live.pop_back();
        }
        if (i % 5000 == 0) allocator.empty_cache();
      }
      for (void* p : live) allocator.deallocate(p);
    });
  }
  for (auto& w : workers) w.join();
  stop = true;
  control.join();

  EXPECT_TRUE(allocator.check_invariants().empty());
  EXPECT_GT(snapshots.load(), 0);
  const memsnap::Snapshot last = memsnap::take_snapshot(allocator, &recorder);
  expect_coherent(last);
  for (const auto& segment : last.segments) EXPECT_EQ(segment.allocated_size, 0u);
}

}  // namespace recording_concurrency_test
