// One device's trace of allocator events, held compactly: 24 bytes an event instead of the
// 40 of a TraceEntry, so a 30-million-event recording fits in the memory of a laptop.
//
// Each event is one row: its address, its size (48 bits) beside the action and the slot of
// its stream in a table of the trace's streams, its time as µs from the time of the first
// event of its run of 4,096, and its stack. An event that does not fit (a size of 2^48 or
// more, a 257th stream, a time more than 35 minutes from its run's first) is kept whole in
// a side table, its place there in the row's address, so nothing is lost whatever a file
// holds and such an event reads back as quickly as any (a trace whose every event is on a
// stream of its own is all such events: issue 53). Events are read back as
// TraceEntry values: indexing and iteration read like a DeviceTrace's, but
// hand out values, not references.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <utility>
#include <vector>

#include "history/trace_action.h"
#include "snapshot/indexed_iterator.h"

namespace memsnap {

// A StackIndex (snapshot.h) as the trace holds it: an index into Snapshot::stacks, or -1.
// Made in the order an event reads: action, address, size, stream, time, stack.
struct TraceEntry {
  TraceEntry(TraceAction what = TraceAction::kAlloc, uint64_t at = 0, uint64_t bytes = 0, uint64_t on_stream = 0,
             int64_t when_us = 0, int64_t stack_index = -1)
      : action(what), stack(static_cast<int32_t>(stack_index)), address(at), size(bytes), stream(on_stream),
        time_us(when_us) {}
  TraceAction action;
  int32_t stack;  // a StackIndex (no snapshot has 2^31 stacks)
  uint64_t address;
  uint64_t size;
  uint64_t stream;
  int64_t time_us;
  bool operator==(const TraceEntry&) const = default;
  // Whether the event's bytes [address, address + size) hold `byte` (an empty event: its address).
  bool covers(uint64_t byte) const { return byte >= address && byte - address < (size ? size : 1); }
};

class DeviceTrace {
 public:
  using const_iterator = IndexedIterator<DeviceTrace, TraceEntry>;
  using value_type = TraceEntry;
  using size_type = size_t;

  size_t size() const { return rows_.size(); }
  bool empty() const { return rows_.empty(); }
  void reserve(size_t events);
  void clear();
  void shrink_to_fit();
  void push_back(const TraceEntry& entry) {
    // The common event, inline: within its run's time, on the last stream seen, a size in 48
    // bits. Anything else (a new run, another stream, an event kept whole) out of line.
    const size_t i = rows_.size();
    int64_t offset = 0;
    if ((i & kRunMask) != 0 && stream_count_ != 0 && streams_[last_slot_] == entry.stream &&
        entry.size <= kSizeMask && static_cast<uint8_t>(entry.action) != kWhole &&
        !__builtin_sub_overflow(entry.time_us, run_times_.back(), &offset) && offset == static_cast<int32_t>(offset)) {
      rows_.push_back(row_of(entry, last_slot_, offset));
      return;
    }
    push_back_slow(entry);
  }
  template <typename... Args>
  void emplace_back(Args&&... args) { push_back(TraceEntry(std::forward<Args>(args)...)); }
  // Replaces event `i` (i < size()).
  void set(size_t i, const TraceEntry& entry);
  // Removes the events in [first, last), or at `at`: the events after them move down.
  void erase(const_iterator first, const_iterator last);
  void erase(const_iterator at);

  TraceEntry operator[](size_t i) const {
    const Row& row = rows_[i];
    const auto action = static_cast<uint8_t>(row.packed >> kActionShift);
    if (action == kWhole) [[unlikely]] return whole(i);
    return TraceEntry(static_cast<TraceAction>(action), row.address, row.packed & kSizeMask,
                      streams_[static_cast<uint8_t>(row.packed >> kStreamShift)],
                      run_times_[i >> kRunShift] + row.time_offset, row.stack);
  }
  TraceEntry at(size_t i) const;  // throws std::out_of_range past the end
  TraceEntry front() const { return (*this)[0]; }
  TraceEntry back() const { return (*this)[size() - 1]; }
  const_iterator begin() const;
  const_iterator end() const;
  std::reverse_iterator<const_iterator> rbegin() const;
  std::reverse_iterator<const_iterator> rend() const;

  bool operator==(const DeviceTrace& other) const;
  // Bytes the trace holds (its rows' capacity and its tables).
  size_t bytes_held() const;

 private:
  struct Row {
    uint64_t address;
    uint64_t packed;      // size (48 bits), stream slot (8 bits), action (8 bits)
    int32_t time_offset;  // µs from the time of its run's first event
    int32_t stack;
  };
  static_assert(sizeof(Row) == 24);
  static constexpr int kStreamShift = 48;
  static constexpr int kActionShift = 56;
  static constexpr uint64_t kSizeMask = (uint64_t{1} << kStreamShift) - 1;
  // The action of a row whose event is in wholes_, at the place the row's address holds.
  static constexpr uint8_t kWhole = 0xff;
  static constexpr int kRunShift = 12;     // 4,096 events a run
  static constexpr size_t kRunMask = (size_t{1} << kRunShift) - 1;

  // The row of an event that fits one: its stream at `slot`, its time `offset` from its run's.
  static Row row_of(const TraceEntry& entry, uint8_t slot, int64_t offset) {
    return Row{entry.address,
               entry.size | uint64_t{slot} << kStreamShift | uint64_t{static_cast<uint8_t>(entry.action)} << kActionShift,
               static_cast<int32_t>(offset), entry.stack};
  }
  Row encode(size_t i, const TraceEntry& entry);
  void push_back_slow(const TraceEntry& entry);
  static bool is_whole(const Row& row) {
    return static_cast<uint8_t>(row.packed >> kActionShift) == kWhole;
  }
  TraceEntry whole(size_t i) const;
  void forget_whole(size_t i);

  std::vector<Row> rows_;
  std::vector<int64_t> run_times_;                      // the time of each run's first event
  std::array<uint64_t, 256> streams_{};                 // by slot
  size_t stream_count_ = 0;
  uint8_t last_slot_ = 0;
  // The events that did not fit a row, each with its index (in no particular order).
  std::vector<std::pair<size_t, TraceEntry>> wholes_;
};

inline DeviceTrace::const_iterator DeviceTrace::begin() const { return {this, 0}; }
inline DeviceTrace::const_iterator DeviceTrace::end() const { return {this, size()}; }
inline std::reverse_iterator<DeviceTrace::const_iterator> DeviceTrace::rbegin() const {
  return std::reverse_iterator<const_iterator>(end());
}
inline std::reverse_iterator<DeviceTrace::const_iterator> DeviceTrace::rend() const {
  return std::reverse_iterator<const_iterator>(begin());
}

}  // namespace memsnap
