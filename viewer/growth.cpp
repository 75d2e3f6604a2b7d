#include "viewer/growth.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
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

// Memory live before the trace's first event: what the trace frees without having allocated
// it, and what is live at the snapshot with no allocation in the trace.
struct BeforeTrace {
  uint64_t bytes_at_start = 0;
  size_t freed_until = 0;  // the trace index after its last free of such memory (0: none)
  size_t frees = 0;        // free_completed events in the trace
};

BeforeTrace memory_before_trace(const Snapshot& snapshot, const DeviceTrace& trace, int64_t device) {
  BeforeTrace out;
  std::unordered_set<uint64_t> live;  // allocated in the trace and not freed yet
  for (size_t i = 0; i < trace.size(); ++i) {
    const TraceEntry e = trace[i];
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
  std::vector<uint64_t> live_bytes;
  std::vector<uint64_t> before_trace_bytes;
};

StepMemory measure_steps(const DeviceTrace& trace, const std::vector<uint64_t>& starts, uint64_t before_trace) {
  StepMemory out;
  std::unordered_map<uint64_t, std::pair<uint64_t, StackIndex>> live;
  std::unordered_map<StackIndex, int64_t> by_stack;
  int64_t in_trace = 0;
  uint64_t before_left = before_trace;
  size_t next_step = 0;
  for (size_t i = 0; i <= trace.size() && next_step < starts.size(); ++i) {
    while (next_step < starts.size() && starts[next_step] == i) {
      out.by_stack.push_back(by_stack);
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
    } else if (e.action == TraceAction::kFreeCompleted) {
      auto it = live.find(e.address);
      if (it == live.end()) {  // memory_before_trace counted it
        before_left -= std::min(before_left, e.size);
        continue;
      }
      by_stack[it->second.second] -= static_cast<int64_t>(it->second.first);
      in_trace -= static_cast<int64_t>(it->second.first);
      live.erase(it);
    }
  }
  return out;
}

double slope(const std::vector<uint64_t>& ys, size_t first) {
  const size_t n = ys.size() - first;
  if (n < 2) return 0;
  double mean_x = 0, mean_y = 0;
  for (size_t i = first; i < ys.size(); ++i) mean_x += static_cast<double>(i), mean_y += static_cast<double>(ys[i]);
  mean_x /= static_cast<double>(n);
  mean_y /= static_cast<double>(n);
  double num = 0, den = 0;
  for (size_t i = first; i < ys.size(); ++i) {
    const double dx = static_cast<double>(i) - mean_x;
    num += dx * (static_cast<double>(ys[i]) - mean_y);
    den += dx * dx;
  }
  return den > 0 ? num / den : 0;
}

// Up over the steps compared and over each half of them, no single step making most of the
// rise: a leak, not a buffer that grew once (a warm-up, a cache filled) or went up and down.
bool grows_steadily(const std::vector<uint64_t>& bytes, size_t first) {
  const size_t last = bytes.size() - 1;
  if (last < first + 2) return false;
  const size_t middle = first + (last - first) / 2;
  if (bytes[middle] <= bytes[first] || bytes[last] <= bytes[middle]) return false;
  uint64_t largest_rise = 0;
  for (size_t i = first + 1; i <= last; ++i)
    if (bytes[i] > bytes[i - 1]) largest_rise = std::max(largest_rise, bytes[i] - bytes[i - 1]);
  return largest_rise * 2 <= bytes[last] - bytes[first];
}

// The steadily growing sites, fastest first.
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
    if (!grows_steadily(site.bytes, first)) continue;
    site.bytes_per_step = slope(site.bytes, first);
    site.growth_bytes = static_cast<int64_t>(site.bytes.back()) - static_cast<int64_t>(site.bytes[first]);
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
  const GrowthSteps& steps = found.value();
  growth.steps_from = steps.from;
  growth.step_events = steps.starts;
  if (steps.starts.size() < 3) {
    growth.verdict = GrowthVerdict::kCannotJudge;
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
    growth.verdict = GrowthVerdict::kCannotJudge;
    growth.reason = std::move(reason);
    return growth;
  };
  if (before.frees == 0)
    return cannot_judge("the trace records no frees (history at level 'alloc' keeps only allocations), so nothing "
                        "says what stayed live");
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
  growth.verdict = growth.sites.empty() ? GrowthVerdict::kNothingGrows : GrowthVerdict::kGrowing;
  if (growth.sites.size() > options.max_sites) growth.sites.resize(options.max_sites);
  return growth;
}

std::string growth_conclusion(const Snapshot& snapshot, const Growth& growth) {
  switch (growth.verdict) {
    case GrowthVerdict::kCannotJudge:
      return "Cannot judge whether memory grows, because " + growth.reason + ".";
    case GrowthVerdict::kNothingGrows:
      return "Nothing grows: no call site holds steadily more memory from step to step over " + step_range(growth) + ".";
    case GrowthVerdict::kGrowing: {
      const GrowthSite& top = growth.sites.front();
      return "Memory grows: " + counted(growth.sites.size(), "call site") + " hold" +
             (growth.sites.size() == 1 ? "s" : "") + " steadily more at each step's start over " + step_range(growth) +
             "; the fastest, " + call_site_label(snapshot, top.stack) + ", by " +
             format_bytes(static_cast<int64_t>(top.bytes_per_step)) + " a step.";
    }
  }
  return "";
}

nlohmann::json growth_to_json(const Snapshot& snapshot, const Growth& growth) {
  nlohmann::json sites = nlohmann::json::array();
  for (const GrowthSite& s : growth.sites)
    sites.push_back({{"stack", s.stack}, {"label", call_site_label(snapshot, s.stack)}, {"bytes", s.bytes},
                     {"bytes_per_step", s.bytes_per_step}, {"growth_bytes", s.growth_bytes}});
  return {{"device", growth.device},
          {"steps_from", growth.steps_from},
          {"step_events", growth.step_events},
          {"live_bytes", growth.live_bytes},
          {"before_trace_bytes", growth.before_trace_bytes},
          {"first_compared_step", growth.first_compared_step},
          {"verdict", growth_verdict_name(growth.verdict)},
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
