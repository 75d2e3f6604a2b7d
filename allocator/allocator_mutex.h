// The lock behind every allocator call: a futex-backed mutex (Drepper's three-state design,
// through C++20 atomic wait/notify).
//
// Each allocate/deallocate takes two locks, so the lock's uncontended cost is a visible part
// of the fast path: here it is one compare-and-swap to lock and one exchange to unlock, where
// pthread_mutex_lock/unlock measured about 30 instructions each. Under contention a thread
// spins briefly (critical sections are short), then sleeps in the kernel until woken.
//
// While the process has a single thread (glibc's __libc_single_threaded, which only ever
// goes from true to false) nobody can contend, so plain loads and stores do, as glibc's own
// mutex does: replays and single-threaded tools skip the atomic instructions. A thread
// created while the lock is held sees it taken and waits; the holder's unlock then finds
// the process multi-threaded and takes the atomic path that wakes it.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#if defined(__has_include)
#if __has_include(<sys/single_threaded.h>)
#include <sys/single_threaded.h>
#define MEMSNAP_HAVE_SINGLE_THREADED_FLAG 1
#endif
#endif

namespace memsnap {

class AllocatorMutex {
 public:
  AllocatorMutex() = default;
  AllocatorMutex(const AllocatorMutex&) = delete;
  AllocatorMutex& operator=(const AllocatorMutex&) = delete;

  void lock() {
    if (single_threaded() && state_.load(std::memory_order_relaxed) == kUnlocked) {
      state_.store(kLocked, std::memory_order_relaxed);
      return;
    }
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
    if (single_threaded()) {
      state_.store(kUnlocked, std::memory_order_relaxed);
      return;
    }
    // Only a lock that someone may be sleeping on (kContended) pays for a wake-up.
    if (state_.exchange(kUnlocked, std::memory_order_release) == kContended) state_.notify_one();
  }

 private:
  static constexpr uint32_t kUnlocked = 0;
  static constexpr uint32_t kLocked = 1;     // held, nobody waiting
  static constexpr uint32_t kContended = 2;  // held, and a waiter may be asleep

  static bool single_threaded() {
#ifdef MEMSNAP_HAVE_SINGLE_THREADED_FLAG
    return __libc_single_threaded != 0;
#else
    return false;
#endif
  }

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
