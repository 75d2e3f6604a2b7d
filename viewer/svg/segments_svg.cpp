#include "viewer/svg/segments_svg.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <unordered_map>

#include "viewer/flame_tree.h"
#include "viewer/memory_views.h"
#include "viewer/svg/flamegraph_svg.h"
#include "viewer/svg/svg_document.h"
#include "viewer/svg/svg_text.h"

namespace memsnap::svg {
namespace {

constexpr int kSegmentsPad = 10;
constexpr int kTowerWidth = 34;
constexpr int kTowerGap = 10;
constexpr int kSegmentsTop = 80;
constexpr int kLabelHeight = 30;
constexpr int kSegmentsDetailLines = 16;

// "20M", "1.5G": fits under a tower.
std::string compact_bytes(uint64_t bytes) {
  const char units[] = "BKMGTP";
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024 && unit < 5) {
    value /= 1024;
    ++unit;
  }
  char text[24];
  std::snprintf(text, sizeof text, value < 10 && unit > 0 ? "%.1f%c" : "%.0f%c", value, units[unit]);
  return text;
}

constexpr const char* kSegmentsScript = R"JS(
var details;
function show(k) {
  var b = D.blocks[k], s = D.segments[b[0]], lines = [];
  lines.push(D.states[b[4]] + ' block at ' + b[1] + ': ' + fmt(b[2]) + (b[4] != 2 ? ' (requested ' + fmt(b[3]) + ')' : ''));
  lines.push('segment ' + s[0] + ': ' + fmt(s[1]) + ', ' + s[2] + ' pool, stream ' + s[3] + ', device ' + s[4]);
  var stack = b[5] >= 0 ? D.stacks[b[5]] : [];
  if (!stack.length) lines.push(b[4] == 2 ? '(free)' : '(no stack recorded)');
  for (var i = 0; i < stack.length && lines.length < D.detailLines; i++) lines.push('  ' + D.labels[stack[i]]);
  if (stack.length > D.detailLines - 2) lines.push('  \u2026 ' + (stack.length - (D.detailLines - 2)) + ' more');
  var spans = details.getElementsByTagName('tspan');
  for (var m = 0; m < spans.length; m++) spans[m].textContent = m < lines.length ? lines[m] : '';
}
window.addEventListener('load', function () {
  details = document.getElementById('details');
  document.documentElement.addEventListener('mouseover', function (e) {
    var k = e.target.getAttribute && e.target.getAttribute('data-b'); if (k !== null && k !== undefined) show(+k);
  });
});
)JS";

}  // namespace

std::string render_segments(const Snapshot& snapshot, const SegmentsOptions& options) {
  std::vector<const SnapshotSegment*> segments;
  for (const SnapshotSegment& s : snapshot.segments)
    if (!options.device || s.device == *options.device) segments.push_back(&s);
  std::sort(segments.begin(), segments.end(), [](const SnapshotSegment* a, const SnapshotSegment* b) {
    if (a->device != b->device) return a->device < b->device;
    if (a->stream != b->stream) return a->stream < b->stream;
    if (a->total_size != b->total_size) return a->total_size > b->total_size;
    return a->address < b->address;
  });
  const int width = std::max(options.width, 400);
  const int per_row = std::max(1, (width - 2 * kSegmentsPad + kTowerGap) / (kTowerWidth + kTowerGap));
  const int rows = std::max<int>(1, static_cast<int>((segments.size() + per_row - 1) / per_row));
  const int tower_height = rows <= 2 ? 300 : rows <= 6 ? 180 : 100;
  uint64_t smallest = UINT64_MAX, largest = 1;
  for (const SnapshotSegment* s : segments) {
    smallest = std::min(smallest, std::max<uint64_t>(s->total_size, 1));
    largest = std::max(largest, s->total_size);
  }
  const double span = segments.empty() || largest <= smallest ? 1.0
                                                               : std::log2(static_cast<double>(largest) / smallest);
  auto height_of = [&](uint64_t size) {
    const double rel = span <= 0 ? 1.0 : std::log2(static_cast<double>(std::max<uint64_t>(size, 1)) / smallest) / span;
    return 30.0 + (tower_height - 30.0) * (span <= 0 ? 1.0 : rel);
  };
  const int row_height = tower_height + kLabelHeight;
  const int details_top = kSegmentsTop + rows * row_height + 16;
  const int height = details_top + (kSegmentsDetailLines + 1) * 15 + 10;

  std::string out;
  char buffer[512];
  out += open_document(width, height, "rect.b:hover{stroke:#000;stroke-width:1.2}");
  uint64_t reserved = 0, allocated = 0;
  for (const SnapshotSegment* s : segments) {
    reserved += s->total_size;
    allocated += s->allocated_size;
  }
  out += heading(width, 20, options.title,
                 std::to_string(segments.size()) + " segments, " + human_bytes(reserved) + " reserved, " +
                     human_bytes(allocated) + " allocated; tower height grows with the log of segment "
                     "size, lowest address at the bottom");
  double legend_x = kSegmentsPad;
  for (BlockState state : {BlockState::kActiveAllocated, BlockState::kActivePendingFree, BlockState::kInactive}) {
    const std::string name(block_state_name(state));
    std::snprintf(buffer, sizeof buffer,
                  "<rect x=\"%.0f\" y=\"54\" width=\"12\" height=\"12\" fill=\"%s\"/><text x=\"%.0f\" y=\"64\">",
                  legend_x, category_colour(flame_category(state), "").c_str(), legend_x + 16);
    out += buffer + name + "</text>\n";
    legend_x += 16 + static_cast<double>(name.size()) * 7 + 20;
  }

  // Script data: stacks and frame labels once, blocks by index.
  std::unordered_map<uint32_t, uint32_t> label_ids;
  std::vector<uint32_t> labels;
  std::unordered_map<StackIndex, int32_t> stack_ids;
  std::string stacks_json;
  std::string blocks_json;
  std::string segments_json;
  auto stack_id = [&](StackIndex stack) -> int32_t {
    if (stack == kNoStackIndex) return -1;
    auto [it, added] = stack_ids.try_emplace(stack, static_cast<int32_t>(stack_ids.size()));
    if (added) {
      std::vector<uint32_t> frames = visible_frames_outermost_first(snapshot, stack, options.frames);
      std::reverse(frames.begin(), frames.end());  // innermost first, as stacks read
      stacks_json += stacks_json.empty() ? "[" : ",[";
      for (size_t i = 0; i < frames.size(); ++i) {
        auto [l, new_label] = label_ids.try_emplace(frames[i], static_cast<uint32_t>(labels.size()));
        if (new_label) labels.push_back(frames[i]);
        stacks_json += (i ? "," : "") + std::to_string(l->second);
      }
      stacks_json += "]";
    }
    return it->second;
  };

  size_t block_index = 0;
  for (size_t i = 0; i < segments.size(); ++i) {
    const SnapshotSegment& s = *segments[i];
    const int row = static_cast<int>(i) / per_row, column = static_cast<int>(i) % per_row;
    const double x = kSegmentsPad + column * (kTowerWidth + kTowerGap);
    const double h = height_of(s.total_size);
    const double bottom = kSegmentsTop + row * row_height + tower_height;
    char hex[32];
    std::snprintf(hex, sizeof hex, "0x%llx", static_cast<unsigned long long>(s.address));
    char stream[32];
    std::snprintf(stream, sizeof stream, "0x%llx", static_cast<unsigned long long>(s.stream));
    segments_json += (i ? ",[" : "[") + json_string(hex) + "," + std::to_string(s.total_size) + "," +
                     json_string(s.segment_type) + "," + json_string(stream) + "," + std::to_string(s.device) + "]";
    std::snprintf(buffer, sizeof buffer,
                  "<g><title>segment %s: %s, %s pool</title><rect x=\"%.1f\" y=\"%.1f\" width=\"%d\" "
                  "height=\"%.1f\" fill=\"none\" stroke=\"#888\"/>\n",
                  hex, human_bytes(s.total_size).c_str(), escape(s.segment_type).c_str(), x, bottom - h,
                  kTowerWidth, h);
    out += buffer;
    const double scale = s.total_size ? h / static_cast<double>(s.total_size) : 0;
    for (const SnapshotBlock& b : s.blocks) {
      const double offset = static_cast<double>(b.address - std::min(b.address, s.address)) * scale;
      const double bh = static_cast<double>(b.size) * scale;
      const int32_t stack = stack_id(b.stack);
      std::string fill = category_colour(flame_category(b.state), std::to_string(stack));
      std::snprintf(buffer, sizeof buffer,
                    "<rect class=\"b\" data-b=\"%zu\" x=\"%.1f\" y=\"%.2f\" width=\"%d\" height=\"%.2f\" "
                    "fill=\"%s\" stroke=\"#fff\" stroke-width=\"0.3\"/>\n",
                    block_index, x, bottom - offset - bh, kTowerWidth, std::max(bh, 0.3), fill.c_str());
      out += buffer;
      char address[32];
      std::snprintf(address, sizeof address, "0x%llx", static_cast<unsigned long long>(b.address));
      blocks_json += (block_index ? ",[" : "[") + std::to_string(i) + "," + json_string(address) + "," +
                     std::to_string(b.size) + "," + std::to_string(b.requested_size) + "," +
                     std::to_string(static_cast<int>(b.state)) + "," + std::to_string(stack) + "]";
      ++block_index;
    }
    const std::string size_label = compact_bytes(s.total_size);
    std::snprintf(buffer, sizeof buffer, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"10\" text-anchor=\"middle\">%s</text></g>\n",
                  x + kTowerWidth / 2.0, bottom + 12, escape(size_label).c_str());
    out += buffer;
  }
  if (segments.empty()) {
    std::snprintf(buffer, sizeof buffer, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\" fill=\"#555\">no segments</text>\n",
                  width / 2, kSegmentsTop + 40);
    out += buffer;
  }
  out += details_panel(kSegmentsPad, details_top, kSegmentsDetailLines, "hover a block for its stack");
  std::string labels_json;
  for (size_t i = 0; i < labels.size(); ++i)
    labels_json += (i ? "," : "") + json_string(frame_label(snapshot.frames[labels[i]], options.frames));
  out += close_document("var D={\"detailLines\":" + std::to_string(kSegmentsDetailLines) +
         ",\"states\":[\"active_allocated\",\"active_pending_free\",\"inactive\"],\"labels\":[" + labels_json +
         "],\"stacks\":[" + stacks_json + "],\"segments\":[" + segments_json + "],\"blocks\":[" + blocks_json +
         "]};\n", kSegmentsScript);
  return out;
}

}  // namespace memsnap::svg
