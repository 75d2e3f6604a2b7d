// Replaying a snapshot's recorded trace on the simulated device: what `memsnap replay`
// does with a memsnap or PyTorch snapshot, and what explain-oom asks "would other settings
// have avoided this?".
//
// Each device's trace is replayed on its own simulated device, starting from the state the
// trace began in (start_state.h), honouring the trace's timing:
//   - alloc: the same request on the same stream; new segments are offered the address the
//     recorded run's next segment_alloc got, so best fit breaks ties as it did;
//   - free_requested followed at once by its free_completed: a plain free; one completed
//     later (the block was used on another stream) stays pending until its free_completed;
//   - segment_free not caused by an allocation (the recording's allocator released memory
//     between allocations, i.e. the program called empty_cache): empty_cache;
//   - oom: the failed request is tried again (it should fail again).
// Under the recorded settings the replay must reproduce the recorded segment allocations,
// same sizes in the same order; `matched_segment_allocs` counts positions that agree. With
// expandable segments, the page mappings (segment_map) are the segment allocations and the
// unmappings (segment_unmap) the releases, as in PyTorch's num_device_alloc/free.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "allocator/allocator_config.h"
#include "allocator/device_stats.h"
#include "allocator/result.h"
#include "snapshot/snapshot.h"
#include "replay/start_state.h"

namespace memsnap {

struct SnapshotReplayOptions {
  AllocatorConfig config;
  // Memory of the simulated device. Unset: what the recorded run could have had — an `oom`
  // event records the device's free bytes, so reserved + free there (or just the reserved
  // bytes when the device had room and a memory cap refused); else the snapshot's device
  // total; else 80 GiB.
  std::optional<size_t> capacity_bytes;
  bool check_invariants = true;
  // Stop after this entry of each device's trace (state_after_entry); the final comparisons
  // are skipped then.
  std::optional<size_t> stop_after_entry;
  // Called after each replayed entry with the device's statistics at that moment and whether
  // the entry was a request the simulated device could not serve (an allocation, or a recorded
  // out-of-memory error that fails again); returning false ends that device's replay there. `memsnap estimate` follows each step's peaks and stops at the first failure
  // (where the program would have raised).
  std::function<bool(int device, size_t entry, const DeviceStats& stats, bool failed)> after_entry;
};

struct DeviceReplay {
  int device = 0;
  size_t capacity_bytes = 0;
  // Where capacity_bytes came from: "given", "recorded device", "reserved + device free at
  // the recorded OOM", "memory cap at the recorded OOM" (the device had room: a memory
  // fraction refused the request, so the cap was the reserved bytes then), "default".
  std::string capacity_source;
  // With the capacity at a recorded OOM and the CUDA calls outside the allocator recorded
  // (snapshot/outside_device_history.h): the capacity follows what the process's other
  // libraries held, capacity_bytes at the error plus what they held then less what they held at
  // each entry, and this says so (with the least and the most it was); "" when it stays
  // capacity_bytes throughout.
  std::string capacity_over_time;
  // The recording's memory cap, which the replay runs under (recorded_caps.h): the cap at the
  // trace's start and how many times it was set in all; unset and 0 where the file does not
  // say, or a capacity was given (it is then the limit asked about).
  std::optional<MemoryCap> memory_cap;
  size_t memory_cap_changes = 0;
  uint64_t least_capacity_bytes = 0, most_capacity_bytes = 0;
  StartState start;  // reconstructed state at the first event
  size_t events = 0;
  size_t allocs = 0;
  size_t frees = 0;
  size_t deferred_frees = 0;      // completed later than requested (cross-stream use)
  size_t empty_cache_calls = 0;   // releases the recording did between allocations
  size_t recorded_ooms = 0;
  size_t settings_changes = 0;    // the program changed the settings while the trace ran
  size_t reproduced_ooms = 0;     // recorded OOMs that failed in the replay too
  size_t failed_allocs = 0;       // allocations that succeeded when recorded, not replayed
  // Frees of blocks neither live at the start nor allocated in the trace, and allocations at
  // an address still live: either means the trace lost events.
  size_t unknown_frees = 0;
  std::vector<uint64_t> recorded_segment_allocs;  // sizes, in order
  std::vector<uint64_t> replayed_segment_allocs;
  size_t matched_segment_allocs = 0;  // same position, same size
  int64_t first_segment_mismatch = -1;  // index into the lists; -1 when they agree
  size_t recorded_segment_frees = 0;
  size_t replayed_segment_frees = 0;
  // What the recording did, from its trace: reserved bytes at their peak and at the end
  // (the snapshot's segments), to set beside the replay's.
  uint64_t recorded_peak_reserved = 0;
  uint64_t recorded_final_reserved = 0;
  // The replay's segments and blocks at the end against the snapshot's: under the recorded
  // settings every segment should match (address, size, and each block's address, size and
  // whether it is free).
  size_t final_segments_recorded = 0;
  size_t final_segments_replayed = 0;  // an expandable segment counts once per mapped run
  size_t final_segments_matched = 0;
  DeviceStats stats;
  std::vector<std::string> invariant_problems;
  // With stop_after_entry: the segments and blocks right after that entry, each block with
  // the stack of the allocation holding it (free blocks: of the one that last held it).
  std::vector<SnapshotSegment> state_segments;
  bool has_trace() const { return events > 0; }
};

struct SnapshotReplay {
  std::string config;  // the settings replayed, as a config string ("" = defaults)
  bool recorded_settings = false;  // options.config equals the snapshot's recorded settings
  std::vector<DeviceReplay> devices;  // devices with a trace
  // Totals over the devices.
  size_t recorded_segment_allocs() const;
  size_t replayed_segment_allocs() const;
  size_t matched_segment_allocs() const;
  int64_t peak_reserved_bytes() const;   // largest of the devices' peaks
  int64_t peak_allocated_bytes() const;
  int64_t device_mallocs() const;
  int64_t num_alloc_retries() const;
  int64_t num_ooms() const;
  bool consistent() const;  // no device's trace contradicted itself or its final state
};

// Fails (one line) when the trace cannot be replayed at all: no trace, or settings the
// simulated device cannot honour.
Result<SnapshotReplay> replay_snapshot(const Snapshot& snapshot,
                                       const SnapshotReplayOptions& options);

// The allocator's state right after entry `entry` of `device`'s trace (PyTorch's
// device_traces[device][entry]), rebuilt by replaying the trace under the recorded settings
// from the state it began in: every segment and block as they were then. `exact` says the
// replay made every segment allocation the recording made up to there, at the same address
// (the blocks are then where the recorded run had them).
struct StateAfterEntry {
  int64_t device = 0;
  uint64_t entry = 0;
  std::vector<SnapshotSegment> segments;
  uint64_t reserved_bytes = 0;
  uint64_t allocated_bytes = 0;
  uint64_t active_bytes = 0;
  bool exact = true;
  std::vector<std::string> problems;  // where the trace contradicts itself
};
Result<StateAfterEntry> state_after_entry(const Snapshot& snapshot, int64_t device, uint64_t entry);

}  // namespace memsnap
