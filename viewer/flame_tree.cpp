#include "viewer/flame_tree.h"

#include <algorithm>

namespace memsnap {

FlameTree::FlameTree(std::string root_label) {
  nodes_.push_back(FlameNode{});
  nodes_[0].label = label_id(root_label);
}

uint32_t FlameTree::label_id(std::string_view label) {
  auto it = label_ids_.find(std::string(label));
  if (it != label_ids_.end()) return it->second;
  const auto id = static_cast<uint32_t>(labels_.size());
  labels_.emplace_back(label);
  label_ids_.emplace(labels_.back(), id);
  return id;
}

uint32_t FlameTree::child(uint32_t parent, uint32_t label, FlameCategory category) {
  const uint64_t key = (uint64_t{parent} << 32) | label;
  auto [it, added] = child_ids_.try_emplace(key, static_cast<uint32_t>(nodes_.size()));
  if (added) {
    FlameNode node;
    node.label = label;
    node.parent = parent;
    node.depth = nodes_[parent].depth + 1;
    node.category = category;
    nodes_.push_back(std::move(node));
    nodes_[parent].children.push_back(it->second);
  }
  return it->second;
}

void FlameTree::add(const std::vector<uint32_t>& path, uint64_t bytes, const Sample& sample) {
  if (bytes == 0) return;
  uint32_t node = 0;
  auto count = [&](uint32_t n) {
    FlameNode& f = nodes_[n];
    (sample.before ? f.before_bytes : f.bytes) += bytes;
    f.samples += 1;
    f.address = sample.address;
  };
  count(0);
  for (size_t i = 0; i < path.size(); ++i) {
    FlameCategory category = sample.category;
    if (i < sample.grouping_levels) category = FlameCategory::kGrouping;
    else if (sample.gaps_leaf && i + 1 == path.size()) category = FlameCategory::kGaps;
    node = child(node, path[i], category);
    count(node);
  }
}

void FlameTree::sort() {
  for (FlameNode& node : nodes_) {
    std::sort(node.children.begin(), node.children.end(), [&](uint32_t a, uint32_t b) {
      const uint64_t wa = std::max(nodes_[a].bytes, nodes_[a].before_bytes);
      const uint64_t wb = std::max(nodes_[b].bytes, nodes_[b].before_bytes);
      if (wa != wb) return wa > wb;
      return labels_[nodes_[a].label] < labels_[nodes_[b].label];
    });
  }
}

std::vector<std::string_view> FlameTree::path_of(uint32_t node) const {
  std::vector<std::string_view> path;
  for (uint32_t n = node; n != 0; n = nodes_[n].parent) path.push_back(labels_[nodes_[n].label]);
  std::reverse(path.begin(), path.end());
  return path;
}

std::string FlameTree::folded() const {
  std::string out;
  for (uint32_t n = 1; n < nodes_.size(); ++n) {
    uint64_t self = nodes_[n].bytes;
    for (uint32_t c : nodes_[n].children) self -= std::min(self, nodes_[c].bytes);
    if (self == 0) continue;
    bool first = true;
    for (std::string_view part : path_of(n)) {
      if (!first) out += ';';
      first = false;
      // ';' separates frames and the last space separates the count: keep both unambiguous.
      for (char c : part) out += (c == ';' ? ':' : c == '\n' ? ' ' : c);
    }
    out += ' ';
    out += std::to_string(self);
    out += '\n';
  }
  return out;
}

}  // namespace memsnap
