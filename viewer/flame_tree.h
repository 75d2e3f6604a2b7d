// A flamegraph as data: bytes attributed to paths of labels (state, then the frames of the
// stack that allocated them, outermost first), merged into a tree. Views fill it from a
// snapshot (memory_views.h); the SVG renderer, the folded-stacks writer and the web API
// read it. For comparisons each node also carries the bytes of a second ("before") input.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace memsnap {

// What a node's colour means, consistently across every view.
enum class FlameCategory : uint8_t {
  kRoot,
  kActiveAllocated,
  kActivePendingFree,
  kInactive,
  kGaps,      // bytes a block has beyond what was asked for (rounding), or unaccounted
  kGrouping,  // stream, device or segment levels
};

struct FlameNode {
  uint32_t label = 0;
  uint32_t parent = 0;
  uint32_t depth = 0;
  FlameCategory category = FlameCategory::kRoot;
  uint64_t bytes = 0;         // this input (the "after" one in a comparison)
  uint64_t before_bytes = 0;  // comparisons only
  uint64_t samples = 0;       // blocks or allocations that contributed
  uint64_t address = 0;       // of the last sample: meaningful when samples == 1
  std::vector<uint32_t> children;
};

class FlameTree {
 public:
  explicit FlameTree(std::string root_label = "all");
  uint32_t label_id(std::string_view label);
  struct Sample {
    FlameCategory category = FlameCategory::kActiveAllocated;  // of the levels below the groupings
    size_t grouping_levels = 0;   // the path's first levels are groupings (stream, segment)
    bool gaps_leaf = false;       // the last level is a <gaps> node
    bool before = false;          // counts toward before_bytes
    uint64_t address = 0;
  };
  // Adds `bytes` along `path` (label ids, root excluded).
  void add(const std::vector<uint32_t>& path, uint64_t bytes, const Sample& sample);
  // Children largest first (ties by label), for stable, readable layouts.
  void sort();

  const std::vector<FlameNode>& nodes() const { return nodes_; }
  const std::vector<std::string>& labels() const { return labels_; }
  const std::string& label(const FlameNode& node) const { return labels_[node.label]; }
  uint64_t total_bytes() const { return nodes_[0].bytes; }
  uint64_t total_before_bytes() const { return nodes_[0].before_bytes; }
  // The labels from the root's child down to `node`.
  std::vector<std::string_view> path_of(uint32_t node) const;
  // `frame;frame;frame bytes` lines (bytes a node holds beyond its children), the input
  // format of flamegraph.pl, speedscope and friends.
  std::string folded() const;

 private:
  uint32_t child(uint32_t parent, uint32_t label, FlameCategory category);

  std::vector<FlameNode> nodes_;
  std::vector<std::string> labels_;
  std::unordered_map<std::string, uint32_t> label_ids_;
  std::unordered_map<uint64_t, uint32_t> child_ids_;  // (parent << 32 | label) -> node
};

}  // namespace memsnap
