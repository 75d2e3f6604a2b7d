#include "viewer/rank_summary.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <unordered_map>

#include "replay/recorded_config.h"
#include "viewer/frame_labels.h"
#include "viewer/memory_peaks.h"
#include "viewer/snapshot_stats.h"

namespace memsnap {
namespace {

// Live bytes by stack at event `peak` of `trace` (entries before it applied), starting from
// `start_active` bytes whose stacks the trace does not know.
std::unordered_map<StackIndex, uint64_t> live_by_stack_at(const DeviceTrace& trace, size_t peak,
                                                          int64_t start_active) {
  struct Live {
    uint64_t size;
    StackIndex stack;
  };
  std::unordered_map<uint64_t, Live> live;
  int64_t before_trace = start_active;
  for (size_t i = 0; i < peak && i < trace.size(); ++i) {
    const TraceEntry& e = trace[i];
    if (e.action == TraceAction::kAlloc) {
      live[e.address] = {e.size, e.stack};
    } else if (e.action == TraceAction::kFreeCompleted) {
      auto it = live.find(e.address);
      if (it != live.end())
        live.erase(it);
      else
        before_trace -= static_cast<int64_t>(e.size);
    }
  }
  std::unordered_map<StackIndex, uint64_t> by_stack;
  for (const auto& [address, block] : live) by_stack[block.stack] += block.size;
  if (before_trace > 0) by_stack[kNoStackIndex - 1] += static_cast<uint64_t>(before_trace);
  return by_stack;
}

std::vector<SiteBytes> top_sites(const Snapshot& snapshot, const std::unordered_map<StackIndex, uint64_t>& by_stack) {
  std::unordered_map<std::string, uint64_t> by_site;
  for (const auto& [stack, bytes] : by_stack) {
    const std::string site = stack == kNoStackIndex - 1 ? "<allocated before the trace began>"
                             : stack >= 0 && static_cast<size_t>(stack) >= snapshot.stacks.size()
                                 ? "<no stack recorded>"
                                 : call_site_label(snapshot, stack);
    by_site[site] += bytes;
  }
  std::vector<SiteBytes> sites;
  sites.reserve(by_site.size());
  for (auto& [site, bytes] : by_site) sites.push_back({site, bytes});
  std::sort(sites.begin(), sites.end(), [](const SiteBytes& a, const SiteBytes& b) {
    return a.bytes != b.bytes ? a.bytes > b.bytes : a.site < b.site;
  });
  if (sites.size() > RankSummary::kMaxSites) sites.resize(RankSummary::kMaxSites);
  return sites;
}

std::optional<int64_t> digits_at(std::string_view text, size_t at) {
  size_t end = at;
  while (end < text.size() && std::isdigit(static_cast<unsigned char>(text[end]))) ++end;
  if (end == at || end - at > 9) return std::nullopt;
  int64_t value = 0;
  std::from_chars(text.data() + at, text.data() + end, value);
  return value;
}

// The number after "rank" in a name, if any.
std::optional<int64_t> rank_word(std::string name) {
  std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::tolower(c); });
  for (size_t at = name.find("rank"); at != std::string::npos; at = name.find("rank", at + 1)) {
    size_t digits = at + 4;
    if (digits < name.size() && (name[digits] == '_' || name[digits] == '-' || name[digits] == '=' || name[digits] == '.'))
      ++digits;
    if (auto rank = digits_at(name, digits)) return rank;
  }
  return std::nullopt;
}

}  // namespace

RankSummary summarize_rank(const Snapshot& snapshot, std::string file) {
  RankSummary out;
  out.file = std::move(file);
  out.rank = snapshot.process.rank;
  if (out.rank) out.rank_from = "snapshot";
  out.host = snapshot.process.host;
  out.pid = snapshot.process.pid;
  out.world_size = snapshot.process.world_size;
  out.source = snapshot.source;
  out.taken_unix_us = snapshot.process.time_unix_us;
  if (const Result<AllocatorConfig> settings = recorded_allocator_config(snapshot)) out.settings = to_config_string(settings.value());

  const std::vector<int64_t> devices = devices_of(snapshot);
  out.devices = devices.size();
  MemoryTotals totals;
  for (const SnapshotSegment& segment : snapshot.segments) totals.add(segment);
  out.segments = totals.segments;
  out.reserved_bytes = totals.reserved_bytes;
  out.allocated_bytes = totals.allocated_bytes;
  out.fragmentation = totals.reserved_bytes
                          ? static_cast<double>(totals.inactive_split_bytes) / static_cast<double>(totals.reserved_bytes)
                          : 0.0;

  // Peaks: the statistics cover the process's whole life; the trace only its own window.
  const MemoryPeaks peaks = compute_peaks(snapshot);
  int64_t retries = 0, stat_ooms = 0;
  bool requested_known = !peaks.statistics.empty();
  for (const StatisticsPeaks& p : peaks.statistics) {
    out.peak_reserved_bytes += p.reserved_bytes;
    out.peak_allocated_bytes += p.allocated_bytes;
    requested_known = requested_known && p.requested_bytes.has_value();
    out.peak_requested_bytes += p.requested_bytes.value_or(0);
    const Statistics& statistics = snapshot.statistics[static_cast<size_t>(p.device)];
    retries += std::max<int64_t>(0, statistic(statistics, "num_alloc_retries").value_or(0));
    stat_ooms += std::max<int64_t>(0, statistic(statistics, "num_ooms").value_or(0));
  }
  uint64_t trace_reserved_peak = 0, trace_in_use_peak = 0;
  const size_t longest = static_cast<size_t>(busiest_device(snapshot));
  int64_t longest_start = 0;
  size_t longest_peak_at = 0;  // entries applied at the longest trace's peak
  for (const TracePeaks& p : peaks.traces) {
    trace_reserved_peak += p.reserved_bytes;
    trace_in_use_peak += p.in_use_bytes;
    if (static_cast<size_t>(p.device) != longest) continue;
    longest_start = static_cast<int64_t>(p.in_use_at_start);
    longest_peak_at = p.in_use_entry ? *p.in_use_entry + 1 : 0;
  }

  // One pass over each trace: its OOMs, and for the longest trace its memory in use over time.
  uint64_t trace_ooms = 0;
  for (size_t d = 0; d < snapshot.device_traces.size(); ++d) {
    const DeviceTrace& trace = snapshot.device_traces[d];
    out.trace_events += trace.size();
    int64_t active = longest_start;
    const bool draw = d == longest && !trace.empty();
    const size_t points = std::min(RankSummary::kTimelinePoints, trace.size());
    if (draw) out.active_timeline.assign(points, 0);
    for (size_t i = 0; i < trace.size(); ++i) {
      const TraceEntry& e = trace[i];
      if (draw) {
        active += in_use_change(e);
        uint64_t& point = out.active_timeline[i * points / trace.size()];
        point = std::max(point, static_cast<uint64_t>(std::max<int64_t>(0, active)));
      }
      if (e.action != TraceAction::kOom) continue;
      ++trace_ooms;
      RankOom oom;
      oom.device = static_cast<int64_t>(d);
      oom.event = i;
      oom.time_us = e.time_us;
      if (snapshot.source == "pytorch")
        oom.unix_time_us = e.time_us;  // PyTorch's trace times are Unix times
      else if (snapshot.process.clock_offset_us != 0)
        oom.unix_time_us = e.time_us + snapshot.process.clock_offset_us;
      oom.requested_bytes = e.size;
      if (e.address > 0) oom.device_free_bytes = e.address;
      const bool later = !out.last_oom || (oom.unix_time_us && out.last_oom->unix_time_us
                                               ? *oom.unix_time_us >= *out.last_oom->unix_time_us
                                               : oom.time_us >= out.last_oom->time_us);
      if (later) out.last_oom = oom;
    }
  }
  if (!peaks.statistics.empty()) {
    out.peaks_from_statistics = true;
    out.alloc_retries = retries;
    out.ooms = std::max<uint64_t>(static_cast<uint64_t>(stat_ooms), trace_ooms);
  } else {
    out.peak_reserved_bytes = std::max(trace_reserved_peak, out.reserved_bytes);
    out.peak_allocated_bytes = std::max(trace_in_use_peak, out.allocated_bytes);
    out.ooms = trace_ooms;
  }
  // The trace's in-use peak is in requested bytes (memory_peaks.h).
  if (!requested_known) out.peak_requested_bytes = trace_in_use_peak;

  // What was live at the longest trace's peak, by stack (without a trace: at the snapshot).
  std::unordered_map<StackIndex, uint64_t> at_peak;
  if (!out.active_timeline.empty()) {
    at_peak = live_by_stack_at(snapshot.device_traces[longest], longest_peak_at, longest_start);
  } else {
    for (const SnapshotSegment& segment : snapshot.segments)
      for (const SnapshotBlock& block : segment.blocks)
        if (block.state != BlockState::kInactive) at_peak[block.stack] += block.size;
  }
  out.sites_at_peak = top_sites(snapshot, at_peak);
  return out;
}

namespace {

// The path without trailing slashes, split at its last slash: (folder, name); no folder is "".
std::pair<std::string_view, std::string_view> split_path(std::string_view path) {
  while (!path.empty() && path.back() == '/') path.remove_suffix(1);
  const size_t slash = path.find_last_of('/');
  if (slash == std::string_view::npos) return {std::string_view(), path};
  std::string_view folder = path.substr(0, slash);
  const size_t folder_slash = folder.find_last_of('/');
  if (folder_slash != std::string_view::npos) folder.remove_prefix(folder_slash + 1);
  return {folder, path.substr(slash + 1)};
}

// "snapshot_3.pickle.gz": the extensions dropped (a dot followed by letters), the number after
// the last separator.
std::optional<int64_t> trailing_number(std::string name) {
  std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::tolower(c); });
  size_t end = name.size();
  while (true) {
    const size_t dot = name.rfind('.', end == 0 ? 0 : end - 1);
    if (dot == std::string::npos || dot == 0) break;
    const std::string_view extension(name.data() + dot + 1, end - dot - 1);
    if (extension.empty() || !std::all_of(extension.begin(), extension.end(), [](unsigned char c) { return std::isalpha(c); }))
      break;
    end = dot;
  }
  size_t start = end;
  while (start > 0 && std::isdigit(static_cast<unsigned char>(name[start - 1]))) --start;
  if (start == end || start == 0 || (name[start - 1] != '_' && name[start - 1] != '-')) return std::nullopt;
  return digits_at(std::string_view(name).substr(0, end), start);
}

}  // namespace

std::optional<int64_t> rank_named_in_path(std::string_view path) {
  const auto [folder, name] = split_path(path);
  if (auto rank = rank_word(std::string(name))) return rank;
  return rank_word(std::string(folder));
}

std::optional<int64_t> rank_from_file_name(std::string_view path) {
  const auto [folder, name] = split_path(path);
  if (auto rank = rank_word(std::string(name))) return rank;
  if (auto rank = trailing_number(std::string(name))) return rank;
  return rank_word(std::string(folder));
}

}  // namespace memsnap
