#include "viewer/outside_holders.h"

#include <algorithm>
#include <map>
#include <unordered_map>
#include <utility>

namespace memsnap {

std::optional<std::vector<OutsideHolder>> outside_holders_at(const Snapshot& snapshot, int64_t device, int64_t time_us,
                                                             std::string& reason) {
  if (!snapshot.outside_memory) return std::nullopt;
  const OutsideMemory& outside = *snapshot.outside_memory;
  if (!outside.unrecorded_reason.empty()) {
    reason = "the calls outside the allocator were not recorded: " + outside.unrecorded_reason;
    return std::nullopt;
  }
  if (outside.dropped_events > 0 && (outside.events.empty() || outside.events.front().allocation.time_us > time_us)) {
    reason = "the recorded calls outside the allocator no longer reach back to the error";
    return std::nullopt;
  }
  std::vector<const OutsideAllocation*> held;
  for (const OutsideAllocation& a : outside.live)
    if (a.device == device && a.kind == OutsideKind::kDevice && a.time_us <= time_us) held.push_back(&a);
  // Freed after the error: held at it when the allocation it ended came before the error (or
  // before the oldest event kept, which came before the error). One pass: each free meets the
  // latest allocation at its address before it.
  std::unordered_map<uint64_t, const OutsideAllocation*> made_at;
  for (const OutsideEvent& event : outside.events) {
    const OutsideAllocation& a = event.allocation;
    if (event.action == OutsideAction::kAlloc) {
      made_at[a.address] = &a;
      continue;
    }
    if (event.action != OutsideAction::kFree || a.time_us <= time_us || a.device != device ||
        a.kind != OutsideKind::kDevice)
      continue;
    const auto made = made_at.find(a.address);
    if (made == made_at.end()) {
      held.push_back(&a);
    } else {
      if (made->second->time_us <= time_us) held.push_back(made->second);
      made_at.erase(made);
    }
  }
  std::map<std::string, OutsideHolder> by_library;
  std::map<std::string, const OutsideAllocation*> largest;
  for (const OutsideAllocation* a : held) {
    OutsideHolder& holder = by_library[a->library];
    holder.library = a->library;
    holder.bytes += a->size;
    ++holder.allocations;
    const OutsideAllocation*& biggest = largest[a->library];
    if (biggest == nullptr || a->size > biggest->size) biggest = a;
  }
  std::vector<OutsideHolder> holders;
  for (auto& [library, holder] : by_library) {
    holder.largest_stack = largest[library]->stack;
    holders.push_back(std::move(holder));
  }
  std::stable_sort(holders.begin(), holders.end(), [](const auto& a, const auto& b) { return a.bytes > b.bytes; });
  return holders;
}

}  // namespace memsnap
