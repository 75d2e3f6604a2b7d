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

#include "allocator/device_stats.h"
#include "viewer/byte_text.h"

namespace memsnap {
namespace {

std::string base_name(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

using text::bytes;

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

std::string ranks_list(const std::vector<int64_t>& ranks) {
  std::string out;
  for (size_t i = 0; i < ranks.size() && i < 20; ++i) out += (i ? ", " : "") + std::to_string(ranks[i]);
  if (ranks.size() > 20) out += ", … (" + std::to_string(ranks.size()) + " in all)";
  return out;
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
  // An even count has two middle ranks, and either is a median; the typical one is the one
  // more ranks are within outlier_percent of (the lower on a tie). Taking one side blindly made
  // a rank 41% above its two alike peers "the median" of four, hiding it.
  const auto agreeing = [&](size_t candidate) {
    const double peak = static_cast<double>(job.ranks[candidate].peak_reserved_bytes);
    return static_cast<size_t>(std::count_if(by_peak.begin(), by_peak.end(), [&](size_t row) {
      const double other = static_cast<double>(job.ranks[row].peak_reserved_bytes);
      return peak > 0 ? std::fabs(other / peak - 1.0) * 100.0 < options.outlier_percent : other == peak;
    }));
  };
  const size_t lower_middle = (by_peak.size() - 1) / 2;
  size_t middle = lower_middle;
  if (by_peak.size() % 2 == 0 && agreeing(by_peak[lower_middle + 1]) > agreeing(by_peak[lower_middle]))
    middle = lower_middle + 1;
  job.median_row = by_peak[middle];
  const RankSummary& median = job.ranks[job.median_row];
  const double median_peak = static_cast<double>(median.peak_reserved_bytes);
  if (const size_t alike = agreeing(job.median_row); by_peak.size() > 2 && alike * 2 < by_peak.size())
    job.notes.push_back("only " + std::to_string(alike) + " of the " + std::to_string(by_peak.size()) +
                        " ranks peak within " + whole_percent(options.outlier_percent) +
                        " of the median rank's: the ranks share no typical peak, so an outlier says little");

  for (size_t row : by_peak) {
    if (median_peak <= 0) break;
    const double percent = (static_cast<double>(job.ranks[row].peak_reserved_bytes) / median_peak - 1.0) * 100.0;
    if (std::fabs(percent) < options.outlier_percent) continue;
    job.outliers.push_back({row, percent, site_differences(job.ranks[row], median, options.max_site_differences)});
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
                        {"file", job.ranks[o.row].file}, {"percent_vs_median", o.percent}, {"sites", std::move(sites)}});
  }
  nlohmann::json skipped = nlohmann::json::array();
  for (const SkippedFile& s : job.skipped) skipped.push_back({{"file", s.file}, {"error", s.error}});
  nlohmann::json oom_rows = nlohmann::json::array();
  for (size_t row : job.oom_rows) oom_rows.push_back(row);
  return {{"ranks", std::move(ranks)},       {"median_row", job.median_row},
          {"outlier_percent", job.outlier_percent}, {"outliers", std::move(outliers)},
          {"oom_rows", std::move(oom_rows)}, {"notes", job.notes},
          {"skipped", std::move(skipped)}};
}

std::string job_ranks_to_text(const JobRanks& job) {
  std::string out;
  char line[512];
  const RankSummary& median = job.ranks[job.median_row];
  std::snprintf(line, sizeof line, "%zu rank snapshot(s); median rank %s peaks at %s reserved, %s allocated\n\n",
                job.ranks.size(), rank_text(median).c_str(), bytes(median.peak_reserved_bytes).c_str(),
                bytes(median.peak_allocated_bytes).c_str());
  out += line;
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
    std::snprintf(line, sizeof line, "\nOutliers (peak reserved %.0f%% or more from the median rank %s):\n",
                  job.outlier_percent, rank_text(median).c_str());
    out += line;
    for (const RankOutlier& o : job.outliers) {
      const RankSummary& r = job.ranks[o.row];
      std::snprintf(line, sizeof line, "  rank %s reserves %.0f%% %s than the median rank (%s against %s)%s\n",
                    rank_text(r).c_str(), std::fabs(o.percent), o.percent > 0 ? "more" : "less",
                    bytes(r.peak_reserved_bytes).c_str(), bytes(median.peak_reserved_bytes).c_str(),
                    o.sites.empty() ? "" : "; live at its peak, against the median rank's:");
      out += line;
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
