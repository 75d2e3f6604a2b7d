#include "viewer/settings_advisor.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <new>
#include <thread>

#include "allocator/counted.h"
#include "allocator/device_stats.h"
#include "replay/recorded_config.h"
#include "replay/snapshot_replay.h"

namespace memsnap {
namespace {

size_t keys_in(const std::string& config) {
  return config.empty() ? 0 : static_cast<size_t>(std::count(config.begin(), config.end(), ',')) + 1;
}

// Better first: works, then lower peak reserved, fewer device allocations and retries, simpler.
bool better(const TunedSetting& a, const TunedSetting& b) {
  if (a.ok != b.ok) return a.ok;
  if (a.peak_reserved_bytes != b.peak_reserved_bytes) return a.peak_reserved_bytes < b.peak_reserved_bytes;
  if (a.device_mallocs != b.device_mallocs) return a.device_mallocs < b.device_mallocs;
  if (a.alloc_retries != b.alloc_retries) return a.alloc_retries < b.alloc_retries;
  if (keys_in(a.config) != keys_in(b.config)) return keys_in(a.config) < keys_in(b.config);
  return a.config < b.config;
}

std::string bytes(int64_t value) { return format_bytes(value); }

void decide(SettingsAdvice& advice) {
  const bool any_malloc = std::any_of(advice.ranked.begin(), advice.ranked.end(),
                                      [](const TunedSetting& t) { return t.device_mallocs > 0; });
  // The recorded settings needed no new segment in the trace: every replay starts from segments
  // those settings made before it, so a setting can only look worse here, never better, and
  // what it would have reserved from the program's start does not show.
  const bool recorded_reserved_nothing = advice.recorded && advice.recorded->device_mallocs == 0 &&
                                         advice.reserved_before_trace_bytes > 0 && advice.recorded->ok;
  if (recorded_reserved_nothing && any_malloc) {
    advice.verdict = TuneVerdict::kCannotJudge;
    advice.reason = "every segment the recorded settings used predates the trace (" +
                    bytes(static_cast<int64_t>(advice.reserved_before_trace_bytes)) +
                    " reserved before its first event) and the trace needed no new one: each replay starts from "
                    "those segments, so a setting can look worse here but not better, and what it would have "
                    "reserved from the program's start does not show. Record history from the program's start, "
                    "or with a larger max_entries";
    return;
  }
  if (!any_malloc) {
    advice.verdict = TuneVerdict::kCannotJudge;
    advice.reason = "every segment predates the trace (" + bytes(static_cast<int64_t>(advice.reserved_before_trace_bytes)) +
                    " reserved before its first event) and no replay needed a new one: each starts from the "
                    "recorded segments, so what other settings would have reserved does not show. Record "
                    "history from the program's start, or with a larger max_entries";
    return;
  }
  const TunedSetting& best = advice.ranked.front();
  if (!best.ok)
    advice.verdict = TuneVerdict::kNoSettingWorks;
  else if (advice.recorded && best.config == advice.recorded->config)
    advice.verdict = TuneVerdict::kKeep;
  else
    advice.verdict = TuneVerdict::kChange;
}

// What a verdict covers when the trace began with segments already reserved.
std::string coverage(const SettingsAdvice& advice) {
  if (advice.reserved_before_trace_bytes == 0 || !advice.recorded) return "";
  const int64_t before = static_cast<int64_t>(advice.reserved_before_trace_bytes);
  const int64_t peak = advice.recorded->peak_reserved_bytes;
  return " for what the trace allocated (" + bytes(std::max<int64_t>(0, peak - before)) + " of the " + bytes(peak) +
         " peak; the " + bytes(before) + " reserved before the trace began is kept as recorded in every replay)";
}

}  // namespace

std::string_view tune_verdict_name(TuneVerdict verdict) {
  switch (verdict) {
    case TuneVerdict::kChange: return "change";
    case TuneVerdict::kKeep: return "keep";
    case TuneVerdict::kNoSettingWorks: return "no_setting_works";
    case TuneVerdict::kCannotJudge: return "cannot_judge";
  }
  return "cannot_judge";
}

std::string settings_advice_conclusion(const SettingsAdvice& advice) {
  switch (advice.verdict) {
    case TuneVerdict::kCannotJudge:
      return "Cannot judge which settings reserve least, because " + advice.reason + ".";
    case TuneVerdict::kNoSettingWorks: {
      std::string out = "No setting tried avoids the out-of-memory error" + coverage(advice);
      const auto needed = static_cast<uint64_t>(advice.unlimited_peak_requested_bytes);
      const uint64_t capacity = advice.capacity_bytes;
      if (needed == 0 || capacity == 0) return out + ".";
      const std::string asked = ": the live allocations ask for " + bytes(static_cast<int64_t>(needed)) + " at once";
      // A memory cap that refused the request is known only from below: the reserved bytes then.
      const bool cap_at_least = advice.capacity_source == "memory cap at the recorded OOM";
      const std::string limit = bytes(static_cast<int64_t>(capacity)) +
                                (cap_at_least ? " the memory cap allowed at least" : " the device has");
      if (needed > capacity && cap_at_least)
        return out + asked + ", more than the " + limit +
               "; whether that is too little memory the recording cannot say, since it bounds the cap only "
               "from below (memsnap explain-oom shows what was free).";
      if (needed > capacity)
        return out + asked + ", more than the " + limit + "; the program needs less memory at that point.";
      if (needed > capacity / 20 * 19)
        return out + asked + ", within 5% of the " + limit +
               ": too close to tell too little memory from cached memory that could not serve the request "
               "(memsnap explain-oom shows what was free).";
      return out + asked + ", less than the " + limit +
             ", but the memory cached and free then could not serve the request under any of these settings "
             "(memsnap explain-oom shows where it was: private pools, split segments, other streams).";
    }
    case TuneVerdict::kKeep:
      return std::string(advice.baseline_given ? "Keep these settings" : "Keep the recorded settings") +
             ": none tried reserves less" + coverage(advice) + ".";
    case TuneVerdict::kChange: {
      const TunedSetting& best = advice.ranked.front();
      std::string out = "Use PYTORCH_CUDA_ALLOC_CONF=" + best.config + ": peak reserved " + bytes(best.peak_reserved_bytes);
      if (advice.recorded) {
        const int64_t base = advice.recorded->peak_reserved_bytes;
        char saving[64];
        std::snprintf(saving, sizeof saving, "%.1f%%",
                      base > 0 ? 100.0 * static_cast<double>(base - best.peak_reserved_bytes) / static_cast<double>(base) : 0.0);
        out += " (" + bytes(base - best.peak_reserved_bytes) + " less, " + saving + ")";
        if (advice.recorded_oom && !advice.recorded->ok)
          out += ", and it avoids the recorded out-of-memory error";
        else if (!advice.recorded->ok)
          out += std::string(", and every allocation succeeds with it (not with ") +
                 (advice.baseline_given ? "these settings" : "the recorded settings") + ")";
      }
      return out + coverage(advice) + ".";
    }
  }
  return "";
}

std::vector<std::string> tune_candidates() {
  std::vector<std::string> out;
  const std::vector<std::string> splits = {"", "max_split_size_mb:32", "max_split_size_mb:64", "max_split_size_mb:128",
                                           "max_split_size_mb:256", "max_split_size_mb:512"};
  const std::vector<std::string> roundups = {"", "roundup_power2_divisions:2", "roundup_power2_divisions:4",
                                             "roundup_power2_divisions:8"};
  const std::vector<std::string> collection = {"", "garbage_collection_threshold:0.8"};
  for (const char* expandable : {"", "expandable_segments:True"})
    for (const std::string& split : splits)
      for (const std::string& roundup : roundups)
        for (const std::string& gc : collection) {
          std::string config;
          for (const std::string& part : {std::string(expandable), split, roundup, gc})
            if (!part.empty()) config += (config.empty() ? "" : ",") + part;
          out.push_back(config);
        }
  return out;
}

Result<SettingsAdvice> tune_settings(const Snapshot& snapshot, const TuneOptions& options) {
  const auto started = std::chrono::steady_clock::now();
  SettingsAdvice advice;
  advice.device = options.device.value_or(busiest_device(snapshot));
  if (advice.device < 0 || static_cast<size_t>(advice.device) >= snapshot.device_traces.size() ||
      snapshot.device_traces[static_cast<size_t>(advice.device)].empty())
    return Result<SettingsAdvice>::failure("tune: no trace to replay for device " + std::to_string(advice.device) +
                                           " (record history at level 'all')");
  const auto& trace = snapshot.device_traces[static_cast<size_t>(advice.device)];
  advice.events = trace.size();
  advice.recorded_oom = std::any_of(trace.begin(), trace.end(), [](const TraceEntry& e) { return e.action == TraceAction::kOom; });
  advice.baseline_given = options.baseline.has_value();
  const Result<AllocatorConfig> recorded =
      options.baseline ? Result<AllocatorConfig>(*options.baseline) : recorded_allocator_config(snapshot);
  if (!recorded) return Result<SettingsAdvice>::failure("tune: " + recorded.error());
  const std::string recorded_text = to_config_string(recorded.value());

  std::vector<std::string> candidates = tune_candidates();
  if (std::find(candidates.begin(), candidates.end(), recorded_text) == candidates.end())
    candidates.insert(candidates.begin(), recorded_text);
  std::vector<std::optional<TunedSetting>> results(candidates.size());
  std::vector<std::string> errors(candidates.size());
  std::atomic<size_t> next{0};
  std::atomic<bool> out_of_memory{false};
  const auto replay_one = [&](size_t i) {
    const Result<AllocatorConfig> config = parse_allocator_config(candidates[i]);
    if (!config) return;
    SnapshotReplayOptions replay_options;
    replay_options.config = config.value();
    replay_options.check_invariants = false;
    replay_options.capacity_bytes = options.capacity_bytes;
    const Result<SnapshotReplay> replay = replay_snapshot(snapshot, replay_options);
    if (!replay) {
      errors[i] = replay.error();
      return;
    }
    for (const DeviceReplay& d : replay->devices) {
      if (d.device != advice.device) continue;
      TunedSetting t;
      t.config = candidates[i];
      t.recorded = candidates[i] == recorded_text;
      t.failed_allocs = d.failed_allocs;
      t.ok = d.failed_allocs == 0 && d.reproduced_ooms == 0;
      t.peak_reserved_bytes = d.stats.reserved_bytes[kAggregate].peak;
      t.peak_allocated_bytes = d.stats.allocated_bytes[kAggregate].peak;
      t.device_mallocs = d.stats.num_device_alloc;
      t.alloc_retries = d.stats.num_alloc_retries;
      if (t.recorded) {
        advice.reserved_before_trace_bytes = d.start.reserved_bytes;
        advice.capacity_bytes = d.capacity_bytes;
        advice.capacity_source = d.capacity_source;
      }
      if (t.recorded && (!d.start.problems.empty() || d.unknown_frees > 0))
        advice.note = "the trace is inconsistent with the snapshot; the figures are only indicative";
      if (t.recorded && advice.recorded_oom && d.reproduced_ooms == 0)
        advice.note = "the replay under the recorded settings does not run out of memory where the recording did "
                      "(the trace may be incomplete); the figures are only indicative";
      results[i] = t;
    }
  };
  // (Nothing may leave a thread: an exception there, or in this one while the others run,
  // would end the process.)
  const auto work = [&] {
    for (size_t i; (i = next++) < candidates.size();) {
      try {
        replay_one(i);
      } catch (const std::bad_alloc&) {
        out_of_memory = true;
      } catch (const std::exception& error) {
        errors[i] = error.what();
      }
    }
  };
  const unsigned threads = std::max(1u, std::min<unsigned>(options.threads ? options.threads : std::thread::hardware_concurrency(),
                                                           static_cast<unsigned>(candidates.size())));
  std::vector<std::thread> pool;
  for (unsigned t = 1; t < threads; ++t) pool.emplace_back(work);
  work();
  for (std::thread& t : pool) t.join();
  if (out_of_memory)
    return Result<SettingsAdvice>::failure("tune: not enough memory to replay the trace (" + std::to_string(threads) +
                                           " settings replayed at once)");
  for (size_t i = 0; i < candidates.size(); ++i) {
    if (!results[i]) continue;
    if (results[i]->recorded) advice.recorded = results[i];
    advice.ranked.push_back(*results[i]);
  }
  if (advice.ranked.empty())
    return Result<SettingsAdvice>::failure("tune: no setting could be replayed" +
                                           (errors.empty() || errors[0].empty() ? std::string() : ": " + errors[0]));
  std::sort(advice.ranked.begin(), advice.ranked.end(), better);
  decide(advice);
  if (advice.verdict == TuneVerdict::kNoSettingWorks) {
    // Too little memory, or memory split in a way no setting avoids? The requests alone say:
    // replayed with no limit, the bytes the live allocations ask for at once are the same
    // under any setting.
    SnapshotReplayOptions unlimited;
    unlimited.config = recorded.value();
    unlimited.check_invariants = false;
    unlimited.capacity_bytes = size_t{512} << 30;  // past any GPU, within the simulated address space
    if (const Result<SnapshotReplay> needed = replay_snapshot(snapshot, unlimited))
      for (const DeviceReplay& d : needed->devices)
        if (d.device == advice.device) advice.unlimited_peak_requested_bytes = d.stats.requested_bytes[kAggregate].peak;
  }
  advice.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  return advice;
}

nlohmann::json settings_advice_to_json(const SettingsAdvice& advice) {
  const auto one = [&](const TunedSetting& t) {
    nlohmann::json j = {{"config", t.config}, {"recorded", t.recorded}, {"ok", t.ok},
                        {"peak_reserved_bytes", t.peak_reserved_bytes}, {"peak_allocated_bytes", t.peak_allocated_bytes},
                        {"device_mallocs", t.device_mallocs}, {"alloc_retries", t.alloc_retries},
                        {"failed_allocs", t.failed_allocs}};
    if (advice.recorded) {
      j["saving_bytes"] = advice.recorded->peak_reserved_bytes - t.peak_reserved_bytes;
      j["saving_percent"] = advice.recorded->peak_reserved_bytes > 0
                                ? 100.0 * static_cast<double>(advice.recorded->peak_reserved_bytes - t.peak_reserved_bytes) /
                                      static_cast<double>(advice.recorded->peak_reserved_bytes)
                                : 0.0;
    }
    return j;
  };
  nlohmann::json ranked = nlohmann::json::array();
  for (const TunedSetting& t : advice.ranked) ranked.push_back(one(t));
  return {{"device", advice.device},
          {"events", advice.events},
          {"recorded_oom", advice.recorded_oom},
          {"recorded", advice.recorded ? one(*advice.recorded) : nlohmann::json(nullptr)},
          {"best", advice.verdict == TuneVerdict::kChange || advice.verdict == TuneVerdict::kKeep
                       ? one(advice.ranked.front())
                       : nlohmann::json(nullptr)},
          {"verdict", tune_verdict_name(advice.verdict)},
          {"reason", advice.reason},
          {"unlimited_peak_requested_bytes", advice.unlimited_peak_requested_bytes},
          {"capacity_bytes", advice.capacity_bytes},
          {"capacity_source", advice.capacity_source},
          {"conclusion", settings_advice_conclusion(advice)},
          {"reserved_before_trace_bytes", advice.reserved_before_trace_bytes},
          {"settings_tried", advice.ranked.size()},
          {"ranked", std::move(ranked)},
          {"note", advice.note},
          {"seconds", advice.seconds}};
}

std::string settings_advice_to_text(const SettingsAdvice& advice, size_t shown) {
  std::string out;
  char line[512];
  const auto name = [](const std::string& config) { return config.empty() ? std::string("(PyTorch's defaults)") : config; };
  std::snprintf(line, sizeof line, "Settings for device %lld: %zu replayed exactly over %zu trace events in %.1f s.\n",
                static_cast<long long>(advice.device), advice.ranked.size(), advice.events, advice.seconds);
  out += line;
  if (advice.recorded) {
    const TunedSetting& r = *advice.recorded;
    out += "  recorded   " + name(r.config) + ": peak reserved " + bytes(r.peak_reserved_bytes) + ", " +
           counted(static_cast<uint64_t>(r.device_mallocs), "device malloc") + ", " +
           counted(static_cast<uint64_t>(r.alloc_retries), "retry", "retries") +
           (advice.recorded_oom ? (r.ok ? ", and no out-of-memory in the replay" : ", out of memory as recorded") : "") + "\n";
  }
  const TunedSetting& best = advice.ranked.front();
  if (advice.verdict == TuneVerdict::kKeep) {
    out += "  recommended: keep the recorded settings: none tried reserves less" + coverage(advice) + ".\n";
  } else if (advice.verdict == TuneVerdict::kChange) {
    const int64_t base = advice.recorded ? advice.recorded->peak_reserved_bytes : 0;
    std::snprintf(line, sizeof line, "  recommended: PYTORCH_CUDA_ALLOC_CONF=%s\n", best.config.c_str());
    out += line;
    if (advice.recorded) {
      std::snprintf(line, sizeof line, "               peak reserved %s (%s less, %.1f%%), %s, %s%s\n",
                    bytes(best.peak_reserved_bytes).c_str(), bytes(base - best.peak_reserved_bytes).c_str(),
                    base > 0 ? 100.0 * static_cast<double>(base - best.peak_reserved_bytes) / static_cast<double>(base) : 0.0,
                    counted(static_cast<uint64_t>(best.device_mallocs), "device malloc").c_str(),
                    counted(static_cast<uint64_t>(best.alloc_retries), "retry", "retries").c_str(),
                    advice.recorded_oom && !advice.recorded->ok ? "; avoids the recorded out-of-memory error" : "");
      out += line;
    }
    if (advice.reserved_before_trace_bytes > 0) out += "               the figures are" + coverage(advice) + "\n";
  } else {
    out += "  " + settings_advice_conclusion(advice) + "\n";
  }
  out += "\n  rank  peak reserved   mallocs  retries  works  settings\n";
  for (size_t i = 0; i < advice.ranked.size() && i < shown; ++i) {
    const TunedSetting& t = advice.ranked[i];
    std::snprintf(line, sizeof line, "  %4zu  %13s  %8lld  %7lld  %5s  %s%s\n", i + 1, bytes(t.peak_reserved_bytes).c_str(),
                  static_cast<long long>(t.device_mallocs), static_cast<long long>(t.alloc_retries), t.ok ? "yes" : "no",
                  name(t.config).c_str(), t.recorded ? "  (recorded)" : "");
    out += line;
  }
  if (!advice.note.empty()) out += "\n(" + advice.note + ")\n";
  return out;
}

}  // namespace memsnap
