#include "viewer/svg/flamegraph_svg.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>

#include "viewer/svg/flamegraph_script.h"
#include "viewer/svg/svg_document.h"
#include "viewer/svg/svg_text.h"

namespace memsnap::svg {
namespace {

constexpr int kFlamePad = 10;
constexpr int kRow = 17;
constexpr int kFlameTop = 76;
constexpr int kFlameDetailLines = 14;
constexpr double kCharWidth = 7.0;  // 12 px monospace
// Nodes narrower than this (in pixels at full width) are left out: even zoomed 100x they
// would be a sliver.
constexpr double kMinWidthPixels = 0.01;
constexpr size_t kMaxNodes = 60000;

std::string fit(const std::string& text, double width) {
  const auto chars = static_cast<long>((width - 6) / kCharWidth);
  if (chars < 3) return "";
  if (static_cast<long>(text.size()) <= chars) return text;
  // Cut on a UTF-8 boundary.
  size_t cut = static_cast<size_t>(chars - 2);
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;
  return text.substr(0, cut) + "..";
}

std::string diff_colour(uint64_t after, uint64_t before) {
  if (after == before) return "rgb(235,235,235)";
  const double change = (static_cast<double>(after) - static_cast<double>(before)) /
                        static_cast<double>(std::max(after, before));
  const int fade = static_cast<int>(std::lround(210 - 170 * std::fabs(change)));
  char text[32];
  if (change > 0) std::snprintf(text, sizeof text, "rgb(255,%d,%d)", fade, fade);
  else std::snprintf(text, sizeof text, "rgb(%d,%d,255)", fade, fade);
  return text;
}

}  // namespace

std::string category_name(FlameCategory category) {
  switch (category) {
    case FlameCategory::kRoot: return "total";
    case FlameCategory::kActiveAllocated: return "active_allocated";
    case FlameCategory::kActivePendingFree: return "active_pending_free";
    case FlameCategory::kInactive: return "inactive (free)";
    case FlameCategory::kGaps: return "rounding gaps";
    case FlameCategory::kGrouping: return "stream / segment";
  }
  return "";
}

std::string category_colour(FlameCategory category, std::string_view label) {
  // A per-label shade within the category's hue family: neighbours differ, and a function
  // keeps its colour between files.
  const uint32_t h = stable_hash(label);
  const double jitter = static_cast<double>(h % 1000) / 1000.0;
  switch (category) {
    case FlameCategory::kRoot: return "rgb(200,200,200)";
    case FlameCategory::kActiveAllocated: return hsl_to_rgb(8 + 40 * jitter, 0.85, 0.58 + 0.1 * jitter);
    case FlameCategory::kActivePendingFree: return hsl_to_rgb(275 + 25 * jitter, 0.6, 0.62 + 0.1 * jitter);
    case FlameCategory::kInactive: return hsl_to_rgb(195 + 25 * jitter, 0.55, 0.66 + 0.1 * jitter);
    case FlameCategory::kGaps: return "rgb(170,170,170)";
    case FlameCategory::kGrouping: return hsl_to_rgb(95 + 40 * jitter, 0.45, 0.62 + 0.08 * jitter);
  }
  return "rgb(200,200,200)";
}

std::string render_flamegraph(const FlameTree& tree, const FlamegraphOptions& options) {
  const std::vector<FlameNode>& nodes = tree.nodes();
  const int width = std::max(options.width, 400);
  auto layout_width = [&](const FlameNode& n) {
    return options.differential ? n.bytes + n.before_bytes : n.bytes;
  };
  const uint64_t total = std::max<uint64_t>(layout_width(nodes[0]), 1);
  const double pixels_per_byte = static_cast<double>(width - 2 * kFlamePad) / static_cast<double>(total);

  // Which nodes to draw: pre-order, skipping slivers; raise the bar if still too many.
  double min_pixels = kMinWidthPixels;
  struct Placed {
    uint32_t node;
    int32_t parent;
    uint64_t x;
  };
  std::vector<Placed> placed;
  for (;;) {
    placed.clear();
    std::vector<std::pair<uint32_t, std::pair<int32_t, uint64_t>>> todo = {{0, {-1, 0}}};
    while (!todo.empty() && placed.size() <= kMaxNodes) {
      auto [n, where] = todo.back();
      todo.pop_back();
      const auto index = static_cast<int32_t>(placed.size());
      placed.push_back({n, where.first, where.second});
      uint64_t x = where.second;
      std::vector<std::pair<uint32_t, std::pair<int32_t, uint64_t>>> children;
      for (uint32_t c : nodes[n].children) {
        const uint64_t w = layout_width(nodes[c]);
        if (static_cast<double>(w) * pixels_per_byte >= min_pixels) children.push_back({c, {index, x}});
        x += w;
      }
      todo.insert(todo.end(), children.rbegin(), children.rend());
    }
    if (placed.size() <= kMaxNodes) break;
    min_pixels *= 4;
  }
  uint32_t max_depth = 0;
  for (const Placed& p : placed) max_depth = std::max(max_depth, nodes[p.node].depth);
  const int details_top = kFlameTop + static_cast<int>(max_depth + 1) * kRow + 20;
  const int height = details_top + (kFlameDetailLines + 1) * 15 + 10;

  std::string out;
  out.reserve(placed.size() * 220 + 16384);
  char buffer[512];
  out += open_document(width, height,
                       "g.n:hover rect{stroke:#222;stroke-width:0.8} g.n{cursor:pointer} "
                       ".button{cursor:pointer;fill:#1a5fb4} .button:hover{text-decoration:underline} "
                       "text{dominant-baseline:middle}");
  out += heading(width, 18, options.title, options.subtitle);
  std::snprintf(buffer, sizeof buffer,
                "<text id=\"unzoom\" class=\"button\" x=\"%d\" y=\"18\" style=\"opacity:0.3\">Reset zoom</text>\n"
                "<text id=\"search\" class=\"button\" x=\"%d\" y=\"18\" text-anchor=\"end\">Search</text>\n"
                "<text id=\"matched\" x=\"%d\" y=\"38\" text-anchor=\"end\" fill=\"#555\"></text>\n",
                kFlamePad, width - kFlamePad, width - kFlamePad);
  out += buffer;

  // Legend: the categories present (or the diff scale).
  double legend_x = kFlamePad;
  auto legend_item = [&](const std::string& colour, const std::string& name) {
    std::snprintf(buffer, sizeof buffer,
                  "<rect x=\"%.1f\" y=\"52\" width=\"12\" height=\"12\" fill=\"%s\"/><text x=\"%.1f\" y=\"58.5\">",
                  legend_x, colour.c_str(), legend_x + 16);
    out += buffer + escape(name) + "</text>\n";
    legend_x += 16 + static_cast<double>(name.size()) * kCharWidth + 18;
  };
  if (options.differential) {
    legend_item("rgb(255,40,40)", "grew");
    legend_item("rgb(40,40,255)", "shrank");
    legend_item("rgb(235,235,235)", "unchanged");
    legend_item("rgb(255,180,180)", "(paler: smaller change)");
  } else {
    std::set<FlameCategory> present;
    for (const Placed& p : placed) present.insert(nodes[p.node].category);
    for (FlameCategory c : present)
      if (c != FlameCategory::kRoot) legend_item(category_colour(c, ""), category_name(c));
  }

  for (size_t i = 0; i < placed.size(); ++i) {
    const FlameNode& n = nodes[placed[i].node];
    const std::string& name = tree.label(n);
    const double x = kFlamePad + static_cast<double>(placed[i].x) * pixels_per_byte;
    const double w = static_cast<double>(layout_width(n)) * pixels_per_byte;
    const int y = kFlameTop + static_cast<int>(n.depth) * kRow;
    const std::string fill = options.differential ? diff_colour(n.bytes, n.before_bytes)
                                                  : category_colour(n.category, name);
    std::snprintf(buffer, sizeof buffer, "<g class=\"n\" id=\"n%zu\" data-fill=\"%s\"><title>", i, fill.c_str());
    out += buffer;
    out += escape(name) + " (" + human_bytes(n.bytes);
    if (options.differential) out += ", before " + human_bytes(n.before_bytes);
    out += ")</title>";
    std::snprintf(buffer, sizeof buffer,
                  "<rect x=\"%.2f\" y=\"%d\" width=\"%.2f\" height=\"%d\" rx=\"2\" fill=\"%s\"/>"
                  "<text x=\"%.2f\" y=\"%.1f\">",
                  x, y, std::max(w - 0.5, 0.1), kRow - 1, fill.c_str(), x + 3, y + kRow / 2.0);
    out += buffer;
    out += escape(fit(name, w)) + "</text></g>\n";
  }
  out += details_panel(kFlamePad, details_top, kFlameDetailLines, "");
  if (placed.size() == 1) {
    std::snprintf(buffer, sizeof buffer, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\" fill=\"#555\">",
                  width / 2, kFlameTop + 2 * kRow + 6);
    out += buffer;
    out += "nothing to show: no memory in this view</text>\n";
  }

  // Data for the script.
  std::string data = "var D={\"width\":" + std::to_string(width) + ",\"diff\":" +
                     (options.differential ? "true" : "false") +
                     ",\"detailLines\":" + std::to_string(kFlameDetailLines) + ",\"labels\":[";
  std::vector<int32_t> label_index(tree.labels().size(), -1);
  std::vector<uint32_t> used_labels;
  for (const Placed& p : placed) {
    int32_t& index = label_index[nodes[p.node].label];
    if (index < 0) {
      index = static_cast<int32_t>(used_labels.size());
      used_labels.push_back(nodes[p.node].label);
    }
  }
  for (size_t i = 0; i < used_labels.size(); ++i) {
    if (i) data += ',';
    data += json_string(tree.labels()[used_labels[i]]);
  }
  auto array = [&](const char* key, auto value_of) {
    data += "],\"";
    data += key;
    data += "\":[";
    for (size_t i = 0; i < placed.size(); ++i) {
      if (i) data += ',';
      data += value_of(placed[i]);
    }
  };
  array("l", [&](const Placed& p) { return std::to_string(label_index[nodes[p.node].label]); });
  array("p", [&](const Placed& p) { return std::to_string(std::max(p.parent, 0)); });
  array("x", [&](const Placed& p) { return std::to_string(p.x); });
  array("w", [&](const Placed& p) { return std::to_string(layout_width(nodes[p.node])); });
  array("v", [&](const Placed& p) { return std::to_string(nodes[p.node].bytes); });
  array("b", [&](const Placed& p) { return std::to_string(nodes[p.node].before_bytes); });
  array("s", [&](const Placed& p) { return std::to_string(nodes[p.node].samples); });
  array("a", [&](const Placed& p) {
    char hex[24];
    std::snprintf(hex, sizeof hex, "\"0x%llx\"", static_cast<unsigned long long>(nodes[p.node].address));
    return std::string(hex);
  });
  data += "]};\n";
  out += close_document(data, kFlamegraphScript);
  return out;
}

}  // namespace memsnap::svg
