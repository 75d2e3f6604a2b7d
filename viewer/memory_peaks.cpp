#include "viewer/memory_peaks.h"

#include <algorithm>
#include <string_view>

namespace memsnap {

std::optional<int64_t> statistic(const Statistics& statistics, std::string_view key) {
  for (const auto& [name, value] : statistics)
    if (name == key) return value;
  return std::nullopt;
}

namespace {

std::optional<uint64_t> non_negative(std::optional<int64_t> value) {
  if (!value) return std::nullopt;
  return static_cast<uint64_t>(std::max<int64_t>(0, *value));
}

}  // namespace

int64_t in_use_change(const TraceEntry& e) {
  if (e.action == TraceAction::kAlloc) return static_cast<int64_t>(e.size);
  if (e.action == TraceAction::kFreeCompleted) return -static_cast<int64_t>(e.size);
  return 0;
}

int64_t reserved_change(const TraceEntry& e) {
  if (e.action == TraceAction::kSegmentAlloc || e.action == TraceAction::kSegmentMap) return static_cast<int64_t>(e.size);
  if (e.action == TraceAction::kSegmentFree || e.action == TraceAction::kSegmentUnmap) return -static_cast<int64_t>(e.size);
  return 0;
}

MemoryPeaks compute_peaks(const Snapshot& snapshot) {
  MemoryPeaks out;
  for (size_t d = 0; d < snapshot.statistics.size(); ++d) {
    const Statistics& statistics = snapshot.statistics[d];
    const auto reserved = non_negative(statistic(statistics, "reserved_bytes.all.peak"));
    const auto allocated = non_negative(statistic(statistics, "allocated_bytes.all.peak"));
    if (!reserved || !allocated) continue;
    StatisticsPeaks peaks;
    peaks.device = static_cast<int64_t>(d);
    peaks.reserved_bytes = *reserved;
    peaks.allocated_bytes = *allocated;
    peaks.active_bytes = non_negative(statistic(statistics, "active_bytes.all.peak"));
    peaks.requested_bytes = non_negative(statistic(statistics, "requested_bytes.all.peak"));
    out.statistics.push_back(peaks);
  }

  for (size_t d = 0; d < snapshot.device_traces.size(); ++d) {
    const DeviceTrace& trace = snapshot.device_traces[d];
    if (trace.empty()) continue;
    // The device's memory when the snapshot was taken, right after the trace's last entry.
    int64_t in_use = 0, reserved = 0;
    for (const SnapshotSegment& segment : snapshot.segments) {
      if (segment.device != static_cast<int64_t>(d)) continue;
      reserved += static_cast<int64_t>(segment.total_size);
      for (const SnapshotBlock& block : segment.blocks)
        if (block.state != BlockState::kInactive) in_use += static_cast<int64_t>(block.requested_size);
    }
    // Less the trace's net change: what was there before its first entry.
    for (const TraceEntry& e : trace) {
      in_use -= in_use_change(e);
      reserved -= reserved_change(e);
    }
    TracePeaks peaks;
    peaks.device = static_cast<int64_t>(d);
    peaks.entries = trace.size();
    peaks.in_use_at_start = static_cast<uint64_t>(std::max<int64_t>(0, in_use));
    peaks.reserved_at_start = static_cast<uint64_t>(std::max<int64_t>(0, reserved));
    peaks.in_use_bytes = peaks.in_use_at_start;
    peaks.reserved_bytes = peaks.reserved_at_start;
    for (size_t i = 0; i < trace.size(); ++i) {
      const TraceEntry& e = trace[i];
      in_use += in_use_change(e);
      reserved += reserved_change(e);
      if (in_use > 0 && static_cast<uint64_t>(in_use) > peaks.in_use_bytes) {
        peaks.in_use_bytes = static_cast<uint64_t>(in_use);
        peaks.in_use_entry = i;
      }
      if (reserved > 0 && static_cast<uint64_t>(reserved) > peaks.reserved_bytes) {
        peaks.reserved_bytes = static_cast<uint64_t>(reserved);
        peaks.reserved_entry = i;
      }
    }
    out.traces.push_back(peaks);
  }
  return out;
}

}  // namespace memsnap
