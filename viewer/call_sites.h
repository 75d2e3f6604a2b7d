// Call sites: what a view names an allocation by (frame_labels.h's site_label: the innermost
// Python line, "backward of ..." for a backward allocation joined to its forward call, a C++
// stack's innermost frame with its caller), as small ids, so an analysis can group allocations
// by the line that made them. Each stack's label is made once; stacks with one label share a
// site.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "snapshot/snapshot.h"

namespace memsnap {

class CallSites {
 public:
  explicit CallSites(const Snapshot& snapshot) : snapshot_(snapshot) {}

  // The site of a stack ("" for none recorded, or a stack with no visible frame).
  uint32_t of(StackIndex stack);
  const std::string& label(uint32_t site) const { return labels_[site]; }
  size_t size() const { return labels_.size(); }

 private:
  static constexpr uint32_t kUnknown = UINT32_MAX;
  const Snapshot& snapshot_;
  std::vector<uint32_t> by_stack_;  // by stack index + 1 (kNoStackIndex first): an analysis asks per allocation
  std::unordered_map<std::string, uint32_t> by_label_;
  std::vector<std::string> labels_;
};

}  // namespace memsnap
