#include "viewer/growth.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <unordered_map>

#include "allocator/counted.h"
#include "allocator/device_stats.h"
#include "viewer/frame_labels.h"

namespace memsnap {
namespace {

// "ProfilerStep#12" -> "ProfilerStep#", "step 12" -> "step "; "" when the name ends in no number.
std::string numbered_stem(const std::string& name) {
  size_t end = name.size();
  while (end > 0 && name[end - 1] >= '0' && name[end - 1] <= '9') --end;
  return end == name.size() || end == 0 ? "" : name.substr(0, end);
}

// The first trace entry at or after each time (traces are in time order).
uint64_t entry_at(const DeviceTrace& trace, int64_t time_us) {
  return static_cast<uint64_t>(std::lower_bound(trace.begin(), trace.end(), time_us,
                                                [](const TraceEntry& e, int64_t t) { return e.time_us < t; }) -
                               trace.begin());
}

std::vector<uint64_t> steps_from_annotations(const Snapshot& snapshot, const DeviceTrace& trace,
                                             int64_t device, const std::string& wanted, std::string& stem_out) {
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
  std::vector<uint64_t> out;
  if (best == nullptr) return out;
  std::vector<int64_t> times = *best;
  std::sort(times.begin(), times.end());
  for (int64_t t : times) out.push_back(entry_at(trace, t));
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
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

}  // namespace

Result<Growth> compute_growth(const Snapshot& snapshot, const GrowthOptions& options) {
  Growth growth;
  growth.device = options.device.value_or(busiest_device(snapshot));
  if (growth.device < 0 || static_cast<size_t>(growth.device) >= snapshot.device_traces.size() ||
      snapshot.device_traces[static_cast<size_t>(growth.device)].empty())
    return Result<Growth>::failure("growth: no trace for device " + std::to_string(growth.device) +
                                   " (record history at level 'all')");
  const DeviceTrace& trace = snapshot.device_traces[static_cast<size_t>(growth.device)];
  std::string stem;
  growth.step_events = steps_from_annotations(snapshot, trace, growth.device, options.annotation, stem);
  if (!growth.step_events.empty()) {
    growth.steps_from = "annotation '" + stem + "'";
  } else if (!options.annotation.empty()) {
    return Result<Growth>::failure("growth: fewer than 3 annotations named '" + options.annotation + "...' on device " +
                                   std::to_string(growth.device));
  } else {
    StackIndex site = kNoStackIndex;
    growth.step_events = steps_from_regular_site(trace, site);
    growth.steps_from = "allocation site that recurs most evenly, " + call_site_label(snapshot, site);
  }
  if (growth.step_events.size() < 3)
    return Result<Growth>::failure("growth: fewer than 3 steps found; annotate steps (memsnap.torch.annotate, "
                                   "torch.profiler's ProfilerStep, record_function) or pass --annotation");

  // Live bytes by allocating stack at each step's start (memory allocated before the trace
  // began is not counted: nothing says which step it belongs to).
  std::unordered_map<uint64_t, std::pair<uint64_t, StackIndex>> live;
  std::unordered_map<StackIndex, int64_t> by_stack;
  std::vector<std::unordered_map<StackIndex, int64_t>> at_steps;
  int64_t total = 0;
  size_t next_step = 0;
  for (size_t i = 0; i <= trace.size() && next_step < growth.step_events.size(); ++i) {
    while (next_step < growth.step_events.size() && growth.step_events[next_step] == i) {
      at_steps.push_back(by_stack);
      growth.live_bytes.push_back(static_cast<uint64_t>(std::max<int64_t>(total, 0)));
      ++next_step;
    }
    if (i == trace.size()) break;
    const TraceEntry& e = trace[i];
    if (e.action == TraceAction::kAlloc) {
      live[e.address] = {e.size, e.stack};
      by_stack[e.stack] += static_cast<int64_t>(e.size);
      total += static_cast<int64_t>(e.size);
    } else if (e.action == TraceAction::kFreeCompleted) {
      auto it = live.find(e.address);
      if (it == live.end()) continue;
      by_stack[it->second.second] -= static_cast<int64_t>(it->second.first);
      total -= static_cast<int64_t>(it->second.first);
      live.erase(it);
    }
  }
  std::unordered_map<StackIndex, bool> seen;
  for (const auto& step : at_steps)
    for (const auto& [stack, bytes] : step) seen[stack] = true;
  for (const auto& [stack, unused] : seen) {
    GrowthSite site;
    site.stack = stack;
    for (const auto& step : at_steps) {
      auto it = step.find(stack);
      site.bytes.push_back(it == step.end() ? 0 : static_cast<uint64_t>(std::max<int64_t>(it->second, 0)));
    }
    site.bytes_per_step = slope(site.bytes, 1);
    site.growth_bytes = static_cast<int64_t>(site.bytes.back()) - static_cast<int64_t>(site.bytes[1]);
    if (site.growth_bytes > 0 && site.bytes_per_step > 0) growth.sites.push_back(std::move(site));
  }
  std::sort(growth.sites.begin(), growth.sites.end(), [](const GrowthSite& a, const GrowthSite& b) {
    return a.bytes_per_step != b.bytes_per_step ? a.bytes_per_step > b.bytes_per_step : a.stack < b.stack;
  });
  if (growth.sites.size() > options.max_sites) growth.sites.resize(options.max_sites);
  return growth;
}

nlohmann::json growth_to_json(const Snapshot& snapshot, const Growth& growth) {
  nlohmann::json sites = nlohmann::json::array();
  for (const GrowthSite& s : growth.sites)
    sites.push_back({{"stack", s.stack}, {"label", call_site_label(snapshot, s.stack)}, {"bytes", s.bytes},
                     {"bytes_per_step", s.bytes_per_step}, {"growth_bytes", s.growth_bytes}});
  return {{"device", growth.device}, {"steps_from", growth.steps_from}, {"step_events", growth.step_events},
          {"live_bytes", growth.live_bytes}, {"sites", std::move(sites)}};
}

std::string growth_to_text(const Snapshot& snapshot, const Growth& growth) {
  std::string out;
  char line[512];
  const size_t steps = growth.step_events.size();
  out += "Device " + std::to_string(growth.device) + ": " + counted(steps, "step") + ", from the " +
         growth.steps_from + ".\n";
  std::snprintf(line, sizeof line, "Live memory at the start of step 2: %s; of step %zu: %s.\n",
                format_bytes(static_cast<int64_t>(growth.live_bytes[1])).c_str(), steps,
                format_bytes(static_cast<int64_t>(growth.live_bytes.back())).c_str());
  out += line;
  if (growth.sites.empty()) {
    out += "No call site holds more memory from step to step: nothing grows.\n";
    return out;
  }
  out += "\nGrowing call sites (live at step starts; the first step warms up and is not counted):\n"
         "     per step     in all   step 2 -> last   call site\n";
  for (const GrowthSite& s : growth.sites) {
    std::snprintf(line, sizeof line, "  %11s  %9s   %s -> %s   %s\n",
                  format_bytes(static_cast<int64_t>(s.bytes_per_step)).c_str(), format_bytes(s.growth_bytes).c_str(),
                  format_bytes(static_cast<int64_t>(s.bytes[1])).c_str(),
                  format_bytes(static_cast<int64_t>(s.bytes.back())).c_str(), call_site_label(snapshot, s.stack).c_str());
    out += line;
  }
  return out;
}

}  // namespace memsnap
