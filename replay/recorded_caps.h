// The memory caps a recorded run's allocator worked under, entry by entry of one device's trace
// (memory_cap.h): from the trace's kMemoryCap state changes, which memsnap's recorder writes
// from the moment it starts (a cap, or "none"), so their absence means the file does not say.
// A replay under the recorded settings runs under the same caps, and explain-oom names the cap
// that refused an error; where the file does not say (PyTorch's pickles, older memsnap files),
// nothing here is known and a cap can only be inferred (the device had room at the error).
#pragma once

#include <cstddef>
#include <optional>
#include <vector>

#include "allocator/allocator_config.h"
#include "allocator/memory_cap.h"
#include "snapshot/snapshot.h"

namespace memsnap {

class RecordedCaps {
 public:
  RecordedCaps(const Snapshot& snapshot, int64_t device, const AllocatorConfig& recorded);
  // The file says which cap held (or that none did) throughout its trace.
  bool known() const { return known_; }
  // The cap in effect at trace entry `entry` (unset: none, or not known).
  const std::optional<MemoryCap>& at(size_t entry) const;
  // The changes: each takes effect just before its entry (entry 0: the state the trace began in).
  const std::vector<std::pair<size_t, std::optional<MemoryCap>>>& list() const { return changes_; }
  size_t changes() const { return changes_.size(); }
  // Text readable as a problem when a recorded cap could not be read; "" otherwise.
  const std::string& problem() const { return problem_; }

 private:
  bool known_ = false;
  std::vector<std::pair<size_t, std::optional<MemoryCap>>> changes_;  // by entry, in order
  std::optional<MemoryCap> none_;
  std::string problem_;
};

}  // namespace memsnap
