// The truth corpus: scripted programs (program_runtime.h) over a grid of the knobs a real
// training run has, each recorded into snapshots with the truth planted beside them: whether
// memory grows and where (leaks at several rates and from several steps, memory that waits on a
// side stream, caches that fill and stop, noisy prefetch), why an out-of-memory error happened
// (the request alone beyond the device or a cap, too much live memory, fragmentation, other
// streams, idle private pools, other libraries' memory; caps set by the program, by a settings
// string or by the environment, recorded or not), whether a job's ranks have outliers and why
// (more live memory, other settings; ties and even splits where nothing can be said), and
// whether a run fits a device of a given size. A case's program can be run again under other
// settings or another device: the truth a settings verdict is checked against.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "tests/verdicts/program_runtime.h"

namespace memsnap::truth {

struct GrowthTruth {
  bool grows = false;
  std::string site;            // the growing site's function (grows only)
  double bytes_per_step = 0;   // its rate (grows only)
  bool decidable = true;       // the recording holds what decides it
};

struct OomTruth {
  // Acceptable causes (oom_cause_name); most cases have one.
  std::set<std::string> causes;
  bool settings_cannot_help = false;  // the request or the live memory alone is beyond the limit
  bool decidable = true;
};

struct RanksTruth {
  std::set<int64_t> outliers;  // empty with alike
  bool decidable = true;       // false: no group of ranks outnumbers the others
  std::string why;             // "live" or "settings" for the outliers
};

struct FitTruth {
  uint64_t capacity_bytes = 0;
  bool fits = false;
};

// How a case's program ends when run again: what a settings verdict is checked against.
using Rerun = std::function<Outcome(const AllocatorConfig& config)>;

struct Case {
  std::string kind;   // "growth", "oom", "ranks", "fit"
  std::string name;   // the knobs, as words: "growth leak=2MiB from=1 annotations=user+nested ..."
  std::vector<Snapshot> snapshots;  // one per rank
  std::optional<GrowthTruth> growth;  // of snapshots[0], or of each rank's (ranks cases)
  std::vector<GrowthTruth> rank_growth;
  std::optional<OomTruth> oom;
  std::optional<RanksTruth> ranks;
  std::optional<FitTruth> fit;
  Rerun rerun;  // oom cases: the program under other settings, same device and cap
  // What the recorder was told that a metamorphic check must keep (a cap, a world size).
  std::string notes;
};

struct CorpusOptions {
  size_t limit = 0;          // 0: every case; else at most this many of each kind (a quick run)
  std::string only_kind;     // "" every kind
};

// Every case, deterministic: the same knobs, the same snapshots and truth every run.
std::vector<Case> make_corpus(const CorpusOptions& options = {});

}  // namespace memsnap::truth
