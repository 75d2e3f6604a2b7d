// The event trace: a ring buffer that keeps the newest `capacity` entries, so recording can
// stay on for a whole run in bounded memory (PyTorch's max_entries).
//
// The whole buffer is allocated and touched when the capacity is set, not as entries
// arrive: a recording program then takes no page faults (and no copies from growth) in its
// allocation path. Recording turned off (capacity 0) drops the entries but keeps the buffer,
// as PyTorch keeps its trace's memory: turning it on again with the same capacity writes
// nothing (rewriting a buffer of a million entries would cost milliseconds and flush the
// processor's caches at every switch).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "allocator/device_backend.h"
#include "history/stack_table.h"
#include "history/tick_clock.h"
#include "history/trace_action.h"
#include "history/trace_labels.h"

namespace memsnap {

struct RecordedEvent {
  RecordedEvent() = default;
  RecordedEvent(TraceAction action_, uintptr_t address_, size_t size_, StreamId stream_,
                Ticks ticks_, StackId stack_, LabelId label_ = kNoLabel)
      : address(address_), size(size_), stream(stream_), ticks(ticks_), stack(stack_), action(action_),
        label_low(static_cast<uint8_t>(label_)), label_high(static_cast<uint16_t>(label_ >> 8)) {}

  LabelId label() const { return LabelId{label_low} | LabelId{label_high} << 8; }

  // The one-byte action and the 24-bit label last: 40 bytes an entry rather than 48, and a
  // recording program writes one or two entries per event into a ring that does not fit in
  // cache.
  uintptr_t address = 0;
  size_t size = 0;  // requested bytes for allocations, segment bytes for segment events
  StreamId stream = 0;
  Ticks ticks = 0;  // tick_clock.h; the recorder converts to microseconds when read
  StackId stack = kNoStack;
  TraceAction action = TraceAction::kAlloc;
  uint8_t label_low = 0;  // the recording thread's label (trace_labels.h)
  uint16_t label_high = 0;
};
static_assert(sizeof(RecordedEvent) == 40, "trace entries stay packed");

class TraceRing {
 public:
  explicit TraceRing(size_t capacity = 0) { set_capacity(capacity); }

  void push(const RecordedEvent& event) {
    if (capacity_ == 0) return;
    ++pushed_;
    slots_[next_] = event;
    next_ = next_ + 1 == capacity_ ? 0 : next_ + 1;
    if (size_ < capacity_)
      ++size_;
    else
      ++dropped_;
  }

  // Oldest first.
  std::vector<RecordedEvent> entries() const {
    std::vector<RecordedEvent> out;
    out.reserve(size_);
    const size_t oldest = size_ < capacity_ ? 0 : next_;
    for (size_t i = 0; i < size_; ++i) out.push_back(slots_[(oldest + i) % capacity_]);
    return out;
  }

  // Keeps the newest entries that still fit.
  void set_capacity(size_t capacity) {
    if (capacity == capacity_) return;
    if (capacity == 0 || (capacity_ == 0 && capacity == slots_.size())) {  // off, or on again
      capacity_ = capacity;
      size_ = next_ = 0;
      return;
    }
    std::vector<RecordedEvent> kept = entries();
    if (kept.size() > capacity) kept.erase(kept.begin(), kept.end() - static_cast<std::ptrdiff_t>(capacity));
    slots_.assign(capacity, RecordedEvent{});
    std::copy(kept.begin(), kept.end(), slots_.begin());
    capacity_ = capacity;
    size_ = kept.size();
    next_ = capacity == 0 ? 0 : size_ % capacity;
  }
  void clear() {
    size_ = 0;
    next_ = 0;
    dropped_ = 0;
  }

  size_t size() const { return size_; }
  size_t capacity() const { return capacity_; }
  uint64_t dropped() const { return dropped_; }  // entries overwritten since the last clear
  // Every entry ever pushed has a sequence number, counting from 0 and never reset: the next
  // one pushed gets next_sequence(); the oldest entry held, oldest_sequence().
  uint64_t next_sequence() const { return pushed_; }
  uint64_t oldest_sequence() const { return pushed_ - size_; }

 private:
  std::vector<RecordedEvent> slots_;  // at least capacity_ entries
  size_t capacity_ = 0;
  size_t size_ = 0;
  size_t next_ = 0;  // the slot written next; once full, the oldest entry
  uint64_t dropped_ = 0;
  uint64_t pushed_ = 0;
};

}  // namespace memsnap
