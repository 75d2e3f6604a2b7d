#include "replay/snapshot_replay.h"

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "allocator/policy.h"
#include "replay/device_replay.h"
#include "replay/recorded_config.h"

namespace memsnap {

Result<SnapshotReplay> replay_snapshot(const Snapshot& snapshot,
                                       const SnapshotReplayOptions& options) {
  SnapshotReplay replay;
  replay.config = to_config_string(options.config);
  // The recorded run's rounding and split rules size the blocks live at the start.
  const Result<AllocatorConfig> recorded = recorded_allocator_config(snapshot);
  const AllocatorConfig start_rules = recorded ? recorded.value() : AllocatorConfig{};
  replay.recorded_settings = recorded && recorded.value() == options.config;
  try {
    for (size_t d = 0; d < snapshot.device_traces.size(); ++d) {
      if (snapshot.device_traces[d].empty()) continue;
      replay.devices.push_back(
          replay_device(snapshot, static_cast<int>(d), options, start_rules));
    }
  } catch (const std::invalid_argument& error) {  // settings the allocator cannot honour
    return Result<SnapshotReplay>::failure(std::string("replay: ") + error.what());
  }
  if (replay.devices.empty())
    return Result<SnapshotReplay>::failure(
        "replay: the snapshot has no trace to replay (record history at level 'all')");
  return replay;
}

namespace {

template <typename Value>
int64_t total(const std::vector<DeviceReplay>& devices, Value value) {
  int64_t n = 0;
  for (const DeviceReplay& d : devices) n += static_cast<int64_t>(value(d));
  return n;
}

template <typename Value>
int64_t largest(const std::vector<DeviceReplay>& devices, Value value) {
  int64_t n = 0;
  for (const DeviceReplay& d : devices) n = std::max(n, static_cast<int64_t>(value(d)));
  return n;
}

}  // namespace

size_t SnapshotReplay::recorded_segment_allocs() const {
  return static_cast<size_t>(total(devices, [](const DeviceReplay& d) { return d.recorded_segment_allocs.size(); }));
}
size_t SnapshotReplay::replayed_segment_allocs() const {
  return static_cast<size_t>(total(devices, [](const DeviceReplay& d) { return d.replayed_segment_allocs.size(); }));
}
size_t SnapshotReplay::matched_segment_allocs() const {
  return static_cast<size_t>(total(devices, [](const DeviceReplay& d) { return d.matched_segment_allocs; }));
}
int64_t SnapshotReplay::peak_reserved_bytes() const {
  return largest(devices, [](const DeviceReplay& d) { return d.stats.reserved_bytes[kAggregate].peak; });
}
int64_t SnapshotReplay::peak_allocated_bytes() const {
  return largest(devices, [](const DeviceReplay& d) { return d.stats.allocated_bytes[kAggregate].peak; });
}
int64_t SnapshotReplay::device_mallocs() const {
  return total(devices, [](const DeviceReplay& d) { return d.stats.num_device_alloc; });
}
int64_t SnapshotReplay::num_alloc_retries() const {
  return total(devices, [](const DeviceReplay& d) { return d.stats.num_alloc_retries; });
}
int64_t SnapshotReplay::num_ooms() const {
  return total(devices, [](const DeviceReplay& d) { return d.stats.num_ooms; });
}
bool SnapshotReplay::consistent() const {
  for (const DeviceReplay& d : devices)
    if (!d.start.problems.empty() || d.unknown_frees > 0) return false;
  return true;
}

Result<StateAfterEntry> state_after_entry(const Snapshot& snapshot, int64_t device, uint64_t entry) {
  if (device < 0 || static_cast<size_t>(device) >= snapshot.device_traces.size() ||
      snapshot.device_traces[static_cast<size_t>(device)].empty())
    return Result<StateAfterEntry>::failure("no trace for device " + std::to_string(device) +
                                            " (record history at level 'all')");
  const DeviceTrace& trace = snapshot.device_traces[static_cast<size_t>(device)];
  if (entry >= trace.size())
    return Result<StateAfterEntry>::failure("event " + std::to_string(entry) + " is past the end of device " +
                                            std::to_string(device) + "'s trace (" +
                                            std::to_string(trace.size()) + " entries)");
  const Result<AllocatorConfig> recorded = recorded_allocator_config(snapshot);
  const AllocatorConfig rules = recorded ? recorded.value() : AllocatorConfig{};
  SnapshotReplayOptions options;
  options.config = rules;
  options.check_invariants = false;
  options.stop_after_entry = static_cast<size_t>(entry);
  StateAfterEntry state;
  state.device = device;
  state.entry = entry;
  try {
    DeviceReplay replay = replay_device(snapshot, static_cast<int>(device), options, rules);
    state.segments = std::move(replay.state_segments);
    state.problems = replay.start.problems;
    if (replay.unknown_frees > 0)
      state.problems.push_back(std::to_string(replay.unknown_frees) +
                               " frees of blocks the trace never allocated: it lost events");
    // Exact while the replay's segment allocations are the recording's, in order and size. A
    // recording without caching (memsnap record) reserved each request's own bytes, which the
    // replay's caching-off allocator rounds up to a block size: the same segments, given back
    // their recorded sizes.
    const bool uncached = !rules.caching;
    size_t recorded_so_far = 0;
    for (size_t i = 0; i <= entry; ++i)
      recorded_so_far += is_segment_growth(trace[i].action) ? 1 : 0;
    const auto& replayed = replay.replayed_segment_allocs;
    state.exact = state.problems.empty() && replay.failed_allocs == 0 && replayed.size() == recorded_so_far;
    for (size_t i = 0; state.exact && i < replayed.size(); ++i) {
      const uint64_t recorded_size = replay.recorded_segment_allocs[i];
      state.exact = replayed[i] == recorded_size || (uncached && replayed[i] == round_size(recorded_size, rules));
    }
    if (uncached) {
      for (SnapshotSegment& segment : state.segments) {
        if (segment.blocks.size() != 1 || segment.blocks[0].state != BlockState::kActiveAllocated) continue;
        SnapshotBlock& block = segment.blocks[0];
        block.size = block.requested_size;
        segment.total_size = segment.allocated_size = segment.active_size = block.size;
      }
    }
  } catch (const std::invalid_argument& error) {
    return Result<StateAfterEntry>::failure(std::string("replay: ") + error.what());
  }
  for (const SnapshotSegment& s : state.segments) {
    state.reserved_bytes += s.total_size;
    state.allocated_bytes += s.allocated_size;
    state.active_bytes += s.active_size;
  }
  return state;
}

}  // namespace memsnap
