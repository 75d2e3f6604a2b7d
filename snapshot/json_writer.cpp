#include "snapshot/json_writer.h"

namespace memsnap {
namespace {

nlohmann::json frames_of(const Snapshot& snapshot, StackIndex stack) {
  nlohmann::json frames = nlohmann::json::array();
  if (stack < 0 || static_cast<size_t>(stack) >= snapshot.stacks.size()) return frames;
  for (uint32_t index : snapshot.stacks[static_cast<size_t>(stack)]) {
    const Frame& frame = snapshot.frames.at(index);
    frames.push_back({{"name", frame.function}, {"filename", frame.file}, {"line", frame.line}});
  }
  return frames;
}

nlohmann::json block_json(const Snapshot& snapshot, const SnapshotBlock& block) {
  nlohmann::json history = nlohmann::json::array();
  for (const HistoryItem& item : block.history)
    history.push_back({{"addr", item.address}, {"real_size", item.size},
                       {"frames", frames_of(snapshot, item.stack)}});
  return {{"address", block.address},       {"size", block.size},
          {"requested_size", block.requested_size}, {"state", block_state_name(block.state)},
          {"frames", frames_of(snapshot, block.stack)}, {"history", history}};
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
                        {"frames", frames_of(snapshot, segment.stack)},
                        {"blocks", blocks}});
  }
  nlohmann::json traces = nlohmann::json::array();
  for (const auto& trace : snapshot.device_traces) {
    nlohmann::json entries = nlohmann::json::array();
    for (const TraceEntry& entry : trace)
      entries.push_back({{"action", trace_action_name(entry.action)},
                         {"addr", entry.address},
                         {"size", entry.size},
                         {"stream", entry.stream},
                         {"time_us", entry.time_us},
                         {"frames", frames_of(snapshot, entry.stack)}});
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
