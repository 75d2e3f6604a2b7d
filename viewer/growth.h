// Memory that grows from step to step, by the call site that allocates it: what leaks.
//
// Steps come from growth_steps.h (the outermost repeating unit the annotations name). At each
// step's start, the memory live then is summed by the stack that allocated it, memory allocated
// before the trace's first event included (a trace that wrapped, or recording that started late,
// begins mid-run: that memory is live and counted, under no call site, until the trace frees
// it). The steps compared leave out the first (it warms up) and every step before memory from
// before the trace stopped being freed (until then a site that reallocates it looks as if it
// grew).
//
// A call site grows when its live bytes trend up over every step compared (Kendall's tau at
// least 0.6, still rising in the second half), or never fall over a run of the last steps in
// which nearly every step rises (a leak that began late; at least 8 steps and a quarter of
// those compared); and in either, no single step makes most of the rise (a buffer that grew
// once, a cache filled). No one sample decides. The rate is the Theil–Sen slope over the steps
// it grows in. Memory the program freed that waits for other streams' work (record_stream)
// counts as held, and is said apart.
//
// Each conclusion is one of: growing sites, nothing grows, or cannot judge — too few steps to
// compare, a trace of allocations alone (no free, no segment event: it cannot tell a program
// that frees nothing from history kept at level 'alloc'), or step starts the trace's
// microsecond clock cannot place among its events in a way that leaves the answer the same
// either way.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "allocator/result.h"
#include "snapshot/snapshot.h"
#include "viewer/verdict.h"

namespace memsnap {

// Fewer steps than this compared, and no growth (or its absence) is claimed.
inline constexpr size_t kMinComparedSteps = 5;

struct GrowthSite {
  StackIndex stack = kNoStackIndex;
  std::vector<uint64_t> bytes;  // live at each step's start
  size_t from_step = 0;         // index into Growth::step_events of the step it grows from
  double bytes_per_step = 0;    // the Theil–Sen slope from there
  int64_t growth_bytes = 0;     // the last step's start minus from_step's
  // Of its bytes at the last step's start, freed by the program but waiting for other streams'
  // work (record_stream): memory that piles up because those streams fall behind, not a leak
  // of references.
  uint64_t pending_bytes = 0;
};

enum class GrowthVerdict { kGrowing, kNothingGrows, kCannotJudge };
std::string_view growth_verdict_name(GrowthVerdict verdict);  // "growing", "nothing_grows", "cannot_judge"

struct Growth {
  int64_t device = 0;
  std::string steps_from;               // "annotation 'ProfilerStep#'" or "allocation site that ..."
  std::vector<uint64_t> step_events;    // trace index where each step starts
  std::vector<uint64_t> live_bytes;     // all live memory at each step's start
  std::vector<uint64_t> before_trace_bytes;  // of it, allocated before the trace's first event
  size_t first_compared_step = 1;       // index into step_events of the first step compared
  GrowthVerdict answer = GrowthVerdict::kCannotJudge;
  std::string reason;                   // with kCannotJudge: why, as a clause
  std::vector<GrowthSite> sites;        // growing sites, fastest first (kGrowing only)
  Verdict verdict;                      // the conclusion every front end shows
};

struct GrowthOptions {
  std::optional<int64_t> device;     // default: the device with the longest trace
  std::string annotation;            // a name prefix to take steps from; "" = detect
  size_t max_sites = 20;
};

// Fails when the device has no trace, or `annotation` names fewer than 3 steps; everything
// else is a Growth with its verdict (fewer than 3 steps found: it cannot judge).
Result<Growth> compute_growth(const Snapshot& snapshot, const GrowthOptions& options = {});

// The verdict (compute_growth ends with it), and its sentence: what the CLI, JSON
// ("conclusion") and web view all show.
void decide_growth(const Snapshot& snapshot, Growth& growth);
std::string growth_conclusion(const Snapshot& snapshot, const Growth& growth);
nlohmann::json growth_to_json(const Snapshot& snapshot, const Growth& growth);
std::string growth_to_text(const Snapshot& snapshot, const Growth& growth);

}  // namespace memsnap
