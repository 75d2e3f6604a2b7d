// AllocatorMutex under contention, with each unlock protocol: mutual exclusion holds, and no
// thread that went to sleep on the lock is left asleep (a lost wake-up would hang; a watchdog
// turns that into a failure).
#include "allocator/allocator_mutex.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <thread>
#include <vector>

#include "tests/test_scale.h"

namespace memsnap::testing {
namespace {

using Unlock = AllocatorMutex::Unlock;

// Aborts the test binary with a message when a test runs past its deadline.
class Watchdog {
 public:
  explicit Watchdog(std::chrono::seconds limit)
      : thread_([this, limit] {
          std::unique_lock lock(mutex_);
          if (!done_cv_.wait_for(lock, limit, [this] { return done_; })) {
            std::fprintf(stderr, "allocator_mutex_test: a thread is still waiting for the lock "
                                 "after %lld s (a lost wake-up)\n",
                         static_cast<long long>(limit.count()));
            std::abort();
          }
        }) {}
  ~Watchdog() {
    {
      std::lock_guard lock(mutex_);
      done_ = true;
    }
    done_cv_.notify_one();
    thread_.join();
  }

 private:
  std::mutex mutex_;
  std::condition_variable done_cv_;
  bool done_ = false;
  std::thread thread_;
};

struct Counted {
  int64_t counter;
  bool overlap;  // two threads were inside at once
};

// Threads increment a plain counter under the lock; some hold it long enough that the others
// give up spinning and sleep.
Counted count_under_contention(AllocatorMutex& mutex, int threads, int increments) {
  int64_t counter = 0;
  std::atomic<int> inside{0};
  std::atomic<bool> overlap{false};
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      for (int i = 0; i < increments; ++i) {
        std::lock_guard lock(mutex);
        if (inside.fetch_add(1) != 0) overlap = true;
        ++counter;
        if ((i + t) % 500 == 0) std::this_thread::sleep_for(std::chrono::microseconds(50));
        inside.fetch_sub(1);
      }
    });
  }
  for (auto& worker : workers) worker.join();
  return {counter, overlap.load()};
}

class AllocatorMutexTest : public ::testing::TestWithParam<Unlock> {};

TEST(AllocatorMutex, UnlocksByStoreWhereMembarrierIsAvailable) {
  EXPECT_EQ(AllocatorMutex().unlocks_by_store(), AllocatorMutex::membarrier_available());
  EXPECT_FALSE(AllocatorMutex(Unlock::kExchange).unlocks_by_store());
  // Linux has had private expedited membarrier since 4.14; a kernel or sandbox without it
  // takes the fallback, which the kExchange cases below cover.
  if (!AllocatorMutex::membarrier_available())
    GTEST_SKIP() << "membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED) is not available here";
  EXPECT_TRUE(AllocatorMutex(Unlock::kStore).unlocks_by_store());
}

// (The name matches the sanitizer script's filter, so ThreadSanitizer runs it too.)
TEST_P(AllocatorMutexTest, ExcludesAcrossThreadsAndCountsEveryIncrement) {
  Watchdog watchdog(std::chrono::seconds(120));
  AllocatorMutex mutex(GetParam());
  constexpr int kThreads = 8;
  const int increments = 100000 / kWorkDivisor;
  const Counted counted = count_under_contention(mutex, kThreads, increments);
  EXPECT_FALSE(counted.overlap) << "two threads held the lock at once";
  EXPECT_EQ(counted.counter, int64_t{kThreads} * increments);
}

TEST_P(AllocatorMutexTest, WakesEveryThreadThatSleptOnTheLock) {
  Watchdog watchdog(std::chrono::seconds(120));
  AllocatorMutex mutex(GetParam());
  for (int round = 0; round < 200 / kWorkDivisor; ++round) {
    mutex.lock();
    std::atomic<int> done{0};
    std::vector<std::thread> waiters;
    for (int t = 0; t < 4; ++t)
      waiters.emplace_back([&] {
        std::lock_guard lock(mutex);
        ++done;
      });
    // Long enough that every waiter has stopped spinning and sleeps in the kernel.
    std::this_thread::sleep_for(std::chrono::microseconds(round % 2 == 0 ? 200 : 5));
    mutex.unlock();
    for (auto& waiter : waiters) waiter.join();
    EXPECT_EQ(done.load(), 4);
  }
}

// A forked child starts without the parent's membarrier registration; its locks still work.
TEST_P(AllocatorMutexTest, WorksInAForkedChild) {
  AllocatorMutex mutex(GetParam());
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    alarm(60);  // a lost wake-up ends the child rather than hanging the test
    const Counted counted = count_under_contention(mutex, 4, 20000 / kWorkDivisor);
    _exit(!counted.overlap && counted.counter == int64_t{4} * (20000 / kWorkDivisor) ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status)) << "the child was killed by signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

INSTANTIATE_TEST_SUITE_P(Unlock, AllocatorMutexTest,
                         ::testing::Values(Unlock::kStore, Unlock::kExchange),
                         [](const ::testing::TestParamInfo<Unlock>& param) {
                           return param.param == Unlock::kStore ? "Store" : "Exchange";
                         });

}  // namespace
}  // namespace memsnap::testing
