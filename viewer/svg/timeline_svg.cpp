#include "viewer/svg/timeline_svg.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <vector>

#include "allocator/counted.h"
#include "viewer/svg/svg_document.h"
#include "viewer/svg/svg_text.h"

namespace memsnap::svg {
namespace {

constexpr int kLeft = 80;
constexpr int kRight = 20;
constexpr int kTimelineTop = 60;
constexpr int kTimelineDetailLines = 14;

constexpr const char* kTimelineScript = R"JS(
var details;
function show(k) {
  var b = D.bands[k], lines = [];
  lines.push(fmt(b[0]) + ' at ' + b[1] + (b[4] ? ', allocated before the trace began' : ', allocated at trace entry ' + b[2]) +
             (b[6] ? ', never freed in the trace' : ', freed at trace entry ' + b[3]));
  var stack = b[5] >= 0 ? D.stacks[b[5]] : [];
  if (!stack.length) lines.push('(no stack recorded)');
  for (var i = 0; i < stack.length && lines.length < D.detailLines; i++)
    lines.push(stack[i] < 0 ? (i + 1 < stack.length ? 'C++, innermost first:' : '') : '  ' + D.labels[stack[i]]);
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

// A tick of the entry axis: a round trace entry number, where the samples put it on the event
// axis (between two samples, in proportion), and the sample nearest it for its time.
struct EntryTick {
  uint64_t entry;
  double at;
  size_t sample;
};

std::vector<EntryTick> entry_ticks(const Timeline& timeline, int count) {
  const std::vector<uint64_t>& entries = timeline.sample_entries;
  std::vector<EntryTick> ticks;
  if (entries.empty() || entries.size() != timeline.samples.size()) return ticks;
  const uint64_t first = entries.front(), last = entries.back();
  const double raw = std::max(1.0, static_cast<double>(last - first) / count);
  const double power = std::pow(10.0, std::floor(std::log10(raw)));
  uint64_t step = static_cast<uint64_t>(10 * power);
  for (double m : {1.0, 2.0, 5.0})
    if (m * power >= raw) {
      step = static_cast<uint64_t>(m * power);
      break;
    }
  step = std::max<uint64_t>(step, 1);
  for (uint64_t entry = (first + step - 1) / step * step; entry <= last; entry += step) {
    const auto i = static_cast<size_t>(std::lower_bound(entries.begin(), entries.end(), entry) - entries.begin());
    double at = static_cast<double>(timeline.samples[i]);
    if (entries[i] != entry && i > 0) {
      const double before = static_cast<double>(timeline.samples[i - 1]);
      at = before + (at - before) * static_cast<double>(entry - entries[i - 1]) /
                        static_cast<double>(std::max<uint64_t>(1, entries[i] - entries[i - 1]));
    }
    ticks.push_back({entry, at, i});
  }
  return ticks;
}

struct LabelBox {
  double left, top, right, bottom;
  bool overlaps(const LabelBox& o) const { return left < o.right && o.left < right && top < o.bottom && o.top < bottom; }
};

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
  const int details_top = kTimelineTop + plot_height + 50;
  const int height = details_top + (kTimelineDetailLines + 1) * 15 + 10;
  const double max_bytes = std::max<double>(1.0, static_cast<double>(timeline.peak_bytes) * 1.05);
  const double events = std::max<double>(1.0, static_cast<double>(timeline.events));
  auto x_of = [&](double event) { return kLeft + plot_width * event / events; };
  auto y_of = [&](double bytes) { return kTimelineTop + plot_height - plot_height * bytes / max_bytes; };

  std::string out;
  char buffer[512];
  out += open_document(width, height, "polygon.a:hover{stroke:#000;stroke-width:1}");
  out += heading(width, 20, options.title,
                 "device " + std::to_string(timeline.device) + ": " + counted(timeline.entries, "trace entry", "trace entries") +
                     ", " + counted(timeline.allocations, timeline.kind == TimelineKind::kSegments ? "segment or mapping" : "allocation",
                                    timeline.kind == TimelineKind::kSegments ? "segments and mappings" : "allocations") +
                     " (" + std::to_string(timeline.bands.size()) + " drawn alone, the rest merged), peak " +
                     human_bytes(timeline.peak_bytes) +
                     (timeline.peak_bytes > 0 ? " after trace entry " + std::to_string(timeline.peak_entry) : ""));

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
  for (const EntryTick& tick : entry_ticks(timeline, std::max(2, plot_width / 170))) {
    const double x = x_of(tick.at);
    const double seconds = timeline.event_time_us.empty()
                               ? 0.0
                               : static_cast<double>(timeline.event_time_us[tick.sample] - timeline.event_time_us.front()) / 1e6;
    char label[64];
    std::snprintf(label, sizeof label, "%llu (%.3f s)", static_cast<unsigned long long>(tick.entry), seconds);
    // Labels at the ends stay inside the picture.
    const double half = 3.3 * static_cast<double>(std::strlen(label));
    const char* anchor = x - half < 2 ? "start" : x + half > width - 2 ? "end" : "middle";
    std::snprintf(buffer, sizeof buffer,
                  "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#bbb\"/>"
                  "<text x=\"%.1f\" y=\"%d\" text-anchor=\"%s\" fill=\"#444\">%s</text>\n",
                  x, kTimelineTop + plot_height, x, kTimelineTop + plot_height + 5, x,
                  kTimelineTop + plot_height + 18, anchor, label);
    out += buffer;
  }
  std::snprintf(buffer, sizeof buffer, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\" fill=\"#444\">trace entry (time since the first)</text>\n",
                kLeft + plot_width / 2, kTimelineTop + plot_height + 36);
  out += buffer;

  // The merged allocations: what was live before the trace (above its bands) and the rest (on
  // top), each between its bottom and top at every sample.
  // `bottom(i)` and `bytes(i)` at sample i.
  const auto merged = [&](auto bottom, auto bytes, const std::string& fill, const std::string& title) {
    bool any = false;
    std::string forward, back;
    for (size_t i = 0; i < timeline.samples.size(); ++i) {
      any = any || bytes(i) > 0;
      const double x = x_of(static_cast<double>(timeline.samples[i]));
      std::snprintf(buffer, sizeof buffer, "%.1f,%.1f ", x, y_of(static_cast<double>(bottom(i) + bytes(i))));
      forward += buffer;
      std::snprintf(buffer, sizeof buffer, "%.1f,%.1f ", x, y_of(static_cast<double>(bottom(i))));
      back.insert(0, buffer);
    }
    if (any) out += "<polygon points=\"" + forward + back + "\" fill=\"" + fill + "\"><title>" + escape(title) + "</title></polygon>\n";
  };
  merged([&](size_t i) { return timeline.base_bottom[i]; }, [&](size_t i) { return timeline.base_bytes[i]; }, "#a8b2c2",
         "live before the trace began: " + counted(timeline.before_trace_allocations, "allocation") +
             ", those without a band of their own merged");
  for (size_t k = 0; k < timeline.merged_sites.size(); ++k) {
    const auto bottom = [&](size_t i) {
      uint64_t at = timeline.sites_bottom[i];
      for (size_t j = 0; j < k; ++j) at += timeline.merged_site_bytes[i][j];
      return at;
    };
    const std::string& site = timeline.merged_sites[k];
    merged(bottom, [&](size_t i) { return timeline.merged_site_bytes[i][k]; }, site_colour(site, 12),
           "allocations by " + (site.empty() ? std::string("no stack recorded") : site) + " without a band of their own, merged");
  }
  merged([&](size_t i) { return timeline.other_bottom[i]; }, [&](size_t i) { return timeline.other_bytes[i]; }, "#d4d4d4",
         "other small allocations, merged");

  // Where memory in use rose above the drawn outline between two samples: the most it reached.
  std::string ranges;
  for (size_t i = 1; i < timeline.samples.size() && i < timeline.most_bytes.size(); ++i) {
    const uint64_t drawn = std::max(timeline.total_bytes[i - 1], timeline.total_bytes[i]);
    if (timeline.most_bytes[i] <= drawn) continue;
    const double x0 = x_of(static_cast<double>(timeline.samples[i - 1])), x1 = x_of(static_cast<double>(timeline.samples[i]));
    const double top = y_of(static_cast<double>(timeline.most_bytes[i])), bottom = y_of(static_cast<double>(drawn));
    std::snprintf(buffer, sizeof buffer, "M%.1f %.1fH%.1fV%.1fH%.1fZ", x0, top, std::max(x1, x0 + 1), bottom, x0);
    ranges += buffer;
  }
  if (!ranges.empty())
    out += "<path d=\"" + ranges + "\" fill=\"rgba(90,90,120,0.22)\"><title>memory in use rose this high between two points of the "
           "picture: a wider picture (--width) shows more</title></path>\n";

  // Bands: bottom edge forward, top edge back, through the points where the band starts, moves
  // and ends; each in its call site's colour, neighbours a little lighter or darker.
  std::vector<LabelBox> labels;  // where band labels are already written
  std::string stacks_json, labels_json, bands_json;
  std::vector<int32_t> label_ids(snapshot.frames.size(), -1);
  int32_t next_label = 0, next_stack = 0;
  for (size_t k = 0; k < timeline.bands.size(); ++k) {
    const TimelineBand& b = timeline.bands[k];
    if (b.bottom.empty()) continue;
    std::string forward, back;
    for (const auto& [event, bottom] : b.bottom) {
      const double x = x_of(static_cast<double>(event));
      std::snprintf(buffer, sizeof buffer, "%.1f,%.1f ", x, y_of(static_cast<double>(bottom)));
      forward += buffer;
      std::snprintf(buffer, sizeof buffer, "%.1f,%.1f ", x, y_of(static_cast<double>(bottom + b.size)));
      back.insert(0, buffer);
    }
    const std::vector<uint32_t> frames = visible_frames_outermost_first(snapshot, b.stack, options.frames);
    const std::string site = site_label(snapshot, b.stack, options.frames);
    const std::string fill = site_colour(site, k % 2 ? 4 : -3);
    std::snprintf(buffer, sizeof buffer, "<polygon class=\"a\" data-k=\"%zu\" points=\"", k);
    out += buffer + forward + back + "\" fill=\"" + fill + "\" stroke=\"#fff\" stroke-width=\"0.4\"><title>" +
           escape(human_bytes(b.size) + (site.empty() ? "" : " " + site)) + "</title></polygon>\n";
    // Script data: the stack Python first (the user's code, innermost first), then the C++ frames
    // below it after a -1 (innermost first).
    int32_t stack_id = -1;
    if (!frames.empty()) {
      stack_id = next_stack++;
      stacks_json += stacks_json.empty() ? "[" : ",[";
      bool first = true;
      for (const bool python : {true, false}) {
        const bool any_python = std::any_of(frames.begin(), frames.end(), [&](uint32_t f) { return frame_is_python(snapshot.frames[f]); });
        if (!python && any_python) {
          stacks_json += first ? "-1" : ",-1";
          first = false;
        }
        for (size_t i = 0; i < frames.size(); ++i) {
          const uint32_t f = frames[frames.size() - 1 - i];  // innermost first
          if (frame_is_python(snapshot.frames[f]) != python) continue;
          if (label_ids[f] < 0) {
            label_ids[f] = next_label++;
            labels_json += (labels_json.empty() ? "" : ",") + json_string(frame_label(snapshot.frames[f], options.frames));
          }
          stacks_json += (first ? "" : ",") + std::to_string(label_ids[f]);
          first = false;
        }
      }
      stacks_json += "]";
    }
    char address[32];
    std::snprintf(address, sizeof address, "0x%llx", static_cast<unsigned long long>(b.address));
    bands_json += (k ? ",[" : "[") + std::to_string(b.size) + "," + json_string(address) + "," +
                  std::to_string(b.start_entry) + "," + std::to_string(b.end_entry) + "," + (b.before_trace ? "1" : "0") +
                  "," + std::to_string(stack_id) + "," + (b.end >= timeline.events ? "1" : "0") + "]";
    // A label on the band's longest flat stretch, where it is tall and long enough and no other
    // label is.
    const double band_height = plot_height * static_cast<double>(b.size) / max_bytes;
    size_t flat = b.bottom.size();
    double flat_width = 0;
    for (size_t i = 0; i + 1 < b.bottom.size(); ++i) {
      const double w = x_of(static_cast<double>(b.bottom[i + 1].first)) - x_of(static_cast<double>(b.bottom[i].first));
      if (b.bottom[i].second == b.bottom[i + 1].second && w > flat_width) {
        flat = i;
        flat_width = w;
      }
    }
    if (band_height >= 13 && flat_width >= 90) {
      std::string text = human_bytes(b.size) + (site.empty() ? "" : " " + site);
      const auto chars = static_cast<size_t>((flat_width - 8) / 7);
      if (text.size() > chars) text = text.substr(0, chars > 2 ? chars - 2 : 0) + "..";
      const double x = x_of(static_cast<double>(b.bottom[flat].first)) + 4;
      const double y = y_of(static_cast<double>(b.bottom[flat].second) + static_cast<double>(b.size) / 2) + 4;
      const LabelBox box{x, y - 11, x + 6.2 * static_cast<double>(text.size()), y + 3};
      if (std::none_of(labels.begin(), labels.end(), [&](const LabelBox& other) { return box.overlaps(other); })) {
        labels.push_back(box);
        std::snprintf(buffer, sizeof buffer, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\" pointer-events=\"none\">", x, y);
        out += buffer + escape(text) + "</text>\n";
      }
    }
  }
  // Out-of-memory errors (red, across the plot) and annotations (blue ticks on the event
  // axis), named on hover.
  for (const TimelineMarker& marker : timeline.markers) {
    const double x = x_of(marker.event);
    const bool oom = marker.kind == "oom";
    std::snprintf(buffer, sizeof buffer,
                  "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"%s\" stroke-width=\"%s\"><title>",
                  x, oom ? kTimelineTop : kTimelineTop + plot_height - 7, x, kTimelineTop + plot_height,
                  oom ? "#c01c28" : "#2563eb", oom ? "2" : "1");
    out += buffer + escape((oom ? "" : marker.kind + " ") + marker.label + " (trace entry " + std::to_string(marker.entry.value_or(0)) + ")") +
           "</title></line>\n";
  }
  if (timeline.peak_bytes > 0) {
    const double x = x_of(timeline.peak_event);
    std::snprintf(buffer, sizeof buffer,
                  "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#c01c28\" stroke-dasharray=\"4,3\"/>"
                  "<text x=\"%.1f\" y=\"%d\" fill=\"#c01c28\" text-anchor=\"middle\">peak %s</text>\n",
                  x, kTimelineTop, x, kTimelineTop + plot_height, x, kTimelineTop - 6,
                  human_bytes(timeline.peak_bytes).c_str());
    out += buffer;
  } else {
    std::snprintf(buffer, sizeof buffer, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\" fill=\"#555\">no allocations in the trace</text>\n",
                  kLeft + plot_width / 2, kTimelineTop + plot_height / 2);
    out += buffer;
  }
  out += details_panel(10, details_top, kTimelineDetailLines, "hover an allocation for its stack");
  out += close_document("var D={\"events\":" + std::to_string(timeline.events) +
         ",\"detailLines\":" + std::to_string(kTimelineDetailLines) + ",\"labels\":[" + labels_json + "],\"stacks\":[" +
         stacks_json + "],\"bands\":[" + bands_json + "]};\n", kTimelineScript);
  return out;
}

}  // namespace memsnap::svg
