// Memory that grows from step to step, by the call site that allocates it: what leaks.
//
// Steps come from the trace's annotations (a name that repeats with a changing number, like
// PyTorch's "ProfilerStep#12" or memsnap's annotate("step 12"), or one that repeats as it is,
// like "Optimizer.step#Adam.step"), or, without them, from the allocation site that recurs
// most evenly across the trace (a training loop's batch). At each step's
// start, the memory live then is summed by the stack that allocated it; a call site whose live
// bytes rise across the steps is growing, ranked by how much per step (a least-squares slope)
// and in all.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "allocator/result.h"
#include "snapshot/snapshot.h"

namespace memsnap {

struct GrowthSite {
  StackIndex stack = kNoStackIndex;
  std::vector<uint64_t> bytes;  // live at each step's start
  double bytes_per_step = 0;    // least-squares slope over the steps
  int64_t growth_bytes = 0;     // last step's start minus the second's (the first warms up)
};

struct Growth {
  int64_t device = 0;
  std::string steps_from;               // "annotation 'ProfilerStep#'" or "recurrences of ..."
  std::vector<uint64_t> step_events;    // alloc/free event index where each step starts
  std::vector<uint64_t> live_bytes;     // all live memory at each step's start
  std::vector<GrowthSite> sites;        // growing sites, fastest first
};

struct GrowthOptions {
  std::optional<int64_t> device;     // default: the device with the longest trace
  std::string annotation;            // a name prefix to take steps from; "" = detect
  size_t max_sites = 20;
};

Result<Growth> compute_growth(const Snapshot& snapshot, const GrowthOptions& options = {});

nlohmann::json growth_to_json(const Snapshot& snapshot, const Growth& growth);
std::string growth_to_text(const Snapshot& snapshot, const Growth& growth);

}  // namespace memsnap
