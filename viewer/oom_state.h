// The state at a recorded out-of-memory error and its cause: what the request needed (rounding,
// pool, segment size), what the allocator held (live, waiting for other streams, cached and
// where), the device's and the cap's figures, other libraries' memory, the stacks holding the
// most, and the cause decided from them (oom_cause.h). explain-oom shows it with the settings
// advice (oom_explanation.h); tune reads its cause to say why no setting avoids the error.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "allocator/memory_cap.h"
#include "allocator/result.h"
#include "snapshot/snapshot.h"
#include "viewer/oom_cause.h"

namespace memsnap {

struct OomHolder {  // live memory by the stack that allocated it
  StackIndex stack = kNoStackIndex;
  uint64_t bytes = 0;
  uint64_t blocks = 0;
  std::vector<std::string> frames;  // labels, innermost first, at most a few
};

struct OomState {
  int64_t device = 0;
  size_t entry = 0;     // the oom entry's index in the device's trace
  int64_t time_us = 0;  // since the device's first trace event
  uint64_t requested_bytes = 0;
  uint64_t rounded_bytes = 0;
  uint64_t segment_bytes = 0;  // what a new segment for it would have been
  bool small_pool = false;
  uint64_t stream = 0;
  std::optional<uint64_t> device_free_bytes;   // from the oom entry
  std::optional<uint64_t> device_total_bytes;  // from the snapshot's device list, when it has one
  // In use on the device but not reserved by the allocator, when the total and the free bytes at
  // the error are known: the process's CUDA context, memory other libraries took from the
  // driver (NCCL, cuDNN, another allocator) and other processes' memory.
  std::optional<uint64_t> outside_allocator_bytes;
  // Of it, what other libraries of this process held on the device at the error, by library
  // (largest first), where the calls outside the allocator were recorded and the moment of the
  // error can be rebuilt from them; unset otherwise (outside_unknown_reason says why, when the
  // snapshot says anything of such calls).
  struct OutsideHolder {
    std::string library;  // "" when unknown
    uint64_t bytes = 0;
    uint64_t allocations = 0;
    std::vector<std::string> frames;  // the largest allocation's stack, as request_frames
  };
  std::optional<std::vector<OutsideHolder>> outside_libraries;
  uint64_t outside_libraries_bytes = 0;
  std::string outside_unknown_reason;
  std::vector<std::string> request_frames;  // the failing allocation's stack, innermost first
  // The memory cap in effect at the error, where the file records it (recorded_caps.h); and
  // where it does not, the range a cap that refused must have lain in: at least the reserved
  // bytes, below them plus the new segment.
  std::optional<MemoryCap> cap;
  bool cap_known = false;  // the file says which cap held (cap unset: none)
  std::optional<std::pair<uint64_t, uint64_t>> cap_range;
  OomLimit limit;  // all the allocator could have reserved (oom_cause.h)

  uint64_t reserved_bytes = 0;
  uint64_t allocated_bytes = 0;
  uint64_t allocated_blocks = 0;
  uint64_t least_live_bytes = 0;    // the live blocks' requests at the smallest rounding
  uint64_t pending_free_bytes = 0;  // freed, waiting for other streams' work
  uint64_t free_bytes = 0;          // cached, every pool and stream
  uint64_t free_blocks = 0;
  uint64_t usable_free_bytes = 0;   // cached in the request's pool and stream
  uint64_t usable_largest_free = 0;
  // A usable cached block the request fits (the split rules allowing): the request's search
  // would have taken it, so it was still waiting for another stream's work then, and the
  // error's recovery, which waits for every stream, freed it (oom_cause.h).
  uint64_t usable_fitting_free = 0;
  uint64_t other_stream_free_bytes = 0;  // cached in the request's pool on other streams
  uint64_t other_pool_free_bytes = 0;    // cached in the other pool
  // Cached free in private pools (CUDA graphs, MemPool), which serve only their own graphs or
  // scope; by pool, largest first. The request is taken to be for the global pools: PyTorch's
  // trace does not say which pool a request went to.
  uint64_t private_pool_free_bytes = 0;
  std::vector<std::pair<MempoolId, uint64_t>> private_pools_free;
  uint64_t inactive_split_bytes = 0;     // free bytes in segments that hold live blocks
  uint64_t blocked_by_split_rules = 0;   // free blocks large enough that max_split_size forbids
  size_t events_after_oom = 0;           // the snapshot was taken this many events after the error
  // With events after it: the memory figures were rebuilt as they stood at the error, by
  // replaying the trace (state_after_entry); false: they are the snapshot's, taken later.
  bool state_rebuilt = false;
  std::vector<OomHolder> holders;  // largest first

  OomDiagnosis diagnosis;  // the cause, its verdict and the reasons, most important first
};

// The state at the last `oom` entry (of `device` when given), with its cause. Fails when there
// is none.
Result<OomState> oom_state(const Snapshot& snapshot, std::optional<int64_t> device = {});

}  // namespace memsnap
