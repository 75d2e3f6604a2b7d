// Replays an allocation trace through the caching allocator on the simulated device and
// reports what the allocator did: the segments it reserved (sizes, in order), peaks, retries
// and out-of-memory errors.
//
// PyTorch traces name each allocation by its address. When every id looks like a device
// address (non-zero, 512-byte aligned), a new segment is offered the address of the
// allocation that caused it — the address the recorded cudaMalloc returned — so best fit
// breaks ties between equal free blocks exactly as the recorded run did.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "allocator/allocator_config.h"
#include "allocator/device_stats.h"
#include "replay/allocation_trace.h"

namespace memsnap {

enum class AddressHints { kAuto, kOn, kOff };

struct ReplayOptions {
  AllocatorConfig config;
  size_t capacity_bytes = size_t{80} << 30;
  AddressHints address_hints = AddressHints::kAuto;
  bool check_invariants = true;  // run the invariant checker at the end
};

struct ReplayResult {
  size_t events = 0;
  size_t allocs = 0;
  size_t frees = 0;
  size_t ignored_frees = 0;       // frees of ids that were not live (as TRACE_FORMAT.md says)
  size_t reused_live_ids = 0;     // allocs whose id was still live; the old one stays allocated
  size_t failed_allocs = 0;       // out-of-memory errors
  std::vector<size_t> segment_alloc_sizes;   // in order
  std::vector<size_t> segment_alloc_events;  // the event (0-based) that caused each one
  size_t segment_frees = 0;
  bool address_hints_used = false;
  // With address hints, an allocation placed elsewhere than in the recorded run means the
  // replay decided differently there (or earlier); the first such event is where to look.
  size_t address_mismatches = 0;
  int64_t first_address_mismatch = -1;  // event index (0-based), -1 when none
  DeviceStats stats;              // at the end of the replay
  std::vector<std::string> invariant_problems;
  std::string config;             // the settings replayed, as a config string
};

ReplayResult replay_trace(const AllocationTrace& trace, const ReplayOptions& options);

// Whether every alloc id of the trace could be a device address.
bool ids_look_like_addresses(const AllocationTrace& trace);

}  // namespace memsnap
