#include "viewer/fit_estimate.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <map>

#include "replay/recorded_config.h"
#include "replay/device_replay.h"
#include "replay/snapshot_replay.h"
#include "viewer/byte_text.h"
#include "viewer/frame_labels.h"
#include "viewer/growth_steps.h"
#include "viewer/oom_state.h"
#include "viewer/replay_fidelity.h"

namespace memsnap {
namespace {

using text::bytes;

constexpr std::string_view kStepPrefix = "estimate step ";
constexpr size_t kFailureFrames = 12;
// Larger than any GPU, and within what the simulated device gives expandable segments (1 TiB
// of address space a device, 1 1/8 of its memory for a segment).
constexpr uint64_t kUnlimitedBytes = uint64_t{512} << 30;

std::string squeezed(const std::string& name) {
  std::string out;
  for (const char c : name)
    if (std::isalnum(static_cast<unsigned char>(c))) out += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// The capture's steps (START to END of each "estimate step N"), ordered, with the setup before
// them; a trace without them is one step.
std::vector<StepFit> step_windows(const Snapshot& snapshot, const DeviceTrace& trace, int64_t device) {
  std::vector<StepFit> steps;
  std::map<std::string, int64_t> open;
  const AnnotationList& annotations = snapshot.external_annotations;
  for (size_t i = 0; i < annotations.size(); ++i) {
    if (annotations.device(i) != device || annotations.name(i).rfind(kStepPrefix, 0) != 0) continue;
    const std::string& name = annotations.name(i);
    if (annotations.stage(i) == "START") {
      open[name] = annotations.time_us(i);
    } else if (auto it = open.find(name); annotations.stage(i) == "END" && it != open.end()) {
      steps.push_back({name, first_at_or_after(trace, it->second), first_at_or_after(trace, annotations.time_us(i))});
      open.erase(it);
    }
  }
  for (const auto& [name, start] : open) steps.push_back({name, first_at_or_after(trace, start), trace.size()});
  std::sort(steps.begin(), steps.end(), [](const StepFit& a, const StepFit& b) { return a.first_entry < b.first_entry; });
  if (steps.empty()) return {{"trace", 0, trace.size()}};
  if (steps.front().first_entry > 0) steps.insert(steps.begin(), {"setup", 0, steps.front().first_entry});
  return steps;
}

// The user's line first (the innermost Python frame), then the innermost frames.
std::vector<std::string> failure_frames(const Snapshot& snapshot, StackIndex stack) {
  std::vector<std::string> out;
  if (stack == kNoStackIndex) return out;
  const std::vector<uint32_t> frames = visible_frames_outermost_first(snapshot, stack, {});
  for (auto it = frames.rbegin(); it != frames.rend() && out.size() < kFailureFrames; ++it)
    out.push_back(frame_label(snapshot.frames[*it]));
  return out;
}

std::string percent(double share) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f%%", 100 * share);
  return text;
}

}  // namespace

const std::vector<DevicePreset>& device_presets() {
  // total_memory from torch.cuda.get_device_properties; context: device memory in use beyond
  // the allocator's reserve (cudaMemGetInfo) after a GPT-2 training step on torch 2.11 / CUDA 13:
  // the CUDA context, the kernels loaded, the cuBLAS handle.
  static const std::vector<DevicePreset> presets = {
      {"H200", 150109880320, 787283968, "measured on an NVIDIA H200 (141 GB), torch 2.11, 2026-11-28"},
  };
  return presets;
}

Result<DevicePreset> find_device_preset(const std::string& name) {
  const std::string wanted = squeezed(name);
  for (const DevicePreset& preset : device_presets())
    if (squeezed(preset.name) == wanted) return preset;
  std::string known;
  for (const DevicePreset& preset : device_presets()) known += (known.empty() ? "" : ", ") + preset.name;
  return Result<DevicePreset>::failure("unknown device '" + name + "' (known: " + known +
                                       "; or give the memory the allocator may use in bytes or GiB)");
}

Result<FitEstimate> estimate_fit(const Snapshot& snapshot, const FitOptions& options) {
  // Without a capacity: the recording's own device and cap, where the recording ran out of
  // memory or not (what a replay of it on that device does).
  const bool as_recorded = options.capacity_bytes == 0;
  FitEstimate out;
  out.device = options.device.value_or(busiest_device(snapshot));
  if (out.device < 0 || static_cast<size_t>(out.device) >= snapshot.device_traces.size() ||
      snapshot.device_traces[static_cast<size_t>(out.device)].empty())
    return Result<FitEstimate>::failure("estimate: no trace to replay for device " + std::to_string(out.device) +
                                        " (capture a step with memsnap.estimate, or record history at level 'all')");
  const DeviceTrace& trace = snapshot.device_traces[static_cast<size_t>(out.device)];
  // A capture (memsnap.estimate's trace of requests) has no segment, no segment event and no
  // error of its own: no device to replay it on.
  if (as_recorded && snapshot.segments.empty() && std::none_of(trace.begin(), trace.end(), [](const TraceEntry& e) {
        return is_segment_growth(e.action) || e.action == TraceAction::kOom;
      }))
    return Result<FitEstimate>::failure(
        "estimate: say which device: --device NAME or --capacity-gib G (a capture of requests has no device of its own)");
  Result<AllocatorConfig> config = options.settings ? parse_allocator_config(*options.settings)
                                                    : recorded_allocator_config(snapshot);
  if (!config) return Result<FitEstimate>::failure("estimate: " + config.error());
  out.capacity_bytes = options.capacity_bytes;
  out.capacity_source = options.capacity_source;
  out.settings = to_config_string(config.value());
  out.steps = step_windows(snapshot, trace, out.device);

  SnapshotReplayOptions replay_options;
  replay_options.config = config.value();
  if (!as_recorded) replay_options.capacity_bytes = options.capacity_bytes;
  std::optional<ReplayFailure> raw_failure;
  size_t window = 0;
  uint64_t allocated_before = 0;
  uint64_t most_allocated_at_reserved_peak = 0;
  replay_options.after_entry = [&](int device, size_t entry, const DeviceStats& stats, bool failed) {
    if (device != out.device) return true;
    const auto allocated = static_cast<uint64_t>(stats.allocated_bytes[kAggregate].current);
    const auto reserved = static_cast<uint64_t>(stats.reserved_bytes[kAggregate].current);
    out.entries = entry + 1;
    while (window < out.steps.size() && entry >= out.steps[window].end_entry) ++window;
    if (window < out.steps.size() && entry >= out.steps[window].first_entry) {
      StepFit& step = out.steps[window];
      if (entry == step.first_entry) step.allocated_at_start_bytes = allocated_before;
      step.peak_allocated_bytes = std::max(step.peak_allocated_bytes, allocated);
      step.peak_reserved_bytes = std::max(step.peak_reserved_bytes, reserved);
      if (failed) step.completed = false;
    }
    allocated_before = allocated;
    out.peak_requested_bytes =
        std::max(out.peak_requested_bytes, static_cast<uint64_t>(stats.requested_bytes[kAggregate].current));
    out.peak_allocated_bytes = std::max(out.peak_allocated_bytes, allocated);
    if (reserved > out.peak_reserved_bytes) {
      out.peak_reserved_bytes = reserved;
      most_allocated_at_reserved_peak = allocated;
    } else if (reserved == out.peak_reserved_bytes) {
      most_allocated_at_reserved_peak = std::max(most_allocated_at_reserved_peak, allocated);
    }
    if (!failed) return true;
    const TraceEntry e = trace[entry];
    FitFailure failure;
    raw_failure = ReplayFailure{entry, e.size, allocated, static_cast<uint64_t>(stats.requested_bytes[kAggregate].current),
                                static_cast<uint64_t>(stats.allocation[kAggregate].current), reserved,
                                static_cast<uint64_t>(stats.active_bytes[kAggregate].current)};
    failure.entry = entry;
    failure.step = window < out.steps.size() && entry >= out.steps[window].first_entry ? out.steps[window].name : "";
    failure.requested_bytes = e.size;
    failure.stream = e.stream;
    failure.allocated_bytes = allocated;
    failure.reserved_bytes = reserved;
    failure.site = headline_label(snapshot, e.stack);
    failure.frames = failure_frames(snapshot, e.stack);
    out.failure = std::move(failure);
    return false;  // the program raises here
  };
  Result<SnapshotReplay> replay = replay_snapshot(snapshot, replay_options);
  if (!replay) return Result<FitEstimate>::failure("estimate: " + replay.error());
  for (const DeviceReplay& d : replay->devices) {
    if (d.device != out.device) continue;
    if (!d.invariant_problems.empty())
      return Result<FitEstimate>::failure("estimate: the allocator's invariants were violated during the replay");
    out.device_mallocs = d.stats.num_device_alloc;
    out.alloc_retries = d.stats.num_alloc_retries;
    if (as_recorded) {
      out.memory_cap = d.memory_cap;
      out.capacity_bytes = d.capacity_bytes;
      out.capacity_source = "the recording's own device (" + d.capacity_source + ")" +
                            (d.memory_cap ? ", under its " + memory_cap_words(*d.memory_cap).substr(2) : "");
    }
    // What the trace began with (a trace that wrapped, or recording that started late) was
    // live at the first step's start.
    if (!out.steps.empty() && out.steps.front().first_entry == 0) out.steps.front().allocated_at_start_bytes = d.start.live_bytes;
    out.reproduced = true;
    if (options.check_replay && records_segments(d)) {
      // A recording: the replays speak for it only if one under its own settings reproduces it.
      SnapshotReplayOptions recorded_run;
      const Result<AllocatorConfig> recorded = recorded_allocator_config(snapshot);
      if (recorded) recorded_run.config = recorded.value();
      const Result<SnapshotReplay> check = recorded ? replay_snapshot(snapshot, recorded_run) : Result<SnapshotReplay>::failure(recorded.error());
      out.reproduced = false;
      out.fidelity = check ? "the recording's own settings could not be replayed on its device" : check.error();
      if (check)
        for (const DeviceReplay& r : check->devices)
          if (r.device == out.device) {
            const ReplayFidelity fidelity = replay_fidelity(r);
            out.reproduced = fidelity.reproduced;
            out.fidelity = fidelity.reproduced ? fidelity.words : fidelity.shortfall;
          }
    }
  }
  if (out.failure && raw_failure) {
    // Why it failed: where the recording failed there too (its own device), the recorded
    // error's cause, word for word what explain-oom says; elsewhere, from the replay's figures.
    const Result<OomState> recorded_error = as_recorded && trace[raw_failure->entry].action == TraceAction::kOom
                                                ? oom_state(snapshot, out.device)
                                                : Result<OomState>::failure("");
    if (recorded_error && recorded_error->entry == raw_failure->entry)
      out.failure->cause = recorded_error->diagnosis;
    else
      out.failure->cause = decide_replay_failure(*raw_failure, out.capacity_bytes);
  }
  if (out.failure && out.capacity_bytes < kUnlimitedBytes) {
    FitOptions unlimited = options;
    unlimited.capacity_bytes = kUnlimitedBytes;
    unlimited.tune = false;
    unlimited.check_replay = false;
    Result<FitEstimate> needed = estimate_fit(snapshot, unlimited);
    if (needed && !needed->failure) {
      out.failure->unlimited_peak_requested_bytes = needed->peak_requested_bytes;
      out.failure->unlimited_peak_allocated_bytes = needed->peak_allocated_bytes;
      out.failure->unlimited_peak_reserved_bytes = needed->peak_reserved_bytes;
    }
  }
  if (out.failure) {  // steps the program never reached
    out.steps.erase(std::remove_if(out.steps.begin(), out.steps.end(),
                                   [&](const StepFit& s) { return s.first_entry > out.failure->entry; }),
                    out.steps.end());
  }
  if (out.peak_reserved_bytes > 0)
    out.free_at_reserved_peak =
        static_cast<double>(out.peak_reserved_bytes - std::min(out.peak_reserved_bytes, most_allocated_at_reserved_peak)) /
        static_cast<double>(out.peak_reserved_bytes);
  if (options.tune) {
    // On the recording's own device with its own settings, the advice is memsnap tune's.
    TuneOptions tune;
    tune.device = out.device;
    if (!as_recorded) tune.capacity_bytes = options.capacity_bytes;
    if (!as_recorded || options.settings) tune.baseline = config.value();
    Result<SettingsAdvice> advice = tune_settings(snapshot, tune);
    if (advice)
      out.advice = std::move(advice).value();
    else
      out.advice_error = advice.error();
  }
  decide_fit(out);
  return out;
}

std::string fit_estimate_verdict(const FitEstimate& estimate) { return estimate.verdict.sentence; }

namespace {

std::string fit_sentence(const FitEstimate& estimate) {
  if (!estimate.reproduced)
    return "Cannot judge whether it fits, because the replay under the recorded settings does not reproduce the "
           "recording: " + estimate.fidelity + ".";
  if (estimate.failure) {
    const FitFailure& f = *estimate.failure;
    std::string where = f.step.empty() || f.step == "trace" ? "" : " in " + f.step;
    const std::string site = f.site.empty() ? "" : " at " + f.site;
    const std::string limit = estimate.memory_cap && estimate.memory_cap->bytes < estimate.capacity_bytes
                                  ? bytes(estimate.memory_cap->bytes) + " (the memory cap)"
                                  : bytes(estimate.capacity_bytes);
    std::string out = "Does not fit: it runs out of memory" + where + site + ", asking for " + bytes(f.requested_bytes) +
                      " with " + bytes(f.allocated_bytes) + " allocated and " + bytes(f.reserved_bytes) +
                      " reserved of " + limit + ".";
    out += " " + f.cause.verdict.sentence;
    if (f.unlimited_peak_reserved_bytes > 0)
      out += " Without a limit it would peak at " + bytes(f.unlimited_peak_allocated_bytes) + " allocated and " +
             bytes(f.unlimited_peak_reserved_bytes) + " reserved.";
    return out;
  }
  return "Fits: peak reserved " + bytes(estimate.peak_reserved_bytes) + " of " + bytes(estimate.capacity_bytes) +
         " (" + bytes(estimate.capacity_bytes - estimate.peak_reserved_bytes) + " to spare), peak allocated " +
         bytes(estimate.peak_allocated_bytes) + ".";
}

}  // namespace

void decide_fit(FitEstimate& estimate) {
  Verdict& v = estimate.verdict;
  v = Verdict{};
  v.kind = VerdictKind::kFit;
  v.answer = !estimate.reproduced ? std::string(kCannotJudgeAnswer) : estimate.failure ? "does_not_fit" : "fits";
  if (!estimate.reproduced) v.reason = "the replay under the recorded settings does not reproduce the recording: " + estimate.fidelity;
  v.sentence = fit_sentence(estimate);
  v.basis = "a replay of the trace on a device of " + bytes(estimate.capacity_bytes) +
            (estimate.fidelity.empty() ? "" : " (" + estimate.fidelity + ")");
  v.add("capacity_bytes", estimate.capacity_bytes);
  v.add("peak_reserved_bytes", estimate.peak_reserved_bytes);
  v.add("peak_allocated_bytes", estimate.peak_allocated_bytes);
  if (estimate.failure) {
    v.add("failed_request_bytes", estimate.failure->requested_bytes);
    v.add("allocated_at_failure_bytes", estimate.failure->allocated_bytes);
  }
}

nlohmann::json fit_estimate_to_json(const FitEstimate& estimate) {
  nlohmann::json steps = nlohmann::json::array();
  for (const StepFit& s : estimate.steps)
    steps.push_back({{"name", s.name},
                     {"first_entry", s.first_entry},
                     {"end_entry", s.end_entry},
                     {"allocated_at_start_bytes", s.allocated_at_start_bytes},
                     {"peak_allocated_bytes", s.peak_allocated_bytes},
                     {"peak_reserved_bytes", s.peak_reserved_bytes},
                     {"completed", s.completed}});
  nlohmann::json failure = nullptr;
  if (estimate.failure) {
    const FitFailure& f = *estimate.failure;
    failure = {{"entry", f.entry},
               {"step", f.step},
               {"requested_bytes", f.requested_bytes},
               {"stream", f.stream},
               {"allocated_bytes", f.allocated_bytes},
               {"reserved_bytes", f.reserved_bytes},
               {"site", f.site},
               {"frames", f.frames},
               {"cause", oom_cause_name(f.cause.cause)},
               {"cause_verdict", verdict_to_json(f.cause.verdict)},
               {"unlimited_peak_requested_bytes", f.unlimited_peak_requested_bytes},
               {"unlimited_peak_allocated_bytes", f.unlimited_peak_allocated_bytes},
               {"unlimited_peak_reserved_bytes", f.unlimited_peak_reserved_bytes}};
  }
  return {{"device", estimate.device},
          {"capacity_bytes", estimate.capacity_bytes},
          {"capacity_source", estimate.capacity_source},
          {"settings", estimate.settings},
          {"fits", estimate.fits()},
          {"verdict", fit_estimate_verdict(estimate)},
          {"judgement", verdict_to_json(estimate.verdict)},
          {"reproduced", estimate.reproduced},
          {"fidelity", estimate.fidelity},
          {"entries", estimate.entries},
          {"peak_requested_bytes", estimate.peak_requested_bytes},
          {"peak_allocated_bytes", estimate.peak_allocated_bytes},
          {"peak_reserved_bytes", estimate.peak_reserved_bytes},
          {"free_at_reserved_peak", estimate.free_at_reserved_peak},
          {"device_mallocs", estimate.device_mallocs},
          {"alloc_retries", estimate.alloc_retries},
          {"steps", std::move(steps)},
          {"failure", std::move(failure)},
          {"tune", estimate.advice ? settings_advice_to_json(*estimate.advice) : nlohmann::json(nullptr)},
          {"tune_error", estimate.advice_error}};
}

std::string fit_estimate_to_text(const FitEstimate& estimate) {
  std::string out = fit_estimate_verdict(estimate) + "\n\n";
  out += "Device memory for the allocator: " + bytes(estimate.capacity_bytes) +
         (estimate.capacity_source.empty() ? "" : " (" + estimate.capacity_source + ")") + "\n";
  out += "Settings: " + (estimate.settings.empty() ? std::string("PyTorch's defaults") : estimate.settings) + "\n\n";
  char line[256];
  std::snprintf(line, sizeof line, "  %-20s %14s %16s %16s\n", "step", "live at start", "peak allocated", "peak reserved");
  out += line;
  for (const StepFit& s : estimate.steps) {
    std::snprintf(line, sizeof line, "  %-20s %14s %16s %16s%s\n", s.name.c_str(),
                  bytes(s.allocated_at_start_bytes).c_str(), bytes(s.peak_allocated_bytes).c_str(),
                  bytes(s.peak_reserved_bytes).c_str(), s.completed ? "" : "  out of memory");
    out += line;
  }
  out += "\nWhile reserved memory stood at its peak, at least " + percent(estimate.free_at_reserved_peak) +
         " of it held no allocation (cached free blocks).\n";
  if (estimate.failure) {
    out += "\nThe allocation that fails (" + bytes(estimate.failure->requested_bytes) + ", stream " +
           std::to_string(estimate.failure->stream) + "):\n";
    for (const std::string& frame : estimate.failure->frames) out += "  " + frame + "\n";
  }
  if (estimate.advice)
    out += "\nSettings on this device: " + settings_advice_conclusion(*estimate.advice) + "\n";
  else if (!estimate.advice_error.empty())
    out += "\nSettings on this device: not ranked (" + estimate.advice_error + ")\n";
  return out;
}

}  // namespace memsnap
