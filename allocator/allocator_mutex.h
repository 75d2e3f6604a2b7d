// The lock behind every allocator call: a futex-backed mutex whose release is a plain store.
//
// Each allocate/deallocate takes one lock, so the lock's uncontended cost is a visible part
// of the fast path. Locking is one compare-and-swap. A usual futex mutex also unlocks with an
// atomic exchange, to learn whether anyone sleeps on it; on x86 that is a second locked
// instruction, which waits for every store of the critical section to reach the cache. Here
// unlocking is a plain store followed by a load of the count of sleepers. A store followed by
// a load can be reordered by the CPU, so the owner could miss a sleeper that registered just
// then; the sleeper closes that window from its side: after counting itself it has the kernel
// run a memory barrier on every CPU running this process (membarrier(2), private expedited),
// and only then looks at the lock again. Either the owner's store is visible to it then, or
// the owner's load comes after the barrier and sees the count. This moves the cost of the
// barrier from every unlock to the rare thread that has to sleep.
//
// Where membarrier is missing (an old kernel, a seccomp filter) the locks fall back to the
// usual three-state protocol (Drepper,
// "Futexes Are Tricky"): unlock by exchange, sleepers marked in the lock word.
//
// While the process has a single thread (glibc's __libc_single_threaded, which only ever
// goes from true to false) nobody can contend, so locking is a plain load and store, as in
// glibc's own mutex. A thread created while the lock is held sees it taken and waits; the
// holder's unlock then finds the process multi-threaded and takes the path that wakes it.
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
  enum class Unlock {
    kStore,     // a plain store, where this process can use membarrier
    kExchange,  // the three-state protocol (tests force it to cover the fallback)
  };
  AllocatorMutex() : store_unlock_(membarrier_available()) {}
  explicit AllocatorMutex(Unlock unlock)
      : store_unlock_(unlock == Unlock::kStore && membarrier_available()) {}
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
    if (store_unlock_) {
      state_.store(kUnlocked, std::memory_order_release);
      // Keeps the compiler from moving the load above the store; the CPU is kept in order by
      // the sleepers' membarrier.
      std::atomic_signal_fence(std::memory_order_seq_cst);
      if (sleepers_.load(std::memory_order_relaxed) != 0) wake_one();
      return;
    }
    // Only a lock that someone may be sleeping on (kContended) pays for a wake-up.
    if (state_.exchange(kUnlocked, std::memory_order_release) == kContended) wake_one();
  }

  // Whether this mutex unlocks with a plain store.
  bool unlocks_by_store() const { return store_unlock_; }
  // Whether this process can use membarrier (asked once, then remembered).
  static bool membarrier_available();

 private:
  static constexpr uint32_t kUnlocked = 0;
  static constexpr uint32_t kLocked = 1;     // held (and, in the fallback, nobody waiting)
  static constexpr uint32_t kContended = 2;  // fallback only: held, and a waiter may sleep

  static bool single_threaded() {
#ifdef MEMSNAP_HAVE_SINGLE_THREADED_FLAG
    return __libc_single_threaded != 0;
#else
    return false;
#endif
  }

  void lock_contended();
  void wake_one();

  std::atomic<uint32_t> state_{kUnlocked};
  std::atomic<uint32_t> sleepers_{0};  // threads in lock_contended past spinning
  const bool store_unlock_;
};

using AllocatorLock = std::unique_lock<AllocatorMutex>;
using AllocatorLockGuard = std::lock_guard<AllocatorMutex>;

}  // namespace memsnap
