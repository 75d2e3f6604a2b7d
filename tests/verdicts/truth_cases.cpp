#include "tests/verdicts/truth_cases.h"

#include <algorithm>
#include <cmath>
#include <random>

#include "snapshot/snapshot.h"

namespace memsnap::truth {
namespace {

constexpr size_t kKiB = size_t{1} << 10;
constexpr size_t kMiB = size_t{1} << 20;
constexpr size_t kGiB = size_t{1} << 30;

std::string size_words(size_t bytes) {
  if (bytes % kMiB == 0) return std::to_string(bytes / kMiB) + "MiB";
  return std::to_string(bytes / kKiB) + "KiB";
}

// ---------------------------------------------------------------------------------------------
// A training loop (growth, ranks, fit).

enum class Annotations { kNone, kUser, kUserNested, kLibraryOnly, kProfilerNested };
const char* annotations_name(Annotations a) {
  switch (a) {
    case Annotations::kNone: return "none";
    case Annotations::kUser: return "user";
    case Annotations::kUserNested: return "user+nested";
    case Annotations::kLibraryOnly: return "library-only";
    case Annotations::kProfilerNested: return "profiler+nested";
  }
  return "none";
}

struct LoopKnobs {
  int steps = 40;
  size_t leak_bytes = 0;  // kept every step from leak_from on, at keep_for_metrics
  int leak_from = 1;
  Annotations annotations = Annotations::kUser;
  bool side_lagging = false;    // a side stream that falls further behind every step
  bool side_keeps_up = false;   // a side stream whose work is done every step
  bool prefetch_noise = false;  // the next batch, of a random size, made at each step's end
  int cache_fill_steps = 0;     // a cache that grows this many steps, then stays
  bool grow_once = false;       // a buffer made once, mid-run
  size_t max_entries = 100000;
  HistoryLevel level = HistoryLevel::kAll;
  size_t scale = 1;             // every size times this
  size_t activation_mib = 8;
  size_t activation_extra_kib = 0;  // each activation this much over a whole MiB
  size_t params_mib = 16;           // each of the six parameters, gradients; twice that of optimizer state
  uint32_t seed = 1;
  AllocatorConfig config;
  bool never_frees = false;     // a program that frees nothing at all (history at level 'all')
  int leak_until = 0;           // the leak stops after this step (0: it never stops)
  bool accumulate = false;      // gradient accumulation: a buffer held across three steps in four
};

constexpr size_t kSideTensor = 3 * kMiB;

// Runs the loop; returns the steps at whose starts the leak and the side stream's pending memory
// stood as planted (for the truth's decidability).
void run_loop(Runtime& rt, const LoopKnobs& k) {
  std::mt19937 random(k.seed);
  const auto sized = [&](size_t bytes) { return bytes * k.scale; };
  std::vector<void*> params;
  for (int i = 0; i < 6; ++i) params.push_back(rt.alloc({"init_params", 10 + i, "main", 300}, sized(k.params_mib * kMiB)));
  std::vector<void*> kept;  // leaks, caches, state: held to the end
  void* next_batch = nullptr;
  std::vector<std::pair<int, StreamId>> side_pending;  // (step, stream) whose work is not done
  const bool user = k.annotations == Annotations::kUser || k.annotations == Annotations::kUserNested;
  const bool profiler = k.annotations == Annotations::kProfilerNested;
  const bool nested = k.annotations == Annotations::kUserNested || k.annotations == Annotations::kLibraryOnly ||
                      k.annotations == Annotations::kProfilerNested;
  for (int n = 1; n <= k.steps && !rt.ran_out_of_memory(); ++n) {
    const std::string step_name = user ? "step " + std::to_string(n) : "ProfilerStep#" + std::to_string(n);
    if (user || profiler) rt.start(step_name);
    void* batch = next_batch;
    if (batch == nullptr) batch = rt.alloc({"load_batch", 40}, sized(4 * kMiB));
    next_batch = nullptr;
    // Forward: twelve activations.
    if (nested) rt.start("DistributedDataParallel.forward");
    std::vector<void*> activations;
    for (int i = 0; i < 12; ++i)
      activations.push_back(rt.alloc({"layer_forward", 50 + i, "forward", 120},
                                     sized((k.activation_mib + i % 4) * kMiB + k.activation_extra_kib * kKiB)));
    void* loss = rt.alloc({"compute_loss", 70}, 512);
    if (nested) rt.end("DistributedDataParallel.forward");
    // Backward: activations go, gradients come (kept from the first step), buckets all-reduced.
    for (auto it = activations.rbegin(); it != activations.rend(); ++it) rt.free(*it);
    if (n == 1)
      for (int i = 0; i < 6; ++i) kept.push_back(rt.alloc({"backward_grads", 80 + i, "backward", 130}, sized(k.params_mib * kMiB)));
    for (int b = 0; b < 4; ++b) {
      if (nested) rt.start("nccl:all_reduce");
      void* bucket = rt.alloc({"all_reduce_bucket", 90, "reducer", 140}, sized(kMiB));
      rt.free(bucket);
      if (nested) rt.end("nccl:all_reduce");
    }
    // The optimizer: its state on the first step, a temporary every step.
    if (nested) rt.start("Optimizer.step#Adam.step");
    if (n == 1)
      for (int i = 0; i < 12; ++i) kept.push_back(rt.alloc({"adam_init_state", 100, "optimizer", 150}, sized(k.params_mib * kMiB)));
    rt.free(rt.alloc({"optimizer_temp", 105, "optimizer", 150}, sized(2 * kMiB)));
    if (nested) rt.end("Optimizer.step#Adam.step");
    rt.free(loss);
    if (k.leak_bytes > 0 && n >= k.leak_from && (k.leak_until == 0 || n <= k.leak_until))
      kept.push_back(rt.alloc({"keep_for_metrics", 110}, k.leak_bytes));
    if (k.accumulate) {
      // Held from a step that is not the fourth to the next fourth: at step starts it comes and goes.
      static thread_local void* accumulated = nullptr;
      if (n % 4 != 0 && accumulated == nullptr) accumulated = rt.alloc({"accumulate_gradients", 112}, sized(8 * kMiB));
      if (n % 4 == 0 && accumulated != nullptr) {
        rt.free(accumulated);
        accumulated = nullptr;
      }
      if (n == k.steps) accumulated = nullptr;
    }
    if (k.cache_fill_steps > 0 && n >= 2 && n < 2 + k.cache_fill_steps)
      kept.push_back(rt.alloc({"fill_kv_cache", 115}, sized(2 * kMiB)));
    if (k.grow_once && n == k.steps / 2) kept.push_back(rt.alloc({"resize_buffer", 118}, sized(24 * kMiB)));
    if (k.side_lagging || k.side_keeps_up) {
      // Copied on the side stream; its work falls behind (or not) and the block waits for it.
      const StreamId side = rt.new_stream();
      void* copy = rt.alloc({"side_copy", 125}, kSideTensor);
      rt.record_stream(copy, side);
      rt.free(copy);
      side_pending.emplace_back(n, side);
      // Lagging: the work of steps up to n - n/2 is done by now.
      const int done_through = k.side_lagging ? n - n / 2 : n;
      for (auto it = side_pending.begin(); it != side_pending.end();) {
        if (it->first <= done_through) {
          rt.complete(it->second);
          it = side_pending.erase(it);
        } else {
          ++it;
        }
      }
    }
    if (!k.never_frees) rt.free(batch);
    if (k.prefetch_noise) {
      std::uniform_int_distribution<size_t> size(1, 8);
      next_batch = rt.alloc({"prefetch_next_batch", 45}, sized(size(random) * kMiB));
    }
    if (user || profiler) rt.end(step_name);
  }
  (void)params;
}

Snapshot record_loop(const LoopKnobs& k, int rank = -1, int world = 0) {
  RunOptions options;
  options.config = k.config;
  options.capacity_bytes = 64 * kGiB;
  options.level = k.level;
  options.max_entries = k.max_entries;
  options.rank = rank;
  options.world_size = world;
  Runtime rt(options);
  run_loop(rt, k);
  return rt.snapshot();
}

// The annotated steps whose start the trace holds (or, without annotations, the steps whose
// loss it holds).
int steps_in_trace(const Snapshot& s, const LoopKnobs& k) {
  const DeviceTrace& trace = s.device_traces.at(0);
  if (trace.size() == 0) return 0;
  const int64_t first = trace.front().time_us;
  int count = 0;
  if (k.annotations == Annotations::kUser || k.annotations == Annotations::kUserNested ||
      k.annotations == Annotations::kProfilerNested) {
    for (const SnapshotAnnotation& a : s.external_annotations)
      if (a.stage == "START" && a.time_us >= first &&
          (a.name.rfind("step ", 0) == 0 || a.name.rfind("ProfilerStep#", 0) == 0))
        ++count;
    return count;
  }
  // One loss a step.
  for (const TraceEntry& e : trace) count += e.action == TraceAction::kAlloc && e.size == 512;
  return count;
}

GrowthTruth loop_growth_truth(const Snapshot& s, const LoopKnobs& k) {
  GrowthTruth t;
  const int in_trace = steps_in_trace(s, k);
  const int first_traced = k.steps - in_trace + 1;
  const double lag_rate = k.side_lagging ? 0.5 * static_cast<double>(kSideTensor) : 0;
  // A leak that stopped is not growing at the end of the run.
  const double leak_rate = k.leak_until > 0 && k.leak_until < k.steps - 8 ? 0 : static_cast<double>(k.leak_bytes);
  const double batch_rate = k.never_frees ? static_cast<double>(4 * kMiB * k.scale) : 0;
  if (leak_rate > 0 || lag_rate > 0 || batch_rate > 0) {
    t.grows = true;
    if (leak_rate >= lag_rate && leak_rate >= batch_rate) {
      t.site = "keep_for_metrics";
      t.bytes_per_step = leak_rate;
    } else if (batch_rate >= lag_rate) {
      t.site = "load_batch";
      t.bytes_per_step = batch_rate;
    } else {
      t.site = "side_copy";
      t.bytes_per_step = lag_rate;
    }
  }
  // Decidable: enough steps compared (the first traced one warms up), and a late leak seen over
  // enough of them; a trace of allocations alone says nothing of what stays live.
  const int compared = in_trace - 1;
  t.decidable = compared >= 8 && k.level == HistoryLevel::kAll;
  if (t.grows && t.site == "keep_for_metrics" && k.leak_from > first_traced + 1) {
    const int leaking = k.steps - k.leak_from + 1;
    t.decidable = t.decidable && leaking >= std::max(9, compared / 4 + 2);
  }
  return t;
}

std::string loop_name(const LoopKnobs& k) {
  std::string out = "steps=" + std::to_string(k.steps) + " annotations=" + annotations_name(k.annotations);
  if (k.leak_bytes) out += " leak=" + size_words(k.leak_bytes) + "/step from=" + std::to_string(k.leak_from);
  if (k.side_lagging) out += " side-stream=lagging";
  if (k.side_keeps_up) out += " side-stream=keeps-up";
  if (k.prefetch_noise) out += " prefetch=noisy";
  if (k.cache_fill_steps) out += " cache-fills=" + std::to_string(k.cache_fill_steps) + "steps";
  if (k.grow_once) out += " grows-once";
  if (k.max_entries < 100000) out += " ring=" + std::to_string(k.max_entries);
  if (k.level == HistoryLevel::kAlloc) out += " history=alloc";
  if (k.never_frees) out += " frees-nothing";
  if (k.leak_until) out += " leak-stops-after=" + std::to_string(k.leak_until);
  if (k.accumulate) out += " accumulation";
  if (k.scale != 1) out += " scale=" + std::to_string(k.scale);
  if (!k.config.source.empty()) out += " settings=" + k.config.source;
  return out;
}

void growth_cases(std::vector<Case>& out, size_t limit) {
  const size_t before = out.size();
  const auto add = [&](const LoopKnobs& k) {
    if (limit && out.size() - before >= limit) return;
    Case c;
    c.kind = "growth";
    c.name = "growth " + loop_name(k);
    c.snapshots.push_back(record_loop(k));
    c.growth = loop_growth_truth(c.snapshots[0], k);
    // The loop again under other settings: what tune's advice on it is checked against.
    c.rerun = [k](const AllocatorConfig& config) {
      RunOptions options;
      options.config = config;
      options.capacity_bytes = 64 * kGiB;
      options.record = false;
      Runtime again(options);
      run_loop(again, k);
      return again.outcome();
    };
    out.push_back(std::move(c));
  };
  uint32_t seed = 1;
  const Annotations annotations[] = {Annotations::kNone, Annotations::kUser, Annotations::kUserNested,
                                     Annotations::kLibraryOnly, Annotations::kProfilerNested};
  // Leaks at several rates, from the start or late, under every kind of annotation, with and
  // without noise, a wrapped ring, and another stream keeping up.
  for (Annotations a : annotations)
    for (size_t leak : {size_t{0}, 512 * kKiB, 2 * kMiB, 16 * kMiB})
      for (int from : {1, 25})
        for (bool noise : {false, true})
          for (size_t ring : {size_t{100000}, size_t{900}}) {
            if (leak == 0 && from != 1) continue;
            LoopKnobs k;
            k.annotations = a;
            k.leak_bytes = leak;
            k.leak_from = from;
            k.prefetch_noise = noise;
            k.max_entries = ring;
            k.seed = seed++;
            add(k);
          }
  // What is not a leak: caches that fill and stop, a buffer made once, a side stream that
  // keeps up; and what is: a side stream falling behind (alone, or beside a leak).
  for (Annotations a : annotations)
    for (int variant = 0; variant < 6; ++variant) {
      LoopKnobs k;
      k.annotations = a;
      k.seed = seed++;
      switch (variant) {
        case 0: k.cache_fill_steps = 5; break;
        case 1: k.grow_once = true; break;
        case 2: k.side_keeps_up = true; break;
        case 3: k.side_lagging = true; break;
        case 4: k.side_lagging = true, k.leak_bytes = 4 * kMiB; break;
        case 5: k.cache_fill_steps = 5, k.prefetch_noise = true, k.side_keeps_up = true; break;
      }
      add(k);
    }
  // Too few steps, history at level 'alloc', a program that frees nothing, short runs.
  for (Annotations a : {Annotations::kUser, Annotations::kNone})
    for (size_t leak : {size_t{0}, 2 * kMiB}) {
      for (int steps : {4, 7, 12}) {
        LoopKnobs k;
        k.annotations = a;
        k.steps = steps;
        k.leak_bytes = leak;
        k.seed = seed++;
        add(k);
      }
      LoopKnobs alloc_only;
      alloc_only.annotations = a;
      alloc_only.leak_bytes = leak;
      alloc_only.level = HistoryLevel::kAlloc;
      add(alloc_only);
    }
  // Longer and shorter runs, rings of several sizes, a program that never frees its batches.
  for (int steps : {20, 80})
    for (size_t leak : {size_t{0}, 2 * kMiB})
      for (size_t ring : {size_t{100000}, size_t{3000}}) {
        LoopKnobs k;
        k.annotations = Annotations::kUserNested;
        k.steps = steps;
        k.leak_bytes = leak;
        k.max_entries = ring;
        k.seed = seed++;
        add(k);
      }
  for (Annotations a : {Annotations::kUser, Annotations::kNone, Annotations::kLibraryOnly}) {
    LoopKnobs k;
    k.annotations = a;
    k.never_frees = true;
    k.seed = seed++;
    add(k);
    // What comes and goes at step starts (gradient accumulation), a leak that stopped half way;
    // and each beside a real leak.
    for (size_t leak : {size_t{0}, 2 * kMiB}) {
      LoopKnobs periodic;
      periodic.annotations = a;
      periodic.accumulate = true;
      periodic.leak_bytes = leak;
      periodic.seed = seed++;
      add(periodic);
    }
    LoopKnobs stopped;
    stopped.annotations = a;
    stopped.leak_bytes = 4 * kMiB;
    stopped.leak_until = 20;
    stopped.seed = seed++;
    add(stopped);
  }
  // Settings and scale do not change what grows.
  for (const char* settings : {"expandable_segments:True", "max_split_size_mb:64", "roundup_power2_divisions:4"})
    for (size_t leak : {size_t{0}, 2 * kMiB}) {
      LoopKnobs k;
      k.annotations = Annotations::kUserNested;
      k.leak_bytes = leak;
      k.config = parse_allocator_config(settings).value();
      k.seed = seed++;
      add(k);
    }
}

// ---------------------------------------------------------------------------------------------
// Ranks of a job.

void ranks_cases(std::vector<Case>& out, size_t limit) {
  const size_t before = out.size();
  struct Job {
    std::string shape;
    std::vector<LoopKnobs> ranks;
    RanksTruth truth;
  };
  std::vector<Job> jobs;
  uint32_t seed = 1000;
  const auto plain = [&](size_t scale = 1) {
    LoopKnobs k;
    k.steps = 12;
    k.annotations = Annotations::kUserNested;
    k.scale = scale;
    k.seed = seed++;
    return k;
  };
  for (int n = 1; n <= 9; ++n) {
    {  // All alike.
      Job job{"alike", {}, {}};
      for (int r = 0; r < n; ++r) job.ranks.push_back(plain());
      job.truth.decidable = n >= 2;
      jobs.push_back(job);
    }
    if (n >= 3) {  // One rank holds more live memory (it keeps tensors, or works at twice the size).
      for (int mode = 0; mode < 2; ++mode) {
        Job job{mode == 0 ? "one-leaking" : "one-doubled", {}, {}};
        const int odd = n / 2;
        for (int r = 0; r < n; ++r) {
          LoopKnobs k = plain();
          if (r == odd) {
            if (mode == 0)
              k.leak_bytes = 64 * kMiB;
            else
              k.scale = 2;
          }
          job.ranks.push_back(k);
        }
        job.truth.outliers = {odd};
        job.truth.why = "live";
        jobs.push_back(job);
      }
      // One rank under other settings, the same live memory: activations just over 32 MiB,
      // which two divisions a power of two round up to 48 MiB, reserve a third more.
      Job settings{"one-other-settings", {}, {}};
      for (int r = 0; r < n; ++r) {
        LoopKnobs k = plain();
        k.params_mib = 4;
        k.activation_mib = 32;
        k.activation_extra_kib = 512;
        if (r == 0) k.config = parse_allocator_config("roundup_power2_divisions:2").value();
        settings.ranks.push_back(k);
      }
      settings.truth.outliers = {0};
      settings.truth.why = "settings";
      jobs.push_back(settings);
    }
    if (n >= 3) {  // A DDP job: every rank's steps annotated, one rank leaking through 40 of them.
      Job job{"one-leaking-40-steps", {}, {}};
      for (int r = 0; r < n; ++r) {
        LoopKnobs k = plain();
        k.steps = 40;
        if (r == n - 1) k.leak_bytes = 8 * kMiB;
        job.ranks.push_back(k);
      }
      job.truth.outliers = {n - 1};
      job.truth.why = "live";
      jobs.push_back(job);
    }
    if (n >= 2 && n % 2 == 0) {  // An even split: half at twice the size.
      Job job{"even-split", {}, {}};
      for (int r = 0; r < n; ++r) job.ranks.push_back(plain(r % 2 == 0 ? 1 : 2));
      job.truth.decidable = false;
      jobs.push_back(job);
    }
    if (n == 3 || n == 4) {  // Every rank apart.
      Job job{"all-apart", {}, {}};
      for (int r = 0; r < n; ++r) job.ranks.push_back(plain(size_t{1} << r));
      job.truth.decidable = false;
      jobs.push_back(job);
    }
    if (n == 4 || n == 6) {  // Two alike, the others each apart: the two are typical.
      Job job{"two-alike-others-apart", {}, {}};
      for (int r = 0; r < n; ++r) job.ranks.push_back(plain(r < 2 ? 1 : size_t{1} << r));
      for (int r = 2; r < n; ++r) job.truth.outliers.insert(r);
      job.truth.why = "live";
      jobs.push_back(job);
    }
  }
  for (Job& job : jobs) {
    if (limit && out.size() - before >= limit) return;
    Case c;
    c.kind = "ranks";
    c.name = "ranks n=" + std::to_string(job.ranks.size()) + " " + job.shape;
    for (size_t r = 0; r < job.ranks.size(); ++r)
      c.snapshots.push_back(record_loop(job.ranks[r], static_cast<int>(r), static_cast<int>(job.ranks.size())));
    c.ranks = job.truth;
    for (size_t r = 0; r < job.ranks.size(); ++r) c.rank_growth.push_back(loop_growth_truth(c.snapshots[r], job.ranks[r]));
    out.push_back(std::move(c));
  }
}

// ---------------------------------------------------------------------------------------------
// Out-of-memory errors.

enum class CapFrom { kNone, kCode, kSettings, kEnvironment };
const char* cap_name(CapFrom cap) {
  switch (cap) {
    case CapFrom::kNone: return "none";
    case CapFrom::kCode: return "set_memory_fraction";
    case CapFrom::kSettings: return "settings-string";
    case CapFrom::kEnvironment: return "environment";
  }
  return "none";
}

enum class OomShape {
  kTooLargeForDevice,
  kTooLargeForCap,
  kExhaustion,
  kFragmentation,
  kOtherStreams,
  kPrivatePools,
  kOtherLibraries,
  kOtherLibrariesUnrecorded,
  kPendingOnOtherStream,  // freed blocks still waiting for another stream's work
};
const char* shape_name(OomShape shape) {
  switch (shape) {
    case OomShape::kTooLargeForDevice: return "request-larger-than-device";
    case OomShape::kTooLargeForCap: return "request-larger-than-cap";
    case OomShape::kExhaustion: return "live-memory-exhausts";
    case OomShape::kFragmentation: return "fragmentation";
    case OomShape::kOtherStreams: return "other-streams";
    case OomShape::kPrivatePools: return "idle-private-pools";
    case OomShape::kOtherLibraries: return "other-libraries-recorded";
    case OomShape::kOtherLibrariesUnrecorded: return "other-libraries-unrecorded";
    case OomShape::kPendingOnOtherStream: return "pending-on-other-stream";
  }
  return "";
}

struct OomKnobs {
  OomShape shape = OomShape::kExhaustion;
  CapFrom cap = CapFrom::kNone;
  size_t unit = 32 * kMiB;  // the scale of every size
  bool strip_cap = false;   // the file does not record the cap (as PyTorch's pickles)
  AllocatorConfig config;   // the recorded settings
  bool on_side_stream = false;  // the failing request is made on a side stream
  bool late_snapshot = false;   // the snapshot taken after the program went on (freed its tensors)
};

constexpr size_t kDevice = 8 * kGiB;

// The device and cap a run of `k` has, for its reruns too.
RunOptions oom_run_options(const OomKnobs& k, const AllocatorConfig& config) {
  RunOptions options;
  options.capacity_bytes = kDevice;
  options.config = config;
  if (k.cap == CapFrom::kSettings || k.cap == CapFrom::kEnvironment) {
    AllocatorConfig capped = config;
    capped.per_process_memory_fraction = 0.25;
    if (k.cap == CapFrom::kEnvironment) capped.origin = "PYTORCH_CUDA_ALLOC_CONF";
    options.config = capped;
  }
  return options;
}

// The allocator's reserved bytes now.
uint64_t reserved_now(Runtime& rt) {
  return static_cast<uint64_t>(rt.allocator().device_stats(0).reserved_bytes[kAggregate].current);
}

// The sizes a program chose from the allocator's state on its recorded run, kept so that a run
// again under other settings makes exactly the same requests (a program's requests do not
// depend on its allocator: the truth of "this setting avoids it" is the same program run again).
struct Script {
  std::vector<uint64_t> sizes;  // 0 ends a loop
  size_t next = 0;
  bool replaying = false;
  // The next size of a loop: chosen by `choose` (0 to stop) on the recorded run, read back after.
  template <typename Choose>
  uint64_t take(Choose&& choose) {
    if (replaying) return next < sizes.size() ? sizes[next++] : 0;
    const uint64_t bytes = choose();
    sizes.push_back(bytes);
    return bytes;
  }
};

// Live tensors made until less than `need` is left under `limit` (each one at least 10 MiB,
// which takes a segment of its own size).
void fill_until_less_than(Runtime& rt, Script& script, std::vector<void*>& held, uint64_t limit, uint64_t need,
                          size_t unit, StreamId stream) {
  for (int guard = 0; guard < 4096; ++guard) {
    const uint64_t bytes = script.take([&]() -> uint64_t {
      if (rt.ran_out_of_memory()) return 0;
      const uint64_t reserved = reserved_now(rt);
      if (reserved >= limit || limit - reserved < need) return 0;
      const uint64_t room = limit - reserved;
      uint64_t chosen = std::min<uint64_t>(4 * unit, room - need + 2 * kMiB);
      chosen = std::max<uint64_t>(chosen, 10 * kMiB);
      chosen = (chosen + 2 * kMiB - 1) / (2 * kMiB) * (2 * kMiB);
      return chosen > room ? 0 : chosen;
    });
    if (bytes == 0) return;
    void* p = rt.alloc({"other_tensors", 42}, bytes, stream);
    if (p != nullptr) held.push_back(p);
  }
}

// The program: memory of its own, then the request that fails. Returns whether the request
// failed; `rt` holds the state at the error (the snapshot is the OOM dump).
bool run_oom(Runtime& rt, const OomKnobs& k, Script& script) {
  if (k.cap == CapFrom::kCode) rt.set_memory_fraction(0.25);
  const size_t limit = k.cap == CapFrom::kNone ? kDevice : kDevice / 4;
  const size_t u = k.unit;
  const StreamId stream = k.on_side_stream ? rt.new_stream() : 0;
  std::vector<void*> held;
  const auto hold = [&](const Site& site, size_t bytes, StreamId s) {
    void* p = rt.alloc(site, bytes, s);
    if (p != nullptr) held.push_back(p);
    return p;
  };
  hold({"build_model", 10}, 4 * u, stream);
  // A segment cut into blocks of `unit` on `on`, keeping every `keep_every`-th block live: the
  // freed ones are holes the segment cannot give back.
  const auto cut = [&](size_t segment, size_t keep_every, StreamId on, const Site& site) {
    rt.free(rt.alloc({"warm_up", 40}, segment, on));
    std::vector<void*> blocks;
    for (size_t b = 0; b + u <= segment; b += u) blocks.push_back(rt.alloc(site, u, on));
    for (size_t i = 0; i < blocks.size(); ++i) {
      if (i % keep_every == 0)
        held.push_back(blocks[i]);
      else
        rt.free(blocks[i]);
    }
  };
  switch (k.shape) {
    case OomShape::kTooLargeForDevice:
      hold({"make_giant_buffer", 20}, kDevice + 64 * kMiB, stream);
      break;
    case OomShape::kTooLargeForCap:
      hold({"make_large_buffer", 21}, limit + 64 * kMiB, stream);
      break;
    case OomShape::kExhaustion: {
      // Live tensors up to 90% of the limit, then a request larger than what is left.
      const size_t live = limit / 10 * 9;
      while (script.take([&]() -> uint64_t { return reserved_now(rt) + 4 * u <= live && !rt.ran_out_of_memory() ? 4 * u : 0; }))
        hold({"activations", 30}, 4 * u, stream);
      hold({"attention_scores", 31}, script.take([&]() -> uint64_t { return limit - reserved_now(rt) + 8 * u; }), stream);
      break;
    }
    case OomShape::kFragmentation:
      // Half the limit in one segment, every other block of it freed; the rest of the limit
      // live; then two blocks' worth.
      cut(limit / 2, 2, stream, {"cut_blocks", 41});
      fill_until_less_than(rt, script, held, limit, 2 * u, u, stream);
      hold({"needs_two_blocks", 43}, 2 * u, stream);
      break;
    case OomShape::kOtherStreams: {
      // Half the limit in one segment on another stream, three blocks of four freed there; the
      // rest live on this stream; then two blocks' worth on this one.
      const StreamId other = rt.new_stream();
      cut(limit / 2, 4, other, {"side_stream_work", 50});
      fill_until_less_than(rt, script, held, limit, 2 * u, u, stream);
      hold({"main_stream_request", 53}, 2 * u, stream);
      break;
    }
    case OomShape::kPrivatePools: {
      // A graph's private pool caches a third of the limit, free; the rest of the limit live;
      // then a request the pool's memory would have made room for.
      const MempoolId pool{1, 0};
      rt.allocator().device(0).create_or_incref_pool(pool);
      rt.begin_pool(pool);
      std::vector<void*> captured;
      while (script.take([&]() -> uint64_t { return reserved_now(rt) + 4 * u <= 4 * u + limit / 3 ? 4 * u : 0; }))
        captured.push_back(rt.alloc({"graph_capture", 60}, 4 * u, stream));
      rt.end_pool(pool);
      for (void* p : captured) rt.free(p);
      fill_until_less_than(rt, script, held, limit, 4 * u, u, stream);
      hold({"eager_request", 62}, 4 * u, stream);
      break;
    }
    case OomShape::kPendingOnOtherStream: {
      // Half the limit in one segment, its blocks used on a side stream whose work is not done:
      // freed, they wait; every fourth kept live. The rest live; then two blocks' worth.
      const StreamId side = rt.new_stream();
      const size_t segment = limit / 2;
      rt.free(rt.alloc({"warm_up", 40}, segment, stream));
      std::vector<void*> blocks;
      for (size_t b = 0; b + u <= segment; b += u) blocks.push_back(rt.alloc({"copied_to_side_stream", 55}, u, stream));
      for (size_t i = 0; i < blocks.size(); ++i) {
        if (i % 4 == 0) {
          held.push_back(blocks[i]);
          continue;
        }
        rt.record_stream(blocks[i], side);
        rt.free(blocks[i]);
      }
      fill_until_less_than(rt, script, held, limit, 2 * u, u, stream);
      hold({"main_stream_request", 56}, 2 * u, stream);
      break;
    }
    case OomShape::kOtherLibraries:
    case OomShape::kOtherLibrariesUnrecorded:
      // Another library takes most of the device, leaving six units; the request is eight.
      rt.outside_alloc(kDevice - 10 * u, "libcupy_backends.so", k.shape == OomShape::kOtherLibraries);
      hold({"after_the_library", 70}, 8 * u, stream);
      break;
  }
  return rt.ran_out_of_memory();
}

OomTruth oom_truth(const OomKnobs& k) {
  OomTruth t;
  switch (k.shape) {
    case OomShape::kTooLargeForDevice: t.causes = {"request_too_large"}; break;
    // A cap the file does not record is a range: that the live memory and the request exceed it
    // may be all it can say (true, if less than the request alone being too large).
    case OomShape::kTooLargeForCap:
      t.causes = {"request_too_large"};
      if (k.strip_cap) t.causes.insert("exhaustion");
      break;
    case OomShape::kExhaustion: t.causes = {"exhaustion"}; break;
    case OomShape::kFragmentation: t.causes = {"fragmentation"}; break;
    case OomShape::kOtherStreams: t.causes = {"other_streams"}; break;
    case OomShape::kPrivatePools: t.causes = {"private_pools"}; break;
    case OomShape::kPendingOnOtherStream: t.causes = {"other_streams"}; break;
    case OomShape::kOtherLibraries: t.causes = {"other_libraries"}; break;
    // Unrecorded, what other libraries held is memory the process could not have: relative to
    // what it could have, the live memory and the request exceed it.
    case OomShape::kOtherLibrariesUnrecorded: t.causes = {"exhaustion", "request_too_large"}; break;
  }
  t.settings_cannot_help = k.shape == OomShape::kTooLargeForDevice || k.shape == OomShape::kTooLargeForCap ||
                           k.shape == OomShape::kExhaustion || k.shape == OomShape::kOtherLibraries ||
                           k.shape == OomShape::kOtherLibrariesUnrecorded;
  // A cap the file does not record is known only as a range: a judged answer must still be
  // right, but "cannot judge" is fair.
  t.decidable = !k.strip_cap || k.cap == CapFrom::kNone;
  return t;
}

// Takes out what records the cap: the snapshot then reads as PyTorch's would.
void strip_cap(Snapshot& s) {
  for (DeviceInfo& d : s.devices) d.memory_cap.reset();
  for (auto& changes : s.trace_state_changes)
    std::erase_if(changes, [](const TraceStateChange& c) { return c.kind == TraceStateKind::kMemoryCap; });
  for (auto& [key, value] : s.allocator_settings)
    if (key == "per_process_memory_fraction") value = "1";
}

void oom_cases(std::vector<Case>& out, size_t limit) {
  const size_t before = out.size();
  const OomShape shapes[] = {OomShape::kTooLargeForDevice, OomShape::kTooLargeForCap,     OomShape::kExhaustion,
                             OomShape::kFragmentation,     OomShape::kOtherStreams,       OomShape::kPrivatePools,
                             OomShape::kOtherLibraries,    OomShape::kOtherLibrariesUnrecorded,
                             OomShape::kPendingOnOtherStream};
  for (OomShape shape : shapes)
    for (CapFrom cap : {CapFrom::kNone, CapFrom::kCode, CapFrom::kSettings, CapFrom::kEnvironment})
      for (size_t unit : {16 * kMiB, 48 * kMiB})
        for (bool strip : {false, true})
          for (const char* settings : {"", "max_split_size_mb:256", "expandable_segments:True"})
            for (bool late : {false, true}) {
            if (limit && out.size() - before >= limit) return;
            if (shape == OomShape::kTooLargeForCap && cap == CapFrom::kNone) continue;
            if ((shape == OomShape::kOtherLibraries || shape == OomShape::kOtherLibrariesUnrecorded) && cap != CapFrom::kNone)
              continue;
            if (strip && cap == CapFrom::kNone) continue;
            if (*settings != '\0' && (strip || unit != 16 * kMiB)) continue;
            // max_split_size_mb keeps whole, and expandable segments give back, the large segment
            // these cut: no error to explain.
            if (*settings != '\0' && (shape == OomShape::kFragmentation || shape == OomShape::kOtherStreams ||
                                      shape == OomShape::kPendingOnOtherStream))
              continue;
            // The state at the error rebuilt from a later snapshot: a few of each shape.
            if (late && (strip || *settings != '\0' || cap == CapFrom::kEnvironment || cap == CapFrom::kSettings)) continue;
            OomKnobs k;
            k.shape = shape;
            k.cap = cap;
            k.unit = unit;
            k.strip_cap = strip;
            k.config = parse_allocator_config(settings).value();
            k.on_side_stream = shape == OomShape::kExhaustion && unit == 48 * kMiB;
            k.late_snapshot = late;
            Case c;
            c.kind = "oom";
            c.name = std::string("oom ") + shape_name(shape) + " cap=" + cap_name(cap) + " unit=" + size_words(unit) +
                     (strip ? " cap-unrecorded" : "") + (*settings ? std::string(" settings=") + settings : "") +
                     (k.on_side_stream ? " on-side-stream" : "") + (late ? " snapshot-after-the-program-went-on" : "");
            Runtime rt(oom_run_options(k, k.config));
            Script script;
            const bool failed = run_oom(rt, k, script);
            if (!failed) {
              c.name += " (BROKEN: did not run out of memory)";
              c.oom = OomTruth{{"broken-case"}, false, true};
              out.push_back(std::move(c));
              continue;
            }
            if (late) rt.release_all();  // the program catches the error and goes on
            Snapshot s = rt.snapshot();
            if (strip) strip_cap(s);
            c.snapshots.push_back(std::move(s));
            c.oom = oom_truth(k);
            script.replaying = true;
            c.rerun = [k, script](const AllocatorConfig& config) {
              RunOptions options = oom_run_options(k, config);
              options.record = false;
              Runtime again(options);
              Script same = script;
              run_oom(again, k, same);
              return again.outcome();
            };
            out.push_back(std::move(c));
            }
}

// ---------------------------------------------------------------------------------------------
// Does it fit: the loop recorded on a large device, asked about smaller ones; the truth is the
// loop run on each.

void fit_cases(std::vector<Case>& out, size_t limit) {
  const size_t before = out.size();
  uint32_t seed = 5000;
  for (Annotations a : {Annotations::kUser, Annotations::kNone})
    for (size_t activation : {size_t{8}, size_t{24}})
      for (const char* settings : {"", "expandable_segments:True"})
        for (double share : {0.5, 0.6, 0.8, 0.9, 0.95, 1.0, 1.05, 1.1, 1.3, 1.5, 2.0}) {
          if (limit && out.size() - before >= limit) return;
          LoopKnobs k;
          k.steps = 6;
          k.annotations = a;
          k.activation_mib = activation;
          k.config = parse_allocator_config(settings).value();
          k.seed = seed++;
          const Snapshot s = record_loop(k);
          // The capacity: a share of the peak reserved on the large device.
          RunOptions probe;
          probe.config = k.config;
          probe.capacity_bytes = 64 * kGiB;
          probe.record = false;
          Runtime measure(probe);
          run_loop(measure, k);
          const uint64_t peak = measure.outcome().peak_reserved_bytes;
          const uint64_t capacity = static_cast<uint64_t>(static_cast<double>(peak) * share) / (2 * kMiB) * (2 * kMiB);
          RunOptions real = probe;
          real.capacity_bytes = capacity;
          Runtime on_device(real);
          run_loop(on_device, k);
          Case c;
          c.kind = "fit";
          c.name = "fit " + loop_name(k) + " activations=" + std::to_string(activation) + "MiB capacity=" +
                   std::to_string(capacity / kMiB) + "MiB (" + std::to_string(static_cast<int>(share * 100)) +
                   "% of its peak reserved)";
          c.snapshots.push_back(s);
          c.fit = FitTruth{capacity, !on_device.ran_out_of_memory()};
          out.push_back(std::move(c));
        }
}

}  // namespace

std::vector<Case> make_corpus(const CorpusOptions& options) {
  std::vector<Case> out;
  const auto wanted = [&](const char* kind) { return options.only_kind.empty() || options.only_kind == kind; };
  if (wanted("growth")) growth_cases(out, options.limit);
  if (wanted("oom")) oom_cases(out, options.limit);
  if (wanted("ranks")) ranks_cases(out, options.limit);
  if (wanted("fit")) fit_cases(out, options.limit);
  return out;
}

}  // namespace memsnap::truth
