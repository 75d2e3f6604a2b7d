#include "snapshot/pickle_extras.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "snapshot/base64_text.h"
#include "snapshot/msgpack_reader.h"
#include "snapshot/msgpack_writer.h"
#include "snapshot/snapshot_stacks.h"

namespace memsnap {
namespace {

// `stack` of `from` as a stack of the snapshot whose tables are `into`.
StackIndex copy_stack(const Snapshot& from, StackIndex stack, SnapshotStackTables& into) {
  if (stack < 0 || static_cast<size_t>(stack) >= from.stacks.size()) return kNoStackIndex;
  std::vector<uint32_t> frames;
  frames.reserve(from.stacks[static_cast<size_t>(stack)].size());
  for (const uint32_t frame : from.stacks[static_cast<size_t>(stack)]) {
    if (frame >= from.frames.size()) return kNoStackIndex;  // (the readers check: never met)
    const Frame& f = from.frames[frame];
    frames.push_back(into.intern_frame({f.function, f.file, static_cast<int>(f.line)}));
  }
  return into.intern_stack(std::move(frames));
}

// Each allocation's stack, from `from`'s tables to `into`'s: each of `from`'s stacks copied once
// (events repeat a few stacks many times over).
void copy_stacks(const Snapshot& from, OutsideMemory& outside, SnapshotStackTables& into) {
  constexpr StackIndex kNotCopied = -2;
  std::vector<StackIndex> copied(from.stacks.size(), kNotCopied);
  const auto copy = [&](StackIndex& stack) {
    if (stack < 0 || static_cast<size_t>(stack) >= copied.size()) {
      stack = kNoStackIndex;
      return;
    }
    StackIndex& known = copied[static_cast<size_t>(stack)];
    if (known == kNotCopied) known = copy_stack(from, stack, into);
    stack = known;
  };
  for (OutsideAllocation& a : outside.live) copy(a.stack);
  for (OutsideEvent& e : outside.events) copy(e.allocation.stack);
}

// The state changes PyTorch's trace entries have no key for: the settings and the memory cap
// (user metadata and the compile context are written on every entry).
bool kept_in_extras(const TraceStateChange& change) {
  return change.kind == TraceStateKind::kSettings || change.kind == TraceStateKind::kMemoryCap;
}

std::vector<std::vector<TraceStateChange>> extra_state_changes(const std::vector<std::vector<TraceStateChange>>& all) {
  std::vector<std::vector<TraceStateChange>> out(all.size());
  bool any = false;
  for (size_t d = 0; d < all.size(); ++d)
    for (const TraceStateChange& change : all[d])
      if (kept_in_extras(change)) {
        out[d].push_back(change);
        any = true;
      }
  if (!any) out.clear();
  return out;
}

}  // namespace

std::string pickle_extras_text(const Snapshot& snapshot) {
  Snapshot extras;
  extras.process = snapshot.process;
  extras.devices = snapshot.devices;
  extras.statistics = snapshot.statistics;
  extras.device_memory = snapshot.device_memory;
  extras.device_memory_before_first_segment = snapshot.device_memory_before_first_segment;
  extras.trace_state_changes = extra_state_changes(snapshot.trace_state_changes);
  const bool has_process = snapshot.process.pid != 0 || !snapshot.process.host.empty();
  const bool has_cap = std::any_of(extras.devices.begin(), extras.devices.end(),
                                   [](const DeviceInfo& d) { return d.memory_cap.has_value(); });
  if (!has_process && extras.statistics.empty() && extras.device_memory.empty() &&
      extras.device_memory_before_first_segment.empty() && !snapshot.outside_memory &&
      extras.trace_state_changes.empty() && !has_cap)
    return "";
  // The pickle's times are Unix time (its trace's and annotations' are written so).
  const int64_t to_unix_us = snapshot.process.clock_offset_us;
  extras.process.clock_offset_us = 0;
  for (DeviceMemorySample& first : extras.device_memory_before_first_segment) first.time_us += to_unix_us;
  if (snapshot.outside_memory) {
    OutsideMemory outside = *snapshot.outside_memory;
    for (OutsideAllocation& a : outside.live) a.time_us += to_unix_us;
    for (OutsideEvent& e : outside.events) e.allocation.time_us += to_unix_us;
    if (outside.recorded_since_us) *outside.recorded_since_us += to_unix_us;
    SnapshotStackTables tables(extras);
    copy_stacks(snapshot, outside, tables);
    extras.outside_memory = std::move(outside);
  }
  return to_base64(to_msgpack(extras));
}

std::optional<std::string> merge_pickle_extras(std::string_view text, Snapshot& into) {
  const std::string where = "'" + std::string(kPickleExtrasKey) + "': ";
  const std::optional<std::string> bytes = from_base64(text);
  if (!bytes) return where + "not base64 text";
  Result<Snapshot> read = snapshot_from_msgpack(*bytes);
  if (!read) return where + read.error();
  Snapshot& extras = read.value();
  if (into.process == ProcessInfo{}) into.process = extras.process;
  if (into.devices.empty()) into.devices = std::move(extras.devices);
  // Settings and cap changes, by device, beside those the pickle's entries carried.
  for (size_t d = 0; d < extras.trace_state_changes.size(); ++d) {
    if (extras.trace_state_changes[d].empty()) continue;
    if (into.trace_state_changes.size() <= d) into.trace_state_changes.resize(d + 1);
    std::vector<TraceStateChange>& changes = into.trace_state_changes[d];
    if (std::any_of(changes.begin(), changes.end(), kept_in_extras)) continue;
    changes.insert(changes.end(), extras.trace_state_changes[d].begin(), extras.trace_state_changes[d].end());
    std::stable_sort(changes.begin(), changes.end(), [](const TraceStateChange& a, const TraceStateChange& b) {
      return a.event_index < b.event_index;
    });
  }
  if (into.statistics.empty()) into.statistics = std::move(extras.statistics);
  if (into.device_memory.empty()) into.device_memory = std::move(extras.device_memory);
  if (into.device_memory_before_first_segment.empty())
    into.device_memory_before_first_segment = std::move(extras.device_memory_before_first_segment);
  if (!into.outside_memory && extras.outside_memory) {
    SnapshotStackTables tables(into);
    copy_stacks(extras, *extras.outside_memory, tables);
    into.outside_memory = std::move(extras.outside_memory);
  }
  return std::nullopt;
}

}  // namespace memsnap
