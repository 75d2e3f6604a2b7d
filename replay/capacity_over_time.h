// The simulated device's memory over a replay whose capacity came from a recorded
// out-of-memory error (reserved + device free there), where the snapshot recorded the CUDA calls
// other libraries of the process made (snapshot/outside_device_history.h): at each entry, the
// capacity at the error plus what those libraries held then, less what they held at the entry.
// Before the oldest event the record kept, what they held is not known: the capacity at the
// error is taken there. It stays the capacity at the error throughout (varies() false) when they
// held the same all along, the record does not reach the error, or the trace has no times.
#pragma once

#include <cstdint>
#include <string>

#include "snapshot/outside_device_history.h"
#include "snapshot/snapshot.h"

namespace memsnap {

class CapacityOverTime {
 public:
  CapacityOverTime(const Snapshot& snapshot, int device, const DeviceTrace& trace, uint64_t capacity_at_oom,
                   int64_t oom_time_us);
  CapacityOverTime(const CapacityOverTime&) = delete;
  CapacityOverTime& operator=(const CapacityOverTime&) = delete;

  bool varies() const { return !description_.empty(); }
  const std::string& description() const { return description_; }  // for DeviceReplay
  uint64_t least_bytes() const { return least_; }
  uint64_t most_bytes() const { return most_; }

  // The capacity at each entry's time, asked in nondecreasing time.
  class Walk {
   public:
    explicit Walk(const CapacityOverTime& capacity) : capacity_(capacity), held_(capacity.history_) {}
    uint64_t at(int64_t time_us);

   private:
    const CapacityOverTime& capacity_;
    OutsideHeldCursor held_;
  };

 private:
  OutsideDeviceHistory history_;
  uint64_t capacity_at_oom_ = 0;
  uint64_t held_at_oom_ = 0;
  uint64_t least_ = 0, most_ = 0;
  std::string description_;
};

}  // namespace memsnap
