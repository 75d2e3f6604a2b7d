#include "snapshot/msgpack_writer.h"

#include <msgpack.hpp>

namespace memsnap {
namespace {

using Packer = msgpack::packer<SinkBuffer>;

void pack_string(Packer& out, const std::string& text) {
  out.pack_str(static_cast<uint32_t>(text.size()));
  out.pack_str_body(text.data(), static_cast<uint32_t>(text.size()));
}

template <typename T>
void pack_array_header(Packer& out, const T& items) {
  out.pack_array(static_cast<uint32_t>(items.size()));
}

void pack_process(Packer& out, const ProcessInfo& process) {
  out.pack_map(7);
  pack_string(out, "host");
  pack_string(out, process.host);
  pack_string(out, "pid");
  out.pack_int64(process.pid);
  for (const auto& [key, value] : {std::pair{"rank", process.rank}, std::pair{"local_rank", process.local_rank},
                                   std::pair{"world_size", process.world_size}}) {
    pack_string(out, key);
    if (value)
      out.pack_int64(*value);
    else
      out.pack_nil();
  }
  pack_string(out, "time_unix_us");
  out.pack_int64(process.time_unix_us);
  pack_string(out, "clock_offset_us");
  out.pack_int64(process.clock_offset_us);
}

void pack_segment(Packer& out, const SnapshotSegment& segment) {
  out.pack_array(12);
  out.pack_int64(segment.device);
  out.pack_uint64(segment.address);
  out.pack_uint64(segment.total_size);
  out.pack_uint64(segment.allocated_size);
  out.pack_uint64(segment.active_size);
  out.pack_uint64(segment.requested_size);
  out.pack_uint64(segment.stream);
  pack_string(out, segment.segment_type);
  out.pack_array(2);
  out.pack_uint64(segment.segment_pool_id.first);
  out.pack_uint64(segment.segment_pool_id.second);
  if (segment.is_expandable)
    out.pack_true();
  else
    out.pack_false();
  out.pack_int64(segment.stack);
  pack_array_header(out, segment.blocks);
  for (const SnapshotBlock& block : segment.blocks) {
    out.pack_array(6);
    out.pack_uint64(block.address);
    out.pack_uint64(block.size);
    out.pack_uint64(block.requested_size);
    out.pack_uint8(static_cast<uint8_t>(block.state));
    out.pack_int64(block.stack);
    pack_array_header(out, block.history);
    for (const HistoryItem& item : block.history) {
      out.pack_array(3);
      out.pack_uint64(item.address);
      out.pack_uint64(item.size);
      out.pack_int64(item.stack);
    }
  }
}

// Addresses and times are written as differences from the previous entry's: consecutive
// entries are close in both, so most deltas take 1 to 5 bytes instead of 9.
void pack_trace(Packer& out, const DeviceTrace& trace) {
  pack_array_header(out, trace);
  uint64_t previous_address = 0;
  int64_t previous_time = 0;
  for (const TraceEntry& entry : trace) {
    out.pack_array(6);
    out.pack_uint8(static_cast<uint8_t>(entry.action));
    out.pack_int64(static_cast<int64_t>(entry.address - previous_address));
    out.pack_uint64(entry.size);
    out.pack_uint64(entry.stream);
    out.pack_int64(entry.time_us - previous_time);
    out.pack_int64(entry.stack);
    previous_address = entry.address;
    previous_time = entry.time_us;
  }
}

// [event_index, kind, value, request] per change, by device.
void pack_trace_state_changes(Packer& out, const std::vector<std::vector<TraceStateChange>>& by_device) {
  pack_array_header(out, by_device);
  for (const auto& changes : by_device) {
    pack_array_header(out, changes);
    for (const TraceStateChange& change : changes) {
      out.pack_array(4);
      out.pack_uint64(change.event_index);
      pack_string(out, std::string(trace_state_kind_name(change.kind)));
      pack_string(out, change.value);
      pack_string(out, change.request);
    }
  }
}

// The fields of an allocation outside the allocator, after those the caller packed.
void pack_outside_fields(Packer& out, const OutsideAllocation& a) {
  out.pack_int64(a.device);
  out.pack_uint64(a.address);
  out.pack_uint64(a.size);
  pack_string(out, std::string(outside_kind_name(a.kind)));
  pack_string(out, a.api);
  pack_string(out, a.library);
  out.pack_int64(a.stack);
  out.pack_int64(a.time_us);
}

void pack_outside_memory(Packer& out, const OutsideMemory& outside) {
  out.pack_map(outside.recorded_since_us ? 5 : 4);
  pack_string(out, "unrecorded_reason");
  pack_string(out, outside.unrecorded_reason);
  pack_string(out, "live");
  pack_array_header(out, outside.live);
  for (const OutsideAllocation& allocation : outside.live) {
    out.pack_array(8);
    pack_outside_fields(out, allocation);
  }
  pack_string(out, "events");
  pack_array_header(out, outside.events);
  for (const OutsideEvent& event : outside.events) {
    out.pack_array(9);
    pack_string(out, std::string(outside_action_name(event.action)));
    pack_outside_fields(out, event.allocation);
  }
  pack_string(out, "dropped_events");
  out.pack_uint64(outside.dropped_events);
  if (outside.recorded_since_us) {
    pack_string(out, "recorded_since_us");
    out.pack_int64(*outside.recorded_since_us);
  }
}

// Each sample, with the time it was taken (`timed`) or not.
void pack_device_memory(Packer& out, const std::vector<DeviceMemorySample>& samples, bool timed) {
  pack_array_header(out, samples);
  for (const DeviceMemorySample& sample : samples) {
    out.pack_array(timed ? 5 : 4);
    out.pack_int64(sample.device);
    out.pack_uint64(sample.total_bytes);
    out.pack_uint64(sample.free_bytes);
    pack_array_header(out, sample.processes);
    for (const auto& [pid, bytes] : sample.processes) {
      out.pack_array(2);
      out.pack_int64(pid);
      out.pack_uint64(bytes);
    }
    if (timed) out.pack_int64(sample.time_us);
  }
}

}  // namespace

void write_msgpack(const Snapshot& snapshot, const ByteSink& sink) {
  SinkBuffer buffer(sink);
  Packer out(buffer);
  const bool has_state_changes = !snapshot.trace_state_changes.empty();
  const bool has_device_memory = !snapshot.device_memory.empty();
  const bool has_first_segment = !snapshot.device_memory_before_first_segment.empty();
  const bool has_outside_memory = snapshot.outside_memory.has_value();
  out.pack_map(12 + (has_state_changes ? 1 : 0) + (has_device_memory ? 1 : 0) + (has_first_segment ? 1 : 0) +
               (has_outside_memory ? 1 : 0));
  pack_string(out, "format");
  pack_string(out, "memsnap-snapshot");
  pack_string(out, "version");
  out.pack_uint32(kSnapshotFormatVersion);
  pack_string(out, "source");
  pack_string(out, snapshot.source);
  pack_string(out, "process");
  pack_process(out, snapshot.process);

  pack_string(out, "devices");
  pack_array_header(out, snapshot.devices);
  for (const DeviceInfo& device : snapshot.devices) {
    out.pack_array(device.memory_cap ? 4 : 3);
    out.pack_int64(device.index);
    pack_string(out, device.name);
    out.pack_uint64(device.total_memory);
    if (device.memory_cap) pack_string(out, memory_cap_text(device.memory_cap));
  }

  pack_string(out, "allocator_settings");
  out.pack_map(static_cast<uint32_t>(snapshot.allocator_settings.size()));
  for (const auto& [key, value] : snapshot.allocator_settings) {
    pack_string(out, key);
    pack_string(out, value);
  }

  pack_string(out, "frames");
  pack_array_header(out, snapshot.frames);
  for (const Frame& frame : snapshot.frames) {
    out.pack_array(3);
    pack_string(out, frame.function);
    pack_string(out, frame.file);
    out.pack_int64(frame.line);
  }

  pack_string(out, "stacks");
  pack_array_header(out, snapshot.stacks);
  for (const auto& stack : snapshot.stacks) {
    pack_array_header(out, stack);
    for (uint32_t frame : stack) out.pack_uint32(frame);
  }

  pack_string(out, "segments");
  pack_array_header(out, snapshot.segments);
  for (const SnapshotSegment& segment : snapshot.segments) pack_segment(out, segment);

  pack_string(out, "device_traces");
  pack_array_header(out, snapshot.device_traces);
  for (const auto& trace : snapshot.device_traces) pack_trace(out, trace);

  if (has_state_changes) {
    pack_string(out, "trace_state_changes");
    pack_trace_state_changes(out, snapshot.trace_state_changes);
  }

  if (has_device_memory) {
    pack_string(out, "device_memory");
    pack_device_memory(out, snapshot.device_memory, /*timed=*/false);
  }
  if (has_first_segment) {
    pack_string(out, "device_memory_before_first_segment");
    pack_device_memory(out, snapshot.device_memory_before_first_segment, /*timed=*/true);
  }

  if (has_outside_memory) {
    pack_string(out, "outside_memory");
    pack_outside_memory(out, *snapshot.outside_memory);
  }

  pack_string(out, "external_annotations");
  pack_array_header(out, snapshot.external_annotations);
  for (const SnapshotAnnotation& annotation : snapshot.external_annotations) {
    out.pack_array(4);
    out.pack_int64(annotation.device);
    pack_string(out, annotation.stage);
    pack_string(out, annotation.name);
    out.pack_int64(annotation.time_us);
  }

  pack_string(out, "statistics");
  pack_array_header(out, snapshot.statistics);
  for (const Statistics& statistics : snapshot.statistics) {
    out.pack_map(static_cast<uint32_t>(statistics.size()));
    for (const auto& [key, value] : statistics) {
      pack_string(out, key);
      out.pack_int64(value);
    }
  }
  buffer.flush();
}

std::string to_msgpack(const Snapshot& snapshot) {
  std::string out;
  write_msgpack(snapshot, [&](std::string_view piece) { out += piece; });
  return out;
}

}  // namespace memsnap
