#include "snapshot/json_writer.h"

#include <optional>
#include <string>
#include <vector>

namespace memsnap {
namespace {

// "frames" and, for a stack joined to its forward call, "forward_frames" (PyTorch's shape).
void put_frames(nlohmann::json& into, const Snapshot& snapshot, StackIndex stack) {
  nlohmann::json frames = nlohmann::json::array();
  if (stack >= 0 && static_cast<size_t>(stack) < snapshot.stacks.size()) {
    const std::vector<uint32_t>& indices = snapshot.stacks[static_cast<size_t>(stack)];
    const size_t joint = forward_joint(snapshot.frames, indices);
    for (size_t i = 0; i < joint; ++i) {
      const Frame& frame = snapshot.frames.at(indices[i]);
      frames.push_back({{"name", frame.function}, {"filename", frame.file}, {"line", frame.line}});
    }
    if (joint + 1 < indices.size()) {
      nlohmann::json forward = nlohmann::json::array();
      for (size_t i = indices.size(); i-- > joint + 1;) forward.push_back(traceback_line(snapshot.frames.at(indices[i])));
      into["forward_frames"] = std::move(forward);
    }
  }
  into["frames"] = std::move(frames);
}

nlohmann::json block_json(const Snapshot& snapshot, const SnapshotBlock& block) {
  nlohmann::json history = nlohmann::json::array();
  for (const HistoryItem& item : block.history) {
    history.push_back({{"addr", item.address}, {"real_size", item.size}});
    put_frames(history.back(), snapshot, item.stack);
  }
  nlohmann::json out = {{"address", block.address}, {"size", block.size},
                        {"requested_size", block.requested_size}, {"state", block_state_name(block.state)},
                        {"history", history}};
  put_frames(out, snapshot, block.stack);
  return out;
}

}  // namespace

nlohmann::json setting_value_json(std::string_view value) {
  nlohmann::json parsed = nlohmann::json::parse(value, nullptr, /*allow_exceptions=*/false);
  return parsed.is_discarded() ? nlohmann::json(std::string(value)) : parsed;
}

static nlohmann::json optional_json(const std::optional<int64_t>& value) {
  return value ? nlohmann::json(*value) : nlohmann::json(nullptr);
}

namespace {

// The JSON text of one value as the whole document writes it: compact, UTF-8 kept, bytes
// that are not UTF-8 replaced.
std::string text(const nlohmann::json& value) {
  return value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

nlohmann::json segment_json(const Snapshot& snapshot, const SnapshotSegment& segment) {
  nlohmann::json blocks = nlohmann::json::array();
  for (const SnapshotBlock& block : segment.blocks) blocks.push_back(block_json(snapshot, block));
  nlohmann::json out = {{"device", segment.device},
                        {"address", segment.address},
                        {"total_size", segment.total_size},
                        {"allocated_size", segment.allocated_size},
                        {"active_size", segment.active_size},
                        {"requested_size", segment.requested_size},
                        {"stream", segment.stream},
                        {"segment_type", segment.segment_type},
                        {"segment_pool_id", {segment.segment_pool_id.first, segment.segment_pool_id.second}},
                        {"is_expandable", segment.is_expandable},
                        {"blocks", blocks}};
  put_frames(out, snapshot, segment.stack);
  return out;
}

// Writes the document a piece at a time, each large list (segments, traces, annotations) an
// element at a time, keys in the order nlohmann::json keeps them (sorted).
class JsonStream {
 public:
  JsonStream(const Snapshot& snapshot, const ByteSink& sink)
      : snapshot_(snapshot), out_(sink), stack_text_(snapshot.stacks.size() + 1) {}

  void write() {
    put("{\"allocator_settings\":");
    nlohmann::json settings = nlohmann::json::object();
    for (const auto& [key, value] : snapshot_.allocator_settings) settings[key] = setting_value_json(value);
    put(text(settings));
    // By device: the driver's figures when the snapshot was taken, and before the allocator's
    // first segment (FORMAT.md).
    const auto device_memory = [&](const char* key, const std::vector<DeviceMemorySample>& samples, bool timed) {
      if (samples.empty()) return;
      nlohmann::json out = nlohmann::json::array();
      for (const DeviceMemorySample& sample : samples) {
        nlohmann::json processes = nlohmann::json::array();
        for (const auto& [pid, bytes] : sample.processes) processes.push_back({{"bytes", bytes}, {"pid", pid}});
        out.push_back({{"device", sample.device},
                       {"free_bytes", sample.free_bytes},
                       {"processes", processes},
                       {"total_bytes", sample.total_bytes}});
        if (timed) out.back()["time_us"] = sample.time_us;
      }
      put(std::string(",\"") + key + "\":");
      put(text(out));
    };
    device_memory("device_memory", snapshot_.device_memory, false);
    device_memory("device_memory_before_first_segment", snapshot_.device_memory_before_first_segment, true);
    put(",\"device_traces\":[");
    for (size_t d = 0; d < snapshot_.device_traces.size(); ++d) {
      put(d == 0 ? "[" : ",[");
      bool first = true;
      for (const TraceEntry& entry : snapshot_.device_traces[d]) {
        put(first ? "{\"action\":\"" : ",{\"action\":\"");
        first = false;
        put(trace_action_name(entry.action));
        put("\",\"addr\":");
        put(std::to_string(entry.address));
        put(",");
        put(frames_text(entry.stack));
        put(",\"size\":");
        put(std::to_string(entry.size));
        put(",\"stream\":");
        put(std::to_string(entry.stream));
        put(",\"time_us\":");
        put(std::to_string(entry.time_us));
        put("}");
      }
      put("]");
    }
    put("],\"devices\":");
    nlohmann::json devices = nlohmann::json::array();
    for (const DeviceInfo& d : snapshot_.devices) {
      devices.push_back({{"index", d.index}, {"name", d.name}, {"total_memory", d.total_memory}});
      if (d.memory_cap) devices.back()["memory_cap"] = memory_cap_text(d.memory_cap);
    }
    put(text(devices));
    put(",\"external_annotations\":[");
    for (size_t i = 0; i < snapshot_.external_annotations.size(); ++i) {
      const AnnotationList& a = snapshot_.external_annotations;
      if (i > 0) put(",");
      put(text({{"device", a.device(i)}, {"stage", a.stage(i)}, {"name", a.name(i)}, {"time_us", a.time_us(i)}}));
    }
    const ProcessInfo& p = snapshot_.process;
    put("],\"format\":\"memsnap-snapshot\"");
    if (snapshot_.outside_memory) write_outside_memory(*snapshot_.outside_memory);
    put(",\"process\":");
    put(text({{"host", p.host},
              {"pid", p.pid},
              {"rank", optional_json(p.rank)},
              {"local_rank", optional_json(p.local_rank)},
              {"world_size", optional_json(p.world_size)},
              {"time_unix_us", p.time_unix_us},
              {"clock_offset_us", p.clock_offset_us}}));
    put(",\"segments\":[");
    for (size_t i = 0; i < snapshot_.segments.size(); ++i) {
      if (i > 0) put(",");
      put(text(segment_json(snapshot_, snapshot_.segments[i])));
    }
    put("],\"source\":");
    put(text(snapshot_.source));
    put(",\"statistics\":");
    nlohmann::json statistics = nlohmann::json::array();
    for (const Statistics& device_statistics : snapshot_.statistics) {
      nlohmann::json values = nlohmann::json::object();
      for (const auto& [key, value] : device_statistics) values[key] = value;
      statistics.push_back(values);
    }
    put(text(statistics));
    if (!snapshot_.trace_state_changes.empty()) {
      // By device: where what the trace's events were recorded under changed (FORMAT.md).
      nlohmann::json by_device = nlohmann::json::array();
      for (const auto& changes : snapshot_.trace_state_changes) {
        nlohmann::json list = nlohmann::json::array();
        for (const TraceStateChange& change : changes) {
          nlohmann::json item = {{"event_index", change.event_index},
                                 {"kind", std::string(trace_state_kind_name(change.kind))},
                                 {"value", change.value}};
          if (!change.request.empty()) item["request"] = change.request;
          list.push_back(std::move(item));
        }
        by_device.push_back(std::move(list));
      }
      put(",\"trace_state_changes\":");
      put(text(by_device));
    }
    put(",\"version\":");
    put(std::to_string(kSnapshotFormatVersion));
    put("}");
    out_.flush();
  }

 private:
  // Memory outside the allocator (FORMAT.md): its allocations and events with their frames.
  void write_outside_memory(const OutsideMemory& outside) {
    const auto fields = [&](const OutsideAllocation& a, std::string_view action) {
      put("{");
      if (!action.empty()) {
        put("\"action\":\"");
        put(action);
        put("\",");
      }
      put("\"address\":" + std::to_string(a.address) + ",\"api\":" + text(a.api) +
          ",\"device\":" + std::to_string(a.device) + ",");
      put(frames_text(a.stack));
      put(",\"kind\":\"");
      put(outside_kind_name(a.kind));
      put("\",\"library\":" + text(a.library) + ",\"size\":" + std::to_string(a.size) +
          ",\"time_us\":" + std::to_string(a.time_us) + "}");
    };
    put(",\"outside_memory\":{\"dropped_events\":" + std::to_string(outside.dropped_events) + ",\"events\":[");
    for (size_t i = 0; i < outside.events.size(); ++i) {
      if (i > 0) put(",");
      fields(outside.events[i].allocation, outside_action_name(outside.events[i].action));
    }
    put("],\"live\":[");
    for (size_t i = 0; i < outside.live.size(); ++i) {
      if (i > 0) put(",");
      fields(outside.live[i], {});
    }
    put("]");
    if (outside.recorded_since_us) put(",\"recorded_since_us\":" + std::to_string(*outside.recorded_since_us));
    put(",\"unrecorded_reason\":" + text(outside.unrecorded_reason) + "}");
  }

  void put(std::string_view piece) { out_.write(piece); }
  // A stack's "forward_frames" and "frames" members, made once however many entries share it.
  const std::string& frames_text(StackIndex stack) {
    const bool known = stack >= 0 && static_cast<size_t>(stack) < snapshot_.stacks.size();
    std::optional<std::string>& kept = stack_text_[known ? static_cast<size_t>(stack) : snapshot_.stacks.size()];
    if (!kept) {
      nlohmann::json members = nlohmann::json::object();
      put_frames(members, snapshot_, known ? stack : kNoStackIndex);
      const std::string object = text(members);
      kept = object.substr(1, object.size() - 2);  // without the braces
    }
    return *kept;
  }

  const Snapshot& snapshot_;
  SinkBuffer out_;
  std::vector<std::optional<std::string>> stack_text_;
};

}  // namespace

void write_json(const Snapshot& snapshot, const ByteSink& sink) { JsonStream(snapshot, sink).write(); }

std::string to_json_text(const Snapshot& snapshot) {
  std::string out;
  write_json(snapshot, [&](std::string_view piece) { out += piece; });
  return out;
}

}  // namespace memsnap
