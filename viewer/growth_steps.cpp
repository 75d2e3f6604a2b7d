#include "viewer/growth_steps.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <map>
#include <unordered_map>

#include "viewer/frame_labels.h"

namespace memsnap {
namespace {

// Sites whose gaps vary within this much (coefficient of variation) of the most even one's are
// taken as even as it.
constexpr double kEvenEnough = 0.05;

// "ProfilerStep#12" -> "ProfilerStep#", "step 12" -> "step "; "" when the name ends in no number.
std::string numbered_stem(const std::string& name) {
  size_t end = name.size();
  while (end > 0 && name[end - 1] >= '0' && name[end - 1] <= '9') --end;
  return end == name.size() || end == 0 ? "" : name.substr(0, end);
}

// A name that repeats among a device's annotations: each time it starts, and where it also
// ends, the span it covers.
struct Repeating {
  std::vector<int64_t> starts;                        // sorted
  std::vector<std::pair<int64_t, int64_t>> spans;      // START to END, sorted by start
  std::map<std::string, size_t> names;                 // the full names under the stem, and how often each
  double coverage = 0;                                 // the share of the trace's events inside its spans
};

// The annotations of `device` grouped by the name they repeat under (numbered_stem, or the name
// itself), each with its starts and spans.
std::map<std::string, Repeating> repeating_names(const Snapshot& snapshot, int64_t device) {
  std::map<std::string, Repeating> out;
  std::map<std::string, std::vector<int64_t>> open;  // full name -> START times not yet ended
  const AnnotationList& list = snapshot.external_annotations;
  for (size_t i = 0; i < list.size(); ++i) {
    if (list.device(i) != device) continue;
    const std::string& name = list.name(i);
    const std::string stem = numbered_stem(name);
    Repeating& r = out[stem.empty() ? name : stem];
    if (list.stage(i) == "START") {
      r.starts.push_back(list.time_us(i));
      ++r.names[name];
      open[name].push_back(list.time_us(i));
    } else if (list.stage(i) == "END") {
      auto it = open.find(name);
      if (it == open.end() || it->second.empty()) continue;
      r.spans.emplace_back(it->second.back(), list.time_us(i));
      it->second.pop_back();
    }
  }
  for (auto& [stem, r] : out) {
    std::sort(r.starts.begin(), r.starts.end());
    std::sort(r.spans.begin(), r.spans.end());
  }
  return out;
}

// Whether `time_us` lies inside one of `spans` (sorted by start).
bool inside(const std::vector<std::pair<int64_t, int64_t>>& spans, int64_t time_us) {
  auto it = std::upper_bound(spans.begin(), spans.end(), std::make_pair(time_us, INT64_MAX));
  // Spans may nest (recursion): look back over a few that start before it.
  for (int looked = 0; it != spans.begin() && looked < 8; ++looked) {
    --it;
    if (it->first <= time_us && time_us <= it->second) return true;
  }
  return false;
}

// Most of `inner`'s starts lie inside `outer`'s spans.
bool mostly_inside(const Repeating& inner, const Repeating& outer) {
  if (outer.spans.size() < 3) return false;
  size_t in = 0;
  for (int64_t t : inner.starts) in += inside(outer.spans, t);
  return in * 5 >= inner.starts.size() * 4;
}

// The share of the trace's events inside a name's spans (or after its first start, for a name
// that never ends: a marker).
double coverage_of(const Repeating& r, const DeviceTrace& trace) {
  if (trace.size() == 0) return 0;
  size_t covered = 0;
  if (r.spans.empty()) {
    covered = trace.size() - first_at_or_after(trace, r.starts.front());
  } else {
    for (const TraceEntry& e : trace) covered += inside(r.spans, e.time_us);
  }
  return static_cast<double>(covered) / static_cast<double>(trace.size());
}

// The steps: the outermost repeating unit. A name whose starts lie mostly inside another's spans
// (NCCL's collectives, the optimizer's step, DDP's forward, a profiler's record_function inside
// the user's step) is never it; of those left that cover at least half as many of the trace's
// events as the most covering one, the one that starts fewest times (the coarsest), then the
// more covering, then the earlier.
std::vector<int64_t> annotated_step_times(const Snapshot& snapshot, const DeviceTrace& trace, int64_t device,
                                          const std::string& wanted, std::string& stem_out) {
  if (!wanted.empty()) {
    // The START times of every annotation whose name begins with `wanted`.
    std::vector<int64_t> times;
    const AnnotationList& list = snapshot.external_annotations;
    for (size_t i = 0; i < list.size(); ++i)
      if (list.device(i) == device && list.stage(i) == "START" && list.name(i).rfind(wanted, 0) == 0)
        times.push_back(list.time_us(i));
    std::sort(times.begin(), times.end());
    stem_out = wanted;
    return times.size() >= 3 ? times : std::vector<int64_t>{};
  }
  std::map<std::string, Repeating> names = repeating_names(snapshot, device);
  std::erase_if(names, [](const auto& entry) { return entry.second.starts.size() < 3; });
  // A numbered name whose numbers come round again ("layer 0" to "layer 11" in every step) is a
  // part within a repeating unit: its unit starts where its first number does.
  for (auto& [stem, r] : names) {
    bool repeats = false;
    for (const auto& [name, count] : r.names) repeats |= count > 1;
    if (r.names.size() < 2 || !repeats) continue;
    std::string first;
    int64_t earliest = INT64_MAX;
    const AnnotationList& list = snapshot.external_annotations;
    for (size_t i = 0; i < list.size(); ++i)
      if (list.device(i) == device && list.stage(i) == "START" && r.names.count(list.name(i)) &&
          list.time_us(i) < earliest) {
        earliest = list.time_us(i);
        first = list.name(i);
      }
    std::vector<int64_t> cycle_starts;
    for (size_t i = 0; i < list.size(); ++i)
      if (list.device(i) == device && list.stage(i) == "START" && list.name(i) == first) cycle_starts.push_back(list.time_us(i));
    std::sort(cycle_starts.begin(), cycle_starts.end());
    r.starts = std::move(cycle_starts);
    r.spans.clear();  // a cycle's extent is not recorded: a marker
  }
  std::erase_if(names, [](const auto& entry) { return entry.second.starts.size() < 3; });
  for (auto& [stem, r] : names) r.coverage = coverage_of(r, trace);
  std::vector<const std::string*> outermost;
  double most_coverage = 0;
  for (const auto& [stem, r] : names) {
    bool nested = false;
    for (const auto& [other_stem, other] : names)
      if (&other != &r && mostly_inside(r, other) && !mostly_inside(other, r)) nested = true;
    if (nested) continue;
    outermost.push_back(&stem);
    most_coverage = std::max(most_coverage, r.coverage);
  }
  // Of the outermost names that cover a good part of the trace, the coarsest: a collective that
  // runs four times a step beside the forward pass is a part of a step too.
  const std::string* best = nullptr;
  for (const std::string* stem : outermost) {
    const Repeating& r = names.at(*stem);
    if (r.coverage * 2 < most_coverage) continue;
    if (best == nullptr) {
      best = stem;
      continue;
    }
    const Repeating& b = names.at(*best);
    const bool better = r.starts.size() < b.starts.size() ||
                        (r.starts.size() == b.starts.size() &&
                         (r.coverage > b.coverage + 1e-9 ||
                          (r.coverage > b.coverage - 1e-9 && r.starts.front() < b.starts.front())));
    if (better) best = stem;
  }
  if (best == nullptr) return {};
  stem_out = *best;
  return names.at(*best).starts;
}

// Without annotations: the allocation site that recurs most evenly across the trace (a
// training loop's batch, or its loss: once per step). A site must recur at least three times
// over at least half the trace. Of the sites whose gaps vary least (a site that allocates
// several times per step has short gaps within a step and long ones between), the one that
// recurs most: a site that recurs every few steps (gradient accumulation's buffer) is as even
// but would make a step of several.
std::vector<uint64_t> steps_from_regular_site(const DeviceTrace& trace, StackIndex& site) {
  std::unordered_map<StackIndex, std::vector<uint64_t>> at;
  for (size_t i = 0; i < trace.size(); ++i)
    if (trace[i].action == TraceAction::kAlloc && trace[i].stack != kNoStackIndex) at[trace[i].stack].push_back(i);
  struct Candidate {
    StackIndex stack;
    double spread;
    size_t count;
  };
  std::vector<Candidate> candidates;
  double best_spread = 1e9;
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
    candidates.push_back({stack, spread, indices.size()});
    best_spread = std::min(best_spread, spread);
  }
  site = kNoStackIndex;
  const Candidate* best = nullptr;
  for (const Candidate& c : candidates) {
    if (c.spread > best_spread + kEvenEnough) continue;
    if (best == nullptr || c.count > best->count ||
        (c.count == best->count && (c.spread < best->spread - 1e-9 || (c.spread < best->spread + 1e-9 && c.stack < best->stack))))
      best = &c;
  }
  if (best == nullptr) return {};
  site = best->stack;
  return at[site];
}

}  // namespace

Result<GrowthSteps> find_growth_steps(const Snapshot& snapshot, const DeviceTrace& trace, int64_t device,
                                      const std::string& annotation) {
  GrowthSteps steps;
  std::string stem;
  std::vector<int64_t> times = annotated_step_times(snapshot, trace, device, annotation, stem);
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
