#include "replay/snapshot_replay_report.h"

#include "allocator/counted.h"

#include <algorithm>
#include <cstdio>
#include <sstream>

namespace memsnap {
namespace {

double fragmentation(int64_t peak_reserved, int64_t peak_allocated) {
  return peak_allocated > 0 ? static_cast<double>(peak_reserved) / static_cast<double>(peak_allocated)
                            : 0.0;
}

std::string fixed3(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%.3f", value);
  return text;
}

std::string padded(const std::string& text, size_t width, bool right = true) {
  if (text.size() >= width) return text;
  const std::string pad(width - text.size(), ' ');
  return right ? pad + text : text + pad;
}

// A trace of requests with no segment in it or in the snapshot (what memsnap.estimate captures):
// there is no recorded reservation to compare with, and the replay's figures are the prediction.
bool records_requests_only(const DeviceReplay& d) {
  return d.allocs > 0 && d.start.empty() && d.recorded_segment_allocs.empty() && d.recorded_segment_frees == 0 &&
         d.final_segments_recorded == 0;
}

nlohmann::json device_json(const DeviceReplay& d) {
  const DeviceStats& s = d.stats;
  return {
      {"device", d.device},
      {"capacity_bytes", d.capacity_bytes},
      {"capacity_source", d.capacity_source},
      {"capacity_over_time", d.capacity_over_time},
      {"least_capacity_bytes", d.least_capacity_bytes},
      {"most_capacity_bytes", d.most_capacity_bytes},
      {"reconstructed",
       {{"segments", d.start.segments.size()},
        {"reserved_bytes", d.start.reserved_bytes},
        {"live_blocks", d.start.live_blocks},
        {"live_bytes", d.start.live_bytes},
        {"problems", d.start.problems}}},
      {"events", d.events},
      {"allocs", d.allocs},
      {"frees", d.frees},
      {"deferred_frees", d.deferred_frees},
      {"empty_cache_calls", d.empty_cache_calls},
      {"recorded_ooms", d.recorded_ooms},
      {"settings_changes", d.settings_changes},
      {"reproduced_ooms", d.reproduced_ooms},
      {"failed_allocs", d.failed_allocs},
      {"unknown_frees", d.unknown_frees},
      {"recorded_segment_allocs", d.recorded_segment_allocs.size()},
      {"replayed_segment_allocs", d.replayed_segment_allocs.size()},
      {"matched_segment_allocs", d.matched_segment_allocs},
      {"first_segment_mismatch", d.first_segment_mismatch},
      {"recorded_segment_alloc_sizes", d.recorded_segment_allocs},
      {"replayed_segment_alloc_sizes", d.replayed_segment_allocs},
      {"recorded_segment_frees", d.recorded_segment_frees},
      {"replayed_segment_frees", d.replayed_segment_frees},
      {"recorded_peak_reserved_bytes", d.recorded_peak_reserved},
      {"recorded_final_reserved_bytes", d.recorded_final_reserved},
      {"peak_reserved_bytes", s.reserved_bytes[kAggregate].peak},
      {"final_reserved_bytes", s.reserved_bytes[kAggregate].current},
      {"peak_allocated_bytes", s.allocated_bytes[kAggregate].peak},
      {"peak_requested_bytes", s.requested_bytes[kAggregate].peak},
      {"device_mallocs", s.num_device_alloc},
      {"device_frees", s.num_device_free},
      {"num_alloc_retries", s.num_alloc_retries},
      {"num_ooms", s.num_ooms},
      {"fragmentation",
       fragmentation(s.reserved_bytes[kAggregate].peak, s.allocated_bytes[kAggregate].peak)},
      {"final_segments_recorded", d.final_segments_recorded},
      {"records_requests_only", records_requests_only(d)},
      {"final_segments_matched", d.final_segments_matched},
      {"final_segments_replayed", d.final_segments_replayed},
      {"invariant_problems", d.invariant_problems},
  };
}

void row(std::ostringstream& out, const std::string& name, const std::string& recorded,
         const std::string& replayed, const std::string& note = "") {
  out << "  " << padded(name, 22, false) << padded(recorded, 14) << padded(replayed, 14);
  if (!note.empty()) out << "   " << note;
  out << "\n";
}

std::string bytes(uint64_t value) { return format_bytes(static_cast<int64_t>(value)); }

void device_text(std::ostringstream& out, const DeviceReplay& d) {
  const DeviceStats& s = d.stats;
  out << "device " << d.device << ": " << counted(d.events, "event") << " (" << counted(d.allocs, "alloc") << ", "
      << counted(d.frees, "free");
  if (d.deferred_frees) out << ", " << d.deferred_frees << " completed later on other streams";
  if (d.empty_cache_calls) out << ", " << d.empty_cache_calls << " empty_cache";
  out << "), simulated device of " << bytes(d.capacity_bytes) << " (" << d.capacity_source
      << ")\n";
  if (!d.capacity_over_time.empty())
    out << "  capacity over time: " << d.capacity_over_time << " (from " << bytes(d.least_capacity_bytes) << " to "
        << bytes(d.most_capacity_bytes) << ")\n";
  const bool requests_only = records_requests_only(d);
  if (requests_only) {
    out << "  the trace records requests only, no segments (as memsnap.estimate captures a step): the replayed\n"
           "  column is what the caching allocator would do with them; there is nothing recorded to compare\n";
  } else if (d.start.empty()) {
    out << "  start state: empty (every segment was allocated inside the trace)\n";
  } else {
    out << "  start state reconstructed: " << counted(d.start.segments.size(), "segment") << " ("
        << bytes(d.start.reserved_bytes) << " reserved) existed before the trace began, holding "
        << counted(d.start.live_blocks, "live block") << " (" << bytes(d.start.live_bytes) << ")\n";
  }
  for (const std::string& problem : d.start.problems) out << "  INCONSISTENT: " << problem << "\n";
  if (d.unknown_frees)
    out << "  INCONSISTENT: " << d.unknown_frees
        << " frees of blocks that were neither live at the start nor allocated in the trace\n";
  out << "\n";
  row(out, "", requests_only ? "" : "recorded", "replayed");
  const auto recorded = [&](const std::string& text) { return requests_only ? std::string("-") : text; };
  std::string match = std::to_string(d.matched_segment_allocs) + " match";
  if (d.first_segment_mismatch >= 0) {
    const auto i = static_cast<size_t>(d.first_segment_mismatch);
    match += "; first difference at #" + std::to_string(i + 1) + ": ";
    match += i < d.recorded_segment_allocs.size() ? bytes(d.recorded_segment_allocs[i]) : "none";
    match += " vs ";
    match += i < d.replayed_segment_allocs.size() ? bytes(d.replayed_segment_allocs[i]) : "none";
  } else {
    match += " (same sizes, same order)";
  }
  if (requests_only) match.clear();
  row(out, "segment allocations", recorded(std::to_string(d.recorded_segment_allocs.size())),
      std::to_string(d.replayed_segment_allocs.size()), match);
  row(out, "segment releases", recorded(std::to_string(d.recorded_segment_frees)),
      std::to_string(d.replayed_segment_frees));
  row(out, "peak reserved", recorded(bytes(d.recorded_peak_reserved)),
      format_bytes(s.reserved_bytes[kAggregate].peak));
  row(out, "final reserved", recorded(bytes(d.recorded_final_reserved)),
      format_bytes(s.reserved_bytes[kAggregate].current));
  row(out, "final segments", recorded(std::to_string(d.final_segments_recorded)),
      std::to_string(d.final_segments_replayed),
      requests_only ? "" : std::to_string(d.final_segments_matched) + " identical to the snapshot's, block for block");
  row(out, "out-of-memory errors", recorded(std::to_string(d.recorded_ooms)),
      std::to_string(d.reproduced_ooms + d.failed_allocs),
      d.failed_allocs ? std::to_string(d.failed_allocs) + " allocations that succeeded when recorded failed"
                      : "");
  row(out, "peak allocated", "", format_bytes(s.allocated_bytes[kAggregate].peak));
  row(out, "fragmentation", "",
      fixed3(fragmentation(s.reserved_bytes[kAggregate].peak, s.allocated_bytes[kAggregate].peak)),
      "peak reserved / peak allocated");
  row(out, "alloc retries", "", std::to_string(s.num_alloc_retries));
  if (!d.invariant_problems.empty()) {
    out << "\n  INVARIANT VIOLATIONS (please report):\n";
    for (const std::string& p : d.invariant_problems) out << "    " << p << "\n";
  }
}

std::string settings_name(const SnapshotReplay& replay) {
  return replay.config.empty() ? "default settings" : replay.config;
}

}  // namespace

nlohmann::json snapshot_replay_to_json(const SnapshotReplay& replay) {
  nlohmann::json devices = nlohmann::json::array();
  for (const DeviceReplay& d : replay.devices) devices.push_back(device_json(d));
  return {
      {"config", replay.config},
      {"recorded_settings", replay.recorded_settings},
      {"consistent", replay.consistent()},
      {"recorded_segment_allocs", replay.recorded_segment_allocs()},
      {"replayed_segment_allocs", replay.replayed_segment_allocs()},
      {"matched_segment_allocs", replay.matched_segment_allocs()},
      {"peak_reserved_bytes", replay.peak_reserved_bytes()},
      {"peak_allocated_bytes", replay.peak_allocated_bytes()},
      {"device_mallocs", replay.device_mallocs()},
      {"num_alloc_retries", replay.num_alloc_retries()},
      {"num_ooms", replay.num_ooms()},
      {"fragmentation", fragmentation(replay.peak_reserved_bytes(), replay.peak_allocated_bytes())},
      {"devices", devices},
  };
}

std::string snapshot_replay_to_text(const SnapshotReplay& replay, const std::string& source_name) {
  std::ostringstream out;
  out << "replay of " << source_name << " on the simulated device with "
      << settings_name(replay)
      << (replay.recorded_settings ? " (the recorded settings)" : " (not the recorded settings)")
      << "\n\n";
  for (const DeviceReplay& d : replay.devices) {
    device_text(out, d);
    out << "\n";
  }
  const bool requests_only = !replay.devices.empty() &&
                             std::all_of(replay.devices.begin(), replay.devices.end(), records_requests_only);
  if (requests_only) {
    out << "The trace records no segments, so nothing is compared: the replayed figures are what the "
           "caching allocator would reserve for these requests on this device.\n";
  } else if (replay.recorded_settings) {
    const bool exact = replay.matched_segment_allocs() == replay.recorded_segment_allocs() &&
                       replay.replayed_segment_allocs() == replay.recorded_segment_allocs();
    out << (exact ? "The replay reproduces every recorded segment allocation.\n"
                  : "The replay does NOT reproduce the recorded segment allocations; the first "
                    "difference is shown above.\n");
  }
  if (!replay.consistent())
    out << "The trace is inconsistent with the snapshot (events lost?); the replay is an "
           "approximation.\n";
  return out.str();
}

nlohmann::json replay_comparison_to_json(const std::vector<SnapshotReplay>& replays,
                                         const std::vector<std::string>& labels) {
  nlohmann::json out = nlohmann::json::array();
  for (size_t i = 0; i < replays.size(); ++i) {
    nlohmann::json one = snapshot_replay_to_json(replays[i]);
    one["label"] = labels[i];
    out.push_back(std::move(one));
  }
  return {{"configs", out}};
}

std::string replay_comparison_to_text(const std::vector<SnapshotReplay>& replays,
                                      const std::vector<std::string>& labels,
                                      const std::string& source_name) {
  std::ostringstream out;
  out << "replays of " << source_name << " on the simulated device\n\n";
  size_t width = 8;
  for (const std::string& label : labels) width = std::max(width, label.size() + 2);
  out << padded("settings", width, false) << padded("segments", 10) << padded("peak reserved", 15)
      << padded("peak alloc", 13) << padded("frag", 8) << padded("mallocs", 9)
      << padded("retries", 9) << padded("OOMs", 6) << "\n";
  for (size_t i = 0; i < replays.size(); ++i) {
    const SnapshotReplay& r = replays[i];
    out << padded(labels[i], width, false) << padded(std::to_string(r.replayed_segment_allocs()), 10)
        << padded(format_bytes(r.peak_reserved_bytes()), 15)
        << padded(format_bytes(r.peak_allocated_bytes()), 13)
        << padded(fixed3(fragmentation(r.peak_reserved_bytes(), r.peak_allocated_bytes())), 8)
        << padded(std::to_string(r.device_mallocs()), 9)
        << padded(std::to_string(r.num_alloc_retries()), 9)
        << padded(std::to_string(r.num_ooms()), 6) << "\n";
  }
  if (!replays.empty() && replays.front().recorded_settings) {
    const SnapshotReplay& recorded = replays.front();
    out << "\nrecorded run: " << recorded.recorded_segment_allocs() << " segment allocations; the "
        << "replay under the recorded settings matches " << recorded.matched_segment_allocs()
        << " of them.\n";
  }
  for (const SnapshotReplay& r : replays)
    if (!r.consistent()) {
      out << "The trace is inconsistent with the snapshot; every row is an approximation.\n";
      break;
    }
  return out.str();
}

}  // namespace memsnap
