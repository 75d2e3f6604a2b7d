// A whole job's memory in one table: every rank's summary (rank_summary.h), the median rank,
// the ranks that ran out of memory, and the outliers — ranks whose peak reserved memory is
// `outlier_percent` above or below the median rank's — with the call sites whose live bytes
// at the peak differ most from the median rank's. Snapshots are loaded, summarized and
// dropped one per worker thread, so memory follows the largest file, not the job's sum.
// `memsnap ranks` and the web viewer's Ranks view.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "allocator/result.h"
#include "snapshot/pytorch_snapshot_reader.h"
#include "snapshot/snapshot.h"
#include "viewer/rank_summary.h"
#include "viewer/verdict.h"

namespace memsnap {

struct JobRanksOptions {
  // A regular expression with one group that captures the rank from a file's base name, for
  // snapshots that carry none (PyTorch pickles). Without it: rank_from_file_name.
  std::string rank_pattern;
  double outlier_percent = 20;
  size_t threads = 0;  // 0: the machine's cores, at most 8
  size_t max_site_differences = 5;
  // Called after each file (from the worker threads, one call at a time) with files done and
  // in all: a command's progress line.
  std::function<void(size_t done, size_t total)> progress;
};

struct SiteDifference {
  std::string site;
  uint64_t rank_bytes = 0;
  uint64_t median_bytes = 0;
  int64_t difference() const { return static_cast<int64_t>(rank_bytes) - static_cast<int64_t>(median_bytes); }
};

struct RankOutlier {
  size_t row = 0;            // into JobRanks::ranks
  double percent = 0;        // peak reserved against the median rank's, +25 = 25% more
  std::vector<SiteDifference> sites;  // largest difference first
  // Why: more (or less) live memory at its peak, or the same live memory under other allocator
  // settings, or cached otherwise.
  std::string why;
};

struct SkippedFile {
  std::string file;
  std::string error;
};

struct JobRanks {
  std::vector<RankSummary> ranks;  // by rank (unknown ranks last), then file
  std::vector<SkippedFile> skipped;
  // The typical rank: of the rows that speak for a rank, the one most others peak within
  // outlier_percent of. Its group is typical_rows; only when that group holds two ranks or more
  // and outnumbers any group the others form (`majority`) are the others outliers.
  size_t median_row = 0;
  std::vector<size_t> typical_rows;
  bool majority = false;
  std::vector<RankOutlier> outliers;  // largest first
  std::vector<size_t> oom_rows;       // ranks that ran out of memory, earliest first
  std::vector<std::string> notes;     // duplicate ranks, ranks of the world with no snapshot
  double outlier_percent = 20;
  // "outliers", "alike", or cannot_judge (no majority of ranks peaks alike; a single rank).
  Verdict verdict;
};

// Gives a file's snapshot; shared so a caller that already holds it (memsnap serve's store)
// lends it without a copy.
using SnapshotLoader = std::function<Result<std::shared_ptr<const Snapshot>>(const std::string& file)>;

// How many of `files` summarize_job reads at once (options.threads, or the cores up to 8).
size_t files_read_at_once(size_t files, const JobRanksOptions& options);
// What a loader reads each of them with: the reads at once share the cores, where alone a
// large pickle would take up to one thread per 3 MiB.
PickleReadOptions job_read_options(size_t files, const JobRanksOptions& options);

// Fails when no file loads or the rank pattern is not a valid expression with one group.
Result<JobRanks> summarize_job(const std::vector<std::string>& files, const SnapshotLoader& load,
                               const JobRanksOptions& options = {});

// Outliers, OOM rows and the verdict from summaries already made (summarize_job ends with it),
// each rank's latest snapshot speaking for it once. The typical ranks are the largest group that
// peaks within outlier_percent of one rank, and only where it holds two ranks or more and
// outnumbers any group of the others are those others outliers: two ranks that differ, or ranks
// split into halves, cannot say which side is typical.
void compare_ranks(JobRanks& job, const JobRanksOptions& options);

// Snapshots named one by one, unlike a folder, are not a job by default: they are the ranks of
// one when at least two different ranks are named (by the snapshots, or their file names, as
// summarize_job reads them). Then the job keeps the rows that name a rank, compared again;
// otherwise nothing (unrelated files, or one process's snapshots: a run's step and OOM dumps).
std::optional<JobRanks> ranks_of_one_job(JobRanks files, const JobRanksOptions& options = {});

nlohmann::json rank_summary_to_json(const RankSummary& rank);
nlohmann::json job_ranks_to_json(const JobRanks& job);
std::string job_ranks_to_text(const JobRanks& job);

}  // namespace memsnap
