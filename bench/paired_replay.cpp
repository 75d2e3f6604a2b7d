// memsnap_paired_bench TRACE [--rounds N] [--passes N] [--only off|nostack|cpp_stacks]
//                            [--harness slots|map] [--json]
//
// memsnap's caching allocator and PyTorch's, in one process on one GPU, replaying the same
// trace in alternating turns: each round times `passes` passes of memsnap and as many of
// PyTorch (by default enough passes for 60,000 events, at least 3), the order flipping every
// round (memsnap first in even rounds). Both sides run the same harness loop, on the same
// streams, with the same history setting. Separate processes (bench/side_by_side.py) see a
// virtual machine's noise differently from one run to the next; here each round's two turns
// share it, so the ratio of a round is steady where the times are not.
//
// Per history mode (off; without stacks; with C++ stacks, PyTorch's RecordContext::ALL as in
// ../shared/bench/torch_cca_replay.cpp) it prints the median ns per event of each side, the
// median and quartiles of the rounds' ratios (PyTorch's time over memsnap's), and whether both
// reserved the same peak with the same number of device mallocs in their cold pass. Each mode
// is measured under both harnesses of replay_harness.h (--harness: one alone): slots, which
// times the allocators, and map, the id map of ../shared/bench/torch_cca_replay.cpp, whose
// cost both sides carry.
//
// Both allocators take their settings from PYTORCH_CUDA_ALLOC_CONF (memsnap: the first of
// MEMSNAP_ALLOC_CONF, PYTORCH_ALLOC_CONF, PYTORCH_CUDA_ALLOC_CONF), so a trace recorded under a
// setting is replayed under it on both sides.
//
// Built only where PyTorch is (-DMEMSNAP_TORCH_DIR=..., bench/gpu/paired_replay.sh).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <c10/cuda/CUDACachingAllocator.h>
#include <torch/csrc/profiler/combined_traceback.h>

#include "allocator/allocator_config.h"
#include "allocator/caching_allocator.h"
#include "allocator/cuda_backend.h"
#include "history/history_recorder.h"
#include "bench/replay_harness.h"
#include "replay/allocation_trace.h"

namespace {

namespace cca = c10::cuda::CUDACachingAllocator;
using memsnap::TraceEvent;

using memsnap::bench::Harness;
using memsnap::bench::ReplayPlan;

// Both sides run the same loop (replay_harness.h) on the same streams.
struct Side {
  memsnap::CachingAllocator& memsnap;
  const ReplayPlan& plan;
  const std::vector<cudaStream_t>& streams;  // per event
  double run_memsnap(Harness harness, int passes) const {
    return memsnap::bench::replay_ns_per_event(
        plan, streams, harness, passes,
        [this](size_t bytes, cudaStream_t stream) {
          return memsnap.allocate(bytes, 0, reinterpret_cast<memsnap::StreamId>(stream));
        },
        [this](void* ptr) { memsnap.deallocate(ptr); });
  }
  double run_pytorch(Harness harness, int passes) const {
    return memsnap::bench::replay_ns_per_event(
        plan, streams, harness, passes,
        [](size_t bytes, cudaStream_t stream) { return cca::raw_alloc_with_stream(bytes, stream); },
        [](void* ptr) { cca::raw_delete(ptr); });
  }
};

double quantile(std::vector<double> values, double q) {
  std::sort(values.begin(), values.end());
  return values[static_cast<size_t>(q * static_cast<double>(values.size() - 1) + 0.5)];
}

struct ModeResult {
  const char* mode;
  Harness harness;
  double memsnap_ns, pytorch_ns;             // medians over the rounds
  double ratio_low, ratio_median, ratio_high;  // PyTorch / memsnap, per round
};

ModeResult measure(const char* mode, Harness harness, const Side& side, int rounds, int passes) {
  std::vector<double> ours, theirs, ratios;
  for (int round = 0; round < rounds; ++round) {
    double m = 0, t = 0;
    if (round % 2 == 0) {
      m = side.run_memsnap(harness, passes);
      t = side.run_pytorch(harness, passes);
    } else {
      t = side.run_pytorch(harness, passes);
      m = side.run_memsnap(harness, passes);
    }
    ours.push_back(m);
    theirs.push_back(t);
    ratios.push_back(t / m);
  }
  return {mode,
          harness,
          quantile(ours, 0.5),
          quantile(theirs, 0.5),
          quantile(ratios, 0.25),
          quantile(ratios, 0.5),
          quantile(ratios, 0.75)};
}

std::shared_ptr<c10::GatheredContext> no_context() { return nullptr; }
std::shared_ptr<c10::GatheredContext> cpp_context() {
  return torch::CapturedTraceback::gather(/*python=*/false, /*script=*/false, /*cpp=*/true);
}

int usage() {
  std::fprintf(stderr,
               "usage: memsnap_paired_bench TRACE [--rounds N] [--passes N]\n"
               "                            [--only off|nostack|cpp_stacks]\n"
               "                            [--harness slots|map] [--json]\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return usage();
  int rounds = 21, passes = 0;  // 0 until given: passes_for(the trace's events)
  bool passes_given = false;
  bool json = false;
  std::string only;  // one mode alone
  std::vector<Harness> harnesses{Harness::kSlots, Harness::kMap};
  for (int i = 2; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--rounds" && i + 1 < argc) rounds = std::atoi(argv[++i]);
    else if (arg == "--passes" && i + 1 < argc) {
      passes = std::atoi(argv[++i]);
      passes_given = true;
    }
    else if (arg == "--only" && i + 1 < argc) only = argv[++i];
    else if (arg == "--json") json = true;
    else if (arg == "--harness" && i + 1 < argc) {
      Harness harness;
      if (!memsnap::bench::parse_harness(argv[++i], harness)) return usage();
      harnesses = {harness};
    } else return usage();
  }
  if (rounds < 1 || rounds > 100000 || (passes_given && passes < 1) || passes > 100000)
    return usage();
  if (!only.empty() && only != "off" && only != "nostack" && only != "cpp_stacks") return usage();
  const auto timed = [&](const char* mode) { return only.empty() || only == mode; };
  auto trace = memsnap::read_allocation_trace(argv[1]);
  if (!trace) {
    std::fprintf(stderr, "memsnap_paired_bench: error: %s\n", trace.error().c_str());
    return 1;
  }
  if (!memsnap::CudaBackend::available()) {
    std::fprintf(stderr, "memsnap_paired_bench: error: no usable CUDA device\n");
    return 1;
  }
  // Both allocators' locks take their multi-threaded paths, as in a real program.
  std::thread([] {}).join();
  cudaSetDevice(0);
  cudaFree(nullptr);
  cca::init(1);

  std::map<int64_t, cudaStream_t> by_id{{0, nullptr}};
  std::vector<cudaStream_t> streams;
  streams.reserve(trace->events.size());
  for (const TraceEvent& e : trace->events) {
    auto [it, fresh] = by_id.try_emplace(e.stream, nullptr);
    if (fresh) cudaStreamCreateWithFlags(&it->second, cudaStreamNonBlocking);
    streams.push_back(it->second);
  }
  const ReplayPlan plan(trace.value());
  if (passes == 0) passes = memsnap::bench::passes_for(trace->events.size());

  auto config = memsnap::allocator_config_from_environment();
  if (!config) {
    std::fprintf(stderr, "memsnap_paired_bench: error: %s\n", config.error().c_str());
    return 1;
  }
  memsnap::CachingAllocator allocator(std::make_shared<memsnap::CudaBackend>(), config.value());
  memsnap::HistoryRecorder recorder(allocator);
  const Side side{allocator, plan, streams};
  side.run_memsnap(harnesses.front(), 1);  // cold passes fill the caches
  side.run_pytorch(harnesses.front(), 1);
  const memsnap::DeviceStats ours = allocator.device_stats(0);
  const cca::DeviceStats theirs = cca::getDeviceStats(0);
  using memsnap::kAggregate;
  const bool same_segments =
      ours.reserved_bytes[kAggregate].peak == theirs.reserved_bytes[0].peak &&
      ours.num_device_alloc == theirs.num_device_alloc;

  std::vector<ModeResult> results;
  const auto measure_mode = [&](const char* mode) {
    if (!timed(mode)) return;
    for (Harness harness : harnesses)
      results.push_back(measure(mode, harness, side, rounds, passes));
  };
  measure_mode("off");
  // As torch_cca_replay: every event (allocations, frees, segments) in a 100,000-entry trace.
  cca::recordHistory(true, no_context, 100000, cca::RecordContext::ALL, false, {});
  recorder.configure({memsnap::HistoryLevel::kAll, 100000, /*cpp_stacks=*/false});
  measure_mode("nostack");
  cca::recordHistory(true, cpp_context, 100000, cca::RecordContext::ALL, true, {});
  recorder.configure({memsnap::HistoryLevel::kAll, 100000, /*cpp_stacks=*/true});
  measure_mode("cpp_stacks");
  cca::recordHistory(false, nullptr, 0, cca::RecordContext::NEVER, false, {});
  recorder.configure({});
  if (!allocator.check_invariants().empty()) {
    std::fprintf(stderr, "memsnap_paired_bench: error: allocator invariants violated\n");
    return 1;
  }

  if (json) {
    std::printf("{\"trace\":\"%s\",\"config\":\"%s\",\"events\":%zu,\"rounds\":%d,\"passes\":%d,"
                "\"same_segments\":%s",
                argv[1], config->source.c_str(), trace->events.size(), rounds, passes,
                same_segments ? "true" : "false");
    for (const ModeResult& r : results)
      std::printf(",\"%s%s\":{\"memsnap_ns\":%.1f,\"pytorch_ns\":%.1f,\"ratio\":%.3f,"
                  "\"ratio_q1\":%.3f,\"ratio_q3\":%.3f}",
                  r.mode, r.harness == Harness::kMap ? "_map" : "", r.memsnap_ns, r.pytorch_ns,
                  r.ratio_median, r.ratio_low, r.ratio_high);
    std::printf("}\n");
    return 0;
  }
  std::printf("%s%s%s: %zu events, %d rounds of %d passes a side; peak reserved %s, %lld device "
              "mallocs%s\n",
              argv[1], config->source.empty() ? "" : " under ", config->source.c_str(),
              trace->events.size(), rounds, passes,
              memsnap::format_bytes(ours.reserved_bytes[kAggregate].peak).c_str(),
              static_cast<long long>(ours.num_device_alloc),
              same_segments ? " (the same on both)" : " (PyTorch's differ!)");
  std::printf("%-11s %-8s %12s %12s %18s\n", "history", "harness", "memsnap ns", "PyTorch ns",
              "ratio (quartiles)");
  for (const ModeResult& r : results)
    std::printf("%-11s %-8s %12.1f %12.1f %7.2fx (%.2f-%.2f)\n", r.mode,
                memsnap::bench::harness_name(r.harness), r.memsnap_ns, r.pytorch_ns,
                r.ratio_median, r.ratio_low, r.ratio_high);
  return 0;
}
