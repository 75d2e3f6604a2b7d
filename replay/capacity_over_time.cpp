#include "replay/capacity_over_time.h"

#include <algorithm>

namespace memsnap {

uint64_t CapacityOverTime::Walk::at(int64_t time_us) {
  const uint64_t held = held_.at(time_us);
  if (!capacity_.history_.known_at(time_us)) return capacity_.capacity_at_oom_;
  const uint64_t room = capacity_.capacity_at_oom_ + capacity_.held_at_oom_;
  return room > held ? room - held : 0;
}

CapacityOverTime::CapacityOverTime(const Snapshot& snapshot, int device, const DeviceTrace& trace,
                                   uint64_t capacity_at_oom, int64_t oom_time_us)
    : history_(outside_device_history(snapshot, device)),
      capacity_at_oom_(capacity_at_oom),
      least_(capacity_at_oom),
      most_(capacity_at_oom) {
  if (history_.changes.empty() || !history_.known_at(oom_time_us) || trace.empty() ||
      trace[0].time_us == trace[trace.size() - 1].time_us)
    return;  // nothing moved, not known at the error, or no times to place it by
  held_at_oom_ = OutsideHeldCursor(history_).at(oom_time_us);
  Walk walk(*this);
  uint64_t least = capacity_at_oom, most = capacity_at_oom;
  bool before_known = false;
  for (const TraceEntry& e : trace) {
    const uint64_t capacity = walk.at(e.time_us);
    least = std::min(least, capacity);
    most = std::max(most, capacity);
    before_known = before_known || !history_.known_at(e.time_us);
  }
  if (least == most) return;
  least_ = least;
  most_ = most;
  description_ =
      "it follows what other libraries of the process held outside the allocator: at each entry, the capacity at the "
      "error plus what they held then, less what they held at that entry";
  if (before_known)
    description_ += "; before the oldest recorded call kept, what they held is not known and the capacity at the error "
                    "is taken";
}

}  // namespace memsnap
