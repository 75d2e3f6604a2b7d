#include "web/view_warmer.h"

#include <sys/resource.h>
#include <unistd.h>

#include "web/cached_views.h"

namespace memsnap::web {

ViewWarmer::~ViewWarmer() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void ViewWarmer::warm(const std::shared_ptr<const StoredSnapshot>& snapshot) {
  {
    std::lock_guard lock(mutex_);
    queue_.push_back(snapshot);
    if (!thread_.joinable()) thread_ = std::thread([this] { run(); });
  }
  changed_.notify_all();
}

void ViewWarmer::wait_idle() {
  std::unique_lock lock(mutex_);
  changed_.wait(lock, [this] { return stopping_ || (queue_.empty() && !busy_); });
}

bool ViewWarmer::busy() {
  std::lock_guard lock(mutex_);
  return busy_ || !queue_.empty();
}

void ViewWarmer::run() {
  // Below the request threads (and a browser on the same machine): what the warm-up makes is
  // for later, what a request asks for is wanted now.
  setpriority(PRIO_PROCESS, static_cast<id_t>(gettid()), 10);
  std::unique_lock lock(mutex_);
  while (true) {
    changed_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
    if (stopping_) return;
    std::shared_ptr<const StoredSnapshot> snapshot = queue_.front().lock();
    queue_.pop_front();
    busy_ = true;
    lock.unlock();
    if (snapshot) {
      warm_up(*snapshot, [this] {
        std::lock_guard stop_lock(mutex_);
        return stopping_;
      });
    }
    snapshot.reset();
    ++warmed_;
    lock.lock();
    busy_ = false;
    changed_.notify_all();
  }
}

}  // namespace memsnap::web
