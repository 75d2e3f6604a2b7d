#include "snapshot/json_writer.h"

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

nlohmann::json to_json(const Snapshot& snapshot) {
  nlohmann::json segments = nlohmann::json::array();
  for (const SnapshotSegment& segment : snapshot.segments) {
    nlohmann::json blocks = nlohmann::json::array();
    for (const SnapshotBlock& block : segment.blocks) blocks.push_back(block_json(snapshot, block));
    segments.push_back({{"device", segment.device},
                        {"address", segment.address},
                        {"total_size", segment.total_size},
                        {"allocated_size", segment.allocated_size},
                        {"active_size", segment.active_size},
                        {"requested_size", segment.requested_size},
                        {"stream", segment.stream},
                        {"segment_type", segment.segment_type},
                        {"segment_pool_id", {segment.segment_pool_id.first, segment.segment_pool_id.second}},
                        {"is_expandable", segment.is_expandable},
                        {"blocks", blocks}});
    put_frames(segments.back(), snapshot, segment.stack);
  }
  nlohmann::json traces = nlohmann::json::array();
  for (const auto& trace : snapshot.device_traces) {
    nlohmann::json entries = nlohmann::json::array();
    for (const TraceEntry& entry : trace) {
      entries.push_back({{"action", trace_action_name(entry.action)},
                         {"addr", entry.address},
                         {"size", entry.size},
                         {"stream", entry.stream},
                         {"time_us", entry.time_us}});
      put_frames(entries.back(), snapshot, entry.stack);
    }
    traces.push_back(entries);
  }
  nlohmann::json settings = nlohmann::json::object();
  for (const auto& [key, value] : snapshot.allocator_settings) settings[key] = setting_value_json(value);
  nlohmann::json annotations = nlohmann::json::array();
  for (const SnapshotAnnotation& a : snapshot.external_annotations)
    annotations.push_back(
        {{"device", a.device}, {"stage", a.stage}, {"name", a.name}, {"time_us", a.time_us}});
  nlohmann::json statistics = nlohmann::json::array();
  for (const Statistics& device_statistics : snapshot.statistics) {
    nlohmann::json values = nlohmann::json::object();
    for (const auto& [key, value] : device_statistics) values[key] = value;
    statistics.push_back(values);
  }
  nlohmann::json devices = nlohmann::json::array();
  for (const DeviceInfo& d : snapshot.devices)
    devices.push_back({{"index", d.index}, {"name", d.name}, {"total_memory", d.total_memory}});
  const ProcessInfo& p = snapshot.process;
  return {{"format", "memsnap-snapshot"},
          {"version", kSnapshotFormatVersion},
          {"source", snapshot.source},
          {"process",
           {{"host", p.host},
            {"pid", p.pid},
            {"rank", optional_json(p.rank)},
            {"local_rank", optional_json(p.local_rank)},
            {"world_size", optional_json(p.world_size)},
            {"time_unix_us", p.time_unix_us},
            {"clock_offset_us", p.clock_offset_us}}},
          {"devices", devices},
          {"allocator_settings", settings},
          {"segments", segments},
          {"device_traces", traces},
          {"external_annotations", annotations},
          {"statistics", statistics}};
}

}  // namespace memsnap
