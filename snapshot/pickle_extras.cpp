#include "snapshot/pickle_extras.h"

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

}  // namespace

std::string pickle_extras_text(const Snapshot& snapshot) {
  Snapshot extras;
  extras.process = snapshot.process;
  extras.devices = snapshot.devices;
  extras.statistics = snapshot.statistics;
  extras.device_memory = snapshot.device_memory;
  extras.device_memory_before_first_segment = snapshot.device_memory_before_first_segment;
  const bool has_process = snapshot.process.pid != 0 || !snapshot.process.host.empty();
  if (!has_process && extras.statistics.empty() && extras.device_memory.empty() &&
      extras.device_memory_before_first_segment.empty() && !snapshot.outside_memory)
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
