#include "snapshot/snapshot_checks.h"

#include <algorithm>
#include <cstdio>
#include <vector>

namespace memsnap {
namespace {

std::string hex(uint64_t value) {
  char text[24];
  std::snprintf(text, sizeof text, "0x%llx", static_cast<unsigned long long>(value));
  return text;
}

std::string segment_name(const SnapshotSegment& s) {
  return "segment " + hex(s.address) + " (device " + std::to_string(s.device) + ", " +
         std::to_string(s.total_size) + " bytes)";
}

bool stack_ok(const Snapshot& snapshot, StackIndex stack) {
  return stack == kNoStackIndex || (stack >= 0 && static_cast<uint64_t>(stack) < snapshot.stacks.size());
}

}  // namespace

std::optional<std::string> check_snapshot(const Snapshot& snapshot) {
  for (size_t i = 0; i < snapshot.stacks.size(); ++i)
    for (uint32_t frame : snapshot.stacks[i])
      if (frame >= snapshot.frames.size())
        return "stack " + std::to_string(i) + " names frame " + std::to_string(frame) + " of " +
               std::to_string(snapshot.frames.size());
  for (const SnapshotSegment& s : snapshot.segments) {
    if (!stack_ok(snapshot, s.stack)) return segment_name(s) + ": its stack index is out of range";
    if (s.address > UINT64_MAX - s.total_size) return segment_name(s) + ": runs past the end of the address space";
    uint64_t at = s.address, allocated = 0, active = 0;
    for (const SnapshotBlock& b : s.blocks) {
      if (b.address != at)
        return segment_name(s) + ": block " + hex(b.address) + " should start at " + hex(at) +
               (b.address < at ? " (it overlaps the block before it)" : " (a gap precedes it)");
      if (b.size == 0 || b.size > s.address + s.total_size - at)
        return segment_name(s) + ": block " + hex(b.address) + " of " + std::to_string(b.size) +
               " bytes lies outside the segment";
      if (b.state != BlockState::kInactive && b.requested_size > b.size)
        return segment_name(s) + ": block " + hex(b.address) + " was asked " +
               std::to_string(b.requested_size) + " bytes but holds " + std::to_string(b.size);
      if (!stack_ok(snapshot, b.stack)) return segment_name(s) + ": block " + hex(b.address) + " has a stack index out of range";
      for (const HistoryItem& h : b.history)
        if (!stack_ok(snapshot, h.stack)) return segment_name(s) + ": block " + hex(b.address) + " has a history stack out of range";
      if (b.state == BlockState::kActiveAllocated) allocated += b.size;
      if (b.state != BlockState::kInactive) active += b.size;
      at += b.size;
    }
    if (!s.blocks.empty() && at != s.address + s.total_size)
      return segment_name(s) + ": its blocks cover " + std::to_string(at - s.address) + " bytes, not " +
             std::to_string(s.total_size);
    if (!s.blocks.empty() && allocated != s.allocated_size)
      return segment_name(s) + ": allocated_size says " + std::to_string(s.allocated_size) +
             " bytes, its allocated blocks hold " + std::to_string(allocated);
    if (!s.blocks.empty() && active != s.active_size)
      return segment_name(s) + ": active_size says " + std::to_string(s.active_size) +
             " bytes, its active blocks hold " + std::to_string(active);
  }
  // Segments of one device never overlap.
  std::vector<const SnapshotSegment*> order;
  for (const SnapshotSegment& s : snapshot.segments) order.push_back(&s);
  std::sort(order.begin(), order.end(), [](const SnapshotSegment* a, const SnapshotSegment* b) {
    return a->device != b->device ? a->device < b->device : a->address < b->address;
  });
  for (size_t i = 1; i < order.size(); ++i)
    if (order[i]->device == order[i - 1]->device &&
        order[i]->address < order[i - 1]->address + order[i - 1]->total_size)
      return segment_name(*order[i]) + " overlaps " + segment_name(*order[i - 1]);
  for (const auto& trace : snapshot.device_traces)
    for (const TraceEntry& e : trace)
      if (!stack_ok(snapshot, e.stack)) return "a trace entry has a stack index out of range";
  // Changes of what events were recorded under name events of their device's trace, in order.
  if (snapshot.trace_state_changes.size() > snapshot.device_traces.size())
    return "trace_state_changes names " + std::to_string(snapshot.trace_state_changes.size()) +
           " devices, the traces " + std::to_string(snapshot.device_traces.size());
  for (size_t d = 0; d < snapshot.trace_state_changes.size(); ++d) {
    const auto& changes = snapshot.trace_state_changes[d];
    for (size_t i = 0; i < changes.size(); ++i) {
      if (changes[i].event_index > snapshot.device_traces[d].size())
        return "device " + std::to_string(d) + ": a trace state change names event " +
               std::to_string(changes[i].event_index) + " of " + std::to_string(snapshot.device_traces[d].size());
      if (i > 0 && changes[i].event_index < changes[i - 1].event_index)
        return "device " + std::to_string(d) + ": trace state changes are out of event order";
    }
  }
  return std::nullopt;
}

}  // namespace memsnap
