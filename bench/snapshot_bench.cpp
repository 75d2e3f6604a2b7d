// memsnap_snapshot_bench [--events N] [--live N] [--out FILE] [--keep]
//
// Records N trace events (allocations and frees from a few dozen call paths, with C++
// stacks) and times taking the snapshot (symbolization included), encoding it as msgpack and
// writing it, and encoding it as PyTorch's pickle (what _dump_snapshot writes under
// memsnap.torch); prints bytes per trace event. PyTorch needs about 88 bytes per event in its
// pickle (with Python stacks); the goal is a quarter of that, written in under a second.
// --live sets how many allocations stay live at once (their blocks fill the snapshot's
// segments: 100000 makes a stress input for the viewers); --keep leaves the file behind.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "allocator/caching_allocator.h"
#include "allocator/simulated_backend.h"
#include "snapshot/msgpack_writer.h"
#include "snapshot/pytorch_pickle_writer.h"
#include "snapshot/snapshot_builder.h"
#include "snapshot/snapshot_file.h"

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Distinct call paths, so the stack table holds more than one stack.
template <int Depth>
__attribute__((noinline)) void* allocate_at_depth(memsnap::CachingAllocator& allocator, size_t bytes) {
  if constexpr (Depth == 0) {
    return allocator.allocate(bytes);
  } else {
    void* p = allocate_at_depth<Depth - 1>(allocator, bytes);
    asm volatile("" ::: "memory");
    return p;
  }
}

void* allocate_somewhere(memsnap::CachingAllocator& allocator, size_t bytes, size_t path) {
  switch (path % 4) {
    case 0: return allocate_at_depth<1>(allocator, bytes);
    case 1: return allocate_at_depth<3>(allocator, bytes);
    case 2: return allocate_at_depth<5>(allocator, bytes);
    default: return allocate_at_depth<7>(allocator, bytes);
  }
}

}  // namespace

int main(int argc, char** argv) {
  size_t events = 1000000;
  std::string out = "memsnap-snapshot-bench.msgpack";
  size_t live_slots = 64;
  bool keep = false;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--events") && i + 1 < argc) events = std::strtoull(argv[++i], nullptr, 10);
    else if (!std::strcmp(argv[i], "--out") && i + 1 < argc) out = argv[++i];
    else if (!std::strcmp(argv[i], "--live") && i + 1 < argc) live_slots = std::max<size_t>(1, std::strtoull(argv[++i], nullptr, 10));
    else if (!std::strcmp(argv[i], "--keep")) keep = true;
    else {
      std::fprintf(stderr, "usage: memsnap_snapshot_bench [--events N] [--live N] [--out FILE] [--keep]\n");
      return 2;
    }
  }
  auto backend = std::make_shared<memsnap::SimulatedBackend>();
  memsnap::CachingAllocator allocator(backend);
  memsnap::HistoryRecorder recorder(allocator);
  recorder.configure({memsnap::HistoryLevel::kAlloc, events, /*cpp_stacks=*/true});

  // Allocations only are traced at level "alloc": one event per allocation.
  std::vector<void*> live(live_slots, nullptr);
  // Up to 2 MiB with the default 64 live allocations; smaller when more stay live, so they fit.
  const size_t size_steps = std::max<size_t>(2, 4096 * 64 / live_slots);
  for (size_t i = 0; i < events; ++i) {
    void*& slot = live[i % live.size()];
    if (slot) allocator.deallocate(slot);
    slot = allocate_somewhere(allocator, 512 * (1 + (i * 7919) % size_steps), i);
  }
  const auto start = Clock::now();
  const memsnap::Snapshot snapshot = memsnap::take_snapshot(allocator, &recorder);
  const double take_s = seconds_since(start);
  const std::string bytes = memsnap::to_msgpack(snapshot);
  const double encode_s = seconds_since(start) - take_s;
  if (auto error = memsnap::write_file_atomically(out, bytes)) {
    std::fprintf(stderr, "memsnap_snapshot_bench: error: %s\n", error->c_str());
    return 1;
  }
  const double total_s = seconds_since(start);
  const auto pickle_start = Clock::now();
  const size_t pickle_bytes = memsnap::to_pytorch_pickle(snapshot).size();
  const double pickle_s = seconds_since(pickle_start);
  // Again, with every address symbolized: what a snapshot costs beyond the first one's
  // reading of debug info and symbol tables.
  const auto again_start = Clock::now();
  const size_t again_events = memsnap::take_snapshot(allocator, &recorder).device_traces.at(0).size();
  const double again_s = seconds_since(again_start);
  const size_t traced = snapshot.device_traces.at(0).size();
  std::printf("{\"trace_events\":%zu,\"stacks\":%zu,\"frames\":%zu,\"snapshot_s\":%.3f,"
              "\"encode_s\":%.3f,\"total_write_s\":%.3f,\"file_bytes\":%zu,"
              "\"bytes_per_event\":%.1f,\"pytorch_bytes_per_event\":88,"
              "\"pickle_encode_s\":%.3f,\"pickle_bytes\":%zu,\"snapshot_again_s\":%.3f,\"again_events\":%zu}\n",
              traced, snapshot.stacks.size(), snapshot.frames.size(), take_s, encode_s, total_s,
              bytes.size(), double(bytes.size()) / double(traced ? traced : 1), pickle_s, pickle_bytes,
              again_s, again_events);
  for (void* p : live)
    if (p) allocator.deallocate(p);
  if (!keep) std::filesystem::remove(out);
  return 0;
}
