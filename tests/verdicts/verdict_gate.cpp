// The verdict gate: every verdict memsnap draws, over the truth corpus (truth_cases.h) and the
// real snapshots kept with their truth (tests/data/memsnap-h200-verdicts), counted correct,
// cannot judge, or wrong, by kind; and the metamorphic checks: the same verdict through every
// command (explain-oom, tune, estimate), after a conversion (msgpack, JSON, PyTorch's pickle),
// with ranks renamed and reordered, with nested annotations added inside steps, and with
// unrelated events before the trace. Any wrong verdict, or "cannot judge" on more than 10% of
// the cases whose truth the data decides, fails (exit status 1).
//
//   memsnap_verdict_gate [--kind growth|oom|ranks|fit] [--limit N] [--out DIR] [--quiet]
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "snapshot/msgpack_writer.h"
#include "snapshot/snapshot_loader.h"
#include "tests/snapshot_formats.h"
#include "tests/verdicts/truth_cases.h"
#include "viewer/fit_estimate.h"
#include "viewer/frame_labels.h"
#include "viewer/growth.h"
#include "viewer/job_ranks.h"
#include "viewer/oom_explanation.h"
#include "replay/recorded_config.h"
#include "viewer/settings_advisor.h"

namespace memsnap::truth {
namespace {

enum class Mark { kCorrect, kCannotJudge, kWrong };

struct Tally {
  size_t correct = 0, cannot_judge = 0, cannot_judge_decidable = 0, decidable = 0, wrong = 0;
  std::vector<std::string> wrong_cases;
  std::vector<std::string> undecided_cases;
};

std::map<std::string, Tally> tallies;

void mark(const std::string& kind, Mark m, bool decidable, const std::string& name, const std::string& why = "") {
  Tally& t = tallies[kind];
  if (decidable) ++t.decidable;
  switch (m) {
    case Mark::kCorrect: ++t.correct; break;
    case Mark::kCannotJudge:
      ++t.cannot_judge;
      if (decidable) {
        ++t.cannot_judge_decidable;
        t.undecided_cases.push_back(name + ": " + why);
      }
      break;
    case Mark::kWrong:
      ++t.wrong;
      t.wrong_cases.push_back(name + ": " + why);
      break;
  }
}

Snapshot convert(const Snapshot& s, const std::string& format) {
  Result<Snapshot> back = testing::converted(s, format);
  if (!back) {
    std::fprintf(stderr, "conversion failed: %s\n", back.error().c_str());
    return Snapshot{};
  }
  return std::move(back).value();
}

// ----------------------------------------------------------------------------------------------
// Growth.

struct GrowthAnswer {
  std::string answer;
  std::string site;  // the fastest growing site's label
  double rate = 0;
  std::string sentence;
};

GrowthAnswer growth_of(const Snapshot& s) {
  Result<Growth> g = compute_growth(s);
  if (!g) return {"error: " + g.error(), "", 0, ""};
  GrowthAnswer a{g->verdict.answer, "", 0, g->verdict.sentence};
  if (!g->sites.empty()) {
    a.site = call_site_label(s, g->sites.front().stack);
    a.rate = g->sites.front().bytes_per_step;
  }
  return a;
}

void judge_growth(const std::string& kind, const std::string& name, const GrowthTruth& truth, const GrowthAnswer& a) {
  if (a.answer == "cannot_judge") return mark(kind, Mark::kCannotJudge, truth.decidable, name, a.sentence);
  if (a.answer == "growing") {
    if (!truth.grows) return mark(kind, Mark::kWrong, truth.decidable, name, "said to grow, nothing does: " + a.sentence);
    if (a.site.find(truth.site) == std::string::npos)
      return mark(kind, Mark::kWrong, truth.decidable, name, "the fastest site is not " + truth.site + ": " + a.sentence);
    if (std::fabs(a.rate - truth.bytes_per_step) > 0.1 * truth.bytes_per_step)
      return mark(kind, Mark::kWrong, truth.decidable, name,
                  "rate " + std::to_string(a.rate) + " a step, planted " + std::to_string(truth.bytes_per_step));
    return mark(kind, Mark::kCorrect, truth.decidable, name);
  }
  if (a.answer == "nothing_grows") {
    if (truth.grows) return mark(kind, Mark::kWrong, truth.decidable, name, "said nothing grows; " + truth.site + " does");
    return mark(kind, Mark::kCorrect, truth.decidable, name);
  }
  mark(kind, Mark::kWrong, truth.decidable, name, "no verdict: " + a.answer);
}

bool same_growth(const GrowthAnswer& a, const GrowthAnswer& b) {
  if (a.answer != b.answer || a.site != b.site) return false;
  return std::fabs(a.rate - b.rate) <= 0.01 * std::max(1.0, std::fabs(a.rate));
}

// Nested library annotations inside every step: a collective in the middle of each.
Snapshot with_nested_annotations(const Snapshot& s) {
  Snapshot out = s;
  std::vector<SnapshotAnnotation> added;
  std::map<std::string, int64_t> open;
  for (const SnapshotAnnotation& a : s.external_annotations) {
    const bool step = a.name.rfind("step ", 0) == 0 || a.name.rfind("ProfilerStep#", 0) == 0;
    if (!step) continue;
    if (a.stage == "START") open[a.name] = a.time_us;
    if (a.stage == "END" && open.count(a.name)) {
      const int64_t middle = (open[a.name] + a.time_us) / 2;
      added.push_back({a.device, "START", "gloo:all_reduce", middle});
      added.push_back({a.device, "END", "gloo:all_reduce", middle + 1});
      added.push_back({a.device, "START", "gloo:all_reduce", middle + 2});
      added.push_back({a.device, "END", "gloo:all_reduce", middle + 3});
    }
  }
  for (const SnapshotAnnotation& a : added) out.external_annotations.push_back(a);
  return out;
}

// Unrelated events before the trace: a small segment made, used and given back on a stream of
// its own, at an address nothing else uses, before the first event.
Snapshot with_unrelated_events_first(const Snapshot& s) {
  Snapshot out = s;
  if (out.device_traces.empty() || out.device_traces[0].size() == 0) return out;
  DeviceTrace& trace = out.device_traces[0];
  const int64_t t = trace[0].time_us - 20;
  const uint64_t address = uint64_t{0x7e0000000000};
  const uint64_t stream = 0x5151;
  std::vector<TraceEntry> entries = {
      {TraceAction::kSegmentAlloc, address, 2u << 20, stream, t, kNoStackIndex},
      {TraceAction::kAlloc, address, 4096, stream, t + 1, kNoStackIndex},
      {TraceAction::kFreeRequested, address, 4096, stream, t + 2, kNoStackIndex},
      {TraceAction::kFreeCompleted, address, 4096, stream, t + 3, kNoStackIndex},
      {TraceAction::kSegmentFree, address, 2u << 20, stream, t + 4, kNoStackIndex},
  };
  DeviceTrace rebuilt;
  for (const TraceEntry& e : entries) rebuilt.push_back(e);
  for (const TraceEntry& e : trace) rebuilt.push_back(e);
  trace = std::move(rebuilt);
  if (!out.trace_state_changes.empty())
    for (TraceStateChange& c : out.trace_state_changes[0])
      if (c.event_index > 0) c.event_index += entries.size();
  return out;
}

// tune's advice on a run that did not run out of memory: a setting said to reserve less must,
// when the program runs again under it; "keep" must hold against every setting tried.
void check_tune_of_a_run(const Case& c) {
  const Result<SettingsAdvice> advice = tune_settings(c.snapshots[0]);
  if (!advice) return mark("settings", Mark::kWrong, true, c.name, "tune failed: " + advice.error());
  const AllocatorConfig recorded = recorded_allocator_config(c.snapshots[0]).value();
  const uint64_t recorded_peak = c.rerun(recorded).peak_reserved_bytes;
  switch (advice->answer) {
    case TuneVerdict::kCannotJudge:  // a wrapped trace cannot show it; a replay that does not reproduce my own program is a fault
      return mark("settings", Mark::kCannotJudge, !advice->reproduced, c.name, advice->verdict.sentence);
    case TuneVerdict::kNoSettingWorks:
      return mark("settings", Mark::kWrong, true, c.name, "no setting works on a run that did not fail: " + advice->verdict.sentence);
    case TuneVerdict::kChange: {
      const TunedSetting& best = advice->ranked.front();
      const Outcome again = c.rerun(parse_allocator_config(best.config).value());
      const bool right = !again.ran_out_of_memory && again.peak_reserved_bytes < recorded_peak &&
                         static_cast<int64_t>(again.peak_reserved_bytes) == best.peak_reserved_bytes;
      return mark("settings", right ? Mark::kCorrect : Mark::kWrong, true, c.name,
                  "recommended " + best.config + " for " + std::to_string(best.peak_reserved_bytes) +
                      " B reserved; run again under it: " + std::to_string(again.peak_reserved_bytes) + " B, recorded " +
                      std::to_string(recorded_peak) + " B");
    }
    case TuneVerdict::kKeep: {
      for (const std::string& candidate : tune_candidates()) {
        const Outcome again = c.rerun(parse_allocator_config(candidate).value());
        if (!again.ran_out_of_memory && again.peak_reserved_bytes < recorded_peak)
          return mark("settings", Mark::kWrong, true, c.name,
                      "keep, but " + (candidate.empty() ? std::string("(defaults)") : candidate) + " reserves " +
                          std::to_string(again.peak_reserved_bytes) + " B against " + std::to_string(recorded_peak));
      }
      return mark("settings", Mark::kCorrect, true, c.name);
    }
  }
}

void check_growth_case(const Case& c, bool metamorphic, bool tune) {
  const Snapshot& s = c.snapshots[0];
  const GrowthAnswer a = growth_of(s);
  judge_growth("growth", c.name, *c.growth, a);
  if (tune && c.rerun) check_tune_of_a_run(c);
  if (!metamorphic) return;
  for (const char* format : {"msgpack", "json", "pickle"}) {
    const GrowthAnswer b = growth_of(convert(s, format));
    mark("metamorphic", same_growth(a, b) ? Mark::kCorrect : Mark::kWrong, true, c.name + " [" + format + "]",
         "growth changed on conversion: " + a.sentence + " / " + b.sentence);
  }
  const GrowthAnswer nested = growth_of(with_nested_annotations(s));
  mark("metamorphic", same_growth(a, nested) ? Mark::kCorrect : Mark::kWrong, true, c.name + " [nested annotations added]",
       "growth changed with nested annotations: " + a.sentence + " / " + nested.sentence);
  const GrowthAnswer prepended = growth_of(with_unrelated_events_first(s));
  mark("metamorphic", same_growth(a, prepended) ? Mark::kCorrect : Mark::kWrong, true, c.name + " [unrelated events first]",
       "growth changed with unrelated events first: " + a.sentence + " / " + prepended.sentence);
}

// ----------------------------------------------------------------------------------------------
// Out-of-memory errors: the cause, the settings advice (checked by running the program again),
// and the same verdict from explain-oom, tune and estimate.

void check_oom_case(const Case& c, bool metamorphic) {
  const OomTruth& truth = *c.oom;
  if (truth.causes.count("broken-case")) return mark("oom_cause", Mark::kWrong, true, c.name, "the case's program did not run out of memory");
  const Snapshot& s = c.snapshots[0];
  const Result<OomExplanation> explained = explain_oom(s);
  if (!explained) return mark("oom_cause", Mark::kWrong, truth.decidable, c.name, "explain-oom failed: " + explained.error());
  const OomExplanation& x = explained.value();
  const std::string cause(oom_cause_name(x.diagnosis.cause));
  if (x.diagnosis.cause == OomCause::kCannotJudge)
    mark("oom_cause", Mark::kCannotJudge, truth.decidable, c.name, x.diagnosis.verdict.sentence);
  else
    mark("oom_cause", truth.causes.count(cause) ? Mark::kCorrect : Mark::kWrong, truth.decidable, c.name,
         "cause " + cause + ": " + x.diagnosis.verdict.sentence);

  // The settings verdict, against the program run again.
  if (!x.advice) {
    mark("settings", Mark::kWrong, truth.decidable, c.name, "no settings advice: " + x.advice_error);
  } else {
    const SettingsAdvice& a = *x.advice;
    const std::string name = c.name;
    switch (a.answer) {
      case TuneVerdict::kCannotJudge: mark("settings", Mark::kCannotJudge, truth.decidable, name, a.verdict.sentence); break;
      case TuneVerdict::kKeep:
        mark("settings", Mark::kWrong, truth.decidable, name, "keep the settings that ran out of memory: " + a.verdict.sentence);
        break;
      case TuneVerdict::kChange: {
        const Outcome again = c.rerun(parse_allocator_config(a.ranked.front().config).value());
        mark("settings", again.ran_out_of_memory || truth.settings_cannot_help ? Mark::kWrong : Mark::kCorrect, truth.decidable,
             name,
             "recommended " + a.ranked.front().config + " (replayed: peak reserved " +
                 std::to_string(a.ranked.front().peak_reserved_bytes) + "), which runs out of memory when run again (peak reserved " +
                 std::to_string(again.peak_reserved_bytes) + ")");
        break;
      }
      case TuneVerdict::kNoSettingWorks: {
        if (truth.settings_cannot_help) {
          mark("settings", Mark::kCorrect, truth.decidable, name);
          break;
        }
        // A cause settings can change: every setting tried must really fail.
        std::string avoids;
        for (const std::string& candidate : tune_candidates())
          if (!c.rerun(parse_allocator_config(candidate).value()).ran_out_of_memory) {
            avoids = candidate.empty() ? "(defaults)" : candidate;
            break;
          }
        mark("settings", avoids.empty() ? Mark::kCorrect : Mark::kWrong, truth.decidable, name,
             "no setting works, but " + avoids + " avoids it when run again");
        break;
      }
    }
    // One verdict through every command: tune, and explain-oom's JSON as the web view reads it.
    const Result<SettingsAdvice> tuned = tune_settings(s);
    const bool same = tuned && tuned->verdict.sentence == a.verdict.sentence &&
                      oom_explanation_to_json(x)["settings_conclusion"] == settings_advice_to_json(tuned.value())["conclusion"];
    mark("agreement", same ? Mark::kCorrect : Mark::kWrong, true, c.name + " [explain-oom / tune]",
         "explain-oom: " + a.verdict.sentence + " / tune: " + (tuned ? tuned->verdict.sentence : tuned.error()));
  }
  // memsnap estimate on the recording's own device: it runs out where the recording did, for
  // the same cause, in the same words.
  FitOptions as_recorded;
  const Result<FitEstimate> estimate = estimate_fit(s, as_recorded);
  const bool same_fit = estimate && estimate->failure && estimate->failure->cause.verdict.sentence == x.diagnosis.verdict.sentence &&
                        (!estimate->advice || !x.advice || estimate->advice->verdict.sentence == x.advice->verdict.sentence);
  mark("agreement", same_fit ? Mark::kCorrect : Mark::kWrong, true, c.name + " [explain-oom / estimate]",
       "explain-oom: " + x.diagnosis.verdict.sentence + " / estimate: " +
           (estimate ? estimate->verdict.sentence : estimate.error()));
  if (!metamorphic) return;
  for (const char* format : {"msgpack", "json", "pickle"}) {
    const Result<OomExplanation> back = explain_oom(convert(s, format));
    const bool same = back && back->diagnosis.verdict.sentence == x.diagnosis.verdict.sentence &&
                      (!back->advice || !x.advice || back->advice->verdict.answer == x.advice->verdict.answer);
    mark("metamorphic", same ? Mark::kCorrect : Mark::kWrong, true, c.name + " [" + format + "]",
         "explain-oom changed on conversion: " + x.diagnosis.verdict.sentence + " / " +
             (back ? back->diagnosis.verdict.sentence : back.error()));
  }
}

// ----------------------------------------------------------------------------------------------
// Ranks.

JobRanks job_of(const std::vector<Snapshot>& snapshots, const std::vector<size_t>& order,
                const std::vector<int64_t>& rank_of) {
  std::vector<std::string> files;
  std::map<std::string, Snapshot> by_file;
  for (size_t i : order) {
    Snapshot s = snapshots[i];
    s.process.rank = rank_of[i];
    const std::string file = "rank" + std::to_string(rank_of[i]) + ".msgpack";
    files.push_back(file);
    by_file[file] = std::move(s);
  }
  JobRanksOptions options;
  options.threads = 1;
  const SnapshotLoader load = [&](const std::string& file) -> Result<std::shared_ptr<const Snapshot>> {
    return std::make_shared<const Snapshot>(by_file.at(file));
  };
  return summarize_job(files, load, options).value();
}

std::set<int64_t> outlier_set(const JobRanks& job) {
  std::set<int64_t> out;
  for (const RankOutlier& o : job.outliers) out.insert(job.ranks[o.row].rank.value_or(-1));
  return out;
}

void check_ranks_case(const Case& c, bool metamorphic) {
  const RanksTruth& truth = *c.ranks;
  std::vector<size_t> order;
  std::vector<int64_t> identity;
  for (size_t r = 0; r < c.snapshots.size(); ++r) order.push_back(r), identity.push_back(static_cast<int64_t>(r));
  const JobRanks job = job_of(c.snapshots, order, identity);
  const std::string& answer = job.verdict.answer;
  if (answer == "cannot_judge") {
    mark("ranks", Mark::kCannotJudge, truth.decidable, c.name, job.verdict.sentence);
  } else if (!truth.decidable) {
    mark("ranks", Mark::kWrong, false, c.name, "judged where no group of ranks outnumbers the others: " + job.verdict.sentence);
  } else if (outlier_set(job) != truth.outliers) {
    mark("ranks", Mark::kWrong, true, c.name, "outliers differ from the planted ones: " + job.verdict.sentence);
  } else {
    bool why_right = true;
    for (const RankOutlier& o : job.outliers) {
      if (truth.why == "settings") why_right = why_right && o.why.find("other allocator settings") != std::string::npos;
      if (truth.why == "live") why_right = why_right && o.why.find("live memory at its peak") != std::string::npos &&
                                           o.why.find("the same live memory") == std::string::npos;
    }
    mark("ranks", why_right ? Mark::kCorrect : Mark::kWrong, true, c.name, "the reason is not the planted one (" + truth.why + "): " + job.verdict.sentence);
  }
  // Each rank's growth.
  for (size_t r = 0; r < c.snapshots.size() && r < c.rank_growth.size(); ++r)
    judge_growth("growth", c.name + " rank " + std::to_string(r), c.rank_growth[r], growth_of(c.snapshots[r]));
  if (!metamorphic || c.snapshots.size() < 2) return;
  // Renamed (ranks reversed) and given in another order: the same verdict of the same ranks.
  std::vector<int64_t> renamed;
  const auto n = static_cast<int64_t>(c.snapshots.size());
  for (int64_t r = 0; r < n; ++r) renamed.push_back(n - 1 - r);
  std::vector<size_t> reordered = order;
  std::rotate(reordered.begin(), reordered.begin() + 1, reordered.end());
  const JobRanks other = job_of(c.snapshots, reordered, renamed);
  std::set<int64_t> mapped;
  for (int64_t r : outlier_set(job)) mapped.insert(n - 1 - r);
  const bool same = other.verdict.answer == job.verdict.answer && outlier_set(other) == mapped;
  mark("metamorphic", same ? Mark::kCorrect : Mark::kWrong, true, c.name + " [ranks renamed and reordered]",
       job.verdict.sentence + " / " + other.verdict.sentence);
}

// ----------------------------------------------------------------------------------------------
// Does it fit.

void check_fit_case(const Case& c) {
  FitOptions options;
  options.capacity_bytes = c.fit->capacity_bytes;
  options.tune = false;
  const Result<FitEstimate> estimate = estimate_fit(c.snapshots[0], options);
  if (!estimate) return mark("fit", Mark::kWrong, true, c.name, "estimate failed: " + estimate.error());
  const std::string& answer = estimate->verdict.answer;
  if (answer == "cannot_judge") return mark("fit", Mark::kCannotJudge, true, c.name, estimate->verdict.sentence);
  const bool said_fits = answer == "fits";
  mark("fit", said_fits == c.fit->fits ? Mark::kCorrect : Mark::kWrong, true, c.name,
       std::string("said ") + answer + ", the program " + (c.fit->fits ? "fits" : "runs out of memory") + ": " +
           estimate->verdict.sentence);
}

// ----------------------------------------------------------------------------------------------
// Real snapshots with their truth (tests/data/memsnap-h200-verdicts/*/truth.json).

// Every folder of tests/data, or of one below it, that holds a truth.json: its files and what is
// true of them (PyTorch's own snapshots beside memsnap's H200 recordings).
void check_real(const std::string& root) {
  namespace fs = std::filesystem;
  if (!fs::is_directory(root)) return;
  std::vector<fs::path> cases;
  for (const auto& entry : fs::recursive_directory_iterator(root))
    if (entry.is_directory() && fs::exists(entry.path() / "truth.json")) cases.push_back(entry.path());
  std::sort(cases.begin(), cases.end());
  for (const fs::path& dir : cases) {
    std::ifstream in(dir / "truth.json");
    const nlohmann::json truth = nlohmann::json::parse(in);
    const std::string name = "real " + dir.filename().string();
    std::map<std::string, Snapshot> snapshots;
    for (const auto& file : truth["files"]) {
      Result<LoadedSnapshot> loaded = load_snapshot((dir / file.get<std::string>()).string());
      if (!loaded) {
        mark("real", Mark::kWrong, true, name, "cannot load " + file.get<std::string>() + ": " + loaded.error());
        continue;
      }
      snapshots[file.get<std::string>()] = std::move(loaded).value().snapshot;
    }
    const nlohmann::json& t = truth["truth"];
    if (t.contains("growth"))
      for (const auto& [file, g] : t["growth"].items()) {
        GrowthTruth planted;
        planted.decidable = g.value("decidable", true);
        planted.grows = g["verdict"] == "growing";
        if (planted.grows) {
          const std::string line = g["site_line"].get<std::string>();  // "verdict_recordings.py:207"
          planted.site = line;
          planted.bytes_per_step = g["bytes_per_step"].get<double>();
        }
        GrowthAnswer a = growth_of(snapshots[file]);
        // The site label reads "function (file:line)": the planted line must be in it.
        judge_growth("real", name + " " + file + " growth", planted, a);
      }
    if (t.contains("oom"))
      for (const auto& [file, o] : t["oom"].items()) {
        const Result<OomExplanation> x = explain_oom(snapshots[file]);
        if (!x) {
          mark("real", Mark::kWrong, true, name + " " + file + " oom", x.error());
          continue;
        }
        const std::string cause(oom_cause_name(x->diagnosis.cause));
        const std::string want = o["cause"].get<std::string>();
        const bool decidable = o.value("decidable", true);
        if (cause == "cannot_judge")
          mark("real", Mark::kCannotJudge, decidable, name + " " + file + " oom", x->diagnosis.verdict.sentence);
        else
          mark("real", cause == want ? Mark::kCorrect : Mark::kWrong, decidable, name + " " + file + " oom",
               "cause " + cause + ", truly " + want + ": " + x->diagnosis.verdict.sentence);
        // A cap the program set is in the snapshot, with its size.
        if (o.contains("cap_bytes") && o["cap_bytes"].is_number()) {
          const bool recorded = x->cap && x->cap->bytes == o["cap_bytes"].get<uint64_t>();
          mark("real", recorded ? Mark::kCorrect : Mark::kWrong, true, name + " " + file + " cap",
               x->cap ? "cap " + std::to_string(x->cap->bytes) + " B recorded" : "no cap recorded");
        }
        if (x->advice && o.contains("avoided_by") && o["avoided_by"].is_string()) {
          const bool recommends = x->advice->answer == TuneVerdict::kChange &&
                                  x->advice->ranked.front().config == o["avoided_by"].get<std::string>();
          const bool fair = x->advice->answer == TuneVerdict::kCannotJudge;
          mark("real", recommends ? Mark::kCorrect : fair ? Mark::kCannotJudge : Mark::kWrong, true,
               name + " " + file + " settings", x->advice->verdict.sentence);
        }
      }
    if (t.contains("ranks")) {
      std::vector<Snapshot> ranks;
      std::vector<size_t> order;
      std::vector<int64_t> ids;
      for (const auto& [file, s] : snapshots) {
        order.push_back(ranks.size());
        ids.push_back(s.process.rank.value_or(static_cast<int64_t>(ranks.size())));
        ranks.push_back(s);
      }
      const JobRanks job = job_of(ranks, order, ids);
      std::set<int64_t> want;
      for (const auto& r : t["ranks"]["outlier_ranks"]) want.insert(r.get<int64_t>());
      mark("real", job.verdict.answer != "cannot_judge" && outlier_set(job) == want ? Mark::kCorrect : Mark::kWrong, true,
           name + " ranks", job.verdict.sentence);
    }
  }
}

// ----------------------------------------------------------------------------------------------

void write_case(const std::string& dir, size_t index, const Case& c) {
  namespace fs = std::filesystem;
  const fs::path folder = fs::path(dir) / (c.kind + "-" + std::to_string(index));
  fs::create_directories(folder);
  nlohmann::json files = nlohmann::json::array();
  for (size_t r = 0; r < c.snapshots.size(); ++r) {
    const std::string file = c.snapshots.size() == 1 ? "snapshot.msgpack" : "rank" + std::to_string(r) + ".msgpack";
    std::ofstream(folder / file, std::ios::binary) << to_msgpack(c.snapshots[r]);
    files.push_back(file);
  }
  nlohmann::json truth = {{"case", c.name}, {"kind", c.kind}, {"files", files}};
  if (c.growth)
    truth["growth"] = {{"grows", c.growth->grows}, {"site", c.growth->site}, {"bytes_per_step", c.growth->bytes_per_step},
                       {"decidable", c.growth->decidable}};
  if (c.oom)
    truth["oom"] = {{"causes", c.oom->causes}, {"settings_cannot_help", c.oom->settings_cannot_help}, {"decidable", c.oom->decidable}};
  if (c.ranks) truth["ranks"] = {{"outliers", c.ranks->outliers}, {"decidable", c.ranks->decidable}, {"why", c.ranks->why}};
  if (c.fit) truth["fit"] = {{"capacity_bytes", c.fit->capacity_bytes}, {"fits", c.fit->fits}};
  std::ofstream(folder / "truth.json") << truth.dump(2) << "\n";
}

int run(int argc, char** argv) {
  CorpusOptions options;
  std::string out_dir, real_dir = MEMSNAP_TEST_DATA_DIR;
  bool quiet = false;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--kind" && i + 1 < argc) options.only_kind = argv[++i];
    else if (arg == "--limit" && i + 1 < argc) options.limit = std::stoul(argv[++i]);
    else if (arg == "--out" && i + 1 < argc) out_dir = argv[++i];
    else if (arg == "--quiet") quiet = true;
    else {
      std::fprintf(stderr, "usage: %s [--kind growth|oom|ranks|fit] [--limit N] [--out DIR] [--quiet]\n", argv[0]);
      return 2;
    }
  }
  const std::vector<Case> corpus = make_corpus(options);
  size_t index = 0;
  for (const Case& c : corpus) {
    // Metamorphic checks on every other case (each is several more verdicts).
    const bool metamorphic = index % 2 == 0;
    if (c.kind == "growth") check_growth_case(c, metamorphic, index % 4 == 0);
    if (c.kind == "oom") check_oom_case(c, metamorphic);
    if (c.kind == "ranks") check_ranks_case(c, metamorphic);
    if (c.kind == "fit") check_fit_case(c);
    if (!out_dir.empty()) write_case(out_dir, index, c);
    ++index;
  }
  if (options.only_kind.empty()) check_real(real_dir);

  std::printf("%zu cases generated with their truth\n\n", corpus.size());
  std::printf("%-12s %8s %8s %13s %8s %28s\n", "verdict", "checked", "correct", "cannot judge", "wrong",
              "cannot judge where decidable");
  size_t wrong = 0;
  bool too_undecided = false;
  for (const auto& [kind, t] : tallies) {
    const size_t checked = t.correct + t.cannot_judge + t.wrong;
    const double share = t.decidable ? 100.0 * static_cast<double>(t.cannot_judge_decidable) / static_cast<double>(t.decidable) : 0;
    std::printf("%-12s %8zu %8zu %13zu %8zu %20zu (%4.1f%%)\n", kind.c_str(), checked, t.correct, t.cannot_judge, t.wrong,
                t.cannot_judge_decidable, share);
    wrong += t.wrong;
    too_undecided = too_undecided || share > 10.0;
  }
  for (const auto& [kind, t] : tallies) {
    for (const std::string& w : t.wrong_cases) std::printf("\nWRONG %s: %s", kind.c_str(), w.c_str());
    if (!quiet)
      for (const std::string& u : t.undecided_cases) std::printf("\ncannot judge (decidable) %s: %s", kind.c_str(), u.c_str());
  }
  std::printf("\n\n%s\n", wrong == 0 && !too_undecided ? "verdict gate: passed"
                          : wrong > 0                 ? "verdict gate: FAILED (wrong verdicts)"
                                                      : "verdict gate: FAILED (cannot judge on more than 10% of decidable cases)");
  return wrong == 0 && !too_undecided ? 0 : 1;
}

}  // namespace
}  // namespace memsnap::truth

int main(int argc, char** argv) { return memsnap::truth::run(argc, argv); }
