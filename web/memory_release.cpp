#include "web/memory_release.h"

#include <algorithm>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace memsnap::web {

void release_free_memory() {
#if defined(__GLIBC__)
  malloc_trim(0);
#endif
}

IdleTrimmer::IdleTrimmer(std::function<uint64_t()> activity, std::function<bool()> busy,
                         std::chrono::milliseconds quiet, std::function<void()> release)
    : activity_(std::move(activity)), busy_(std::move(busy)), quiet_(quiet), release_(std::move(release)) {
  thread_ = std::thread([this] { run(); });
}

IdleTrimmer::~IdleTrimmer() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  stop_changed_.notify_all();
  thread_.join();
}

uint64_t IdleTrimmer::releases() const {
  std::lock_guard lock(mutex_);
  return releases_;
}

void IdleTrimmer::run() {
  using Steady = std::chrono::steady_clock;
  const auto tick = std::clamp(quiet_ / 4, std::chrono::milliseconds(10), std::chrono::milliseconds(250));
  uint64_t released_at = activity_();  // the work done when memory was last released
  uint64_t seen = released_at;
  Steady::time_point seen_since = Steady::now();
  std::unique_lock lock(mutex_);
  while (!stop_changed_.wait_for(lock, tick, [this] { return stopping_; })) {
    lock.unlock();
    const uint64_t now_seen = activity_();
    const auto now = Steady::now();
    if (now_seen != seen) {
      seen = now_seen;
      seen_since = now;
    } else if (seen != released_at && now - seen_since >= quiet_ && !busy_()) {
      release_();
      released_at = seen;
      lock.lock();
      ++releases_;
      continue;
    }
    lock.lock();
  }
}

}  // namespace memsnap::web
