// What other libraries of a process held on a device at one moment, from a snapshot's record of
// the calls made outside the allocator (Snapshot::outside_memory): the allocations live at the
// snapshot that were made by then, and those freed since whose allocation came before it, by
// the library that made them. explain-oom asks it for the moment of the error.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "snapshot/snapshot.h"

namespace memsnap {

struct OutsideHolder {
  std::string library;  // "" when unknown
  uint64_t bytes = 0;
  uint64_t allocations = 0;
  StackIndex largest_stack = kNoStackIndex;  // the stack of its largest allocation
};

// Device memory (not managed, not host) held on `device` at `time_us` (the trace's clock), by
// library, largest first. Unset, with `reason` set, when the snapshot cannot say: the calls were
// not recorded, or the events kept no longer reach back to that moment; unset, reason left
// empty, when the snapshot holds no record of such calls.
std::optional<std::vector<OutsideHolder>> outside_holders_at(const Snapshot& snapshot, int64_t device, int64_t time_us,
                                                             std::string& reason);

}  // namespace memsnap
