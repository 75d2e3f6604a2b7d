// memsnap ranks: a job's snapshots as one table. The rank that runs out of memory is named with
// its request, a rank that keeps more memory than its peers is flagged with the call site that
// makes the difference, ranks come from snapshots or from PyTorch pickles' file names, and a
// file that does not load is listed, not fatal.
#include "viewer/job_ranks.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <thread>

#include "allocator/caching_allocator.h"
#include "allocator/out_of_memory.h"
#include "allocator/simulated_backend.h"
#include "history/history_recorder.h"
#include "snapshot/snapshot_builder.h"
#include "snapshot/snapshot_loader.h"

namespace job_ranks_test {

using namespace memsnap;

constexpr size_t kMiB = 1 << 20;

__attribute__((noinline)) void* parameters(CachingAllocator& allocator, size_t bytes) {
  void* p = allocator.allocate(bytes);
  asm volatile("" ::: "memory");
  return p;
}

__attribute__((noinline)) void* activations(CachingAllocator& allocator, size_t bytes) {
  void* p = allocator.allocate(bytes);
  asm volatile("" ::: "memory");
  return p;
}

__attribute__((noinline)) void* metrics_cache(CachingAllocator& allocator) {
  void* p = allocator.allocate(4 * kMiB);
  asm volatile("" ::: "memory");
  return p;
}

struct RankRun {
  bool keeps_metrics = false;
  bool runs_out = false;
  std::optional<int64_t> world_size = 5;
};

// One rank of a small data-parallel job: parameters, then steps whose activations come and
// go. Returns its snapshot, taken at the end (or after its out-of-memory error).
Snapshot run_rank(int64_t rank, const RankRun& run) {
  SimulatedBackend::Options device;
  device.capacity_bytes = size_t{4} << 30;
  auto backend = std::make_shared<SimulatedBackend>(device);
  CachingAllocator allocator(backend);
  HistoryRecorder recorder(allocator);
  recorder.configure({HistoryLevel::kAll, 100000, true});
  std::vector<void*> kept;
  kept.push_back(parameters(allocator, 64 * kMiB));
  for (int step = 0; step < 10; ++step) {
    void* a = activations(allocator, 40 * kMiB);
    void* b = activations(allocator, 24 * kMiB);
    if (run.keeps_metrics) kept.push_back(metrics_cache(allocator));
    allocator.deallocate(b);
    allocator.deallocate(a);
  }
  if (run.runs_out) {
    allocator.set_memory_fraction(double(256 * kMiB) / double(device.capacity_bytes), 0);
    try {
      activations(allocator, 512 * kMiB);
      ADD_FAILURE() << "expected an out-of-memory error";
    } catch (const OutOfMemoryError&) {
    }
  }
  SnapshotOptions options;
  options.job.rank = rank;
  options.job.world_size = run.world_size;
  Snapshot snapshot = take_snapshot(allocator, &recorder, options);
  for (void* p : kept) allocator.deallocate(p);
  return snapshot;
}

SnapshotLoader loader_of(const std::map<std::string, Snapshot>& files) {
  return [&files](const std::string& file) -> Result<std::shared_ptr<const Snapshot>> {
    auto it = files.find(file);
    if (it == files.end()) return Result<std::shared_ptr<const Snapshot>>::failure(file + ": no such file");
    return std::shared_ptr<const Snapshot>(std::shared_ptr<const Snapshot>(), &it->second);  // borrowed
  };
}

std::vector<std::string> names_of(const std::map<std::string, Snapshot>& files) {
  std::vector<std::string> names;
  for (const auto& [name, snapshot] : files) names.push_back(name);
  return names;
}

const RankSummary& row_of_rank(const JobRanks& job, int64_t rank) {
  for (const RankSummary& r : job.ranks)
    if (r.rank == rank) return r;
  throw std::runtime_error("no row for rank " + std::to_string(rank));
}

TEST(JobRanks, NamesTheRankThatRanOutAndTheOneThatKeepsMore) {
  std::map<std::string, Snapshot> files;
  for (int64_t rank = 0; rank < 5; ++rank) {
    RankRun run;
    run.keeps_metrics = rank == 3;
    run.runs_out = rank == 1;
    files["job/rank" + std::to_string(rank) + ".msgpack"] = run_rank(rank, run);
  }
  JobRanksOptions options;
  options.threads = 3;
  std::vector<size_t> progress;  // called one at a time, so no lock here
  options.progress = [&](size_t done, size_t total) {
    EXPECT_EQ(total, 5u);
    progress.push_back(done);
  };
  const Result<JobRanks> result = summarize_job(names_of(files), loader_of(files), options);
  ASSERT_TRUE(result.ok()) << result.error();
  EXPECT_EQ(progress, (std::vector<size_t>{1, 2, 3, 4, 5}));
  const JobRanks& job = result.value();
  ASSERT_EQ(job.ranks.size(), 5u);
  for (size_t row = 0; row < 5; ++row) {
    EXPECT_EQ(job.ranks[row].rank, static_cast<int64_t>(row));
    EXPECT_EQ(job.ranks[row].rank_from, "snapshot");
    EXPECT_TRUE(job.ranks[row].peaks_from_statistics);
  }
  const RankSummary& normal = row_of_rank(job, 0);
  EXPECT_EQ(normal.peak_allocated_bytes, 128 * kMiB);  // parameters and one step's activations
  EXPECT_EQ(normal.alloc_retries, 0);
  EXPECT_EQ(normal.ooms, 0u);
  EXPECT_EQ(normal.active_timeline.size(), RankSummary::kTimelinePoints < normal.trace_events
                                               ? RankSummary::kTimelinePoints
                                               : normal.trace_events);
  EXPECT_EQ(*std::max_element(normal.active_timeline.begin(), normal.active_timeline.end()), 128 * kMiB);

  // Rank 1 ran out of memory asking for 512 MiB.
  ASSERT_EQ(job.oom_rows.size(), 1u);
  const RankSummary& failed = job.ranks[job.oom_rows[0]];
  EXPECT_EQ(failed.rank, 1);
  ASSERT_TRUE(failed.last_oom.has_value());
  EXPECT_EQ(failed.last_oom->requested_bytes, 512 * kMiB);
  EXPECT_EQ(failed.ooms, 1u);

  // Rank 3 kept 40 MiB more than the others: flagged, with the call site that kept it.
  const RankSummary& median = job.ranks[job.median_row];
  EXPECT_TRUE(median.rank == 0 || median.rank == 2 || median.rank == 4 || median.rank == 1);
  ASSERT_EQ(job.outliers.size(), 1u) << job_ranks_to_text(job);
  const RankOutlier& outlier = job.outliers[0];
  EXPECT_EQ(job.ranks[outlier.row].rank, 3);
  EXPECT_GT(outlier.percent, 20.0);
  ASSERT_FALSE(outlier.sites.empty());
  EXPECT_NE(outlier.sites[0].site.find("metrics_cache"), std::string::npos) << outlier.sites[0].site;
  EXPECT_EQ(outlier.sites[0].difference(), static_cast<int64_t>(40 * kMiB));

  const std::string text = job_ranks_to_text(job);
  EXPECT_NE(text.find("rank 1: device 0"), std::string::npos) << text;
  EXPECT_NE(text.find("requesting 512.00 MiB"), std::string::npos) << text;
  EXPECT_NE(text.find("rank 3 reserves"), std::string::npos) << text;
  EXPECT_NE(text.find("metrics_cache"), std::string::npos) << text;

  const nlohmann::json json = job_ranks_to_json(job);
  EXPECT_EQ(json["ranks"].size(), 5u);
  EXPECT_EQ(json["ranks"][1]["last_oom"]["requested_bytes"], 512 * kMiB);
  EXPECT_EQ(json["outliers"][0]["rank"], 3);
  EXPECT_EQ(json["oom_rows"][0], 1);
  EXPECT_EQ(json["ranks"][0]["world_size"], 5);
}

TEST(JobRanks, ARankWithAnOomDumpAndAFinalSnapshotCountsOnce) {
  std::map<std::string, Snapshot> files;
  RankRun oom;
  oom.runs_out = true;
  files["job/rank1-oom-1.msgpack"] = run_rank(1, oom);  // taken first
  for (int64_t rank : {0, 1, 2}) files["job/rank" + std::to_string(rank) + ".msgpack"] = run_rank(rank, {});
  const Result<JobRanks> result = summarize_job(names_of(files), loader_of(files));
  ASSERT_TRUE(result.ok()) << result.error();
  const JobRanks& job = result.value();
  ASSERT_EQ(job.ranks.size(), 4u);
  // The OOM dump reserves far more than the others, but rank 1's latest snapshot speaks for it.
  EXPECT_TRUE(job.outliers.empty()) << job_ranks_to_text(job);
  ASSERT_EQ(job.oom_rows.size(), 1u);
  EXPECT_EQ(job.ranks[job.oom_rows[0]].file, "job/rank1-oom-1.msgpack");
  EXPECT_NE(job.ranks[job.median_row].file, "job/rank1-oom-1.msgpack");
  const std::string text = job_ranks_to_text(job);
  EXPECT_NE(text.find("more than one snapshot for rank 1"), std::string::npos) << text;
}

JobRanks job_of_peaks(const std::vector<uint64_t>& peaks) {
  JobRanks job;
  for (size_t rank = 0; rank < peaks.size(); ++rank) {
    RankSummary r;
    r.file = "job/rank" + std::to_string(rank) + ".msgpack";
    r.rank = static_cast<int64_t>(rank);
    r.peak_reserved_bytes = peaks[rank];
    job.ranks.push_back(r);
  }
  compare_ranks(job, {});
  return job;
}

std::vector<int64_t> outlier_ranks(const JobRanks& job) {
  std::vector<int64_t> out;
  for (const RankOutlier& o : job.outliers) out.push_back(*job.ranks[o.row].rank);
  std::sort(out.begin(), out.end());
  return out;
}

TEST(JobRanks, TheTypicalRankOfAnEvenCountIsOneOfTheTypicalRanks) {
  // Two ranks alike, one 41% above them and one far above: the typical rank is one of the two
  // alike, so both others are outliers (the middle of four once made the 41% rank "the median").
  constexpr uint64_t kMB = 1000 * 1000;
  for (const auto& peaks : {std::vector<uint64_t>{1830 * kMB, 1830 * kMB, 2590 * kMB, 4360 * kMB},
                            std::vector<uint64_t>{4360 * kMB, 2590 * kMB, 1830 * kMB, 1830 * kMB}}) {
    const JobRanks job = job_of_peaks(peaks);
    EXPECT_EQ(job.ranks[job.median_row].peak_reserved_bytes, 1830 * kMB) << job_ranks_to_text(job);
    EXPECT_EQ(outlier_ranks(job).size(), 2u) << job_ranks_to_text(job);
    for (const RankOutlier& o : job.outliers) EXPECT_GE(o.percent, 41.0);
  }
  // The same two ranks alike, now at the top: the typical rank is one of them.
  const JobRanks high = job_of_peaks({1000 * kMB, 1700 * kMB, 2400 * kMB, 2400 * kMB});
  EXPECT_EQ(high.ranks[high.median_row].peak_reserved_bytes, 2400 * kMB) << job_ranks_to_text(high);
  EXPECT_EQ(outlier_ranks(high), (std::vector<int64_t>{0, 1})) << job_ranks_to_text(high);
  // No two ranks alike: which is typical, nothing says; no rank is called an outlier.
  const JobRanks apart = job_of_peaks({1000 * kMB, 2000 * kMB, 4000 * kMB, 8000 * kMB});
  EXPECT_TRUE(apart.outliers.empty());
  EXPECT_EQ(apart.verdict.answer, "cannot_judge");
  EXPECT_NE(apart.verdict.sentence.find("Cannot judge which ranks are outliers, because no group of ranks that peak "
                                        "within 20% of each other outnumbers the others"),
            std::string::npos)
      << apart.verdict.sentence;
}

// Two ranks that differ, or four split two and two: which side is typical is a coin toss, and the
// verdict says so instead of naming one side outliers.
TEST(JobRanks, ATieBetweenGroupsNamesNoOutliers) {
  constexpr uint64_t kMB = 1000 * 1000;
  for (const auto& peaks : {std::vector<uint64_t>{1000 * kMB, 2000 * kMB},
                            std::vector<uint64_t>{1000 * kMB, 1010 * kMB, 2000 * kMB, 2020 * kMB},
                            std::vector<uint64_t>{2000 * kMB, 1000 * kMB, 2020 * kMB, 1010 * kMB}}) {
    const JobRanks job = job_of_peaks(peaks);
    EXPECT_TRUE(job.outliers.empty()) << job_ranks_to_text(job);
    EXPECT_EQ(job.verdict.answer, "cannot_judge") << job.verdict.sentence;
    EXPECT_NE(job_ranks_to_text(job).find("Cannot judge which ranks are outliers"), std::string::npos);
  }
  // Three against one: the one is the outlier.
  const JobRanks three = job_of_peaks({1000 * kMB, 1010 * kMB, 990 * kMB, 2000 * kMB});
  EXPECT_EQ(outlier_ranks(three), (std::vector<int64_t>{3}));
  EXPECT_EQ(three.verdict.answer, "outliers");
  // All alike.
  const JobRanks alike = job_of_peaks({1000 * kMB, 1010 * kMB, 990 * kMB});
  EXPECT_TRUE(alike.outliers.empty());
  EXPECT_EQ(alike.verdict.answer, "alike");
}

// An outlier whose live memory matches the typical rank's and whose settings differ is said to
// differ by its settings; one that holds more live memory, by that.
TEST(JobRanks, AnOutlierOfTheSameLiveMemoryIsSaidToDifferBySettings) {
  constexpr uint64_t kMB = 1000 * 1000;
  JobRanks job;
  for (size_t rank = 0; rank < 4; ++rank) {
    RankSummary r;
    r.file = "rank" + std::to_string(rank) + ".msgpack";
    r.rank = static_cast<int64_t>(rank);
    r.peak_reserved_bytes = rank == 3 ? 1500 * kMB : 1000 * kMB;
    r.peak_allocated_bytes = 800 * kMB;
    r.settings = rank == 3 ? "max_split_size_mb:128" : "";
    job.ranks.push_back(r);
  }
  compare_ranks(job, {});
  ASSERT_EQ(outlier_ranks(job), (std::vector<int64_t>{3}));
  EXPECT_NE(job.outliers[0].why.find("the same live memory at its peak (762.94 MiB against 762.94 MiB) under other "
                                     "allocator settings ('max_split_size_mb:128' against PyTorch's defaults)"),
            std::string::npos)
      << job.outliers[0].why;
  EXPECT_NE(job.verdict.sentence.find("the settings, not the program, make the difference"), std::string::npos)
      << job.verdict.sentence;
  job.ranks[3].settings = "";
  compare_ranks(job, {});
  EXPECT_NE(job.outliers[0].why.find("cached otherwise"), std::string::npos) << job.outliers[0].why;
  job.ranks[3].peak_allocated_bytes = 1300 * kMB;
  compare_ranks(job, {});
  EXPECT_NE(job.outliers[0].why.find("more live memory at its peak"), std::string::npos) << job.outliers[0].why;
}

TEST(JobRanks, AnOddCountKeepsTheMedianRank) {
  constexpr uint64_t kMB = 1000 * 1000;
  const JobRanks job = job_of_peaks({1000 * kMB, 1050 * kMB, 1100 * kMB, 1150 * kMB, 2000 * kMB});
  EXPECT_EQ(job.ranks[job.median_row].peak_reserved_bytes, 1100 * kMB);
  EXPECT_EQ(outlier_ranks(job), (std::vector<int64_t>{4}));
}

TEST(JobRanks, FilesNamedOneByOneAreAJobOnlyWhenTheyNameTwoRanks) {
  JobRanks unrelated;  // PyTorch pickles of different programs: no rank in them or their names
  for (const char* file : {"mlp_train.pickle", "two_streams.pickle", "pool_oom.pickle"}) {
    RankSummary r;
    r.file = file;
    unrelated.ranks.push_back(r);
  }
  EXPECT_FALSE(ranks_of_one_job(unrelated).has_value());

  JobRanks one_process;  // a run's step snapshot and its OOM dump: one pid, one rank
  for (const char* file : {"run/step-100.msgpack", "run/oom-1.msgpack"}) {
    RankSummary r;
    r.file = file;
    r.pid = 4242;
    r.rank = 0;
    one_process.ranks.push_back(r);
  }
  EXPECT_FALSE(ranks_of_one_job(one_process).has_value());

  JobRanks job = one_process;  // two ranks, and a file that names none: the ranks are the job
  job.ranks[1].rank = 1;
  job.ranks[1].pid = 4343;
  RankSummary notes;
  notes.file = "notes.pickle";
  job.ranks.push_back(notes);
  const std::optional<JobRanks> ranks = ranks_of_one_job(job);
  ASSERT_TRUE(ranks.has_value());
  ASSERT_EQ(ranks->ranks.size(), 2u);
  for (const RankSummary& r : ranks->ranks) EXPECT_TRUE(r.rank.has_value()) << r.file;
}

TEST(JobRanks, PeaksFromTheTraceAgreeWithTheStatistics) {
  RankRun run;
  run.keeps_metrics = true;
  const Snapshot with = run_rank(0, run);
  Snapshot without = with;
  without.statistics.clear();
  const RankSummary a = summarize_rank(with, "a");
  const RankSummary b = summarize_rank(without, "b");
  EXPECT_TRUE(a.peaks_from_statistics);
  EXPECT_FALSE(b.peaks_from_statistics);
  EXPECT_EQ(a.peak_reserved_bytes, b.peak_reserved_bytes);
  EXPECT_EQ(a.peak_allocated_bytes, b.peak_allocated_bytes);
  EXPECT_FALSE(b.alloc_retries.has_value());
}

TEST(JobRanks, RanksComeFromFileNames) {
  const std::pair<const char*, std::optional<int64_t>> cases[] = {
      {"rank3.pickle", 3},
      {"snapshot_rank_12.pickle.gz", 12},
      {"RANK-7.msgpack", 7},
      {"out/snapshot_3.pickle", 3},
      {"oom-5.pkl.gz", 5},
      {"job/rank2/snapshot.pickle", 2},
      {"job/rank2/", 2},
      {"gpt2.pickle", std::nullopt},
      {"snapshot.pickle", std::nullopt},
      {"rank.pickle", std::nullopt},
      {"rank99999999999.pickle", std::nullopt},
      {"", std::nullopt},
      {"_", std::nullopt},
      {".pickle", std::nullopt},
  };
  for (const auto& [name, rank] : cases) EXPECT_EQ(rank_from_file_name(name), rank) << name;
  // Only "rank" and a number count where other numbers are a pid or a count.
  EXPECT_EQ(rank_named_in_path("job/rank4/oom-1234-1.msgpack"), 4);
  EXPECT_EQ(rank_named_in_path("job/rank_2-oom-1.msgpack"), 2);
  EXPECT_FALSE(rank_named_in_path("oom-1234-1.msgpack").has_value());
  EXPECT_FALSE(rank_named_in_path("ranks/oom-1.msgpack").has_value());
}

TEST(JobRanks, PyTorchPicklesTakeTheirRankFromTheirNames) {
  const Result<LoadedSnapshot> pickle = load_snapshot(std::string(MEMSNAP_TEST_DATA_DIR) + "/pytorch-2.11/mlp_train.pickle");
  ASSERT_TRUE(pickle.ok()) << pickle.error();
  std::map<std::string, Snapshot> files;
  files["run/snapshot_1.pickle"] = pickle.value().snapshot;
  files["run/snapshot_0.pickle"] = pickle.value().snapshot;
  files["run/gpu3-of-4.pickle"] = pickle.value().snapshot;
  {
    const Result<JobRanks> job = summarize_job(names_of(files), loader_of(files));
    ASSERT_TRUE(job.ok()) << job.error();
    // "gpu3-of-4" ends in 4, which is a guess the default rule makes; ranks 0 and 1 first.
    EXPECT_EQ(job.value().ranks[0].rank, 0);
    EXPECT_EQ(job.value().ranks[0].rank_from, "file name");
    EXPECT_EQ(job.value().ranks[1].rank, 1);
    EXPECT_FALSE(job.value().ranks[0].peaks_from_statistics);
    EXPECT_GT(job.value().ranks[0].peak_reserved_bytes, 0u);
  }
  JobRanksOptions options;
  options.rank_pattern = "gpu(\\d+)";
  const Result<JobRanks> job = summarize_job(names_of(files), loader_of(files), options);
  ASSERT_TRUE(job.ok()) << job.error();
  EXPECT_EQ(job.value().ranks[0].rank, 3);
  EXPECT_EQ(job.value().ranks[0].rank_from, "--rank-pattern");
  EXPECT_FALSE(job.value().ranks[1].rank.has_value());  // the pattern replaces the default rule
  EXPECT_NE(job_ranks_to_text(job.value()).find("name no rank"), std::string::npos);
}

TEST(JobRanks, MissingDuplicateAndUnreadableFilesAreSaidNotFatal) {
  std::map<std::string, Snapshot> files;
  for (int64_t rank : {0, 1, 1, 3}) {
    RankRun run;
    run.world_size = 6;
    files["job/r" + std::to_string(files.size()) + "/rank" + std::to_string(rank) + ".msgpack"] = run_rank(rank, run);
  }
  std::vector<std::string> names = names_of(files);
  names.push_back("job/broken.msgpack");
  const Result<JobRanks> result = summarize_job(names, loader_of(files));
  ASSERT_TRUE(result.ok()) << result.error();
  const JobRanks& job = result.value();
  EXPECT_EQ(job.ranks.size(), 4u);
  ASSERT_EQ(job.skipped.size(), 1u);
  EXPECT_EQ(job.skipped[0].file, "job/broken.msgpack");
  const std::string text = job_ranks_to_text(job);
  EXPECT_NE(text.find("more than one snapshot for rank 1"), std::string::npos) << text;
  EXPECT_NE(text.find("no snapshot for rank 2, 4, 5 of a world of 6"), std::string::npos) << text;
  EXPECT_NE(text.find("broken.msgpack: job/broken.msgpack: no such file"), std::string::npos) << text;

  const Result<JobRanks> none = summarize_job({"a", "b"}, loader_of(files));
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.error().find("no snapshot could be read"), std::string::npos);
  EXPECT_FALSE(summarize_job({}, loader_of(files)).ok());
}

TEST(JobRanks, ABadRankPatternIsOneClearError) {
  std::map<std::string, Snapshot> files;
  files["rank0.msgpack"] = run_rank(0, {});
  JobRanksOptions options;
  options.rank_pattern = "rank(\\d+";
  Result<JobRanks> job = summarize_job(names_of(files), loader_of(files), options);
  ASSERT_FALSE(job.ok());
  EXPECT_NE(job.error().find("not a regular expression"), std::string::npos) << job.error();
  options.rank_pattern = "rank\\d+";
  job = summarize_job(names_of(files), loader_of(files), options);
  ASSERT_FALSE(job.ok());
  EXPECT_NE(job.error().find("needs a group"), std::string::npos) << job.error();
}

// The files read at once share the cores: each read may use its share of them, a lone file
// all of them (a large pickle alone is read on a thread per 3 MiB).
TEST(JobRanks, ReadsAtOnceShareTheCores) {
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  JobRanksOptions options;
  EXPECT_EQ(files_read_at_once(100, options), std::min<size_t>(8, cores));
  EXPECT_EQ(files_read_at_once(1, options), 1u);
  options.threads = 4;
  EXPECT_EQ(files_read_at_once(3, options), 3u);
  EXPECT_EQ(files_read_at_once(100, options), 4u);
  const memsnap::PickleReadOptions shared = job_read_options(100, options);
  EXPECT_EQ(shared.threads, 0u) << "the size still chooses, within the share";
  EXPECT_EQ(cores - shared.spare_cores, std::max(1u, cores / 4));
  EXPECT_EQ(job_read_options(1, options).spare_cores, 0u);
}

}  // namespace job_ranks_test
