// Renders a FlameTree as a self-contained interactive SVG (no network, no external script):
// hover shows the full path, bytes, share and address; click zooms into a node (click the
// root or press Escape to zoom out); "Search" highlights nodes whose label matches a
// regular expression and reports their share. Nodes too narrow to ever see are left out
// so the file stays small.
#pragma once

#include <string>

#include "viewer/flame_tree.h"

namespace memsnap::svg {

struct FlamegraphOptions {
  std::string title = "Memory";
  std::string subtitle;
  bool differential = false;  // colour by after - before (red grew, blue shrank)
  int width = 1200;
};

std::string render_flamegraph(const FlameTree& tree, const FlamegraphOptions& options);

// Colours shared by every view, per category (the legend uses the same ones).
std::string category_colour(FlameCategory category, std::string_view label);
std::string category_name(FlameCategory category);

}  // namespace memsnap::svg
