#include "web/view_json.h"

#include <algorithm>

#include "snapshot/snapshot.h"
#include "viewer/call_sites.h"
#include "viewer/device_memory_account.h"
#include "web/json_text.h"

namespace memsnap::web {
namespace {

using nlohmann::json;

json frames_json(const Snapshot& snapshot, StackIndex stack, const FrameFilter& filter) {
  json out = json::array();
  const std::vector<uint32_t> frames = visible_frames_outermost_first(snapshot, stack, filter);
  for (auto it = frames.rbegin(); it != frames.rend(); ++it) {
    const Frame& f = snapshot.frames[*it];
    out.push_back({{"function", f.function}, {"file", f.file}, {"line", f.line},
                   {"label", frame_label(f, filter)}, {"python", frame_is_python(f)},
                   {"dispatcher", !filter.keep_all && frame_is_dispatcher(f)}});
  }
  return out;
}

// A free block was requested by nobody: PyTorch's pickles keep the last allocation's size
// there, which would read as if the free block were still asked for.
uint64_t requested_of(const SnapshotBlock& block) {
  return block.state == BlockState::kInactive ? 0 : block.requested_size;
}

bool frames_contain(const Snapshot& snapshot, StackIndex stack, const FrameFilter& filter, const std::string& text) {
  for (uint32_t f : visible_frames_outermost_first(snapshot, stack, filter)) {
    const Frame& frame = snapshot.frames[f];
    if (frame.function.find(text) != std::string::npos || frame.file.find(text) != std::string::npos) return true;
  }
  return false;
}

json segment_header(const SnapshotSegment& s, size_t index) {
  return {{"index", index},
          {"device", s.device},
          {"address", s.address},
          {"total_size", s.total_size},
          {"allocated_size", s.allocated_size},
          {"active_size", s.active_size},
          {"requested_size", s.requested_size},
          {"stream", s.stream},
          {"segment_type", s.segment_type},
          {"pool", {s.segment_pool_id.first, s.segment_pool_id.second}},
          {"pool_name", pool_display_name(s.segment_pool_id)},
          {"is_expandable", s.is_expandable},
          {"stack", s.stack}};
}

}  // namespace

json snapshot_summary_json(const StoredSnapshot& stored) {
  const Snapshot& s = stored.loaded.snapshot;
  uint64_t reserved = 0, allocated = 0;
  for (const SnapshotSegment& segment : s.segments) {
    reserved += segment.total_size;
    allocated += segment.allocated_size;
  }
  json devices = json::array();
  for (size_t d = 0; d < s.device_traces.size(); ++d) devices.push_back({{"device", d}, {"events", s.device_traces[d].size()}});
  return {{"id", stored.id},
          {"name", stored.name},
          {"size", stored.file_bytes},
          {"format", std::string(snapshot_format_name(stored.loaded.format))},
          {"compressed", stored.loaded.compressed},
          {"source", s.source},
          {"devices", devices},
          {"events", stored.trace_events},
          {"segments", s.segments.size()},
          {"reserved_bytes", reserved},
          {"allocated_bytes", allocated},
          {"has_oom", stored.has_oom}};
}

json flamegraph_json(const FlameTree& tree, double min_share) {
  const auto& nodes = tree.nodes();
  const uint64_t total = std::max(tree.total_bytes(), tree.total_before_bytes());
  const double min_bytes = std::max(0.0, min_share) * static_cast<double>(total);
  json out_nodes = json::array();
  std::vector<uint32_t> used_labels(tree.labels().size(), UINT32_MAX);
  json labels = json::array();
  auto label_index = [&](uint32_t label) {
    if (used_labels[label] == UINT32_MAX) {
      used_labels[label] = static_cast<uint32_t>(labels.size());
      labels.push_back(tree.labels()[label]);
    }
    return used_labels[label];
  };
  // Preorder with an explicit stack (trees can be thousands of frames deep).
  std::vector<std::pair<uint32_t, int64_t>> pending = {{0, -1}};  // node, emitted parent
  uint64_t dropped = 0;
  while (!pending.empty()) {
    const auto [node, parent] = pending.back();
    pending.pop_back();
    const FlameNode& n = nodes[node];
    const int64_t index = static_cast<int64_t>(out_nodes.size());
    out_nodes.push_back(json::array({parent, label_index(n.label), static_cast<int>(n.category), n.bytes,
                                     n.before_bytes, n.samples}));
    for (auto it = n.children.rbegin(); it != n.children.rend(); ++it) {
      const FlameNode& child = nodes[*it];
      if (static_cast<double>(std::max(child.bytes, child.before_bytes)) < min_bytes && node != 0) {
        ++dropped;
        continue;
      }
      pending.push_back({*it, index});
    }
  }
  return {{"total_bytes", tree.total_bytes()},
          {"total_before_bytes", tree.total_before_bytes()},
          {"labels", std::move(labels)},
          {"nodes", std::move(out_nodes)},
          {"dropped_nodes", dropped},
          {"categories", {"root", "active_allocated", "active_pending_free", "inactive", "gaps", "grouping"}}};
}

json segments_json(const std::vector<SnapshotSegment>& all, std::optional<int64_t> device) {
  json segments = json::array();
  uint64_t blocks = 0;
  for (size_t i = 0; i < all.size(); ++i) {
    const SnapshotSegment& s = all[i];
    if (device && s.device != *device) continue;
    json segment = segment_header(s, i);
    json rows = json::array();
    for (const SnapshotBlock& b : s.blocks) {
      // The last element: the stack of the allocation that last held a free block's bytes.
      const StackIndex last_holder = b.state == BlockState::kInactive && !b.history.empty() ? b.history.back().stack
                                                                                           : kNoStackIndex;
      rows.push_back(json::array({b.address - s.address, b.size, requested_of(b), static_cast<int>(b.state),
                                  b.stack, b.history.size(), last_holder}));
    }
    blocks += s.blocks.size();
    segment["blocks"] = std::move(rows);
    segments.push_back(std::move(segment));
  }
  return {{"segments", std::move(segments)},
          {"blocks", blocks},
          {"states", {"active_allocated", "active_pending_free", "inactive"}}};
}

namespace {

// The call site of each stack that holds a live block (by stack index), so the page can colour
// blocks as the timeline colours bands.
json block_sites_json(const Snapshot& snapshot, const std::vector<SnapshotSegment>& segments, std::optional<int64_t> device) {
  CallSites sites(snapshot);
  json out = json::object();
  for (const SnapshotSegment& s : segments) {
    if (device && s.device != *device) continue;
    for (const SnapshotBlock& b : s.blocks) {
      if (b.state == BlockState::kInactive || b.stack == kNoStackIndex) continue;
      const std::string key = std::to_string(b.stack);
      if (!out.contains(key)) out[key] = sites.label(sites.of(b.stack));
    }
  }
  return out;
}

}  // namespace

json segments_json(const Snapshot& snapshot, std::optional<int64_t> device) {
  json out = segments_json(snapshot.segments, device);
  out["sites"] = block_sites_json(snapshot, snapshot.segments, device);
  return out;
}

json state_json(const Snapshot& snapshot, const StateAfterEntry& state) {
  const TraceEntry& entry = snapshot.device_traces[static_cast<size_t>(state.device)][state.entry];
  json out = segments_json(state.segments, std::nullopt);
  out["sites"] = block_sites_json(snapshot, state.segments, std::nullopt);
  out["device"] = state.device;
  out["event"] = state.entry;
  out["events"] = snapshot.device_traces[static_cast<size_t>(state.device)].size();
  out["action"] = std::string(trace_action_name(entry.action));
  out["address"] = entry.address;
  out["size"] = entry.size;
  out["time_us"] = entry.time_us;
  out["reserved_bytes"] = state.reserved_bytes;
  out["allocated_bytes"] = state.allocated_bytes;
  out["active_bytes"] = state.active_bytes;
  out["exact"] = state.exact;
  out["problems"] = state.problems;
  return out;
}

std::optional<json> block_json(const Snapshot& snapshot, size_t segment, size_t block, const FrameFilter& filter) {
  if (segment >= snapshot.segments.size() || block >= snapshot.segments[segment].blocks.size()) return std::nullopt;
  const SnapshotSegment& s = snapshot.segments[segment];
  const SnapshotBlock& b = s.blocks[block];
  json history = json::array();
  for (const HistoryItem& h : b.history)
    history.push_back({{"address", h.address}, {"size", h.size}, {"frames", frames_json(snapshot, h.stack, filter)}});
  return json{{"segment", segment_header(s, segment)},
              {"address", b.address},
              {"size", b.size},
              {"requested_size", requested_of(b)},
              {"state", std::string(block_state_name(b.state))},
              {"frames", frames_json(snapshot, b.stack, filter)},
              {"history", std::move(history)}};
}

std::optional<json> stack_json(const Snapshot& snapshot, int64_t stack, const FrameFilter& filter) {
  if (stack < 0 || static_cast<uint64_t>(stack) >= snapshot.stacks.size()) return std::nullopt;
  return json{{"stack", stack}, {"frames", frames_json(snapshot, stack, filter)}};
}

std::string timeline_json(const Snapshot& snapshot, const Timeline& timeline, const FrameFilter& filter) {
  // Written directly: a zoomed timeline of a big trace has ~10^5 band points, and building
  // them as nlohmann values first costs several times the analysis itself.
  JsonText out;
  out.begin_object().field("device", timeline.device).key("devices").begin_array();
  for (size_t d = 0; d < snapshot.device_traces.size(); ++d)
    if (!snapshot.device_traces[d].empty()) out.value(d);
  out.end_array().field("events", timeline.events);
  out.key("kind").string(timeline.kind == TimelineKind::kSegments ? "segments" : "active");
  out.key("window").begin_array().value(timeline.window_begin).value(timeline.window_end).end_array();
  out.field("entries", timeline.entries).key("window_entries").begin_array();
  out.value(timeline.window_begin_entry).value(timeline.window_end_entry).end_array();
  out.key("samples").values(timeline.samples).key("sample_entries").values(timeline.sample_entries);
  out.key("time_us").values(timeline.event_time_us);
  out.key("total_bytes").values(timeline.total_bytes);
  out.key("least_bytes").values(timeline.least_bytes).key("most_bytes").values(timeline.most_bytes);
  out.key("base_bottom").values(timeline.base_bottom).key("base_bytes").values(timeline.base_bytes);
  out.key("merged_sites").begin_array();
  for (const std::string& site : timeline.merged_sites) out.string(site);
  out.end_array().key("sites_bottom").values(timeline.sites_bottom).key("merged_site_bytes").begin_array();
  for (const std::vector<uint64_t>& bytes : timeline.merged_site_bytes) out.values(bytes);
  out.end_array();
  out.key("other_bottom").values(timeline.other_bottom).key("other_bytes").values(timeline.other_bytes);
  out.field("allocations", timeline.allocations).field("before_trace_allocations", timeline.before_trace_allocations);
  out.field("peak_bytes", timeline.peak_bytes);
  out.field("peak_event", timeline.peak_event).field("peak_entry", timeline.peak_entry).key("markers").begin_array();
  for (const TimelineMarker& marker : timeline.markers) {
    out.begin_object().field("event", marker.event).field("entry", marker.entry.value_or(0)).key("kind").string(marker.kind);
    out.key("label").string(marker.label).end_object();
  }
  out.end_array().field("marker_count", timeline.marker_count);
  if (!timeline.role_bytes.empty()) {
    out.key("roles").begin_array();
    for (size_t r = 0; r < kMemoryRoles; ++r) out.string(memory_role_name(static_cast<MemoryRole>(r)));
    out.end_array().key("role_bytes").begin_array();
    for (const RoleBytes& bytes : timeline.role_bytes) {
      out.begin_array();
      for (uint64_t b : bytes) out.value(b);
      out.end_array();
    }
    out.end_array();
  }
  if (!timeline.pools.empty()) {
    out.key("pools").begin_array();
    for (const MempoolId& pool : timeline.pools) out.string(pool_display_name(pool));
    out.end_array().key("pool_bytes").begin_array();
    for (const std::vector<uint64_t>& bytes : timeline.pool_bytes) out.values(bytes);
    out.end_array();
  }
  if (timeline.whole_device) {
    const WholeDeviceTimeline& whole = *timeline.whole_device;
    out.key("whole_device").begin_object().key("reserved_bytes").values(whole.reserved_bytes).key("libraries").begin_array();
    for (size_t k = 0; k < whole.libraries.size(); ++k)
      out.string(whole.libraries_merged && k + 1 == whole.libraries.size() ? whole.libraries[k] : library_label(whole.libraries[k]));
    out.end_array().key("library_bytes").begin_array();
    for (const std::vector<uint64_t>& bytes : whole.library_bytes) out.values(bytes);
    out.end_array().field("libraries_known_from", whole.libraries_known_from);
    out.key("libraries_note").string(whole.libraries_note);
    out.field("peak_bytes", whole.peak_bytes).field("peak_event", whole.peak_event).field("peak_entry", whole.peak_entry);
    const auto optional = [&](std::string_view name, const std::optional<uint64_t>& bytes) {
      if (bytes) out.field(name, *bytes);
    };
    optional("device_total_bytes", whole.device_total_bytes);
    optional("device_free_bytes", whole.device_free_bytes);
    optional("context_bytes", whole.context_bytes);
    optional("other_processes_bytes", whole.other_processes_bytes);
    out.key("snapshot_note").string(whole.snapshot_note).end_object();
  }
  out.key("bands").begin_array();
  for (const TimelineBand& band : timeline.bands) {
    out.begin_object().field("address", band.address).field("size", band.size).field("stack", band.stack);
    out.key("label").string(site_label(snapshot, band.stack, filter));
    out.field("start", band.start).field("end", band.end).field("start_entry", band.start_entry);
    out.field("end_entry", band.end_entry).key("before_trace").value(band.before_trace);
    // Flat, event then bottom at each point: 10^5 small arrays cost the browser more to parse.
    out.key("outline").begin_array();
    for (const auto& [sample, bottom] : band.bottom) out.value(sample).value(bottom);
    out.end_array().end_object();
  }
  return out.end_array().end_object().take();
}

json search_json(const Snapshot& snapshot, const SearchQuery& query, const FrameFilter& filter) {
  json out = {{"query", query.text}};
  // An address: the block that holds it, and the trace events that cover it.
  if (query.address) {
    json where = nullptr;
    for (size_t i = 0; i < snapshot.segments.size() && where.is_null(); ++i) {
      const SnapshotSegment& s = snapshot.segments[i];
      if (query.device && s.device != *query.device) continue;
      if (*query.address < s.address || *query.address - s.address >= s.total_size) continue;
      for (size_t b = 0; b < s.blocks.size(); ++b) {
        const SnapshotBlock& block = s.blocks[b];
        if (*query.address >= block.address && *query.address - block.address < block.size)
          where = {{"segment", i}, {"block", b}, {"address", block.address}, {"size", block.size},
                   {"state", std::string(block_state_name(block.state))}, {"stack", block.stack}};
      }
    }
    uint64_t events = 0;
    for (size_t d = 0; d < snapshot.device_traces.size(); ++d)
      if (!query.device || static_cast<int64_t>(d) == *query.device)
        for (const TraceEntry& e : snapshot.device_traces[d]) events += e.action != TraceAction::kOom && e.covers(*query.address);
    out["address"] = *query.address;
    out["block"] = std::move(where);
    out["address_events"] = events;
  }
  // Frame text, case-insensitive, in the frames a view shows: the stacks that have it, and what
  // they hold and did.
  std::vector<bool> matched(snapshot.stacks.size(), false);
  json stacks = json::array();
  if (!query.text.empty()) {
    std::string needle = query.text;
    for (char& c : needle) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    for (size_t i = 0; i < snapshot.stacks.size(); ++i) {
      for (uint32_t f : visible_frames_outermost_first(snapshot, static_cast<StackIndex>(i), filter)) {
        const Frame& frame = snapshot.frames[f];
        std::string hay = frame.function + "\n" + frame.file;
        for (char& c : hay) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
        if (hay.find(needle) != std::string::npos) {
          matched[i] = true;
          if (stacks.size() < SearchQuery::kMaxStacks) stacks.push_back(i);
          break;
        }
      }
    }
  }
  uint64_t blocks = 0, bytes = 0, events = 0;
  for (const SnapshotSegment& s : snapshot.segments) {
    if (query.device && s.device != *query.device) continue;
    for (const SnapshotBlock& b : s.blocks)
      if (b.state != BlockState::kInactive && b.stack >= 0 && matched[static_cast<size_t>(b.stack)]) {
        ++blocks;
        bytes += b.size;
      }
  }
  for (size_t d = 0; d < snapshot.device_traces.size(); ++d)
    if (!query.device || static_cast<int64_t>(d) == *query.device)
      for (const TraceEntry& e : snapshot.device_traces[d]) events += e.stack >= 0 && matched[static_cast<size_t>(e.stack)];
  out["stacks"] = std::move(stacks);
  out["stacks_truncated"] = std::count(matched.begin(), matched.end(), true) > static_cast<long>(SearchQuery::kMaxStacks);
  out["live_blocks"] = blocks;
  out["live_bytes"] = bytes;
  out["trace_events"] = events;
  return out;
}

json trace_page_json(const Snapshot& snapshot, const TraceQuery& query, const FrameFilter& filter) {
  json events = json::array();
  uint64_t matched = 0;
  const uint64_t limit = std::min(query.limit, TraceQuery::kMaxLimit);
  // Whether a stack's frames contain the searched text, decided once per stack, not per event.
  std::vector<int8_t> stack_matches(query.frame.empty() ? 0 : snapshot.stacks.size(), -1);
  auto frame_matches = [&](StackIndex stack) {
    if (stack < 0 || static_cast<size_t>(stack) >= stack_matches.size()) return false;
    int8_t& known = stack_matches[static_cast<size_t>(stack)];
    if (known < 0) known = frames_contain(snapshot, stack, filter, query.frame) ? 1 : 0;
    return known == 1;
  };
  for (size_t d = 0; d < snapshot.device_traces.size(); ++d) {
    if (query.device && static_cast<int64_t>(d) != *query.device) continue;
    const auto& trace = snapshot.device_traces[d];
    const int64_t first_time = trace.empty() ? 0 : trace.front().time_us;
    for (size_t i = 0; i < trace.size(); ++i) {
      const TraceEntry& e = trace[i];
      if (!query.actions.empty() && !query.actions[static_cast<size_t>(e.action)]) continue;
      if (e.size < query.min_size) continue;
      if (query.address && !e.covers(*query.address)) continue;
      if (!query.frame.empty() && !frame_matches(e.stack)) continue;
      if (matched++ < query.offset || events.size() >= limit) continue;
      events.push_back({{"device", d},
                        {"index", i},
                        {"time_us", e.time_us - first_time},
                        {"action", std::string(trace_action_name(e.action))},
                        {"address", e.address},
                        {"size", e.size},
                        {"stream", e.stream},
                        {"stack", e.stack},
                        {"frame", site_label(snapshot, e.stack, filter)}});
    }
  }
  return {{"matched", matched}, {"offset", query.offset}, {"limit", limit}, {"events", std::move(events)}};
}

json compare_json(const StoredSnapshot& before, const StoredSnapshot& after, const Comparison& comparison,
                  double min_share) {
  auto list = [](const std::vector<const SnapshotSegment*>& segments) {
    json out = json::array();
    for (const SnapshotSegment* s : segments)
      out.push_back({{"device", s->device},
                     {"address", s->address},
                     {"total_size", s->total_size},
                     {"allocated_size", s->allocated_size},
                     {"segment_type", s->segment_type},
                     {"stream", s->stream}});
    return out;
  };
  return {{"before", {{"id", before.id}, {"name", before.name}, {"allocated_bytes", comparison.before_allocated},
                      {"reserved_bytes", comparison.before_reserved}}},
          {"after", {{"id", after.id}, {"name", after.name}, {"allocated_bytes", comparison.after_allocated},
                     {"reserved_bytes", comparison.after_reserved}}},
          {"only_before", list(comparison.only_before)},
          {"only_after", list(comparison.only_after)},
          {"flamegraph", flamegraph_json(comparison.allocated_by_stack, min_share)}};
}

}  // namespace memsnap::web
