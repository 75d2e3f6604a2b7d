// The ranks of a distributed job that `memsnap serve` was given (a folder, or several files):
// their summaries (viewer/job_ranks.h), made once at start, and each rank's snapshot loaded
// only when someone opens it. Ranks opened this way share the store with uploads; when it is
// full, the rank opened longest ago is closed to make room, so a thousand-rank job is browsed
// with the memory of a few snapshots.
#pragma once

#include <deque>
#include <memory>
#include <mutex>
#include <string>

#include "allocator/result.h"
#include "viewer/job_ranks.h"
#include "web/snapshot_store.h"

namespace memsnap::web {

class JobCatalog {
 public:
  JobCatalog(SnapshotStore& store, JobRanks job);

  size_t ranks() const { return job_.ranks.size(); }
  const JobRanks& job() const { return job_; }
  // GET /api/ranks: the table (job_ranks_to_json), rendered once.
  Body table_json() const { return table_json_; }
  // GET /api/ranks/ROW: one rank with its call sites at the peak, and its store id when open.
  std::string rank_json(size_t row) const;
  // POST /api/ranks/ROW/open: the rank's snapshot in the store, loaded if it is not there.
  Result<std::shared_ptr<const StoredSnapshot>> open(size_t row);
  // A rank's file that is already in the store (given on the command line), so opening it
  // finds that one.
  void note_open(const std::string& file, const std::string& id);

 private:
  SnapshotStore& store_;
  const JobRanks job_;
  Body table_json_;
  mutable std::mutex mutex_;  // opened_, and one load at a time
  std::deque<std::pair<size_t, std::string>> opened_;  // (row, store id), oldest first
};

}  // namespace memsnap::web
