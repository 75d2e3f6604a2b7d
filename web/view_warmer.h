// Renders a newly opened snapshot's first views (and their gzip) on a background thread, so the
// server answers at once and the view a page opens on is made first or found made: a request
// for a view the warm-up is making waits for it rather than making it twice.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>

#include "web/snapshot_store.h"

namespace memsnap::web {

class ViewWarmer {
 public:
  ViewWarmer() = default;
  // Stops after the view being made and joins the thread.
  ~ViewWarmer();
  ViewWarmer(const ViewWarmer&) = delete;
  ViewWarmer& operator=(const ViewWarmer&) = delete;

  // Queues `snapshot`; one closed before its turn is skipped.
  void warm(const std::shared_ptr<const StoredSnapshot>& snapshot);
  // Returns once everything queued so far is made (for tests).
  void wait_idle();
  bool busy();
  uint64_t snapshots_warmed() const { return warmed_.load(); }

 private:
  void run();

  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<std::weak_ptr<const StoredSnapshot>> queue_;
  bool busy_ = false;
  bool stopping_ = false;
  std::atomic<uint64_t> warmed_{0};
  std::thread thread_;
};

}  // namespace memsnap::web
