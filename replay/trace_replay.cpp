#include "replay/trace_replay.h"

#include <memory>
#include <unordered_map>

#include "allocator/allocator_observer.h"
#include "allocator/caching_allocator.h"
#include "allocator/simulated_backend.h"

namespace memsnap {
namespace {

class SegmentRecorder final : public AllocatorObserver {
 public:
  void on_segment_alloc(int, const Segment& segment) override {
    sizes.push_back(segment.size);
    events.push_back(current_event);
  }
  void on_segment_free(int, const Segment&) override { ++frees; }
  // Expandable segments grow by mapped pages: each mapping is a device allocation.
  void on_segment_map(int, const Segment&, uintptr_t, size_t bytes) override {
    sizes.push_back(bytes);
    events.push_back(current_event);
  }
  void on_segment_unmap(int, const Segment&, uintptr_t, size_t) override { ++frees; }
  size_t current_event = 0;  // index of the trace event being replayed
  std::vector<size_t> sizes;
  std::vector<size_t> events;
  size_t frees = 0;
};

}  // namespace

bool ids_look_like_addresses(const AllocationTrace& trace) {
  bool any = false;
  for (const TraceEvent& event : trace.events) {
    if (event.kind != TraceEvent::Kind::kAlloc) continue;
    if (event.id == 0 || event.id % 512 != 0) return false;
    any = true;
  }
  return any;
}

ReplayResult replay_trace(const AllocationTrace& trace, const ReplayOptions& options) {
  SimulatedBackend::Options device;
  device.capacity_bytes = options.capacity_bytes;
  auto backend = std::make_shared<SimulatedBackend>(device);
  CachingAllocator allocator(backend, options.config);
  SegmentRecorder recorder;
  allocator.set_observer(&recorder);

  ReplayResult result;
  result.config = to_config_string(options.config);
  result.address_hints_used =
      options.address_hints == AddressHints::kOn ||
      (options.address_hints == AddressHints::kAuto && ids_look_like_addresses(trace));

  std::unordered_map<uint64_t, void*> live;
  live.reserve(1024);
  for (const TraceEvent& event : trace.events) {
    recorder.current_event = result.events;
    ++result.events;
    const auto stream = static_cast<StreamId>(event.stream);
    if (event.kind == TraceEvent::Kind::kAlloc) {
      ++result.allocs;
      if (result.address_hints_used) backend->prefer_address_for_next_reserve(0, event.id);
      void* ptr = nullptr;
      try {
        ptr = allocator.allocate(event.bytes, 0, stream);
      } catch (const OutOfMemoryError&) {
        ++result.failed_allocs;
      }
      if (result.address_hints_used) backend->prefer_address_for_next_reserve(0, 0);
      if (ptr == nullptr) continue;
      if (result.address_hints_used && reinterpret_cast<uintptr_t>(ptr) != event.id) {
        if (result.address_mismatches == 0) result.first_address_mismatch = result.events - 1;
        ++result.address_mismatches;
      }
      auto [it, fresh] = live.try_emplace(event.id, ptr);
      if (!fresh) {
        ++result.reused_live_ids;  // like the reference replay, the older block stays allocated
        it->second = ptr;
      }
    } else {
      auto it = live.find(event.id);
      if (it == live.end()) {
        ++result.ignored_frees;
        continue;
      }
      ++result.frees;
      allocator.deallocate(it->second);
      live.erase(it);
    }
  }
  result.stats = allocator.device_stats(0);
  result.segment_alloc_sizes = std::move(recorder.sizes);
  result.segment_alloc_events = std::move(recorder.events);
  result.segment_frees = recorder.frees;
  if (options.check_invariants) result.invariant_problems = allocator.check_invariants();
  allocator.set_observer(nullptr);
  return result;
}

}  // namespace memsnap
