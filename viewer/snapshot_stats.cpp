#include "viewer/snapshot_stats.h"

#include "viewer/device_memory_account.h"

#include "allocator/counted.h"
#include "replay/recorded_config.h"
#include "snapshot/json_writer.h"

#include <algorithm>
#include <array>
#include <cinttypes>
#include <cstdio>

#include "allocator/device_stats.h"
#include "viewer/byte_text.h"

namespace memsnap {
namespace {

constexpr std::array<BlockState, 3> kStates = {BlockState::kActiveAllocated,
                                               BlockState::kActivePendingFree, BlockState::kInactive};

nlohmann::json totals_json(const MemoryTotals& t) {
  nlohmann::json state_bytes = nlohmann::json::object();
  nlohmann::json state_blocks = nlohmann::json::object();
  for (BlockState state : kStates) {
    state_bytes[std::string(block_state_name(state))] = t.state_bytes[static_cast<size_t>(state)];
    state_blocks[std::string(block_state_name(state))] = t.state_blocks[static_cast<size_t>(state)];
  }
  return {{"segments", t.segments},
          {"blocks", t.blocks},
          {"reserved_bytes", t.reserved_bytes},
          {"allocated_bytes", t.allocated_bytes},
          {"active_bytes", t.active_bytes},
          {"requested_bytes", t.requested_bytes},
          {"state_bytes", state_bytes},
          {"state_blocks", state_blocks},
          {"pools",
           {{"small", {{"segments", t.small_pool_segments}, {"blocks", t.small_pool_blocks}}},
            {"large", {{"segments", t.large_pool_segments}, {"blocks", t.large_pool_blocks}}}}},
          {"inactive_split_bytes", t.inactive_split_bytes},
          {"largest_free_block", t.largest_free_block}};
}

using text::bytes;

nlohmann::json optional_json(const std::optional<uint64_t>& value) {
  return value ? nlohmann::json(*value) : nlohmann::json(nullptr);
}

nlohmann::json peaks_json(const MemoryPeaks& peaks) {
  nlohmann::json statistics = nlohmann::json::array();
  for (const StatisticsPeaks& p : peaks.statistics)
    statistics.push_back({{"device", p.device},
                          {"reserved_bytes", p.reserved_bytes},
                          {"allocated_bytes", p.allocated_bytes},
                          {"active_bytes", optional_json(p.active_bytes)},
                          {"requested_bytes", optional_json(p.requested_bytes)}});
  nlohmann::json traces = nlohmann::json::array();
  for (const TracePeaks& p : peaks.traces)
    traces.push_back({{"device", p.device},
                      {"entries", p.entries},
                      {"in_use_at_start", p.in_use_at_start},
                      {"reserved_at_start", p.reserved_at_start},
                      {"in_use_bytes", p.in_use_bytes},
                      {"in_use_entry", optional_json(p.in_use_entry)},
                      {"reserved_bytes", p.reserved_bytes},
                      {"reserved_entry", optional_json(p.reserved_entry)}});
  return {{"statistics", std::move(statistics)}, {"traces", std::move(traces)}};
}

// "after entry #12" or "at the trace's start".
std::string at_entry(const std::optional<uint64_t>& entry) {
  return entry ? "after entry #" + std::to_string(*entry) : "from the trace's start";
}

std::string peaks_text(const MemoryPeaks& peaks, bool pytorch) {
  std::string out;
  if (!peaks.statistics.empty()) {
    out += "peaks (allocator statistics: since the process started or reset_peak_memory_stats()):\n";
    for (const StatisticsPeaks& p : peaks.statistics) {
      out += "  device " + std::to_string(p.device) + ": reserved " + bytes(p.reserved_bytes) + ", allocated " +
             bytes(p.allocated_bytes) + " (block bytes, as max_memory_allocated)";
      if (p.requested_bytes) out += ", requested " + bytes(*p.requested_bytes) + " (what the program asked for)";
      out += "\n";
    }
  }
  if (!peaks.traces.empty()) {
    out += "peaks during the trace (in use: requested bytes not yet freed, as the Timeline draws them):\n";
    for (const TracePeaks& p : peaks.traces) {
      out += "  device " + std::to_string(p.device) + ", " + counted(p.entries, "entry", "entries") + ": in use " +
             bytes(p.in_use_bytes) + " " + at_entry(p.in_use_entry) + ", reserved " + bytes(p.reserved_bytes) + " " +
             at_entry(p.reserved_entry) + "\n";
      if (p.in_use_at_start > 0 || p.reserved_at_start > 0)
        out += "    live before its first entry (counted in): " + bytes(p.in_use_at_start) + " in use, " +
               bytes(p.reserved_at_start) + " reserved\n";
    }
    if (peaks.statistics.empty())
      out += pytorch ? "  (a trace sees only its own window: the process's peaks are torch.cuda.max_memory_allocated() and "
                       "max_memory_reserved(), which PyTorch's snapshots do not hold)\n"
                     : "  (a trace sees only its own window; this snapshot holds no allocator statistics)\n";
  }
  if (out.empty()) out = "peaks: unknown (the snapshot holds neither allocator statistics nor a trace)\n";
  return out;
}

}  // namespace

void MemoryTotals::add(const SnapshotSegment& segment) {
  ++segments;
  blocks += segment.blocks.size();
  reserved_bytes += segment.total_size;
  allocated_bytes += segment.allocated_size;
  active_bytes += segment.active_size;
  requested_bytes += segment.requested_size;
  const bool small = segment.segment_type == "small";
  (small ? small_pool_segments : large_pool_segments) += 1;
  (small ? small_pool_blocks : large_pool_blocks) += segment.blocks.size();
  bool has_live_block = false;
  uint64_t free_bytes = 0;
  for (const SnapshotBlock& block : segment.blocks) {
    const auto state = static_cast<size_t>(block.state);
    state_bytes[state] += block.size;
    state_blocks[state] += 1;
    if (block.state == BlockState::kInactive) {
      free_bytes += block.size;
      largest_free_block = std::max(largest_free_block, block.size);
    } else {
      has_live_block = true;
    }
  }
  if (has_live_block) inactive_split_bytes += free_bytes;
}

SnapshotStats compute_stats(const Snapshot& snapshot) {
  SnapshotStats stats;
  std::map<std::pair<int64_t, uint64_t>, MemoryTotals> by_stream;
  std::map<std::pair<int64_t, MempoolId>, MemoryTotals> by_pool;
  for (const SnapshotSegment& segment : snapshot.segments) {
    stats.totals.add(segment);
    by_stream[{segment.device, segment.stream}].add(segment);
    by_pool[{segment.device, segment.segment_pool_id}].add(segment);
  }
  for (auto& [key, totals] : by_stream) stats.by_stream.push_back({key.first, key.second, totals});
  for (auto& [key, totals] : by_pool) stats.by_pool.push_back({key.first, key.second, totals});
  for (const auto& trace : snapshot.device_traces) {
    stats.trace_entries += trace.size();
    stats.trace_entries_by_device.push_back(trace.size());
    // Counted by action first: a name per entry would cost a string and a map lookup each.
    std::array<uint64_t, kTraceActionCount> counts{};
    for (const TraceEntry& entry : trace)
      if (static_cast<size_t>(entry.action) < counts.size()) ++counts[static_cast<size_t>(entry.action)];
    for (size_t a = 0; a < counts.size(); ++a)
      if (counts[a] > 0) stats.trace_actions[std::string(trace_action_name(static_cast<TraceAction>(a)))] += counts[a];
  }
  int64_t devices = static_cast<int64_t>(std::max(snapshot.devices.size(), snapshot.device_traces.size()));
  for (const SnapshotSegment& segment : snapshot.segments) devices = std::max(devices, segment.device + 1);
  stats.devices = static_cast<uint64_t>(devices);
  stats.peaks = compute_peaks(snapshot);
  stats.stacks = snapshot.stacks.size();
  stats.frames = snapshot.frames.size();
  stats.annotations = snapshot.external_annotations.size();
  return stats;
}

// The settings the run used, as a config string a user could set again.
std::string settings_line(const Snapshot& snapshot) {
  if (snapshot.allocator_settings.empty()) return "allocator settings: not recorded";
  const Result<AllocatorConfig> config = recorded_allocator_config(snapshot);
  if (!config) return "allocator settings: " + config.error();
  const std::string text = to_config_string(config.value());
  return "allocator settings: " + (text.empty() ? std::string("PyTorch's defaults") : text) +
         (config->caching ? "" : "; caching off (MEMSNAP_NO_CACHING, or memsnap record): every request a device allocation of its own");
}

nlohmann::json stats_to_json(const SnapshotStats& stats, const Snapshot& snapshot) {
  nlohmann::json out = totals_json(stats.totals);
  out["source"] = snapshot.source;
  out["devices"] = stats.devices;
  out["trace_entries"] = stats.trace_entries;
  out["trace_actions"] = stats.trace_actions;
  out["trace_entries_by_device"] = stats.trace_entries_by_device;
  out["peaks"] = peaks_json(stats.peaks);
  out["stacks"] = stats.stacks;
  out["frames"] = stats.frames;
  out["annotations"] = stats.annotations;
  nlohmann::json streams = nlohmann::json::array();
  for (const StreamTotals& s : stats.by_stream) {
    nlohmann::json row = totals_json(s.totals);
    row["device"] = s.device;
    row["stream"] = s.stream;
    streams.push_back(std::move(row));
  }
  out["by_stream"] = std::move(streams);
  nlohmann::json pools = nlohmann::json::array();
  for (const PoolTotals& p : stats.by_pool) {
    nlohmann::json row = totals_json(p.totals);
    row["device"] = p.device;
    row["pool"] = {p.pool.first, p.pool.second};
    row["name"] = pool_display_name(p.pool);
    pools.push_back(std::move(row));
  }
  out["by_pool"] = std::move(pools);
  nlohmann::json settings = nlohmann::json::object();
  for (const auto& [key, value] : snapshot.allocator_settings) settings[key] = setting_value_json(value);
  out["allocator_settings"] = std::move(settings);
  const Result<AllocatorConfig> config = recorded_allocator_config(snapshot);
  out["allocator_config"] = config ? nlohmann::json(to_config_string(config.value())) : nlohmann::json(nullptr);
  out["device_memory"] = device_memory_json(account_device_memory(snapshot));
  out["outside_memory"] = outside_memory_json(account_outside_memory(snapshot));
  return out;
}

std::string stats_to_text(const SnapshotStats& stats, const Snapshot& snapshot) {
  std::string out;
  char line[256];
  const MemoryTotals& t = stats.totals;
  out += snapshot.source + " snapshot: " + counted(stats.devices, "device") + ", " +
         counted(t.segments, "segment") + ", " + counted(t.blocks, "block") + ", " +
         counted(stats.trace_entries, "trace entry", "trace entries") + "\n";
  out += settings_line(snapshot) + "\n\n";
  out += peaks_text(stats.peaks, snapshot.source == "pytorch") + "\n";
  out += "device  stream              segments  blocks    reserved   allocated      active   requested  inactive split  largest free\n";
  auto row = [&](const std::string& device, const std::string& stream, const MemoryTotals& m) {
    std::snprintf(line, sizeof line, "%-7s %-18s %9" PRIu64 " %7" PRIu64 " %11s %11s %11s %11s %15s %13s\n",
                  device.c_str(), stream.c_str(), m.segments, m.blocks, bytes(m.reserved_bytes).c_str(),
                  bytes(m.allocated_bytes).c_str(), bytes(m.active_bytes).c_str(),
                  bytes(m.requested_bytes).c_str(), bytes(m.inactive_split_bytes).c_str(),
                  bytes(m.largest_free_block).c_str());
    out += line;
  };
  for (const StreamTotals& s : stats.by_stream) {
    char stream[32];
    std::snprintf(stream, sizeof stream, "0x%" PRIx64, s.stream);
    row(std::to_string(s.device), stream, s.totals);
  }
  row("all", "", t);
  out += "\nby block state:\n";
  for (BlockState state : kStates) {
    std::snprintf(line, sizeof line, "  %-20s %11s in %s\n",
                  std::string(block_state_name(state)).c_str(),
                  bytes(t.state_bytes[static_cast<size_t>(state)]).c_str(),
                  counted(t.state_blocks[static_cast<size_t>(state)], "block").c_str());
    out += line;
  }
  const bool private_pools = std::any_of(stats.by_pool.begin(), stats.by_pool.end(),
                                         [](const PoolTotals& p) { return !p.pool.is_global(); });
  if (private_pools) {
    out += "\nby memory pool (free memory of a private pool serves only its own graphs or scope):\n";
    std::snprintf(line, sizeof line, "  %-7s %-26s %9s %11s %11s %11s %13s\n", "device", "pool",
                  "segments", "reserved", "allocated", "active", "free cached");
    out += line;
    for (const PoolTotals& p : stats.by_pool) {
      const MemoryTotals& m = p.totals;
      std::snprintf(line, sizeof line, "  %-7s %-26s %9" PRIu64 " %11s %11s %11s %13s\n",
                    std::to_string(p.device).c_str(), pool_display_name(p.pool).c_str(), m.segments,
                    bytes(m.reserved_bytes).c_str(), bytes(m.allocated_bytes).c_str(),
                    bytes(m.active_bytes).c_str(),
                    bytes(m.reserved_bytes - std::min(m.reserved_bytes, m.active_bytes)).c_str());
      out += line;
    }
  }
  out += "\nby pool:\n  small  " + counted(t.small_pool_segments, "segment") + ", " +
         counted(t.small_pool_blocks, "block") + "\n  large  " + counted(t.large_pool_segments, "segment") +
         ", " + counted(t.large_pool_blocks, "block") + "\n";
  const uint64_t free_bytes = t.reserved_bytes - std::min(t.reserved_bytes, t.active_bytes);
  std::snprintf(line, sizeof line,
                "\nfragmentation: %s reserved but free, %s of it in split segments (unusable for "
                "large requests); largest free block %s; allocation rounding %s\n",
                bytes(free_bytes).c_str(), bytes(t.inactive_split_bytes).c_str(),
                bytes(t.largest_free_block).c_str(),
                bytes(t.allocated_bytes - std::min(t.allocated_bytes, t.requested_bytes)).c_str());
  out += line;
  const std::vector<DeviceMemoryAccount> devices = account_device_memory(snapshot);
  out += device_memory_text(devices);
  out += outside_memory_text(account_outside_memory(snapshot), devices);
  if (stats.trace_entries > 0) {
    out += "\ntrace:";
    for (const auto& [action, count] : stats.trace_actions) out += " " + action + " " + std::to_string(count) + ",";
    out.back() = '\n';
  }
  return out;
}

}  // namespace memsnap
