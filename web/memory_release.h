// Memory that glibc's malloc keeps after it is freed, given back to the system. A view's render,
// an upload's parse (kept or refused) and a closed snapshot free many small blocks spread over
// malloc's arenas; glibc returns only the free space at the top of each heap, so a server that
// once parsed a hostile upload (45M empty JSON objects: a 3 GB parse, refused) kept 2.8 GB
// resident while idle. malloc_trim(0) returns every free page.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>

namespace memsnap::web {

// malloc_trim(0) with glibc; nothing elsewhere.
void release_free_memory();

// Calls `release` once the server has been quiet for `quiet` after some work: `activity` (a
// count of work done: requests answered, views warmed) has not changed for that long and
// `busy` says nothing is in progress. Each burst of work is followed by one release, while the
// server is idle, so a release never holds up a request.
class IdleTrimmer {
 public:
  IdleTrimmer(std::function<uint64_t()> activity, std::function<bool()> busy,
              std::chrono::milliseconds quiet = std::chrono::milliseconds(1000),
              std::function<void()> release = release_free_memory);
  ~IdleTrimmer();
  IdleTrimmer(const IdleTrimmer&) = delete;
  IdleTrimmer& operator=(const IdleTrimmer&) = delete;

  uint64_t releases() const;

 private:
  void run();

  const std::function<uint64_t()> activity_;
  const std::function<bool()> busy_;
  const std::chrono::milliseconds quiet_;
  const std::function<void()> release_;
  mutable std::mutex mutex_;
  std::condition_variable stop_changed_;
  bool stopping_ = false;
  uint64_t releases_ = 0;
  std::thread thread_;
};

}  // namespace memsnap::web
