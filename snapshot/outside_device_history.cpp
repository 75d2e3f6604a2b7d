#include "snapshot/outside_device_history.h"

#include <algorithm>
#include <unordered_map>

namespace memsnap {
namespace {

bool device_memory_on(const OutsideAllocation& a, int64_t device) {
  return a.device == device && a.kind == OutsideKind::kDevice;
}

}  // namespace

OutsideDeviceHistory outside_device_history(const Snapshot& snapshot, int64_t device) {
  OutsideDeviceHistory out;
  if (!snapshot.outside_memory) {
    out.note =
        "the snapshot holds no record of the CUDA calls made outside the allocator (PyTorch's snapshots do not record "
        "them; memsnap.torch records them while history is recorded, memsnap record always)";
    return out;
  }
  const OutsideMemory& outside = *snapshot.outside_memory;
  if (!outside.unrecorded_reason.empty()) {
    out.note = "the CUDA calls outside the allocator were not recorded: " + outside.unrecorded_reason;
    return out;
  }
  std::unordered_map<std::string, size_t> index_of;
  const auto library = [&](const std::string& name) {
    const auto [it, added] = index_of.try_emplace(name, out.libraries.size());
    if (added) {
      out.libraries.push_back(name);
      out.before.push_back(0);
    }
    return it->second;
  };
  // What is live at the snapshot, less what the kept events added since: what was held before
  // the first of them.
  for (const OutsideAllocation& a : outside.live)
    if (device_memory_on(a, device)) out.before[library(a.library)] += a.size;
  for (const OutsideEvent& event : outside.events) {
    const OutsideAllocation& a = event.allocation;
    if (event.action == OutsideAction::kOom || !device_memory_on(a, device)) continue;
    const size_t at = library(a.library);
    const uint64_t bytes = event.action == OutsideAction::kAlloc ? a.size : uint64_t{0} - a.size;
    out.before[at] -= bytes;
    out.changes.push_back({a.time_us, at, bytes});
  }
  std::stable_sort(out.changes.begin(), out.changes.end(),
                   [](const OutsideDeviceHistory::Change& x, const OutsideDeviceHistory::Change& y) {
                     return x.time_us < y.time_us;
                   });
  out.known_from_us = std::numeric_limits<int64_t>::min();
  if (outside.dropped_events > 0) {
    if (outside.events.empty()) {
      out.known_from_us = std::numeric_limits<int64_t>::max();
      out.note = "the recorded calls outside the allocator kept none of their events, only what was live at the snapshot";
    } else {
      out.known_from_us = outside.events.front().allocation.time_us;
      out.note = "the recorded calls outside the allocator kept only their newest events; before the oldest kept, what "
                 "other libraries held is not known";
    }
  }
  // Before the recording began, its calls say nothing (what was allocated then is in no record).
  if (outside.recorded_since_us && *outside.recorded_since_us > out.known_from_us) {
    out.known_from_us = *outside.recorded_since_us;
    if (out.note.empty())
      out.note = "the calls outside the allocator were recorded from a later moment on; before it, what other "
                 "libraries held is not known";
  }
  return out;
}

OutsideHeldCursor::OutsideHeldCursor(const OutsideDeviceHistory& history) : history_(history) {
  for (uint64_t bytes : history.before) held_ += bytes;
}

uint64_t OutsideHeldCursor::at(int64_t time_us) {
  for (; next_ < history_.changes.size() && history_.changes[next_].time_us <= time_us; ++next_)
    held_ += history_.changes[next_].bytes;
  return held_bytes(held_);
}

}  // namespace memsnap
