// memsnap_bench replay FILE.trace [--backend sim|cuda] [--passes N] [--json]
//                      [--only off|nostack|cpp_stacks|fp_stacks] [--off-after ROUNDS]
//                      [--harness map|slots] [--lock-cost ROUNDS]
//
// Replays an allocation trace through memsnap's caching allocator the way
// ../shared/bench/torch_cca_replay.cpp replays it through PyTorch's: one cold pass that fills
// the cache (its peaks and device-malloc count are reported), then `passes` timed passes,
// each freeing what is left at its end. Prints the same keys, so bench/side_by_side.py can
// put the two next to each other.
//
// Settings come from the environment as in a program (MEMSNAP_ALLOC_CONF, PYTORCH_ALLOC_CONF
// or PYTORCH_CUDA_ALLOC_CONF, the first set), so a trace recorded under a setting replays
// under it, as torch_cca_replay's PyTorch does.
//
// With C++ stacks timed, it also prints what the stack walker did there (cfi_unwinder.h):
// walks per event, and per walk the steps walked afresh and the walks remembered anew (a walk
// found whole among those remembered walks no step and remembers nothing).
//
// --harness map|slots: how the timed loop keeps the trace's ids (replay_harness.h). The
// default, map, is torch_cca_replay's; slots times the allocator without it.
//
// --off-after ROUNDS: whether turning history off gives the allocator its speed back. The
// allocator that recorded (the modes above, then a million-entry trace with C++ stacks filled
// past its end) and two that never recorded replay the trace with history off, one pass
// each per round, in an order that rotates every round. Printed: the medians over the rounds
// of the recorded one's pass time over a fresh one's, and of one fresh one's over the other's
// (what the same allocator state measures as, the noise), with their quartiles.
//
// --lock-cost ROUNDS: what the atomic instructions of the allocator's lock cost, history off.
// Each round replays `passes` passes with the lock as a multi-threaded program takes it (a
// compare-and-swap) and as a single-threaded one does (a plain load and store,
// allocator_mutex.h), in an order that flips every round, by setting glibc's
// __libc_single_threaded while the bench's only other thread is long gone (so only with the
// simulated backend). Printed: the median and quartiles of the rounds' atomic-over-plain
// ratios.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "allocator/allocator_config.h"
#include "allocator/caching_allocator.h"
#include "allocator/simulated_backend.h"
#include "history/cfi_unwinder.h"
#include "history/history_recorder.h"
#include "bench/replay_harness.h"
#include "replay/allocation_trace.h"
#if defined(__has_include)
#if __has_include(<sys/single_threaded.h>)
#include <sys/single_threaded.h>
#define MEMSNAP_BENCH_CAN_SET_SINGLE_THREADED 1
#endif
#endif
#ifdef MEMSNAP_HAVE_CUDA
#include <cuda_runtime.h>

#include "allocator/cuda_backend.h"
#endif

namespace {

using memsnap::CachingAllocator;
using memsnap::StreamId;
using memsnap::TraceEvent;

// Trace stream numbers -> the allocator's stream ids (real streams on CUDA).
class StreamTable {
 public:
  explicit StreamTable(bool cuda) : cuda_(cuda) {}
  StreamId operator()(int64_t id) {
    if (!cuda_ || id == 0) return static_cast<StreamId>(id);
    auto [it, fresh] = streams_.try_emplace(id, 0);
#ifdef MEMSNAP_HAVE_CUDA
    if (fresh) {
      cudaStream_t stream = nullptr;
      cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
      it->second = reinterpret_cast<StreamId>(stream);
    }
#endif
    return it->second;
  }

 private:
  bool cuda_;
  std::map<int64_t, StreamId> streams_;
};

// A trace ready to replay through an allocator: its plan, its events' streams, the harness.
struct Replayer {
  const memsnap::bench::ReplayPlan& plan;
  const std::vector<StreamId>& streams;  // per event
  memsnap::bench::Harness harness;

  double ns_per_event(CachingAllocator& allocator, int passes) const {
    return memsnap::bench::replay_ns_per_event(
        plan, streams, harness, passes,
        [&](size_t bytes, StreamId stream) { return allocator.allocate(bytes, 0, stream); },
        [&](void* pointer) { allocator.deallocate(pointer); });
  }
};

struct Spread {
  double low, median, high;  // quartiles
};

Spread quartiles(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const auto at = [&](double q) {
    return values[static_cast<size_t>(q * static_cast<double>(values.size() - 1) + 0.5)];
  };
  return {at(0.25), at(0.5), at(0.75)};
}

// One allocator that never records, with its own backend and (like a PyTorch process's)
// a history recorder left off.
struct FreshAllocator {
  FreshAllocator(std::shared_ptr<memsnap::DeviceBackend> backend,
                 const memsnap::AllocatorConfig& config)
      : allocator(std::move(backend), config), recorder(allocator) {}
  CachingAllocator allocator;
  memsnap::HistoryRecorder recorder;
};

// The --off-after comparison (see the top of this file); `recorded` has recorded and is off.
using BackendMaker = std::function<std::shared_ptr<memsnap::DeviceBackend>()>;

std::pair<Spread, Spread> off_after_ratios(CachingAllocator& recorded, const BackendMaker& backend,
                                           const memsnap::AllocatorConfig& config,
                                           const Replayer& replay, int rounds) {
  FreshAllocator fresh(backend(), config), other(backend(), config);
  CachingAllocator* const allocators[3] = {&recorded, &fresh.allocator, &other.allocator};
  for (CachingAllocator* allocator : allocators) replay.ns_per_event(*allocator, 1);
  std::vector<double> recorded_over_fresh, fresh_over_fresh;
  for (int round = 0; round < rounds; ++round) {
    double ns[3];
    for (int k = 0; k < 3; ++k) {
      const int which = (round + k) % 3;
      ns[which] = replay.ns_per_event(*allocators[which], 1);
    }
    recorded_over_fresh.push_back(ns[0] / ns[1]);
    fresh_over_fresh.push_back(ns[2] / ns[1]);
  }
  return {quartiles(recorded_over_fresh), quartiles(fresh_over_fresh)};
}

// The --lock-cost comparison (see the top of this file).
std::optional<Spread> lock_cost_ratios(CachingAllocator& allocator, const Replayer& replay, int passes, int rounds) {
#ifdef MEMSNAP_BENCH_CAN_SET_SINGLE_THREADED
  std::vector<double> atomic_over_plain;
  for (int round = 0; round < rounds; ++round) {
    double ns[2];  // [0]: plain, [1]: atomic
    for (int k = 0; k < 2; ++k) {
      const int atomic = (round + k) % 2;
      __libc_single_threaded = atomic == 0;
      ns[atomic] = replay.ns_per_event(allocator, passes);
      __libc_single_threaded = 0;  // the truth: the process has had a second thread
    }
    atomic_over_plain.push_back(ns[1] / ns[0]);
  }
  return quartiles(atomic_over_plain);
#else
  (void)allocator, (void)replay, (void)passes, (void)rounds;
  return std::nullopt;
#endif
}

int usage() {
  std::fprintf(stderr,
               "usage: memsnap_bench replay FILE.trace [--backend sim|cuda] [--passes N] [--json]\n"
               "                            [--only off|nostack|cpp_stacks|fp_stacks]\n"
               "                            [--off-after ROUNDS] [--harness map|slots]\n"
               "                            [--lock-cost ROUNDS]\n");
  return 2;
}

// What the stack walker did over a timed stretch with C++ stacks (cfi_unwinder.h).
struct WalkFigures {
  double walks_per_event = 0;
  double steps_walked_per_walk = 0;
  double remembered_per_walk = 0;
};

WalkFigures walk_figures(const memsnap::CfiWalkCounts& before, const memsnap::CfiWalkCounts& after,
                         size_t events) {
  const uint64_t walks = after.walks - before.walks;
  if (walks == 0 || events == 0) return {};
  return {static_cast<double>(walks) / static_cast<double>(events),
          static_cast<double>(after.steps_walked - before.steps_walked) / static_cast<double>(walks),
          static_cast<double>(after.remembered - before.remembered) / static_cast<double>(walks)};
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3 || std::strcmp(argv[1], "replay") != 0) return usage();
  // Real programs have more than one thread (CUDA's runtime starts its own), and then every
  // lock takes its atomic path; a single-threaded replay would skip it (allocator_mutex.h)
  // and flatter both backends. One short-lived thread makes the process multi-threaded.
  std::thread([] {}).join();
  const std::string path = argv[2];
  std::string backend_name = "sim";
  int passes = 5;
  bool json = false;
  // Times one mode alone (the others print as 0), for a profiler's view of that mode.
  std::string only;
  int off_after_rounds = 0;
  int lock_cost_rounds = 0;
  memsnap::bench::Harness harness = memsnap::bench::Harness::kMap;  // as torch_cca_replay
  for (int i = 3; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--backend" && i + 1 < argc) backend_name = argv[++i];
    else if (arg == "--passes" && i + 1 < argc) passes = std::atoi(argv[++i]);
    else if (arg == "--json") json = true;
    else if (arg == "--only" && i + 1 < argc) only = argv[++i];
    else if (arg == "--off-after" && i + 1 < argc) off_after_rounds = std::atoi(argv[++i]);
    else if (arg == "--lock-cost" && i + 1 < argc) lock_cost_rounds = std::atoi(argv[++i]);
    else if (arg == "--harness" && i + 1 < argc) {
      if (!memsnap::bench::parse_harness(argv[++i], harness)) return usage();
    } else return usage();
  }
  if (passes < 1 || passes > 100000 || off_after_rounds < 0 || off_after_rounds > 100000 ||
      lock_cost_rounds < 0 || lock_cost_rounds > 100000)
    return usage();
  if (!only.empty() && only != "off" && only != "nostack" && only != "cpp_stacks" &&
      only != "fp_stacks")
    return usage();
  const auto timed = [&](const char* mode) { return only.empty() || only == mode; };
  if (lock_cost_rounds > 0 && backend_name != "sim") {
    std::fprintf(stderr, "memsnap_bench: error: --lock-cost needs --backend sim (CUDA's runtime "
                         "runs threads of its own, so the process is never single-threaded)\n");
    return 1;
  }

  auto trace = memsnap::read_allocation_trace(path);
  if (!trace) {
    std::fprintf(stderr, "memsnap_bench: error: %s\n", trace.error().c_str());
    return 1;
  }
  BackendMaker make_backend;
  if (backend_name == "sim") {
    make_backend = [] { return std::make_shared<memsnap::SimulatedBackend>(); };
  } else if (backend_name == "cuda") {
#ifdef MEMSNAP_HAVE_CUDA
    if (!memsnap::CudaBackend::available()) {
      std::fprintf(stderr, "memsnap_bench: error: no usable CUDA device\n");
      return 1;
    }
    cudaSetDevice(0);
    cudaFree(nullptr);
    make_backend = [] { return std::make_shared<memsnap::CudaBackend>(); };
#else
    std::fprintf(stderr, "memsnap_bench: error: built without CUDA\n");
    return 1;
#endif
  } else {
    return usage();
  }
  const std::shared_ptr<memsnap::DeviceBackend> backend = make_backend();

  // As torch_cca_replay, which PyTorch's allocator configures from the environment.
  auto config = memsnap::allocator_config_from_environment();
  if (!config) {
    std::fprintf(stderr, "memsnap_bench: error: %s\n", config.error().c_str());
    return 1;
  }
  CachingAllocator allocator(backend, config.value());
  StreamTable table(backend_name == "cuda");
  std::vector<StreamId> streams;
  streams.reserve(trace->events.size());
  for (const TraceEvent& e : trace->events) streams.push_back(table(e.stream));
  const memsnap::bench::ReplayPlan plan(trace.value());
  const Replayer replay{plan, streams, harness};

  replay.ns_per_event(allocator, 1);  // cold pass fills the cache
  const memsnap::DeviceStats cold = allocator.device_stats(0);
  const auto measure = [&](const char* mode) {
    return timed(mode) ? replay.ns_per_event(allocator, passes) : 0.0;
  };
  const double off = measure("off");
  // As torch_cca_replay: history of every event (alloc, frees, segments) in a 100,000-entry
  // trace, first without stacks, then with C++ stacks.
  memsnap::HistoryRecorder recorder(allocator);
  recorder.configure({memsnap::HistoryLevel::kAll, 100000, /*cpp_stacks=*/false});
  const double nostack = measure("nostack");
  recorder.configure({memsnap::HistoryLevel::kAll, 100000, /*cpp_stacks=*/true});
  const memsnap::CfiWalkCounts walks_before = memsnap::cfi_walk_counts();
  const double cpp_stacks = measure("cpp_stacks");
  const WalkFigures walks =
      walk_figures(walks_before, memsnap::cfi_walk_counts(), trace->events.size() * static_cast<size_t>(passes));
  // memsnap only: the same with stacks walked by frame pointer (this binary and memsnap are
  // built with them).
  recorder.configure({memsnap::HistoryLevel::kAll, 100000, true,
                      memsnap::StackUnwinder::kFramePointers});
  const double fp_stacks = measure("fp_stacks");
  if (off_after_rounds > 0) {  // a million-entry trace with C++ stacks, filled past its end
    constexpr size_t kEntries = 1000000;
    recorder.configure({memsnap::HistoryLevel::kAll, kEntries, /*cpp_stacks=*/true});
    const int fill = static_cast<int>(kEntries / std::max<size_t>(trace->events.size(), 1)) + 1;
    replay.ns_per_event(allocator, fill);
  }
  recorder.configure({});
  std::optional<std::pair<Spread, Spread>> off_after;
  if (off_after_rounds > 0)
    off_after = off_after_ratios(allocator, make_backend, config.value(), replay, off_after_rounds);
  std::optional<Spread> lock_cost;
  if (lock_cost_rounds > 0) {
    lock_cost = lock_cost_ratios(allocator, replay, passes, lock_cost_rounds);
    if (!lock_cost) {
      std::fprintf(stderr, "memsnap_bench: error: --lock-cost needs glibc's __libc_single_threaded\n");
      return 1;
    }
  }
  if (!allocator.check_invariants().empty()) {
    std::fprintf(stderr, "memsnap_bench: error: allocator invariants violated\n");
    return 1;
  }
  using memsnap::kAggregate;
  if (json) {
    std::printf(
        "{\"allocator\":\"memsnap\",\"backend\":\"%s\",\"events\":%zu,"
        "\"ns_per_event_history_off\":%.1f,\"ns_per_event_history_nostack\":%.1f,"
        "\"ns_per_event_history_cpp_stacks\":%.1f,\"ns_per_event_history_fp_stacks\":%.1f,"
        "\"peak_reserved_bytes\":%lld,"
        "\"peak_allocated_bytes\":%lld,\"device_mallocs\":%lld",
        backend->name().c_str(), trace->events.size(), off, nostack, cpp_stacks, fp_stacks,
        static_cast<long long>(cold.reserved_bytes[kAggregate].peak),
        static_cast<long long>(cold.allocated_bytes[kAggregate].peak),
        static_cast<long long>(cold.num_device_alloc));
    if (off_after)
      std::printf(",\"off_after_recorded_over_fresh\":%.4f,\"off_after_fresh_over_fresh\":%.4f",
                  off_after->first.median, off_after->second.median);
    if (lock_cost) std::printf(",\"lock_atomic_over_plain\":%.4f", lock_cost->median);
    if (walks.walks_per_event > 0)
      std::printf(",\"cpp_stacks_walks_per_event\":%.3f,\"cpp_stacks_steps_walked_per_walk\":%.3f,"
                  "\"cpp_stacks_remembered_per_walk\":%.4f",
                  walks.walks_per_event, walks.steps_walked_per_walk, walks.remembered_per_walk);
    std::printf("}\n");
  } else {
    std::printf("memsnap on %s: %zu events, ns/event: %.1f history off, %.1f without stacks, "
                "%.1f with C++ stacks (%.1f by frame pointer); peak reserved %s, %lld device "
                "mallocs\n",
                backend->name().c_str(), trace->events.size(), off, nostack, cpp_stacks, fp_stacks,
                memsnap::format_bytes(cold.reserved_bytes[kAggregate].peak).c_str(),
                static_cast<long long>(cold.num_device_alloc));
    if (off_after)
      std::printf("history off, %d rounds, pass time over a never-recording allocator's "
                  "(median [quartiles]): after recording %.4f [%.4f, %.4f]; another "
                  "never-recording one %.4f [%.4f, %.4f]\n",
                  off_after_rounds, off_after->first.median, off_after->first.low,
                  off_after->first.high, off_after->second.median, off_after->second.low,
                  off_after->second.high);
    if (lock_cost)
      std::printf("history off, %s harness, %d rounds: time with the lock's atomic path over "
                  "its plain one %.4f [%.4f, %.4f]\n",
                  memsnap::bench::harness_name(harness), lock_cost_rounds, lock_cost->median,
                  lock_cost->low, lock_cost->high);
    if (walks.walks_per_event > 0)
      std::printf("C++ stacks: %.3f walks per event; per walk, %.3f steps walked (the rest taken "
                  "over from walks remembered) and %.4f walks remembered anew\n",
                  walks.walks_per_event, walks.steps_walked_per_walk, walks.remembered_per_walk);
  }
  return 0;
}
