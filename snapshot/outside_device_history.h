// The device memory a process's other libraries held on one device over time, from the CUDA
// calls recorded outside the allocator (Snapshot::outside_memory): what each library held
// before the oldest event kept, and each change since, in time order (the trace's clock). The
// Timeline's whole-device mode draws it; a replay takes it out of the device's capacity at each
// moment. Only what the record supports: from when on it is known, or why it is not at all.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "snapshot/snapshot.h"

namespace memsnap {

struct OutsideDeviceHistory {
  // Known at and after this time (the oldest event kept, when older ones were dropped; else when
  // the recording began, where the snapshot says; else the lowest time); at no time when the
  // calls were not recorded, the snapshot holds no record of them, or the record kept no event.
  // `note` says why, when not always.
  int64_t known_from_us = std::numeric_limits<int64_t>::max();
  std::string note;
  std::vector<std::string> libraries;  // by library index ("" when not known)
  // What each library held before the first change (sums wrap: read through held_bytes()).
  std::vector<uint64_t> before;
  struct Change {
    int64_t time_us;
    size_t library;
    uint64_t bytes;  // added (a free adds the negative)
  };
  std::vector<Change> changes;  // by time, then as recorded

  bool known_at(int64_t time_us) const { return time_us >= known_from_us; }
};

OutsideDeviceHistory outside_device_history(const Snapshot& snapshot, int64_t device);

// A wrapping sum of bytes read as signed, less than nothing read as nothing.
inline uint64_t held_bytes(uint64_t sum) {
  const auto value = static_cast<int64_t>(sum);
  return value > 0 ? static_cast<uint64_t>(value) : 0;
}

// All libraries together, walked forward in time: what they held at each moment asked, in
// nondecreasing time.
class OutsideHeldCursor {
 public:
  explicit OutsideHeldCursor(const OutsideDeviceHistory& history);
  uint64_t at(int64_t time_us);  // bytes held at `time_us` (after the changes made by then)

 private:
  const OutsideDeviceHistory& history_;
  size_t next_ = 0;
  uint64_t held_ = 0;
};

}  // namespace memsnap
