// A snapshot's frame and stack tables, filled as stacks are symbolized: each distinct frame
// (function, file, line) and each distinct stack is stored once and named by its index, so a
// million trace entries that share a call path share one stack.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "history/symbolizer.h"
#include "snapshot/snapshot.h"

namespace memsnap {

class SnapshotStackTables {
 public:
  // Appends to `snapshot`'s frames and stacks; those it already holds are found again, so a
  // second set of stacks added to a snapshot shares the first's entries.
  explicit SnapshotStackTables(Snapshot& snapshot);

  uint32_t intern_frame(SourceFrame frame);
  StackIndex intern_stack(std::vector<uint32_t> frames);  // frame indices, innermost first

 private:
  struct FramesHash {
    size_t operator()(const std::vector<uint32_t>& frames) const;
  };
  Snapshot& snapshot_;
  std::unordered_map<std::string, uint32_t> frame_index_;
  std::unordered_map<std::vector<uint32_t>, StackIndex, FramesHash> stack_index_;
};

}  // namespace memsnap
