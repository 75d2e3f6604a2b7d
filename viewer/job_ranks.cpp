#include "viewer/job_ranks.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <map>
#include <mutex>
#include <new>
#include <regex>
#include <set>
#include <thread>
#include <tuple>
#include <unordered_map>

#include "allocator/counted.h"
#include "allocator/device_stats.h"
#include "viewer/byte_text.h"

namespace memsnap {
namespace {

std::string base_name(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

using text::bytes;

// Peak live memory within this share of the typical rank's counts as the same.
constexpr double kSameLiveShare = 0.02;

std::string whole_percent(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%.0f%%", value);
  return text;
}

std::string rank_text(const RankSummary& r) { return r.rank ? std::to_string(*r.rank) : "?"; }

// Sets the rank of a summary whose snapshot had none, from its file name.
void name_rank(RankSummary& summary, const std::optional<std::regex>& pattern) {
  if (summary.rank) return;
  const std::string name = base_name(summary.file);
  if (pattern) {
    std::smatch match;
    if (std::regex_search(name, match, *pattern) && match.size() > 1 && match[1].matched) {
      const std::string digits = match[1].str();
      if (!digits.empty() && digits.size() <= 9 && std::all_of(digits.begin(), digits.end(), ::isdigit)) {
        summary.rank = std::stoll(digits);
        summary.rank_from = "--rank-pattern";
      }
    }
    return;
  }
  // A memsnap snapshot without a rank was not taken in a job: only an explicit "rank" in its
  // path counts (its pattern's trailing number is more likely {n} or {pid}).
  const std::optional<int64_t> rank =
      summary.source == "pytorch" ? rank_from_file_name(summary.file) : rank_named_in_path(summary.file);
  if (rank) {
    summary.rank = rank;
    summary.rank_from = "file name";
  }
}

std::vector<SiteDifference> site_differences(const RankSummary& rank, const RankSummary& median, size_t limit) {
  std::map<std::string, SiteDifference> by_site;
  for (const SiteBytes& s : rank.sites_at_peak) by_site[s.site].rank_bytes = s.bytes;
  for (const SiteBytes& s : median.sites_at_peak) by_site[s.site].median_bytes = s.bytes;
  std::vector<SiteDifference> out;
  for (auto& [site, difference] : by_site) {
    difference.site = site;
    if (difference.difference() != 0) out.push_back(difference);
  }
  std::sort(out.begin(), out.end(), [](const SiteDifference& a, const SiteDifference& b) {
    const int64_t x = std::llabs(a.difference()), y = std::llabs(b.difference());
    return x != y ? x > y : a.site < b.site;
  });
  if (out.size() > limit) out.resize(limit);
  return out;
}

// Why an outlier's peak differs from the typical rank's: its live memory, or (the same live
// memory) its allocator settings or how its cache lay.
std::string outlier_reason(const RankSummary& rank, const RankSummary& typical) {
  // The program's own bytes where both say them (requests, before the settings round them to
  // blocks); else the blocks.
  const bool requested = rank.peak_requested_bytes > 0 && typical.peak_requested_bytes > 0;
  const uint64_t rank_live = requested ? rank.peak_requested_bytes : rank.peak_allocated_bytes;
  const uint64_t typical_live_bytes = requested ? typical.peak_requested_bytes : typical.peak_allocated_bytes;
  const double live = static_cast<double>(rank_live);
  const double typical_live = static_cast<double>(typical_live_bytes);
  const std::string figures = " (" + bytes(rank_live) + " against " + bytes(typical_live_bytes) + ")";
  if (typical_live > 0 && std::fabs(live / typical_live - 1.0) < kSameLiveShare) {
    if (rank.settings && typical.settings && *rank.settings != *typical.settings) {
      const auto name = [](const std::string& config) { return config.empty() ? std::string("PyTorch's defaults") : "'" + config + "'"; };
      return "the same live memory at its peak" + figures + " under other allocator settings (" + name(*rank.settings) +
             " against " + name(*typical.settings) + "): the settings, not the program, make the difference";
    }
    return "the same live memory at its peak" + figures + ", cached otherwise: the allocator's cache, not the program's "
           "tensors, makes the difference (fragmentation; memsnap tune on its snapshot)";
  }
  return std::string(live > typical_live ? "more" : "less") + " live memory at its peak" + figures;
}

std::string ranks_list(const std::vector<int64_t>& ranks) {
  std::string out;
  for (size_t i = 0; i < ranks.size() && i < 20; ++i) out += (i ? ", " : "") + std::to_string(ranks[i]);
  if (ranks.size() > 20) out += ", … (" + std::to_string(ranks.size()) + " in all)";
  return out;
}

std::string row_names(const JobRanks& job, const std::vector<size_t>& rows) {
  std::string out;
  for (size_t i = 0; i < rows.size() && i < 12; ++i) {
    const RankSummary& r = job.ranks[rows[i]];
    out += (i ? ", " : "") + (r.rank ? rank_text(r) : base_name(r.file));
  }
  if (rows.size() > 12) out += ", … (" + std::to_string(rows.size()) + " in all)";
  return out;
}

// Ranks grouped by peak (sorted), each group within outlier_percent of its first: for saying how
// ranks split when no group is a majority.
std::string groups_words(const JobRanks& job, const std::vector<size_t>& by_peak) {
  std::vector<std::vector<size_t>> groups;
  for (size_t row : by_peak) {
    const double peak = static_cast<double>(job.ranks[row].peak_reserved_bytes);
    if (!groups.empty()) {
      const double first = static_cast<double>(job.ranks[groups.back().front()].peak_reserved_bytes);
      if (first > 0 ? (peak / first - 1.0) * 100.0 < job.outlier_percent : peak == first) {
        groups.back().push_back(row);
        continue;
      }
    }
    groups.push_back({row});
  }
  std::string out;
  for (size_t g = 0; g < groups.size() && g < 4; ++g)
    out += std::string(g ? (g + 1 == groups.size() ? " and " : ", ") : "") + (groups[g].size() == 1 ? "rank " : "ranks ") +
           row_names(job, groups[g]) + " near " + bytes(job.ranks[groups[g].front()].peak_reserved_bytes);
  if (groups.size() > 4) out += ", and " + std::to_string(groups.size() - 4) + " groups more";
  return out;
}

void decide_ranks(JobRanks& job, const std::vector<size_t>& by_peak) {
  Verdict& v = job.verdict;
  v = Verdict{};
  v.kind = VerdictKind::kRanks;
  const size_t ranks = by_peak.size();
  const RankSummary& typical = job.ranks[job.median_row];
  v.basis = "peak reserved memory of " + counted(ranks, "rank") + ", within " + whole_percent(job.outlier_percent) + " counted alike";
  v.add("ranks", static_cast<int64_t>(ranks));
  v.add("typical_ranks", static_cast<int64_t>(job.typical_rows.size()));
  v.add("typical_peak_reserved_bytes", typical.peak_reserved_bytes);
  v.add("outliers", static_cast<int64_t>(job.outliers.size()));
  if (ranks < 2) {
    v.reason = "there is one rank, with nothing to compare it with";
  } else if (!job.majority) {
    v.reason = ranks == 2 ? "there are two ranks and they peak " +
                                whole_percent(std::fabs(static_cast<double>(job.ranks[by_peak.back()].peak_reserved_bytes) /
                                                            std::max(1.0, static_cast<double>(job.ranks[by_peak.front()].peak_reserved_bytes)) -
                                                        1.0) *
                                              100.0) +
                                " apart: which of two is typical, they cannot tell (" + groups_words(job, by_peak) + ")"
                          : "no group of ranks that peak within " + whole_percent(job.outlier_percent) +
                                " of each other outnumbers the others: " + groups_words(job, by_peak) +
                                "; which ranks are typical, the peaks cannot tell";
  }
  if (!v.reason.empty()) {
    v.sentence = "Cannot judge which ranks are outliers, because " + v.reason + ".";
    return;
  }
  if (job.outliers.empty()) {
    v.answer = "alike";
    v.sentence = "The " + counted(ranks, "rank") + " peak alike: all within " + whole_percent(job.outlier_percent) +
                 " of rank " + rank_text(typical) + "'s " + bytes(typical.peak_reserved_bytes) + " reserved.";
    return;
  }
  v.answer = "outliers";
  const RankOutlier& top = job.outliers.front();
  const RankSummary& far = job.ranks[top.row];
  std::vector<size_t> outlier_rows;
  for (const RankOutlier& o : job.outliers) outlier_rows.push_back(o.row);
  std::sort(outlier_rows.begin(), outlier_rows.end());
  std::string out = job.outliers.size() == 1 ? "Rank " + rank_text(far) + " stands out"
                                             : counted(job.outliers.size(), "rank") + " stand out (" + row_names(job, outlier_rows) + ")";
  out += " against the " + counted(job.typical_rows.size(), "typical rank") + " (" + row_names(job, job.typical_rows) +
         ", within " + whole_percent(job.outlier_percent) + " of rank " + rank_text(typical) + "'s " +
         bytes(typical.peak_reserved_bytes) + " reserved at its peak): ";
  out += job.outliers.size() > 1 ? "the furthest, rank " + rank_text(far) + ", reserves " : std::string("it reserves ");
  out += whole_percent(std::fabs(top.percent)) + (top.percent > 0 ? " more" : " less") +
         " at its peak (" + bytes(far.peak_reserved_bytes) + "), with " + top.why + ".";
  v.sentence = out;
}

}  // namespace

void compare_ranks(JobRanks& job, const JobRanksOptions& options) {
  job.outlier_percent = options.outlier_percent;
  job.outliers.clear();
  job.oom_rows.clear();
  job.notes.clear();
  if (job.ranks.empty()) return;
  // One row speaks for each rank: its latest snapshot (a rank that dumped at an OOM and again at
  // the end is one rank, not three); rows without a rank speak for themselves.
  std::map<int64_t, size_t> latest;
  std::vector<size_t> by_peak;
  for (size_t row = 0; row < job.ranks.size(); ++row) {
    const RankSummary& r = job.ranks[row];
    if (!r.rank) {
      by_peak.push_back(row);
      continue;
    }
    auto [it, fresh] = latest.emplace(*r.rank, row);
    if (!fresh && r.taken_unix_us >= job.ranks[it->second].taken_unix_us) it->second = row;
  }
  for (const auto& [rank, row] : latest) by_peak.push_back(row);
  std::stable_sort(by_peak.begin(), by_peak.end(), [&](size_t a, size_t b) {
    return job.ranks[a].peak_reserved_bytes < job.ranks[b].peak_reserved_bytes;
  });
  // The typical ranks are those within outlier_percent of one rank's peak: of every rank, the
  // one most others peak close to (on a tie, the one nearest the middle). They are typical only
  // as at least two and more than any group the other ranks form; otherwise (two ranks that
  // differ, four split two and two, every rank apart) which ranks are typical is a coin toss,
  // and no rank is called an outlier.
  const auto close = [&](size_t center, size_t row) {
    const double peak = static_cast<double>(job.ranks[center].peak_reserved_bytes);
    const double other = static_cast<double>(job.ranks[row].peak_reserved_bytes);
    return peak > 0 ? std::fabs(other / peak - 1.0) * 100.0 < options.outlier_percent : other == peak;
  };
  const auto agreeing = [&](size_t center) {
    return static_cast<size_t>(std::count_if(by_peak.begin(), by_peak.end(), [&](size_t row) { return close(center, row); }));
  };
  const double middle_position = static_cast<double>(by_peak.size() - 1) / 2.0;
  size_t center = 0, most = 0;
  for (size_t i = 0; i < by_peak.size(); ++i) {
    const size_t alike = agreeing(by_peak[i]);
    if (alike > most || (alike == most && std::fabs(static_cast<double>(i) - middle_position) <
                                              std::fabs(static_cast<double>(center) - middle_position))) {
      most = alike;
      center = i;
    }
  }
  job.median_row = by_peak[center];
  job.typical_rows.clear();
  for (size_t row : by_peak)
    if (close(job.median_row, row)) job.typical_rows.push_back(row);
  size_t second = 0;  // the largest group among the others
  for (size_t a : by_peak) {
    if (close(job.median_row, a)) continue;
    size_t group = 0;
    for (size_t b : by_peak) group += !close(job.median_row, b) && close(a, b);
    second = std::max(second, group);
  }
  job.majority = job.typical_rows.size() >= 2 && job.typical_rows.size() > second;
  const RankSummary& median = job.ranks[job.median_row];
  const double median_peak = static_cast<double>(median.peak_reserved_bytes);
  for (size_t row : by_peak) {
    if (!job.majority || median_peak <= 0 || close(job.median_row, row)) continue;
    const double percent = (static_cast<double>(job.ranks[row].peak_reserved_bytes) / median_peak - 1.0) * 100.0;
    RankOutlier outlier{row, percent, site_differences(job.ranks[row], median, options.max_site_differences), ""};
    outlier.why = outlier_reason(job.ranks[row], median);
    job.outliers.push_back(std::move(outlier));
  }
  std::stable_sort(job.outliers.begin(), job.outliers.end(),
                   [](const RankOutlier& a, const RankOutlier& b) { return std::fabs(a.percent) > std::fabs(b.percent); });

  for (size_t row = 0; row < job.ranks.size(); ++row)
    if (job.ranks[row].ooms > 0) job.oom_rows.push_back(row);
  std::stable_sort(job.oom_rows.begin(), job.oom_rows.end(), [&](size_t a, size_t b) {
    const auto& x = job.ranks[a].last_oom;
    const auto& y = job.ranks[b].last_oom;
    if (!x || !y) return x.has_value() && !y.has_value();
    if (x->unix_time_us && y->unix_time_us) return *x->unix_time_us < *y->unix_time_us;
    return false;
  });

  // Ranks that appear twice, and ranks of the world that sent no snapshot.
  std::map<int64_t, size_t> files_per_rank;
  int64_t world = 0;
  for (const RankSummary& r : job.ranks) {
    if (r.rank) ++files_per_rank[*r.rank];
    if (r.world_size) world = std::max(world, *r.world_size);
  }
  std::vector<int64_t> repeated, missing;
  for (const auto& [rank, files] : files_per_rank)
    if (files > 1) repeated.push_back(rank);
  if (!repeated.empty())
    job.notes.push_back("more than one snapshot for rank " + ranks_list(repeated) +
                        " (each is a row; an OOM snapshot and a final one, or two runs in one folder?)");
  for (int64_t rank = 0; rank < world; ++rank)
    if (!files_per_rank.count(rank)) missing.push_back(rank);
  if (!missing.empty())
    job.notes.push_back("no snapshot for rank " + ranks_list(missing) + " of a world of " + std::to_string(world));
  const size_t unknown = std::count_if(job.ranks.begin(), job.ranks.end(), [](const RankSummary& r) { return !r.rank; });
  if (unknown > 0)
    job.notes.push_back(std::to_string(unknown) +
                        " snapshot(s) name no rank, in the file or its name (--rank-pattern takes it from the name)");
  decide_ranks(job, by_peak);
}

size_t files_read_at_once(size_t files, const JobRanksOptions& options) {
  const size_t threads = options.threads ? options.threads : std::min<size_t>(8, std::max(1u, std::thread::hardware_concurrency()));
  return std::max<size_t>(1, std::min(threads, files));
}

PickleReadOptions job_read_options(size_t files, const JobRanksOptions& options) {
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  const auto share = static_cast<unsigned>(std::max<size_t>(1, cores / files_read_at_once(files, options)));
  PickleReadOptions read;
  read.spare_cores = cores - share;
  return read;
}

Result<JobRanks> summarize_job(const std::vector<std::string>& files, const SnapshotLoader& load,
                               const JobRanksOptions& options) {
  std::optional<std::regex> pattern;
  if (!options.rank_pattern.empty()) {
    try {
      pattern.emplace(options.rank_pattern, std::regex::ECMAScript);
    } catch (const std::regex_error& error) {
      return Result<JobRanks>::failure("--rank-pattern '" + options.rank_pattern + "' is not a regular expression (" +
                                       error.what() + ")");
    }
    if (pattern->mark_count() < 1)
      return Result<JobRanks>::failure("--rank-pattern '" + options.rank_pattern +
                                       "' needs a group that captures the rank, as in 'rank(\\d+)'");
  }
  if (files.empty()) return Result<JobRanks>::failure("no snapshot files given");

  std::vector<std::optional<RankSummary>> summaries(files.size());
  std::vector<std::optional<std::string>> errors(files.size());
  const size_t threads = files_read_at_once(files.size(), options);
  std::atomic<size_t> next{0};
  std::mutex progress_mutex;
  size_t done = 0;
  auto report = [&] {
    if (!options.progress) return;
    std::lock_guard<std::mutex> lock(progress_mutex);
    options.progress(++done, files.size());
  };
  auto work = [&] {
    for (size_t i = next++; i < files.size(); i = next++, report()) {
      // (Nothing may leave a thread: an exception would end the process.)
      try {
        Result<std::shared_ptr<const Snapshot>> snapshot = load(files[i]);
        if (!snapshot || !snapshot.value()) {
          errors[i] = snapshot ? std::string("not loaded") : snapshot.error();
          continue;
        }
        summaries[i] = summarize_rank(*snapshot.value(), files[i]);
        name_rank(*summaries[i], pattern);
      } catch (const std::bad_alloc&) {
        summaries[i].reset();
        errors[i] = "not enough memory to read it (" + std::to_string(threads) + " files read at once)";
      } catch (const std::exception& error) {
        summaries[i].reset();
        errors[i] = error.what();
      }
    }
  };
  std::vector<std::thread> pool;
  for (size_t t = 1; t < threads; ++t) pool.emplace_back(work);
  work();
  for (std::thread& thread : pool) thread.join();

  JobRanks job;
  for (size_t i = 0; i < files.size(); ++i) {
    if (summaries[i])
      job.ranks.push_back(std::move(*summaries[i]));
    else
      job.skipped.push_back({files[i], errors[i].value_or("not loaded")});
  }
  if (job.ranks.empty())
    return Result<JobRanks>::failure("no snapshot could be read (" + job.skipped.front().file + ": " +
                                     job.skipped.front().error + ")");
  std::stable_sort(job.ranks.begin(), job.ranks.end(), [](const RankSummary& a, const RankSummary& b) {
    if (a.rank.has_value() != b.rank.has_value()) return a.rank.has_value();
    if (a.rank && *a.rank != *b.rank) return *a.rank < *b.rank;
    return a.file < b.file;
  });
  compare_ranks(job, options);
  return job;
}

std::optional<JobRanks> ranks_of_one_job(JobRanks files, const JobRanksOptions& options) {
  std::set<int64_t> named;
  for (const RankSummary& r : files.ranks)
    if (r.rank) named.insert(*r.rank);
  if (named.size() < 2) return std::nullopt;
  std::erase_if(files.ranks, [](const RankSummary& r) { return !r.rank.has_value(); });
  compare_ranks(files, options);
  return files;
}

nlohmann::json rank_summary_to_json(const RankSummary& r) {
  auto optional_json = [](const auto& value) { return value ? nlohmann::json(*value) : nlohmann::json(nullptr); };
  nlohmann::json out = {
      {"file", r.file},
      {"rank", optional_json(r.rank)},
      {"rank_from", r.rank_from},
      {"host", r.host},
      {"pid", r.pid},
      {"world_size", optional_json(r.world_size)},
      {"source", r.source},
      {"taken_unix_us", r.taken_unix_us},
      {"devices", r.devices},
      {"trace_events", r.trace_events},
      {"reserved_bytes", r.reserved_bytes},
      {"allocated_bytes", r.allocated_bytes},
      {"peak_reserved_bytes", r.peak_reserved_bytes},
      {"peak_allocated_bytes", r.peak_allocated_bytes},
      {"peak_requested_bytes", r.peak_requested_bytes},
      {"settings", r.settings ? nlohmann::json(*r.settings) : nlohmann::json(nullptr)},
      {"peaks_from", r.peaks_from_statistics ? "statistics" : "trace"},
      {"segments", r.segments},
      {"fragmentation", r.fragmentation},
      {"alloc_retries", optional_json(r.alloc_retries)},
      {"ooms", r.ooms},
      {"active_timeline", r.active_timeline},
  };
  if (r.last_oom) {
    const RankOom& o = *r.last_oom;
    out["last_oom"] = {{"device", o.device},
                       {"event", o.event},
                       {"time_us", o.time_us},
                       {"unix_time_us", optional_json(o.unix_time_us)},
                       {"requested_bytes", o.requested_bytes},
                       {"device_free_bytes", optional_json(o.device_free_bytes)}};
  } else {
    out["last_oom"] = nullptr;
  }
  nlohmann::json sites = nlohmann::json::array();
  for (const SiteBytes& s : r.sites_at_peak) sites.push_back({{"site", s.site}, {"bytes", s.bytes}});
  out["sites_at_peak"] = std::move(sites);
  return out;
}

nlohmann::json job_ranks_to_json(const JobRanks& job) {
  nlohmann::json ranks = nlohmann::json::array();
  for (const RankSummary& r : job.ranks) {
    nlohmann::json row = rank_summary_to_json(r);
    row.erase("sites_at_peak");  // per rank on request (the web's /ranks/N); the outliers carry theirs
    ranks.push_back(std::move(row));
  }
  nlohmann::json outliers = nlohmann::json::array();
  for (const RankOutlier& o : job.outliers) {
    nlohmann::json sites = nlohmann::json::array();
    for (const SiteDifference& s : o.sites)
      sites.push_back({{"site", s.site}, {"rank_bytes", s.rank_bytes}, {"median_bytes", s.median_bytes},
                       {"difference_bytes", s.difference()}});
    outliers.push_back({{"row", o.row}, {"rank", job.ranks[o.row].rank ? nlohmann::json(*job.ranks[o.row].rank) : nlohmann::json(nullptr)},
                        {"file", job.ranks[o.row].file}, {"percent_vs_median", o.percent}, {"why", o.why},
                        {"sites", std::move(sites)}});
  }
  nlohmann::json skipped = nlohmann::json::array();
  for (const SkippedFile& s : job.skipped) skipped.push_back({{"file", s.file}, {"error", s.error}});
  nlohmann::json oom_rows = nlohmann::json::array();
  for (size_t row : job.oom_rows) oom_rows.push_back(row);
  return {{"ranks", std::move(ranks)},       {"median_row", job.median_row},
          {"typical_rows", job.typical_rows},  {"verdict", verdict_to_json(job.verdict)},
          {"conclusion", job.verdict.sentence},
          {"outlier_percent", job.outlier_percent}, {"outliers", std::move(outliers)},
          {"oom_rows", std::move(oom_rows)}, {"notes", job.notes},
          {"skipped", std::move(skipped)}};
}

std::string job_ranks_to_text(const JobRanks& job) {
  std::string out;
  char line[512];
  const RankSummary& median = job.ranks[job.median_row];
  std::snprintf(line, sizeof line, "%zu rank snapshot(s); typical rank %s peaks at %s reserved, %s allocated\n",
                job.ranks.size(), rank_text(median).c_str(), bytes(median.peak_reserved_bytes).c_str(),
                bytes(median.peak_allocated_bytes).c_str());
  out += line + job.verdict.sentence + "\n\n";
  std::snprintf(line, sizeof line, "%6s  %-16s %13s %13s %13s %13s %6s %8s %7s %5s %8s  %s\n", "rank", "host",
                "peak reserved", "peak alloc", "reserved", "allocated", "frag", "segments", "retries", "OOMs",
                "vs median", "file");
  out += line;
  std::vector<const RankOutlier*> outlier_of(job.ranks.size(), nullptr);
  for (const RankOutlier& o : job.outliers) outlier_of[o.row] = &o;
  for (size_t row = 0; row < job.ranks.size(); ++row) {
    const RankSummary& r = job.ranks[row];
    char versus[32] = "";
    if (row == job.median_row)
      std::snprintf(versus, sizeof versus, "median");
    else if (median.peak_reserved_bytes > 0)
      std::snprintf(versus, sizeof versus, "%+.0f%%%s",
                    (static_cast<double>(r.peak_reserved_bytes) / static_cast<double>(median.peak_reserved_bytes) - 1) * 100,
                    outlier_of[row] ? " !" : "");
    std::snprintf(line, sizeof line, "%6s  %-16.16s %13s %13s %13s %13s %5.1f%% %8llu %7s %5llu %9s  %s\n",
                  rank_text(r).c_str(), r.host.empty() ? "-" : r.host.c_str(), bytes(r.peak_reserved_bytes).c_str(),
                  bytes(r.peak_allocated_bytes).c_str(), bytes(r.reserved_bytes).c_str(),
                  bytes(r.allocated_bytes).c_str(), r.fragmentation * 100,
                  static_cast<unsigned long long>(r.segments),
                  r.alloc_retries ? std::to_string(*r.alloc_retries).c_str() : "-",
                  static_cast<unsigned long long>(r.ooms), versus, base_name(r.file).c_str());
    out += line;
  }
  if (!job.oom_rows.empty()) {
    out += "\nOut of memory:\n";
    std::vector<std::tuple<std::optional<int64_t>, int64_t, uint64_t>> said;  // rank, time, request
    for (size_t row : job.oom_rows) {
      const RankSummary& r = job.ranks[row];
      if (r.last_oom) {  // the same error in a rank's OOM dump and its later snapshots: once
        const auto key = std::make_tuple(r.rank, r.last_oom->time_us, r.last_oom->requested_bytes);
        if (std::find(said.begin(), said.end(), key) != said.end()) continue;
        said.push_back(key);
      }
      if (!r.last_oom) {
        std::snprintf(line, sizeof line, "  rank %s: %llu OOM(s) counted by the allocator (not in the trace)\n",
                      rank_text(r).c_str(), static_cast<unsigned long long>(r.ooms));
      } else {
        const RankOom& o = *r.last_oom;
        std::string free_text = o.device_free_bytes ? ", " + bytes(*o.device_free_bytes) + " free on the device" : "";
        std::snprintf(line, sizeof line, "  rank %s: device %lld, event %llu of its trace, requesting %s%s%s\n",
                      rank_text(r).c_str(), static_cast<long long>(o.device), static_cast<unsigned long long>(o.event),
                      bytes(o.requested_bytes).c_str(), free_text.c_str(),
                      row == job.oom_rows.front() && job.oom_rows.size() > 1 ? " (first)" : "");
      }
      out += line;
    }
  }
  if (!job.outliers.empty()) {
    std::snprintf(line, sizeof line, "\nOutliers (peak reserved %.0f%% or more from the typical rank %s):\n",
                  job.outlier_percent, rank_text(median).c_str());
    out += line;
    for (const RankOutlier& o : job.outliers) {
      const RankSummary& r = job.ranks[o.row];
      std::snprintf(line, sizeof line, "  rank %s reserves %.0f%% %s than the typical rank (%s against %s), with ",
                    rank_text(r).c_str(), std::fabs(o.percent), o.percent > 0 ? "more" : "less",
                    bytes(r.peak_reserved_bytes).c_str(), bytes(median.peak_reserved_bytes).c_str());
      out += line + o.why + (o.sites.empty() ? "\n" : "; live at its peak, against the typical rank's:\n");
      for (const SiteDifference& s : o.sites) {
        const int64_t d = s.difference();
        std::snprintf(line, sizeof line, "    %s%-10s %s\n", d > 0 ? "+" : "-", bytes(static_cast<uint64_t>(std::llabs(d))).c_str(),
                      s.site.c_str());
        out += line;
      }
    }
  }
  for (const std::string& note : job.notes) out += "\nnote: " + note + "\n";
  if (!job.skipped.empty()) {
    out += "\nNot read:\n";
    for (const SkippedFile& s : job.skipped) out += "  " + s.file + ": " + s.error + "\n";
  }
  return out;
}

}  // namespace memsnap
