// The contended side of AllocatorMutex: spinning, sleeping on the futex, and the process-wide
// memory barrier that lets unlock be a plain store (see allocator_mutex.h).
#include "allocator/allocator_mutex.h"

#include <linux/futex.h>
#include <linux/membarrier.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>

namespace memsnap {
namespace {

static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t) &&
                  std::atomic<uint32_t>::is_always_lock_free,
              "the futex syscalls address the atomic's word directly");

long membarrier(int command) { return syscall(SYS_membarrier, command, 0, 0); }

// Every running thread of this process passes a full memory barrier before this returns.
// False when the kernel refuses, e.g. in a child forked after registration (a fork starts
// unregistered): registers again and retries once.
bool barrier_on_every_cpu() {
  if (membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED) == 0) return true;
  if (errno == EPERM && membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED) == 0)
    return membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED) == 0;
  return false;
}

// Sleeps while *word == expected (returns at once otherwise), or until `timeout` passes
// when given; wake-ups may be spurious, so callers loop.
void futex_wait(std::atomic<uint32_t>& word, uint32_t expected, const timespec* timeout) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word), FUTEX_WAIT_PRIVATE, expected, timeout,
          nullptr, 0);
}

void futex_wake_one(std::atomic<uint32_t>& word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word), FUTEX_WAKE_PRIVATE, 1, nullptr, nullptr,
          0);
}

}  // namespace

bool AllocatorMutex::membarrier_available() {
  static const bool available = [] {
    const long commands = membarrier(MEMBARRIER_CMD_QUERY);
    if (commands < 0 || (commands & MEMBARRIER_CMD_PRIVATE_EXPEDITED) == 0) return false;
    return membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED) == 0;
  }();
  return available;
}

void AllocatorMutex::wake_one() { futex_wake_one(state_); }

void AllocatorMutex::lock_contended() {
  // Critical sections are short: the holder is usually about to unlock.
  for (int spin = 0; spin < 64; ++spin) {
    if (state_.load(std::memory_order_relaxed) == kUnlocked && try_lock()) return;
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
  }
  if (!store_unlock_) {
    // Marking the lock contended before sleeping makes the holder's unlock wake us; when the
    // exchange finds it unlocked, we own it (in the contended state, which only costs a
    // spare wake-up later).
    while (state_.exchange(kContended, std::memory_order_acquire) != kUnlocked)
      futex_wait(state_, kContended, nullptr);
    return;
  }
  sleepers_.fetch_add(1, std::memory_order_seq_cst);
  // After the barrier, any unlock either has its store visible to us or sees the count. If
  // the kernel refused the barrier, nothing guarantees a wake-up: sleep in short slices.
  const bool woken_reliably = barrier_on_every_cpu();
  const timespec slice{0, 1000000};  // 1 ms
  for (;;) {
    uint32_t seen = kUnlocked;
    if (state_.compare_exchange_strong(seen, kLocked, std::memory_order_acquire,
                                       std::memory_order_relaxed))
      break;
    futex_wait(state_, seen, woken_reliably ? nullptr : &slice);
  }
  sleepers_.fetch_sub(1, std::memory_order_relaxed);
}

}  // namespace memsnap
