// Many threads, devices and streams at once; afterwards nothing is lost or double-freed and
// the statistics still equal what the blocks say.
#include <atomic>
#include <random>
#include <thread>

#include "tests/test_scale.h"
#include "allocator_harness.h"

namespace memsnap::testing {
namespace {

void allocate_and_free_on_threads(const std::string& config) {
  Harness h(config, size_t{4} << 30, /*devices=*/2, /*events_complete_immediately=*/true);
  constexpr int kThreads = 6;
  constexpr int kOperationsPerThread = 200000 / kWorkDivisor;
  std::atomic<int64_t> ooms{0};
  std::atomic<bool> stop_observer{false};

  // A reader that looks at statistics and empties caches while the workers run.
  std::thread observer([&] {
    while (!stop_observer.load()) {
      (void)h.allocator.device_stats(0);
      (void)h.allocator.memory_summary(1);
      h.allocator.empty_cache();
      std::this_thread::yield();
    }
  });

  std::vector<std::thread> workers;
  for (int t = 0; t < kThreads; ++t) {
    workers.emplace_back([&, t] {
      std::mt19937_64 rng(100 + t);
      std::vector<void*> live;
      for (int i = 0; i < kOperationsPerThread; ++i) {
        if (live.empty() || rng() % 2 == 0) {
          const size_t bytes = (size_t{1} << (rng() % 25)) + rng() % 1000;
          const int device = static_cast<int>(rng() % 2);
          try {
            void* p = h.allocator.allocate(bytes, device, rng() % 3);
            if (rng() % 16 == 0) h.allocator.record_stream(p, 7);
            live.push_back(p);
          } catch (const OutOfMemoryError&) {
            ++ooms;
          }
        } else {
          const size_t k = rng() % live.size();
          h.allocator.deallocate(live[k]);
          live[k] = live.back();
          live.pop_back();
        }
      }
      for (void* p : live) h.allocator.deallocate(p);
    });
  }
  for (auto& w : workers) w.join();
  stop_observer = true;
  observer.join();

  EXPECT_CONSISTENT(h);
  for (int d = 0; d < 2; ++d) EXPECT_EQ(h.stats(d).allocation[kAggregate].current, 0);
  EXPECT_EQ(h.stats(0).num_ooms + h.stats(1).num_ooms, ooms.load());
  h.allocator.empty_cache();
  for (int d = 0; d < 2; ++d) {
    EXPECT_EQ(h.backend->used_bytes(d), 0u);
    EXPECT_EQ(h.segments(d), 0);
  }
  EXPECT_EQ(h.backend->live_events(), 0u);
}

TEST(Concurrency, ThreadsAllocatingAndFreeingConcurrentlyKeepEveryInvariant) {
  allocate_and_free_on_threads("max_split_size_mb:64");
}

// Mapping and unmapping pages while other threads allocate, free and empty the cache.
TEST(Concurrency, ThreadsOnExpandableSegmentsKeepEveryInvariant) {
  allocate_and_free_on_threads("expandable_segments:True");
}

TEST(Concurrency, ReleaseLockOnDeviceMallocStaysConsistent) {
  Harness h("release_lock_on_cudamalloc:True", size_t{2} << 30);
  std::vector<std::thread> workers;
  for (int t = 0; t < 4; ++t) {
    workers.emplace_back([&, t] {
      std::mt19937_64 rng(t);
      std::vector<void*> live;
      for (int i = 0; i < 50000; ++i) {
        if (live.size() < 20 && rng() % 2 == 0) {
          try {
            live.push_back(h.allocator.allocate((size_t{1} << (rng() % 26)) + 1, 0, rng() % 2));
          } catch (const OutOfMemoryError&) {
          }
        } else if (!live.empty()) {
          h.allocator.deallocate(live.back());
          live.pop_back();
        }
        if (i % 1000 == 0) h.allocator.empty_cache();
      }
      for (void* p : live) h.allocator.deallocate(p);
    });
  }
  for (auto& w : workers) w.join();
  EXPECT_CONSISTENT(h);
  h.allocator.empty_cache();
  EXPECT_EQ(h.backend->used_bytes(0), 0u);
}

}  // namespace
}  // namespace memsnap::testing
