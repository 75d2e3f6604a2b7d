// The loop that the allocator benchmarks time: a trace's allocations and frees, pass after
// pass, each pass ending by freeing what is still live. memsnap_bench replay and
// memsnap_paired_bench (which runs PyTorch's allocator through the very same loop) share it.
//
// Two harnesses keep the trace's ids apart:
//   slots  Before timing, each allocation is given a slot and each free the slot of the
//          allocation it ends, so the timed loop keeps pointers in a flat array: a store per
//          allocation, a load per free. What is timed is the allocator.
//   map    The ids map to live pointers in a std::unordered_map, as
//          ../shared/bench/torch_cca_replay.cpp does. Its node allocation and hashing cost
//          about 250 instructions an event, as much as memsnap's allocator itself; both sides
//          pay it, which pulls their ratio towards 1. One difference: what is live at the end
//          of a pass is erased entry by entry, where the kit's loop calls clear(), which also
//          zeroes all 65,536 buckets (512 KiB) every pass: on a trace of a few hundred events
//          that zeroing took longer than the allocations.
// Both see the same calls in the same order within a pass, except for the frees at the end of
// a pass (slot order against the map's order).
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "replay/allocation_trace.h"

namespace memsnap::bench {

enum class Harness { kSlots, kMap };

inline const char* harness_name(Harness harness) {
  return harness == Harness::kSlots ? "slots" : "map";
}

// "slots" or "map"; false for anything else.
inline bool parse_harness(std::string_view text, Harness& harness) {
  if (text == "slots") harness = Harness::kSlots;
  else if (text == "map") harness = Harness::kMap;
  else return false;
  return true;
}

// A trace with its slots assigned (see the top of this file).
class ReplayPlan {
 public:
  static constexpr uint32_t kNoSlot = UINT32_MAX;  // a free of an id that is not live

  explicit ReplayPlan(const AllocationTrace& trace) : trace_(trace) {
    std::unordered_map<uint64_t, uint32_t> live;
    slots_.reserve(trace.events.size());
    for (const TraceEvent& e : trace.events) {
      if (e.kind == TraceEvent::Kind::kAlloc) {
        // An id allocated again while live leaves its earlier allocation unfreed, as the map
        // harness (whose entry is overwritten) does.
        live[e.id] = slot_count_;
        slots_.push_back(slot_count_++);
      } else if (auto it = live.find(e.id); it != live.end()) {
        slots_.push_back(it->second);
        live.erase(it);
      } else {
        slots_.push_back(kNoSlot);
      }
    }
    for (const auto& [id, slot] : live) left_live_.push_back(slot);
    std::sort(left_live_.begin(), left_live_.end());
  }

  const AllocationTrace& trace() const { return trace_; }
  uint32_t slot(size_t event) const { return slots_[event]; }
  uint32_t slot_count() const { return slot_count_; }
  // The slots still live at the end of a pass, in allocation order.
  const std::vector<uint32_t>& left_live() const { return left_live_; }

 private:
  const AllocationTrace& trace_;
  std::vector<uint32_t> slots_;  // per event
  uint32_t slot_count_ = 0;
  std::vector<uint32_t> left_live_;
};

// Passes enough for a timed turn to replay at least `min_events` events (and at least 3), so
// that a trace of a few hundred events is timed over as long a stretch as one of thousands.
inline int passes_for(size_t trace_events, size_t min_events = 60000) {
  if (trace_events == 0) return 3;
  const size_t passes = (min_events + trace_events - 1) / trace_events;
  return static_cast<int>(std::clamp<size_t>(passes, 3, 100000));
}

// Nanoseconds per event over `passes` passes. `streams` holds each event's stream as
// `allocate(bytes, stream)` takes it; `release(pointer)` frees.
template <typename Stream, typename Allocate, typename Release>
double replay_ns_per_event(const ReplayPlan& plan, const std::vector<Stream>& streams,
                           Harness harness, int passes, Allocate&& allocate, Release&& release) {
  const std::vector<TraceEvent>& events = plan.trace().events;
  size_t n = 0;
  if (harness == Harness::kSlots) {
    std::vector<void*> pointers(plan.slot_count());
    const auto start = std::chrono::steady_clock::now();
    for (int p = 0; p < passes; ++p) {
      for (size_t i = 0; i < events.size(); ++i) {
        const TraceEvent& e = events[i];
        const uint32_t slot = plan.slot(i);
        if (e.kind == TraceEvent::Kind::kAlloc)
          pointers[slot] = allocate(e.bytes, streams[i]);
        else if (slot != ReplayPlan::kNoSlot)
          release(pointers[slot]);
      }
      n += events.size();
      for (uint32_t slot : plan.left_live()) release(pointers[slot]);
    }
    const auto elapsed = std::chrono::steady_clock::now() - start;
    return std::chrono::duration<double, std::nano>(elapsed).count() / static_cast<double>(n);
  }
  std::unordered_map<uint64_t, void*> live;
  live.reserve(1 << 16);
  const auto start = std::chrono::steady_clock::now();
  for (int p = 0; p < passes; ++p) {
    for (size_t i = 0; i < events.size(); ++i) {
      const TraceEvent& e = events[i];
      if (e.kind == TraceEvent::Kind::kAlloc) {
        live[e.id] = allocate(e.bytes, streams[i]);
      } else if (auto it = live.find(e.id); it != live.end()) {
        release(it->second);
        live.erase(it);
      }
    }
    n += events.size();
    for (auto it = live.begin(); it != live.end(); it = live.erase(it)) release(it->second);
  }
  const auto elapsed = std::chrono::steady_clock::now() - start;
  return std::chrono::duration<double, std::nano>(elapsed).count() / static_cast<double>(n);
}

}  // namespace memsnap::bench
