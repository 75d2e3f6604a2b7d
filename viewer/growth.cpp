#include "viewer/growth.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <optional>
#include <unordered_map>
#include <unordered_set>

#include "allocator/counted.h"
#include "allocator/device_stats.h"
#include "viewer/frame_labels.h"
#include "viewer/growth_steps.h"

namespace memsnap {
namespace {

// Two placements of the step starts whose slopes for a site differ by more than this share
// give different answers.
constexpr double kSlopeAgreement = 0.10;
// Kendall's tau over the steps compared at or above which a site's bytes trend up.
constexpr double kLeakTrend = 0.6;
// A leak that began late must show over at least this many of the last steps (and a quarter of
// those compared): by chance, a level that comes and goes rises that many times in a row once
// in 40,320.
constexpr size_t kMinLateSteps = 8;

// Memory live before the trace's first event: what the trace frees without having allocated
// it, and what is live at the snapshot with no allocation in the trace.
struct BeforeTrace {
  uint64_t bytes_at_start = 0;
  size_t freed_until = 0;  // the trace index after its last free of such memory (0: none)
  size_t frees = 0;        // free_completed events in the trace
  // Events other than allocations (frees, segment events, out-of-memory errors): history at
  // level 'all', which would have recorded frees had there been any.
  size_t other_events = 0;
};

BeforeTrace memory_before_trace(const Snapshot& snapshot, const DeviceTrace& trace, int64_t device) {
  BeforeTrace out;
  std::unordered_set<uint64_t> live;  // allocated in the trace and not freed yet
  for (size_t i = 0; i < trace.size(); ++i) {
    const TraceEntry e = trace[i];
    if (e.action != TraceAction::kAlloc) ++out.other_events;
    if (e.action == TraceAction::kAlloc) {
      live.insert(e.address);
    } else if (e.action == TraceAction::kFreeCompleted) {
      ++out.frees;
      if (live.erase(e.address) == 0) {
        out.bytes_at_start += e.size;
        out.freed_until = i + 1;
      }
    }
  }
  for (const SnapshotSegment& segment : snapshot.segments) {
    if (segment.device != device) continue;
    for (const SnapshotBlock& block : segment.blocks)
      if (block.state != BlockState::kInactive && !live.count(block.address))
        out.bytes_at_start += block.requested_size ? block.requested_size : block.size;
  }
  return out;
}

// Live bytes at each step's start, by allocating stack (memory from before the trace apart).
struct StepMemory {
  std::vector<std::unordered_map<StackIndex, int64_t>> by_stack;
  // Of it, freed by the program but waiting for other streams' work (record_stream).
  std::vector<std::unordered_map<StackIndex, int64_t>> pending_by_stack;
  std::vector<uint64_t> live_bytes;
  std::vector<uint64_t> before_trace_bytes;
};

StepMemory measure_steps(const DeviceTrace& trace, const std::vector<uint64_t>& starts, uint64_t before_trace) {
  StepMemory out;
  std::unordered_map<uint64_t, std::pair<uint64_t, StackIndex>> live;
  std::unordered_set<uint64_t> pending;  // addresses freed, not yet completed
  std::unordered_map<StackIndex, int64_t> by_stack, pending_by_stack;
  int64_t in_trace = 0;
  uint64_t before_left = before_trace;
  size_t next_step = 0;
  for (size_t i = 0; i <= trace.size() && next_step < starts.size(); ++i) {
    while (next_step < starts.size() && starts[next_step] == i) {
      out.by_stack.push_back(by_stack);
      out.pending_by_stack.push_back(pending_by_stack);
      out.live_bytes.push_back(static_cast<uint64_t>(std::max<int64_t>(in_trace, 0)) + before_left);
      out.before_trace_bytes.push_back(before_left);
      ++next_step;
    }
    if (i == trace.size()) break;
    const TraceEntry e = trace[i];
    if (e.action == TraceAction::kAlloc) {
      live[e.address] = {e.size, e.stack};
      by_stack[e.stack] += static_cast<int64_t>(e.size);
      in_trace += static_cast<int64_t>(e.size);
    } else if (e.action == TraceAction::kFreeRequested) {
      // Completed at once (the next event) unless other streams used the block.
      const bool completes_next =
          i + 1 < trace.size() && trace[i + 1].action == TraceAction::kFreeCompleted && trace[i + 1].address == e.address;
      auto it = live.find(e.address);
      if (!completes_next && it != live.end() && pending.insert(e.address).second)
        pending_by_stack[it->second.second] += static_cast<int64_t>(it->second.first);
    } else if (e.action == TraceAction::kFreeCompleted) {
      auto it = live.find(e.address);
      if (it == live.end()) {  // memory_before_trace counted it
        before_left -= std::min(before_left, e.size);
        continue;
      }
      if (pending.erase(e.address)) pending_by_stack[it->second.second] -= static_cast<int64_t>(it->second.first);
      by_stack[it->second.second] -= static_cast<int64_t>(it->second.first);
      in_trace -= static_cast<int64_t>(it->second.first);
      live.erase(it);
    }
  }
  return out;
}

// At most this many evenly spaced steps are compared (the pair statistics below take time in
// the square of their count).
constexpr size_t kMostComparedPoints = 256;

// The points compared, ys[first..last] as (step, bytes), thinned evenly to kMostComparedPoints.
std::vector<std::pair<double, double>> compared_points(const std::vector<uint64_t>& ys, size_t first, size_t last) {
  std::vector<std::pair<double, double>> out;
  const size_t n = last + 1 - first;
  const size_t stride = (n + kMostComparedPoints - 1) / kMostComparedPoints;
  for (size_t i = first; i <= last; i += stride) out.emplace_back(static_cast<double>(i), static_cast<double>(ys[i]));
  if (out.back().first != static_cast<double>(last)) out.emplace_back(static_cast<double>(last), static_cast<double>(ys[last]));
  return out;
}

// Kendall's tau between step and bytes: 1 when every later step holds more, 0 with no trend (a
// level that stays, or comes and goes).
double kendall_tau(const std::vector<std::pair<double, double>>& points) {
  int64_t score = 0, pairs = 0;
  for (size_t i = 0; i < points.size(); ++i)
    for (size_t j = i + 1; j < points.size(); ++j) {
      score += (points[j].second > points[i].second) - (points[j].second < points[i].second);
      ++pairs;
    }
  return pairs > 0 ? static_cast<double>(score) / static_cast<double>(pairs) : 0;
}

// The Theil–Sen slope: the median of the slopes between every two points, which a few odd steps
// do not move.
double theil_sen(const std::vector<std::pair<double, double>>& points) {
  std::vector<double> slopes;
  for (size_t i = 0; i < points.size(); ++i)
    for (size_t j = i + 1; j < points.size(); ++j)
      slopes.push_back((points[j].second - points[i].second) / (points[j].first - points[i].first));
  if (slopes.empty()) return 0;
  const auto middle = slopes.begin() + static_cast<std::ptrdiff_t>(slopes.size() / 2);
  std::nth_element(slopes.begin(), middle, slopes.end());
  return *middle;
}

// The largest rise between two steps in a row, over ys[first..last].
uint64_t largest_rise(const std::vector<uint64_t>& ys, size_t first, size_t last) {
  uint64_t rise = 0;
  for (size_t i = first + 1; i <= last; ++i)
    if (ys[i] > ys[i - 1]) rise = std::max(rise, ys[i] - ys[i - 1]);
  return rise;
}

// The start of the run of last steps in which the bytes never fall, from where they first rose,
// and how many of its steps rise.
std::pair<size_t, size_t> last_rising_run(const std::vector<uint64_t>& ys, size_t first) {
  const size_t last = ys.size() - 1;
  size_t start = last;
  while (start > first && ys[start - 1] <= ys[start]) --start;
  while (start < last && ys[start] == ys[start + 1]) ++start;
  size_t rises = 0;
  for (size_t i = start + 1; i <= last; ++i) rises += ys[i] > ys[i - 1];
  return {start, rises};
}

// Where a site's live bytes grow as a leak's do (growth.h): over the steps compared, or over a
// run of the last ones; the step it grows from, or nothing. No one step decides: the trend is
// over every step, and no single rise may make most of the growth (a buffer that grew once).
// Growth that began late is dated from where it began, and its rate taken there.
std::optional<size_t> growing_from(const std::vector<uint64_t>& ys, size_t first) {
  const size_t last = ys.size() - 1;
  if (last + 1 < first + kMinComparedSteps) return std::nullopt;
  // A leak that began late: the last steps never fall and nearly all rise.
  const auto [start, rises] = last_rising_run(ys, first);
  const size_t steps = last - start;
  const size_t shortest = std::max<size_t>(kMinLateSteps, (last + 1 - first) / 4);
  const bool late_run = steps + 1 >= shortest && rises * 4 >= steps * 3 && ys[last] > ys[start] &&
                        largest_rise(ys, start, last) * 2 <= ys[last] - ys[start];
  // The whole stretch: a strong trend, rising in its second half too.
  if (ys[last] > ys[first]) {
    const size_t middle = first + (last - first) / 2;
    if (kendall_tau(compared_points(ys, first, last)) >= kLeakTrend && theil_sen(compared_points(ys, middle, last)) > 0 &&
        largest_rise(ys, first, last) * 2 <= ys[last] - ys[first]) {
      // Flat, then rising: it began where the run of rises did.
      if (late_run && start > first &&
          theil_sen(compared_points(ys, start, last)) > 1.5 * theil_sen(compared_points(ys, first, last)))
        return start;
      return first;
    }
  }
  if (late_run) return start;
  return std::nullopt;
}

// The growing sites, fastest first.
std::vector<GrowthSite> growing_sites(const StepMemory& memory, size_t first) {
  std::unordered_set<StackIndex> seen;
  for (const auto& step : memory.by_stack)
    for (const auto& [stack, bytes] : step) seen.insert(stack);
  std::vector<GrowthSite> out;
  for (StackIndex stack : seen) {
    GrowthSite site;
    site.stack = stack;
    for (const auto& step : memory.by_stack) {
      auto it = step.find(stack);
      site.bytes.push_back(it == step.end() ? 0 : static_cast<uint64_t>(std::max<int64_t>(it->second, 0)));
    }
    const std::optional<size_t> from = growing_from(site.bytes, first);
    if (!from) continue;
    site.from_step = *from;
    site.bytes_per_step = theil_sen(compared_points(site.bytes, *from, site.bytes.size() - 1));
    site.growth_bytes = static_cast<int64_t>(site.bytes.back()) - static_cast<int64_t>(site.bytes[*from]);
    if (const auto pending = memory.pending_by_stack.back().find(stack); pending != memory.pending_by_stack.back().end())
      site.pending_bytes = static_cast<uint64_t>(std::max<int64_t>(pending->second, 0));
    out.push_back(std::move(site));
  }
  std::sort(out.begin(), out.end(), [](const GrowthSite& a, const GrowthSite& b) {
    return a.bytes_per_step != b.bytes_per_step ? a.bytes_per_step > b.bytes_per_step : a.stack < b.stack;
  });
  return out;
}

// Whether two placements of the step starts name the same growing sites at the same rates.
bool same_answer(const std::vector<GrowthSite>& a, const std::vector<GrowthSite>& b) {
  if (a.size() != b.size()) return false;
  std::unordered_map<StackIndex, double> rates;
  for (const GrowthSite& s : a) rates[s.stack] = s.bytes_per_step;
  for (const GrowthSite& s : b) {
    auto it = rates.find(s.stack);
    if (it == rates.end()) return false;
    if (std::fabs(it->second - s.bytes_per_step) > kSlopeAgreement * std::max(it->second, s.bytes_per_step)) return false;
  }
  return true;
}

std::string median_step_text(const GrowthSteps& steps) {
  if (steps.start_times_us.size() < 2) return "";
  std::vector<int64_t> lengths;
  for (size_t i = 1; i < steps.start_times_us.size(); ++i)
    lengths.push_back(steps.start_times_us[i] - steps.start_times_us[i - 1]);
  std::nth_element(lengths.begin(), lengths.begin() + static_cast<std::ptrdiff_t>(lengths.size() / 2), lengths.end());
  return " (a step lasts " + std::to_string(lengths[lengths.size() / 2]) + " µs at the median)";
}

std::string step_range(const Growth& g) {
  return "steps " + std::to_string(g.first_compared_step + 1) + " to " + std::to_string(g.step_events.size());
}

}  // namespace

std::string_view growth_verdict_name(GrowthVerdict verdict) {
  switch (verdict) {
    case GrowthVerdict::kGrowing: return "growing";
    case GrowthVerdict::kNothingGrows: return "nothing_grows";
    case GrowthVerdict::kCannotJudge: return "cannot_judge";
  }
  return "cannot_judge";
}

namespace {

Growth growth_answer(const Snapshot& snapshot, const DeviceTrace& trace, const GrowthSteps& steps, Growth growth,
                     const GrowthOptions& options);

}  // namespace

Result<Growth> compute_growth(const Snapshot& snapshot, const GrowthOptions& options) {
  Growth growth;
  growth.device = options.device.value_or(busiest_device(snapshot));
  if (growth.device < 0 || static_cast<size_t>(growth.device) >= snapshot.device_traces.size() ||
      snapshot.device_traces[static_cast<size_t>(growth.device)].empty())
    return Result<Growth>::failure("growth: no trace for device " + std::to_string(growth.device) +
                                   " (record history at level 'all')");
  const DeviceTrace& trace = snapshot.device_traces[static_cast<size_t>(growth.device)];
  Result<GrowthSteps> found = find_growth_steps(snapshot, trace, growth.device, options.annotation);
  if (!found) return Result<Growth>::failure(found.error());
  growth = growth_answer(snapshot, trace, found.value(), std::move(growth), options);
  decide_growth(snapshot, growth);
  return growth;
}

namespace {

Growth growth_answer(const Snapshot& snapshot, const DeviceTrace& trace, const GrowthSteps& steps, Growth growth,
                     const GrowthOptions& options) {
  growth.steps_from = steps.from;
  growth.step_events = steps.starts;
  if (steps.starts.size() < 3) {
    growth.answer = GrowthVerdict::kCannotJudge;
    growth.reason = "fewer than 3 steps were found (" + std::to_string(steps.starts.size()) +
                    "): annotate steps (memsnap.torch.annotate, torch.profiler's ProfilerStep, record_function) or "
                    "pass --annotation";
    return growth;
  }

  const BeforeTrace before = memory_before_trace(snapshot, trace, growth.device);
  const StepMemory memory = measure_steps(trace, steps.starts, before.bytes_at_start);
  growth.live_bytes = memory.live_bytes;
  growth.before_trace_bytes = memory.before_trace_bytes;
  // The first step warms up; until memory from before the trace is no longer freed, a site
  // that reallocates it would look as if it grew.
  growth.first_compared_step = 1;
  while (growth.first_compared_step < steps.starts.size() &&
         steps.starts[growth.first_compared_step] < before.freed_until)
    ++growth.first_compared_step;
  const size_t compared = steps.starts.size() - std::min(steps.starts.size(), growth.first_compared_step);

  const auto cannot_judge = [&](std::string reason) {
    growth.answer = GrowthVerdict::kCannotJudge;
    growth.reason = std::move(reason);
    return growth;
  };
  if (before.frees == 0 && before.other_events == 0)
    return cannot_judge("the trace holds allocations alone, no free and no segment event: a program that freed "
                        "nothing and history kept at level 'alloc' (which records no frees) look the same, so "
                        "nothing says what stayed live");
  if (steps.collapsed > 0)
    return cannot_judge(std::to_string(steps.collapsed) + " of the " + counted(steps.starts.size(), "step") +
                        " start in the same microsecond as the step before, with allocator events in it: the "
                        "trace's microsecond clock cannot tell steps this short apart" + median_step_text(steps));
  if (compared < kMinComparedSteps) {
    std::string why = "step 1 warms up";
    if (growth.first_compared_step > 1)
      why += "; memory allocated before the trace began was freed until step " +
             std::to_string(growth.first_compared_step);
    return cannot_judge("only " + counted(compared, "step") + " can be compared (" + why + ", and the trace has " +
                        counted(steps.starts.size(), "step") + ") and at least " + std::to_string(kMinComparedSteps) +
                        " are needed");
  }
  growth.sites = growing_sites(memory, growth.first_compared_step);
  if (steps.latest_starts != steps.starts) {
    // Events in a step start's microsecond may precede it: the answer must not depend on it.
    const StepMemory latest = measure_steps(trace, steps.latest_starts, before.bytes_at_start);
    if (!same_answer(growth.sites, growing_sites(latest, growth.first_compared_step))) {
      size_t shared = 0;
      for (size_t i = 0; i < steps.starts.size(); ++i) shared += steps.starts[i] != steps.latest_starts[i];
      growth.sites.clear();
      return cannot_judge(std::to_string(shared) + " of the " + counted(steps.starts.size(), "step") +
                          " start in a microsecond that also holds allocator events, and which call sites grow "
                          "depends on which side of the start those events fell: the trace's microsecond clock "
                          "cannot say" + median_step_text(steps));
    }
  }
  growth.answer = growth.sites.empty() ? GrowthVerdict::kNothingGrows : GrowthVerdict::kGrowing;
  if (growth.sites.size() > options.max_sites) growth.sites.resize(options.max_sites);
  return growth;
}

}  // namespace

std::string growth_conclusion(const Snapshot&, const Growth& growth) { return growth.verdict.sentence; }

namespace {

std::string growth_sentence(const Snapshot& snapshot, const Growth& growth) {
  switch (growth.answer) {
    case GrowthVerdict::kCannotJudge:
      return "Cannot judge whether memory grows, because " + growth.reason + ".";
    case GrowthVerdict::kNothingGrows:
      return "Nothing grows: no call site holds steadily more memory from step to step over " + step_range(growth) + ".";
    case GrowthVerdict::kGrowing: {
      const GrowthSite& top = growth.sites.front();
      std::string out = "Memory grows: " + counted(growth.sites.size(), "call site") + " hold" +
                        (growth.sites.size() == 1 ? "s" : "") + " more at each step's start over " + step_range(growth) +
                        "; the fastest, " + call_site_label(snapshot, top.stack) + ", by " +
                        format_bytes(static_cast<int64_t>(top.bytes_per_step)) + " a step";
      if (growth.steps_from.rfind("allocation site", 0) == 0)
        out += " (a step here: each time the " + growth.steps_from + " allocates; no annotation names the steps)";
      if (top.from_step > growth.first_compared_step) out += " from step " + std::to_string(top.from_step + 1);
      if (top.pending_bytes * 2 >= top.bytes.back() && top.pending_bytes > 0)
        out += ". Of its " + format_bytes(static_cast<int64_t>(top.bytes.back())) + " at the last step, " +
               format_bytes(static_cast<int64_t>(top.pending_bytes)) +
               " was freed by the program but waits for other streams' work (record_stream): those streams fall "
               "behind, so freed memory piles up";
      return out + ".";
    }
  }
  return "";
}

}  // namespace

void decide_growth(const Snapshot& snapshot, Growth& growth) {
  Verdict& v = growth.verdict;
  v = Verdict{};
  v.kind = VerdictKind::kGrowth;
  v.answer = std::string(growth_verdict_name(growth.answer));
  if (growth.answer == GrowthVerdict::kCannotJudge) v.reason = growth.reason;
  v.sentence = growth_sentence(snapshot, growth);
  v.basis = counted(growth.step_events.size(), "step") + " from the " + growth.steps_from;
  v.add("steps", static_cast<int64_t>(growth.step_events.size()));
  v.add("first_compared_step", static_cast<int64_t>(growth.first_compared_step + 1));
  if (!growth.live_bytes.empty()) {
    v.add("live_bytes_first_compared", growth.live_bytes[std::min(growth.first_compared_step, growth.live_bytes.size() - 1)]);
    v.add("live_bytes_last", growth.live_bytes.back());
  }
  v.add("growing_sites", static_cast<int64_t>(growth.sites.size()));
  if (!growth.sites.empty()) {
    v.add("fastest_bytes_per_step", static_cast<int64_t>(growth.sites.front().bytes_per_step));
    v.add("fastest_pending_bytes", growth.sites.front().pending_bytes);
  }
}

nlohmann::json growth_to_json(const Snapshot& snapshot, const Growth& growth) {
  nlohmann::json sites = nlohmann::json::array();
  for (const GrowthSite& s : growth.sites)
    sites.push_back({{"stack", s.stack}, {"label", call_site_label(snapshot, s.stack)}, {"bytes", s.bytes},
                     {"bytes_per_step", s.bytes_per_step}, {"growth_bytes", s.growth_bytes},
                     {"from_step", s.from_step + 1}, {"pending_bytes", s.pending_bytes}});
  return {{"device", growth.device},
          {"steps_from", growth.steps_from},
          {"step_events", growth.step_events},
          {"live_bytes", growth.live_bytes},
          {"before_trace_bytes", growth.before_trace_bytes},
          {"first_compared_step", growth.first_compared_step},
          {"verdict", growth_verdict_name(growth.answer)},
          {"judgement", verdict_to_json(growth.verdict)},
          {"reason", growth.reason},
          {"conclusion", growth_conclusion(snapshot, growth)},
          {"sites", std::move(sites)}};
}

std::string growth_to_text(const Snapshot& snapshot, const Growth& growth) {
  std::string out;
  char line[512];
  const size_t steps = growth.step_events.size();
  out += "Device " + std::to_string(growth.device) + ": " + counted(steps, "step") + ", from the " +
         growth.steps_from + ".\n";
  if (growth.live_bytes.empty()) return out + growth_conclusion(snapshot, growth) + "\n";
  const size_t first = std::min(growth.first_compared_step, steps - 1);
  std::snprintf(line, sizeof line, "Live memory at the start of step %zu: %s; of step %zu: %s.\n", first + 1,
                format_bytes(static_cast<int64_t>(growth.live_bytes[first])).c_str(), steps,
                format_bytes(static_cast<int64_t>(growth.live_bytes.back())).c_str());
  out += line;
  if (growth.before_trace_bytes.front() > 0)
    out += "The trace begins mid-run (its oldest events were dropped, or recording started late): " +
           format_bytes(static_cast<int64_t>(growth.before_trace_bytes.front())) +
           " was live before its first event; it is counted in live memory, under no call site.\n";
  out += growth_conclusion(snapshot, growth) + "\n";
  if (growth.sites.empty()) return out;
  std::snprintf(line, sizeof line,
                "\nGrowing call sites (live at step starts, %s; step 1 warms up):\n"
                "     per step     in all   step %zu -> %zu   call site\n",
                step_range(growth).c_str(), first + 1, steps);
  out += line;
  for (const GrowthSite& s : growth.sites) {
    std::snprintf(line, sizeof line, "  %11s  %9s   %s -> %s   %s\n",
                  format_bytes(static_cast<int64_t>(s.bytes_per_step)).c_str(), format_bytes(s.growth_bytes).c_str(),
                  format_bytes(static_cast<int64_t>(s.bytes[first])).c_str(),
                  format_bytes(static_cast<int64_t>(s.bytes.back())).c_str(), call_site_label(snapshot, s.stack).c_str());
    out += line;
  }
  return out;
}

}  // namespace memsnap
