// Where a recorded run's steps start in one device's trace, for the growth analysis (growth.h).
//
// Steps are the outermost repeating unit the trace's annotations name: a name that repeats with
// a changing number (PyTorch's "ProfilerStep#12", memsnap's annotate("step 12")) or as it is
// ("Optimizer.step#Adam.step"). A name whose starts lie mostly inside another repeating name's
// spans is never it: NCCL's collectives, the optimizer's step and DDP's forward inside the
// user's step are parts of a step, not steps. Of the names left that cover at least half as many
// of the trace's events as the most covering one, the coarsest (fewest starts) wins. A numbered
// name whose numbers come round again ("layer 0" to "layer 11" in every step) is a part too: its
// unit starts where its first number does. Without
// annotations, steps come from the allocation site that recurs most evenly across the trace (a
// training loop's batch).
//
// An annotation is placed among the trace's events by its time, and both clocks tick in
// microseconds: events in the same microsecond as a step's start may have come before it or
// after it. Each start is therefore given twice, before and after the events that share its
// microsecond, and a conclusion must hold for both; two starts in one microsecond cannot be
// told apart at all (steps shorter than the clock's tick).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "allocator/result.h"
#include "snapshot/snapshot.h"

namespace memsnap {

struct GrowthSteps {
  std::string from;  // "annotation 'ProfilerStep#'" or "allocation site that recurs most evenly, ..."
  // The trace index where each step starts, placed before the events of its microsecond.
  std::vector<uint64_t> starts;
  // The same, placed after them (equal to `starts` for steps found from an allocation site).
  std::vector<uint64_t> latest_starts;
  // The annotations' start times (empty for steps found from an allocation site).
  std::vector<int64_t> start_times_us;
  size_t named = 0;      // step starts named by the annotations (or site recurrences)
  size_t collapsed = 0;  // of them, those that fell in the microsecond of an earlier one
};

// The first trace entry at or after `time_us`, and the first after it (traces are in time order).
uint64_t first_at_or_after(const DeviceTrace& trace, int64_t time_us);
uint64_t first_after(const DeviceTrace& trace, int64_t time_us);

// Fails when `annotation` is given and fewer than 3 annotations bear it; otherwise the steps
// found, however few.
Result<GrowthSteps> find_growth_steps(const Snapshot& snapshot, const DeviceTrace& trace, int64_t device,
                                      const std::string& annotation);

}  // namespace memsnap
