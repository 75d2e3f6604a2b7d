#include "viewer/growth_steps.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <unordered_map>

#include "viewer/frame_labels.h"

namespace memsnap {
namespace {

// "ProfilerStep#12" -> "ProfilerStep#", "step 12" -> "step "; "" when the name ends in no number.
std::string numbered_stem(const std::string& name) {
  size_t end = name.size();
  while (end > 0 && name[end - 1] >= '0' && name[end - 1] <= '9') --end;
  return end == name.size() || end == 0 ? "" : name.substr(0, end);
}

// The start times of the steps the annotations name (sorted), and the name they share.
std::vector<int64_t> annotated_step_times(const Snapshot& snapshot, int64_t device, const std::string& wanted,
                                          std::string& stem_out) {
  std::map<std::string, std::vector<int64_t>> starts;  // stem -> START times
  for (const SnapshotAnnotation& a : snapshot.external_annotations) {
    if (a.device != device || a.stage != "START") continue;
    if (!wanted.empty()) {
      if (a.name.rfind(wanted, 0) == 0) starts[wanted].push_back(a.time_us);
      continue;
    }
    // A name that repeats with a number, or a name that repeats as it is (PyTorch's
    // "Optimizer.step#Adam.step" once per step).
    const std::string stem = numbered_stem(a.name);
    starts[stem.empty() ? a.name : stem].push_back(a.time_us);
  }
  const std::vector<int64_t>* best = nullptr;
  for (const auto& [stem, times] : starts)
    if (times.size() >= 3 && (best == nullptr || times.size() > best->size())) {
      best = &times;
      stem_out = stem;
    }
  if (best == nullptr) return {};
  std::vector<int64_t> times = *best;
  std::sort(times.begin(), times.end());
  return times;
}

// Without annotations: the allocation site that recurs most evenly across the trace (a
// training loop's batch, or its loss: once per step). A site must recur at least three times
// over at least half the trace; the one whose gaps vary least wins (a site that allocates
// several times per step has short gaps within a step and long ones between), then the rarer.
std::vector<uint64_t> steps_from_regular_site(const DeviceTrace& trace, StackIndex& site) {
  std::unordered_map<StackIndex, std::vector<uint64_t>> at;
  for (size_t i = 0; i < trace.size(); ++i)
    if (trace[i].action == TraceAction::kAlloc && trace[i].stack != kNoStackIndex) at[trace[i].stack].push_back(i);
  site = kNoStackIndex;
  double best_spread = 0;
  size_t best_count = 0;
  for (const auto& [stack, indices] : at) {
    if (indices.size() < 3 || indices.back() - indices.front() < trace.size() / 2) continue;
    double mean = 0, square = 0;
    for (size_t i = 1; i < indices.size(); ++i) mean += static_cast<double>(indices[i] - indices[i - 1]);
    mean /= static_cast<double>(indices.size() - 1);
    for (size_t i = 1; i < indices.size(); ++i) {
      const double d = static_cast<double>(indices[i] - indices[i - 1]) - mean;
      square += d * d;
    }
    const double spread = mean > 0 ? std::sqrt(square / static_cast<double>(indices.size() - 1)) / mean : 1e9;
    if (site == kNoStackIndex || spread < best_spread - 1e-9 ||
        (spread < best_spread + 1e-9 && (indices.size() < best_count || (indices.size() == best_count && stack < site)))) {
      site = stack;
      best_spread = spread;
      best_count = indices.size();
    }
  }
  return site == kNoStackIndex ? std::vector<uint64_t>{} : at[site];
}

}  // namespace

Result<GrowthSteps> find_growth_steps(const Snapshot& snapshot, const DeviceTrace& trace, int64_t device,
                                      const std::string& annotation) {
  GrowthSteps steps;
  std::string stem;
  std::vector<int64_t> times = annotated_step_times(snapshot, device, annotation, stem);
  if (!times.empty()) {
    steps.from = "annotation '" + stem + "'";
    steps.named = times.size();
    // Of the steps that began before the trace's first event (it wrapped, or recording started
    // late), only the last is kept: it starts at that event, and as the first step it is not
    // compared; the others have no events at all.
    auto first_traced = std::lower_bound(times.begin(), times.end(), trace.front().time_us);
    if (first_traced != times.begin()) --first_traced;
    times.erase(times.begin(), first_traced);
    steps.start_times_us = times;
    for (size_t i = 0; i < times.size(); ++i) {
      const uint64_t earliest = first_at_or_after(trace, times[i]);
      const uint64_t latest = first_after(trace, times[i]);
      // Two starts in one microsecond with events in it: which step those events belong to,
      // nothing says.
      if (i > 0 && times[i] == times[i - 1] && earliest != latest) ++steps.collapsed;
      steps.starts.push_back(earliest);
      steps.latest_starts.push_back(latest);
    }
  } else if (!annotation.empty()) {
    return Result<GrowthSteps>::failure("growth: fewer than 3 annotations named '" + annotation + "...' on device " +
                                        std::to_string(device));
  } else {
    StackIndex site = kNoStackIndex;
    steps.starts = steps_from_regular_site(trace, site);
    steps.latest_starts = steps.starts;
    steps.named = steps.starts.size();
    steps.from = site == kNoStackIndex ? "trace, where no allocation site recurs over half of it"
                                       : "allocation site that recurs most evenly, " + call_site_label(snapshot, site);
  }
  return steps;
}

uint64_t first_at_or_after(const DeviceTrace& trace, int64_t time_us) {
  return static_cast<uint64_t>(std::lower_bound(trace.begin(), trace.end(), time_us,
                                                [](const TraceEntry& e, int64_t t) { return e.time_us < t; }) -
                               trace.begin());
}
uint64_t first_after(const DeviceTrace& trace, int64_t time_us) {
  return static_cast<uint64_t>(std::upper_bound(trace.begin(), trace.end(), time_us,
                                                [](int64_t t, const TraceEntry& e) { return t < e.time_us; }) -
                               trace.begin());
}


}  // namespace memsnap
