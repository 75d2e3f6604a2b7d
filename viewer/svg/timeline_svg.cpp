#include "viewer/svg/timeline_svg.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "allocator/counted.h"
#include "viewer/svg/svg_document.h"
#include "viewer/svg/svg_text.h"

namespace memsnap::svg {
namespace {

constexpr int kLeft = 80;
constexpr int kRight = 20;
constexpr int kTop = 60;
constexpr int kDetailLines = 14;

constexpr const char* kScript = R"JS(
var details;
function show(k) {
  var b = D.bands[k], lines = [];
  lines.push(fmt(b[0]) + ' at ' + b[1] + (b[4] ? ', allocated before the trace began' : ', allocated at event ' + b[2]) +
             (b[3] >= D.events ? ', never freed in the trace' : ', freed at event ' + b[3]));
  var stack = b[5] >= 0 ? D.stacks[b[5]] : [];
  if (!stack.length) lines.push('(no stack recorded)');
  for (var i = 0; i < stack.length && lines.length < D.detailLines; i++) lines.push('  ' + D.labels[stack[i]]);
  var spans = details.getElementsByTagName('tspan');
  for (var m = 0; m < spans.length; m++) spans[m].textContent = m < lines.length ? lines[m] : '';
}
window.addEventListener('load', function () {
  details = document.getElementById('details');
  document.documentElement.addEventListener('mouseover', function (e) {
    var k = e.target.getAttribute && e.target.getAttribute('data-k'); if (k) show(+k);
  });
});
)JS";

std::string axis_bytes(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int unit = 0;
  while (bytes >= 1024 && unit < 4) {
    bytes /= 1024;
    ++unit;
  }
  char text[32];
  std::snprintf(text, sizeof text, bytes < 10 && unit > 0 ? "%.1f %s" : "%.0f %s", bytes, units[unit]);
  return text;
}

}  // namespace

std::string render_timeline(const Snapshot& snapshot, const Timeline& timeline,
                            const TimelineSvgOptions& options) {
  const int width = std::max(options.width, 400);
  const int plot_width = width - kLeft - kRight;
  const int plot_height = std::max(options.plot_height, 100);
  const int details_top = kTop + plot_height + 50;
  const int height = details_top + (kDetailLines + 1) * 15 + 10;
  const double max_bytes = std::max<double>(1.0, static_cast<double>(timeline.peak_bytes) * 1.05);
  const double events = std::max<double>(1.0, static_cast<double>(timeline.events));
  auto x_of = [&](uint64_t event) { return kLeft + plot_width * static_cast<double>(event) / events; };
  auto y_of = [&](double bytes) { return kTop + plot_height - plot_height * bytes / max_bytes; };

  std::string out;
  char buffer[512];
  out += open_document(width, height, "polygon.a:hover{stroke:#000;stroke-width:1}");
  out += heading(width, 20, options.title,
                 "device " + std::to_string(timeline.device) + ": " + counted(timeline.events, "alloc/free event") +
                     ", " + counted(timeline.allocations, timeline.kind == TimelineKind::kSegments ? "segment or mapping" : "allocation",
                                    timeline.kind == TimelineKind::kSegments ? "segments and mappings" : "allocations") +
                     " (" + std::to_string(timeline.bands.size()) + " drawn alone, the rest in grey), peak " +
                     human_bytes(timeline.peak_bytes));

  // Axes and grid.
  for (int tick = 0; tick <= 5; ++tick) {
    const double bytes = max_bytes * tick / 5;
    const double y = y_of(bytes);
    std::snprintf(buffer, sizeof buffer,
                  "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#e4e4e4\"/>"
                  "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\" fill=\"#444\">%s</text>\n",
                  kLeft, y, kLeft + plot_width, y, kLeft - 6, y + 4, axis_bytes(bytes).c_str());
    out += buffer;
  }
  for (int tick = 0; tick <= 6 && timeline.events > 0; ++tick) {
    const auto event = static_cast<uint64_t>(events * tick / 6);
    const double x = x_of(event);
    // The time of the nearest sample, relative to the first.
    size_t nearest = static_cast<size_t>(std::lower_bound(timeline.samples.begin(), timeline.samples.end(), event) -
                                         timeline.samples.begin());
    nearest = std::min(nearest, timeline.samples.size() - 1);
    const double seconds = timeline.event_time_us.empty()
                               ? 0.0
                               : static_cast<double>(timeline.event_time_us[nearest] - timeline.event_time_us.front()) / 1e6;
    std::snprintf(buffer, sizeof buffer,
                  "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#bbb\"/>"
                  "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\" fill=\"#444\">%llu (%.3f s)</text>\n",
                  x, kTop + plot_height, x, kTop + plot_height + 5, x, kTop + plot_height + 18,
                  static_cast<unsigned long long>(event), seconds);
    out += buffer;
  }
  std::snprintf(buffer, sizeof buffer, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\" fill=\"#444\">event (time since the first)</text>\n",
                kLeft + plot_width / 2, kTop + plot_height + 36);
  out += buffer;

  // The merged band.
  if (!timeline.samples.empty()) {
    std::string points;
    for (size_t i = 0; i < timeline.samples.size(); ++i) {
      std::snprintf(buffer, sizeof buffer, "%.1f,%.1f ", x_of(timeline.samples[i]),
                    y_of(static_cast<double>(timeline.other_bytes[i])));
      points += buffer;
    }
    std::snprintf(buffer, sizeof buffer, "%.1f,%.1f %.1f,%.1f", x_of(timeline.samples.back()), y_of(0),
                  x_of(timeline.samples.front()), y_of(0));
    points += buffer;
    out += "<polygon points=\"" + points + "\" fill=\"#c8c8c8\"><title>smaller allocations, merged</title></polygon>\n";
  }

  // Bands: bottom edge forward, top edge back. Equal consecutive points collapse.
  std::vector<std::string> band_labels(timeline.bands.size());
  std::string stacks_json, labels_json, bands_json;
  std::vector<int32_t> label_ids(snapshot.frames.size(), -1);
  int32_t next_label = 0, next_stack = 0;
  for (size_t k = 0; k < timeline.bands.size(); ++k) {
    const TimelineBand& b = timeline.bands[k];
    if (b.bottom.empty()) continue;
    std::string forward, back;
    double last_y = -1;
    for (size_t i = 0; i < b.bottom.size(); ++i) {
      const double x = x_of(b.bottom[i].first), y = y_of(static_cast<double>(b.bottom[i].second));
      if (i > 0 && i + 1 < b.bottom.size() && std::fabs(y - last_y) < 0.05) continue;
      last_y = y;
      std::snprintf(buffer, sizeof buffer, "%.1f,%.1f ", x, y);
      forward += buffer;
      std::snprintf(buffer, sizeof buffer, "%.1f,%.1f ", x, y_of(static_cast<double>(b.bottom[i].second + b.size)));
      back.insert(0, buffer);
    }
    const std::vector<uint32_t> frames = visible_frames_outermost_first(snapshot, b.stack, options.frames);
    const std::optional<uint32_t> headline = headline_frame(snapshot, b.stack, options.frames);
    const std::string innermost = headline ? frame_label(snapshot.frames[*headline], options.frames) : "";
    // Neighbouring bands never share a colour: hues step by the golden angle in stacking order.
    const double shade = static_cast<double>(stable_hash(innermost + std::to_string(b.stack)) % 1000) / 1000.0;
    const std::string fill = hsl_to_rgb(static_cast<int>(std::fmod(static_cast<double>(k) * 137.508 + 20 * shade, 360.0)),
                                        0.5 + 0.15 * shade, 0.6 + 0.08 * static_cast<double>(k % 2));
    std::snprintf(buffer, sizeof buffer, "<polygon class=\"a\" data-k=\"%zu\" points=\"", k);
    out += buffer + forward + back + "\" fill=\"" + fill + "\" stroke=\"#fff\" stroke-width=\"0.4\"><title>" +
           escape(human_bytes(b.size) + (innermost.empty() ? "" : " " + innermost)) + "</title></polygon>\n";
    // Script data.
    int32_t stack_id = -1;
    if (!frames.empty()) {
      stack_id = next_stack++;
      stacks_json += stacks_json.empty() ? "[" : ",[";
      for (size_t i = 0; i < frames.size(); ++i) {
        const uint32_t f = frames[frames.size() - 1 - i];  // innermost first
        if (label_ids[f] < 0) {
          label_ids[f] = next_label++;
          labels_json += (labels_json.empty() ? "" : ",") + json_string(frame_label(snapshot.frames[f], options.frames));
        }
        stacks_json += (i ? "," : "") + std::to_string(label_ids[f]);
      }
      stacks_json += "]";
    }
    char address[32];
    std::snprintf(address, sizeof address, "0x%llx", static_cast<unsigned long long>(b.address));
    bands_json += (k ? ",[" : "[") + std::to_string(b.size) + "," + json_string(address) + "," +
                  std::to_string(b.start) + "," + std::to_string(b.end) + "," + (b.before_trace ? "1" : "0") +
                  "," + std::to_string(stack_id) + "]";
    // A label where the band is tall and long enough.
    const double band_height = plot_height * static_cast<double>(b.size) / max_bytes;
    const double band_width = x_of(b.end) - x_of(b.start);
    if (band_height >= 13 && band_width >= 90 && !b.bottom.empty()) {
      const auto& mid = b.bottom[b.bottom.size() / 2];
      std::string text = human_bytes(b.size) + (innermost.empty() ? "" : " " + innermost);
      const auto chars = static_cast<size_t>((band_width - 8) / 7);
      if (text.size() > chars) text = text.substr(0, chars > 2 ? chars - 2 : 0) + "..";
      std::snprintf(buffer, sizeof buffer, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\" pointer-events=\"none\">",
                    std::max(x_of(b.start), x_of(mid.first) - band_width / 4) + 4,
                    y_of(static_cast<double>(mid.second) + static_cast<double>(b.size) / 2) + 4);
      out += buffer + escape(text) + "</text>\n";
    }
  }
  // Out-of-memory errors (red, across the plot) and annotations (blue ticks on the event
  // axis), named on hover.
  for (const TimelineMarker& marker : timeline.markers) {
    const double x = x_of(marker.event);
    const bool oom = marker.kind == "oom";
    std::snprintf(buffer, sizeof buffer,
                  "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"%s\" stroke-width=\"%s\"><title>",
                  x, oom ? kTop : kTop + plot_height - 7, x, kTop + plot_height, oom ? "#c01c28" : "#2563eb", oom ? "2" : "1");
    out += buffer + escape((oom ? "" : marker.kind + " ") + marker.label + " (event " + std::to_string(marker.event) + ")") +
           "</title></line>\n";
  }
  if (timeline.peak_bytes > 0) {
    const double x = x_of(timeline.peak_event);
    std::snprintf(buffer, sizeof buffer,
                  "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#c01c28\" stroke-dasharray=\"4,3\"/>"
                  "<text x=\"%.1f\" y=\"%d\" fill=\"#c01c28\" text-anchor=\"middle\">peak %s</text>\n",
                  x, kTop, x, kTop + plot_height, x, kTop - 6, human_bytes(timeline.peak_bytes).c_str());
    out += buffer;
  } else {
    std::snprintf(buffer, sizeof buffer, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\" fill=\"#555\">no allocations in the trace</text>\n",
                  kLeft + plot_width / 2, kTop + plot_height / 2);
    out += buffer;
  }
  out += details_panel(10, details_top, kDetailLines, "hover an allocation for its stack");
  out += close_document("var D={\"events\":" + std::to_string(timeline.events) +
         ",\"detailLines\":" + std::to_string(kDetailLines) + ",\"labels\":[" + labels_json + "],\"stacks\":[" +
         stacks_json + "],\"bands\":[" + bands_json + "]};\n", kScript);
  return out;
}

}  // namespace memsnap::svg
