#include "snapshot/snapshot_builder.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <iterator>
#include <optional>
#include <string>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "allocator/device_stats.h"
#include "history/symbolizer.h"
#include "history/trace_labels.h"
#include "snapshot/recorded_stacks.h"

namespace memsnap {
namespace {

// Symbolizes each of the recorder's interned stacks once (recorded_stacks.h does the rest).
class StackTables {
 public:
  StackTables(Snapshot& snapshot, const HistoryRecorder* recorder)
      : symbolizer_(snapshot, recorder != nullptr ? recorder->interpreter_frames() : nullptr), recorder_(recorder) {}

  // Stack ids are per device (each device interns its own), and dense: the table's index.
  StackIndex index_of(int device, StackId id) {
    if (id == kNoStack || recorder_ == nullptr || device < 0) return kNoStackIndex;
    if (by_id_.size() <= static_cast<size_t>(device)) by_id_.resize(static_cast<size_t>(device) + 1);
    std::vector<StackIndex>& indices = by_id_[static_cast<size_t>(device)];
    if (indices.size() <= id) indices.resize(std::max<size_t>(size_t{id} + 1, indices.size() * 2), kUnseen);
    StackIndex& index = indices[id];
    if (index == kUnseen) index = symbolizer_.stack_of(recorder_->stack_frames(device, id));
    return index;
  }

 private:
  RecordedStackSymbolizer symbolizer_;
  const HistoryRecorder* recorder_;
  static constexpr StackIndex kUnseen = -2;
  std::vector<std::vector<StackIndex>> by_id_;  // by device, then the recorder's stack id
};

// Whether the trace already holds this error (history at level "all" records it before the
// observers run; other threads' events may have come after it).
bool has_recent_oom(const DeviceTrace& trace, const OomInfo& oom) {
  const size_t look = std::min<size_t>(trace.size(), 256);
  for (size_t i = trace.size() - look; i < trace.size(); ++i)
    if (trace[i].action == TraceAction::kOom && trace[i].size == oom.requested_bytes && trace[i].stream == oom.stream)
      return true;
  return false;
}

// Values as JSON texts, so every reader keeps their types (snapshot.h).
std::vector<std::pair<std::string, std::string>> settings_of(const AllocatorConfig& config) {
  const auto json = [](const auto& value) { return nlohmann::json(value).dump(); };
  return {
      {"config", json(config.source)},
      {"max_split_size", config.max_split_size == kNoMaxSplitSize ? "-1" : json(config.max_split_size)},
      {"max_non_split_rounding_size", json(config.max_non_split_rounding_size)},
      {"garbage_collection_threshold", json(config.garbage_collection_threshold)},
      {"roundup_power2_divisions", json(config.roundup_power2_divisions)},
      {"expandable_segments", json(config.expandable_segments)},
      {"release_lock_on_cudamalloc", json(config.release_lock_on_cudamalloc)},
      {"caching", json(config.caching)},
  };
}

SnapshotSegment segment_of(const SegmentRecord& record, const HistoryRecorder* recorder,
                           StackTables& stacks) {
  SnapshotSegment segment;
  segment.device = record.device;
  segment.address = record.address;
  segment.total_size = record.size;
  segment.stream = record.stream;
  segment.segment_type = record.small_pool ? "small" : "large";
  segment.is_expandable = record.expandable;
  segment.segment_pool_id = record.pool_id;
  // The segment's history in one call, handed out to its blocks: both are in address order,
  // and no entry straddles two blocks (a split comes with an allocation that replaces every
  // entry it overlaps; free neighbours always merge).
  std::vector<BlockHistoryEntry> history;
  if (recorder != nullptr) history = recorder->history_within(record.device, record.address, record.size);
  auto entry = history.begin();
  for (const BlockRecord& block_record : record.blocks) {
    SnapshotBlock& block = segment.blocks.emplace_back();
    block.address = block_record.address;
    block.size = block_record.size;
    block.requested_size = block_record.requested_size;
    block.state = block_record.state;
    if (block.state != BlockState::kInactive) {
      segment.active_size += block.size;
      segment.requested_size += block.requested_size;
    }
    if (block.state == BlockState::kActiveAllocated) segment.allocated_size += block.size;
    for (; entry != history.end() && entry->address < block.address + block.size; ++entry) {
      const StackIndex stack = stacks.index_of(record.device, entry->stack);
      block.history.push_back({entry->address, entry->requested_size, stack});
      // Entries never overlap, so the one at an active block's address is its allocation.
      if (entry->address == block.address && block.state != BlockState::kInactive)
        block.stack = stack;
    }
  }
  return segment;
}

// Adds to the settings changes where the events' labels (trace_labels.h) change: a user
// metadata or compile context change at each event whose text differs from the event before
// (at event 0 when set there), in event order.
std::vector<TraceStateChange> with_label_changes(std::vector<TraceStateChange> settings,
                                                 const std::vector<HistoryEvent>& events) {
  std::vector<TraceStateChange> labels;
  LabelId previous = kNoLabel;
  TraceLabel before;
  for (size_t i = 0; i < events.size(); ++i) {
    if (events[i].label == previous) continue;
    previous = events[i].label;
    TraceLabel label = trace_labels::resolve(previous);
    if (label.user_metadata != before.user_metadata)
      labels.push_back({i, TraceStateKind::kUserMetadata, label.user_metadata, {}});
    if (label.compile_context != before.compile_context)
      labels.push_back({i, TraceStateKind::kCompileContext, label.compile_context, {}});
    before = std::move(label);
  }
  if (labels.empty()) return settings;
  std::vector<TraceStateChange> merged;
  merged.reserve(settings.size() + labels.size());
  std::merge(std::make_move_iterator(settings.begin()), std::make_move_iterator(settings.end()),
             std::make_move_iterator(labels.begin()), std::make_move_iterator(labels.end()),
             std::back_inserter(merged), [](const TraceStateChange& a, const TraceStateChange& b) {
               return a.event_index < b.event_index;
             });
  return merged;
}

}  // namespace

Snapshot take_snapshot(CachingAllocator& allocator, HistoryRecorder* recorder,
                       const SnapshotOptions& options) {
  Snapshot snapshot;
  StackTables stacks(snapshot, recorder);
  snapshot.process = process_at_snapshot(options.job);
  snapshot.allocator_settings = settings_of(allocator.config());
  for (int d = 0; d < allocator.device_count(); ++d) {
    if (recorder != nullptr && options.mark_in_trace) recorder->record_snapshot_taken(d);
    for (const SegmentRecord& record : allocator.device(d).segment_records())
      snapshot.segments.push_back(segment_of(record, recorder, stacks));
    snapshot.statistics.push_back(to_memory_stats(allocator.device_stats(d)));
    const DeviceMemoryInfo memory = allocator.backend().memory_info(d);
    snapshot.devices.push_back({d, allocator.backend().device_name(d), memory.total_bytes, allocator.device(d).memory_cap()});
    DeviceMemorySample& sample = snapshot.device_memory.emplace_back();
    sample.device = d;
    sample.total_bytes = memory.total_bytes;
    sample.free_bytes = memory.free_bytes;
    for (const DeviceProcess& process : allocator.backend().device_processes(d))
      sample.processes.emplace_back(process.pid, process.bytes);
    if (const std::optional<DeviceMemoryFigures> before = allocator.device(d).figures_before_first_segment()) {
      DeviceMemorySample& first = snapshot.device_memory_before_first_segment.emplace_back();
      first.device = d;
      first.total_bytes = before->memory.total_bytes;
      first.free_bytes = std::min(before->memory.free_bytes, before->memory.total_bytes);
      first.time_us = before->time_us;
      for (const DeviceProcess& process : before->processes) first.processes.emplace_back(process.pid, process.bytes);
    }
    DeviceTrace& trace = snapshot.device_traces.emplace_back();
    if (recorder != nullptr && options.include_traces) {
      HistoryRecorder::TraceRead read = recorder->trace_read(d);
      trace.reserve(read.events.size() + 1);  // (and an out-of-memory entry)
      for (const HistoryEvent& event : read.events)
        trace.push_back({event.action, event.address, event.size, event.stream, event.time_us,
                         stacks.index_of(d, event.stack)});
      std::vector<TraceStateChange> changes = with_label_changes(std::move(read.changes), read.events);
      if (!changes.empty()) {
        snapshot.trace_state_changes.resize(static_cast<size_t>(d) + 1);
        snapshot.trace_state_changes[static_cast<size_t>(d)] = std::move(changes);
      }
    }
    if (options.oom && options.oom->device == d && !has_recent_oom(trace, *options.oom)) {
      trace.push_back({TraceAction::kOom, options.oom->device_free_bytes, options.oom->requested_bytes,
                       options.oom->stream, steady_time_us(), kNoStackIndex});
      // A trace of the error alone (history off, or not read): the cap it met is the one in
      // effect now, none included, as a recording states it from its start (recorded_caps.h).
      if (trace.size() == 1) {
        snapshot.trace_state_changes.resize(std::max(snapshot.trace_state_changes.size(), static_cast<size_t>(d) + 1));
        std::vector<TraceStateChange>& changes = snapshot.trace_state_changes[static_cast<size_t>(d)];
        std::erase_if(changes, [](const TraceStateChange& c) { return c.kind == TraceStateKind::kMemoryCap; });
        changes.insert(changes.begin(), {0, TraceStateKind::kMemoryCap, memory_cap_text(allocator.device(d).memory_cap()), ""});
      }
    }
  }
  if (recorder != nullptr) {
    for (const Annotation& annotation : recorder->annotations())
      snapshot.external_annotations.push_back(
          {annotation.device, annotation.start ? "START" : "END", annotation.name,
           annotation.time_us});
  }
  if (options.complete) options.complete(snapshot);
  return snapshot;
}

}  // namespace memsnap
