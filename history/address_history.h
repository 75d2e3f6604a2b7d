// The allocation that last lived in each stretch of device memory: what a snapshot shows as
// a block's history, and for a live block, who allocated it.
//
// Entries never overlap: a new allocation replaces every entry its bytes touch, so a free
// block that merged two neighbours still shows both of their last allocations until
// something new lands on them (PyTorch's rule). Entries are kept per segment, in flat
// vectors sorted by address: an allocation finds its segment and its entry where it found
// them the last time (Place), or binary-searches for them, where an ordered map walked a
// dozen tree nodes on every event. Not thread-safe; the recorder calls it under the
// device's lock.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "history/stack_table.h"
#include "history/tick_clock.h"

namespace memsnap {

class AddressHistory {
 public:
  struct Entry {
    uintptr_t address = 0;
    size_t block_size = 0;      // bytes it occupied (after rounding)
    size_t requested_size = 0;  // bytes asked for
    StackId stack = kNoStack;
    Ticks ticks = 0;
  };

  // Where the entries of a segment, and one entry in them, were last found: a guess the
  // caller keeps (in the allocator's block and segment) and record() checks before use.
  // Right, it turns the common case (a block reused whole) into two probes instead of two
  // binary searches; wrong or stale, it costs nothing but the searches.
  struct Place {
    uint32_t& segment;
    uint32_t& entry;
  };

  // `entry` now lives in its bytes of the segment at [segment_address, + segment_size).
  void record(uintptr_t segment_address, size_t segment_size, const Entry& entry, Place place);
  // Without a kept place (tests, one-off records): always searches.
  void record(uintptr_t segment_address, size_t segment_size, const Entry& entry) {
    uint32_t segment_hint = 0, entry_hint = 0;
    record(segment_address, segment_size, entry, {segment_hint, entry_hint});
  }
  // Drops entries that overlap [address, address + size), and segments wholly inside it.
  void forget(uintptr_t address, size_t size);
  // Entries that start within [address, address + size), in address order.
  std::vector<Entry> within(uintptr_t address, size_t size) const;
  template <typename Predicate>
  void erase_if(Predicate drop) {
    for (SegmentEntries& segment : segments_) std::erase_if(segment.entries, drop);
  }
  size_t size() const;

 private:
  struct SegmentEntries {
    uintptr_t address = 0;
    size_t size = 0;
    std::vector<Entry> entries;  // sorted by address, never overlapping
  };
  SegmentEntries& segment_for(uintptr_t address, size_t size, uint32_t& hint);

  std::vector<SegmentEntries> segments_;  // sorted by address
};

}  // namespace memsnap
