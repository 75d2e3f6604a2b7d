#include "viewer/settings_advisor.h"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <new>
#include <thread>

#include "allocator/counted.h"
#include "allocator/device_stats.h"
#include "replay/recorded_config.h"
#include "replay/snapshot_replay.h"
#include "viewer/oom_state.h"
#include "viewer/replay_fidelity.h"

namespace memsnap {
namespace {

AllocatorConfig without_fraction(AllocatorConfig config) {
  config.per_process_memory_fraction = 1.0;
  return config;
}

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

// The segments the trace began with: every replay starts from them, so what a setting would
// have reserved from the program's start does not show when no replay needed a new one.
std::optional<std::string> coverage_problem(const SettingsAdvice& advice) {
  const bool any_malloc = std::any_of(advice.ranked.begin(), advice.ranked.end(),
                                      [](const TunedSetting& t) { return t.device_mallocs > 0; });
  // The recorded settings needed no new segment in the trace: every replay starts from segments
  // those settings made before it, so a setting can only look worse here, never better.
  const bool recorded_reserved_nothing = advice.recorded && advice.recorded->device_mallocs == 0 &&
                                         advice.reserved_before_trace_bytes > 0 && advice.recorded->ok;
  if (recorded_reserved_nothing && any_malloc)
    return "every segment the recorded settings used predates the trace (" +
           bytes(static_cast<int64_t>(advice.reserved_before_trace_bytes)) +
           " reserved before its first event) and the trace needed no new one: each replay starts from those "
           "segments, so a setting can look worse here but not better, and what it would have reserved from the "
           "program's start does not show. Record history from the program's start, or with a larger max_entries";
  if (!any_malloc)
    return "no replay needed a segment beyond the " + bytes(static_cast<int64_t>(advice.reserved_before_trace_bytes)) +
           " reserved before the trace's first event: each starts from the recorded segments, so what other settings "
           "would have reserved does not show. Record history from the program's start, or with a larger max_entries";
  return std::nullopt;
}

// What a verdict covers when the trace began with segments already reserved.
std::string coverage(const SettingsAdvice& advice) {
  if (advice.reserved_before_trace_bytes == 0 || !advice.recorded) return "";
  const int64_t before = static_cast<int64_t>(advice.reserved_before_trace_bytes);
  const int64_t peak = advice.recorded->peak_reserved_bytes;
  return " for what the trace allocated (" + bytes(std::max<int64_t>(0, peak - before)) + " of the " + bytes(peak) +
         " peak; the " + bytes(before) + " reserved before the trace began is kept as recorded in every replay)";
}

// A sentence set after a colon reads on in lower case ("...: the live allocations ...").
std::string continued(std::string sentence) {
  if (sentence.size() > 1 && std::isupper(static_cast<unsigned char>(sentence[0])) &&
      std::islower(static_cast<unsigned char>(sentence[1])))
    sentence[0] = static_cast<char>(std::tolower(static_cast<unsigned char>(sentence[0])));
  return sentence;
}

std::string conclusion_sentence(const SettingsAdvice& advice) {
  switch (advice.answer) {
    case TuneVerdict::kCannotJudge:
      return "Cannot judge which settings reserve least, because " + advice.reason + ".";
    case TuneVerdict::kNoSettingWorks: {
      if (advice.oom && settings_cannot_help(advice.oom->cause))
        return "No setting can avoid the out-of-memory error: " + continued(advice.oom->verdict.sentence);
      std::string out = "No setting tried avoids the out-of-memory error" + coverage(advice) + ".";
      if (advice.oom) return out + " " + advice.oom->verdict.sentence;
      return out;
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

// The verdict, from the ranked replays, the recorded error's cause and the replay's fidelity.
void decide(SettingsAdvice& advice) {
  const auto cannot_judge = [&](std::string reason) {
    advice.answer = TuneVerdict::kCannotJudge;
    advice.reason = std::move(reason);
  };
  if (advice.oom && settings_cannot_help(advice.oom->cause)) {
    advice.answer = TuneVerdict::kNoSettingWorks;
  } else if (!advice.reproduced) {
    cannot_judge("the replay under the recorded settings does not reproduce the recording: " + advice.fidelity +
                 "; no setting is recommended from replays that disagree with what happened");
  } else if (const std::optional<std::string> problem = coverage_problem(advice)) {
    cannot_judge(*problem);
  } else if (!advice.ranked.front().ok) {
    advice.answer = TuneVerdict::kNoSettingWorks;
    // Under a cap the file does not record, the replays ran under the least it can have been: a
    // setting that fails there may work under the real cap.
    if (advice.capacity_source == "memory cap at the recorded OOM")
      cannot_judge("no setting tried avoids the out-of-memory error under " + bytes(static_cast<int64_t>(advice.capacity_bytes)) +
                   ", the least the memory cap can have been, and the file does not record the cap: under the real "
                   "one a setting may avoid it");
  } else if (advice.recorded && advice.ranked.front().config == advice.recorded->config) {
    advice.answer = TuneVerdict::kKeep;
  } else {
    advice.answer = TuneVerdict::kChange;
  }
  Verdict& v = advice.verdict;
  v.kind = VerdictKind::kSettings;
  v.answer = advice.answer == TuneVerdict::kCannotJudge ? std::string(kCannotJudgeAnswer) : std::string(tune_verdict_name(advice.answer));
  v.reason = advice.answer == TuneVerdict::kCannotJudge ? advice.reason : "";
  v.sentence = conclusion_sentence(advice);
  v.basis = advice.oom && settings_cannot_help(advice.oom->cause)
                ? "the out-of-memory error's cause, from " + advice.oom->verdict.basis
                : advice.fidelity.empty() ? "replays of the trace" : advice.fidelity;
  v.evidence.clear();
  if (advice.recorded) v.add("recorded_peak_reserved_bytes", advice.recorded->peak_reserved_bytes);
  if (advice.answer == TuneVerdict::kChange) v.add("best_peak_reserved_bytes", advice.ranked.front().peak_reserved_bytes);
  v.add("settings_tried", static_cast<int64_t>(advice.ranked.size()));
  v.add("capacity_bytes", advice.capacity_bytes);
  v.add("reserved_before_trace_bytes", advice.reserved_before_trace_bytes);
  if (advice.memory_cap) v.add("cap_bytes", advice.memory_cap->bytes);
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

std::string settings_advice_conclusion(const SettingsAdvice& advice) { return advice.verdict.sentence; }

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
  const Result<AllocatorConfig> recorded_settings = recorded_allocator_config(snapshot);
  if (!recorded_settings) return Result<SettingsAdvice>::failure("tune: " + recorded_settings.error());
  const AllocatorConfig& baseline = options.baseline ? *options.baseline : recorded_settings.value();
  const std::string recorded_text = to_config_string(baseline);
  // The recorded error's cause (explain-oom's): one no setting can change answers at once.
  bool cap_unrecorded = false;
  if (advice.recorded_oom && !options.capacity_bytes) {
    Result<OomState> state = oom_state(snapshot, advice.device);
    if (state) {
      cap_unrecorded = state.value().cap_range.has_value();
      advice.oom = std::move(state.value().diagnosis);
    }
  }
  const bool settled = advice.oom && settings_cannot_help(advice.oom->cause);

  std::vector<std::string> candidates = settled ? std::vector<std::string>{} : tune_candidates();
  // Under a cap the file does not record, the replays run on the least it can have been, with no
  // cap of their own: garbage collection, which works to a share of the cap, does not run there
  // as it did, so its settings are not tried.
  if (cap_unrecorded) {
    std::erase_if(candidates, [](const std::string& c) { return c.find("garbage_collection_threshold") != std::string::npos; });
    advice.note = "garbage_collection_threshold is not tried: it works to a share of the memory cap, which this file "
                  "does not record";
  }
  if (std::find(candidates.begin(), candidates.end(), recorded_text) == candidates.end())
    candidates.insert(candidates.begin(), recorded_text);
  // One more job: the recorded settings on the recording's own device, when the baseline is not
  // that (a capacity or other settings given), to see whether replays reproduce the recording.
  const bool baseline_is_recording = !options.capacity_bytes && without_fraction(baseline) == without_fraction(recorded_settings.value());
  const size_t fidelity_job = baseline_is_recording ? SIZE_MAX : candidates.size();
  const size_t jobs = candidates.size() + (baseline_is_recording ? 0 : 1);
  std::vector<std::optional<TunedSetting>> results(candidates.size());
  std::vector<std::string> errors(jobs);
  std::optional<DeviceReplay> fidelity_replay;
  std::atomic<size_t> next{0};
  std::atomic<bool> out_of_memory{false};
  const auto replay_one = [&](size_t i) {
    SnapshotReplayOptions replay_options;
    replay_options.check_invariants = false;
    std::optional<ReplayFailure> failure;
    const bool is_fidelity = i == fidelity_job;
    const bool is_baseline = !is_fidelity && candidates[i] == recorded_text;
    if (is_fidelity) {
      replay_options.config = recorded_settings.value();
      replay_options.check_invariants = true;
    } else {
      const Result<AllocatorConfig> config = is_baseline ? Result<AllocatorConfig>(baseline) : parse_allocator_config(candidates[i]);
      if (!config) return;
      replay_options.config = config.value();
      replay_options.capacity_bytes = options.capacity_bytes;
      replay_options.check_invariants = is_baseline;
    }
    if (is_baseline)
      replay_options.after_entry = [&](int device, size_t entry, const DeviceStats& stats, bool failed) {
        if (device != advice.device || !failed || failure) return true;
        failure = ReplayFailure{entry,
                                trace[entry].size,
                                static_cast<uint64_t>(stats.allocated_bytes[kAggregate].current),
                                static_cast<uint64_t>(stats.requested_bytes[kAggregate].current),
                                static_cast<uint64_t>(stats.allocation[kAggregate].current),
                                static_cast<uint64_t>(stats.reserved_bytes[kAggregate].current),
                                static_cast<uint64_t>(stats.active_bytes[kAggregate].current)};
        return true;
      };
    const Result<SnapshotReplay> replay = replay_snapshot(snapshot, replay_options);
    if (!replay) {
      errors[i] = replay.error();
      return;
    }
    for (const DeviceReplay& d : replay->devices) {
      if (d.device != advice.device) continue;
      if (is_fidelity) {
        fidelity_replay = d;
        continue;
      }
      TunedSetting t;
      t.config = candidates[i];
      t.recorded = is_baseline;
      t.failed_allocs = d.failed_allocs;
      t.ok = d.failed_allocs == 0 && d.reproduced_ooms == 0;
      t.peak_reserved_bytes = d.stats.reserved_bytes[kAggregate].peak;
      t.peak_allocated_bytes = d.stats.allocated_bytes[kAggregate].peak;
      t.device_mallocs = d.stats.num_device_alloc;
      t.alloc_retries = d.stats.num_alloc_retries;
      if (is_baseline) {
        advice.reserved_before_trace_bytes = d.start.reserved_bytes;
        advice.capacity_bytes = d.capacity_bytes;
        advice.capacity_source = d.capacity_source;
        advice.memory_cap = d.memory_cap;
        if (baseline_is_recording) fidelity_replay = d;
        if (failure) advice.baseline_failure = failure;
      }
      results[i] = t;
    }
  };
  // (Nothing may leave a thread: an exception there, or in this one while the others run,
  // would end the process.)
  const auto work = [&] {
    for (size_t i; (i = next++) < jobs;) {
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
                                                           static_cast<unsigned>(jobs)));
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
  if (advice.ranked.empty()) {
    std::string error;
    for (const std::string& e : errors)
      if (!e.empty()) error = e;
    return Result<SettingsAdvice>::failure("tune: no setting could be replayed" + (error.empty() ? std::string() : ": " + error));
  }
  std::sort(advice.ranked.begin(), advice.ranked.end(), better);
  if (!fidelity_replay) {
    advice.fidelity = "the recorded settings could not be replayed";
  } else if (!records_segments(*fidelity_replay)) {
    // A capture of requests (memsnap.estimate): nothing recorded to reproduce; the replay is the
    // prediction.
    advice.reproduced = true;
    advice.fidelity = "a trace of requests, replayed";
  } else {
    const ReplayFidelity fidelity = replay_fidelity(*fidelity_replay);
    advice.reproduced = fidelity.reproduced;
    advice.fidelity = fidelity.reproduced ? fidelity.words : fidelity.shortfall;
  }
  if (advice.baseline_failure && !advice.ranked.front().ok && !advice.oom)
    advice.oom = decide_replay_failure(*advice.baseline_failure, advice.capacity_bytes);
  decide(advice);
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
          {"best", advice.answer == TuneVerdict::kChange || advice.answer == TuneVerdict::kKeep
                       ? one(advice.ranked.front())
                       : nlohmann::json(nullptr)},
          {"verdict", tune_verdict_name(advice.answer)},
          {"judgement", verdict_to_json(advice.verdict)},
          {"oom_cause", advice.oom ? nlohmann::json(oom_cause_name(advice.oom->cause)) : nlohmann::json(nullptr)},
          {"reproduced", advice.reproduced},
          {"fidelity", advice.fidelity},
          {"cap_bytes", advice.memory_cap ? nlohmann::json(advice.memory_cap->bytes) : nlohmann::json(nullptr)},
          {"reason", advice.reason},
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
  std::snprintf(line, sizeof line, "Settings for device %lld: %s replayed over %zu trace events in %.1f s.\n",
                static_cast<long long>(advice.device), counted(advice.ranked.size(), "setting").c_str(), advice.events,
                advice.seconds);
  out += line;
  if (advice.recorded) {
    const TunedSetting& r = *advice.recorded;
    out += "  recorded   " + name(r.config) + ": peak reserved " + bytes(r.peak_reserved_bytes) + ", " +
           counted(static_cast<uint64_t>(r.device_mallocs), "device malloc") + ", " +
           counted(static_cast<uint64_t>(r.alloc_retries), "retry", "retries") +
           (advice.recorded_oom ? (r.ok ? ", and no out-of-memory in the replay" : ", out of memory as recorded") : "") + "\n";
  }
  const TunedSetting& best = advice.ranked.front();
  if (advice.answer == TuneVerdict::kKeep) {
    out += "  recommended: keep the recorded settings: none tried reserves less" + coverage(advice) + ".\n";
  } else if (advice.answer == TuneVerdict::kChange) {
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
