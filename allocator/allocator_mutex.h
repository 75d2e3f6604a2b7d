// The lock behind every allocator call: a futex-backed mutex (Drepper's three-state design,
// through C++20 atomic wait/notify).
//
// Each allocate/deallocate takes two locks, so the lock's uncontended cost is a visible part
// of the fast path: here it is one compare-and-swap to lock and one exchange to unlock, where
// pthread_mutex_lock/unlock measured about 30 instructions each. Under contention a thread
// spins briefly (critical sections are short), then sleeps in the kernel until woken.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>

namespace memsnap {

class AllocatorMutex {
 public:
  AllocatorMutex() = default;
  AllocatorMutex(const AllocatorMutex&) = delete;
  AllocatorMutex& operator=(const AllocatorMutex&) = delete;

  void lock() {
    uint32_t expected = kUnlocked;
    if (state_.compare_exchange_strong(expected, kLocked, std::memory_order_acquire,
                                       std::memory_order_relaxed))
      return;
    lock_contended();
  }

  bool try_lock() {
    uint32_t expected = kUnlocked;
    return state_.compare_exchange_strong(expected, kLocked, std::memory_order_acquire,
                                          std::memory_order_relaxed);
  }

  void unlock() {
    // Only a lock that someone may be sleeping on (kContended) pays for a wake-up.
    if (state_.exchange(kUnlocked, std::memory_order_release) == kContended) state_.notify_one();
  }

 private:
  static constexpr uint32_t kUnlocked = 0;
  static constexpr uint32_t kLocked = 1;     // held, nobody waiting
  static constexpr uint32_t kContended = 2;  // held, and a waiter may be asleep

  void lock_contended() {
    for (int spin = 0; spin < 64; ++spin) {
      if (state_.load(std::memory_order_relaxed) == kUnlocked && try_lock()) return;
#if defined(__x86_64__) || defined(__i386__)
      __builtin_ia32_pause();
#endif
    }
    // Marking the lock contended before sleeping makes the holder's unlock wake us; when
    // the exchange finds it unlocked, we own it (in the contended state, which only costs a
    // spare wake-up later).
    while (state_.exchange(kContended, std::memory_order_acquire) != kUnlocked)
      state_.wait(kContended, std::memory_order_relaxed);
  }

  std::atomic<uint32_t> state_{kUnlocked};
};

using AllocatorLock = std::unique_lock<AllocatorMutex>;
using AllocatorLockGuard = std::lock_guard<AllocatorMutex>;

}  // namespace memsnap
