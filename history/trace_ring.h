// The event trace: a ring buffer that keeps the newest `capacity` entries, so recording can
// stay on for a whole run in bounded memory (PyTorch's max_entries).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "allocator/device_backend.h"
#include "history/stack_table.h"
#include "history/trace_action.h"

namespace memsnap {

struct RecordedEvent {
  TraceAction action = TraceAction::kAlloc;
  uintptr_t address = 0;
  size_t size = 0;  // requested bytes for allocations, segment bytes for segment events
  StreamId stream = 0;
  int64_t time_us = 0;  // steady clock, microseconds
  StackId stack = kNoStack;
};

class TraceRing {
 public:
  explicit TraceRing(size_t capacity = 0) { set_capacity(capacity); }

  void push(const RecordedEvent& event) {
    if (capacity_ == 0) return;
    if (entries_.size() < capacity_) {
      entries_.push_back(event);
    } else {
      entries_[next_] = event;
      next_ = (next_ + 1) % capacity_;
      ++dropped_;
    }
  }

  // Oldest first.
  std::vector<RecordedEvent> entries() const {
    std::vector<RecordedEvent> out;
    out.reserve(entries_.size());
    out.insert(out.end(), entries_.begin() + static_cast<std::ptrdiff_t>(next_), entries_.end());
    out.insert(out.end(), entries_.begin(), entries_.begin() + static_cast<std::ptrdiff_t>(next_));
    return out;
  }

  // Keeps the newest entries that still fit.
  void set_capacity(size_t capacity) {
    std::vector<RecordedEvent> kept = entries();
    if (kept.size() > capacity) kept.erase(kept.begin(), kept.end() - static_cast<std::ptrdiff_t>(capacity));
    entries_ = std::move(kept);
    capacity_ = capacity;
    next_ = 0;
  }
  void clear() {
    entries_.clear();
    next_ = 0;
    dropped_ = 0;
  }

  size_t size() const { return entries_.size(); }
  size_t capacity() const { return capacity_; }
  uint64_t dropped() const { return dropped_; }  // entries overwritten since the last clear

 private:
  std::vector<RecordedEvent> entries_;
  size_t capacity_ = 0;
  size_t next_ = 0;  // once full: the oldest entry, overwritten next
  uint64_t dropped_ = 0;
};

}  // namespace memsnap
