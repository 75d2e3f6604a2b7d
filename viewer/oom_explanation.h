// Why an allocation failed, in plain words: the analysis behind `memsnap explain-oom` and the
// web viewer's OOM view.
//
// From a snapshot taken at (or after) an out-of-memory error — memsnap's or PyTorch's; the
// `oom` trace entry holds the request and the device's free bytes — it works out what the
// request needed (rounding, pool, segment size), what the allocator held (live, waiting for
// other streams, cached and where), whether the device was really full or a memory cap
// refused, whether free memory existed but in the wrong place (fragmentation, other streams,
// split rules), the stacks holding the most memory, and — by replaying the trace under other
// settings — which settings would have avoided it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "allocator/result.h"
#include "snapshot/snapshot.h"
#include "viewer/shared_graph_pool.h"

namespace memsnap {

enum class OomCause {
  kMemoryCap,       // the device had room; a memory fraction cap refused
  kFragmentation,   // enough free bytes cached for the request, but no block fits it
  kOtherStreams,    // enough free bytes cached, but on other streams (or waiting for them)
  kExhaustion,      // live memory plus the request exceed what the device had
  kTooLarge,        // the request alone exceeds the device (or all this process could have had)
  kPrivatePools,    // private pools (CUDA graphs, MemPool) held free what the request needed
  kOtherLibraries,  // it fits the device only with what other libraries of this process held
};
std::string_view oom_cause_name(OomCause cause);

struct OomHolder {  // live memory by the stack that allocated it
  StackIndex stack = kNoStackIndex;
  uint64_t bytes = 0;
  uint64_t blocks = 0;
  std::vector<std::string> frames;  // labels, innermost first, at most a few
};

struct OomSetting {  // one replay with other settings
  std::string config;  // "" = PyTorch's defaults
  bool avoided = false;     // every recorded allocation succeeded and the OOM did not recur
  bool recorded = false;    // the recorded settings
  int64_t peak_reserved_bytes = 0;
  int64_t segment_allocs = 0;
};

struct OomExplanation {
  int64_t device = 0;
  int64_t time_us = 0;  // since the device's first trace event
  uint64_t requested_bytes = 0;
  uint64_t rounded_bytes = 0;
  uint64_t segment_bytes = 0;  // what a new segment for it would have been
  bool small_pool = false;
  uint64_t stream = 0;
  std::optional<uint64_t> device_free_bytes;  // from the oom entry, when recorded
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
  std::vector<std::string> request_frames;    // the failing allocation's stack, innermost first

  uint64_t reserved_bytes = 0;
  uint64_t allocated_bytes = 0;
  uint64_t allocated_blocks = 0;
  uint64_t pending_free_bytes = 0;  // freed, waiting for other streams' work
  uint64_t free_bytes = 0;          // cached, every pool and stream
  uint64_t free_blocks = 0;
  uint64_t usable_free_bytes = 0;   // cached in the request's pool and stream
  uint64_t usable_largest_free = 0;
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

  OomCause cause = OomCause::kExhaustion;
  std::vector<std::string> reasons;  // plain sentences, most important first
  std::vector<OomHolder> holders;    // largest first
  std::vector<OomSetting> settings;  // replays; empty when the snapshot has no usable trace
  std::string settings_note;         // why there are none, or a caveat
  // The replays' simulated device: its memory, and where that figure came from
  // (DeviceReplay::capacity_source).
  uint64_t replay_capacity_bytes = 0;
  std::string replay_capacity_source;
  // Where the replays' capacity follows other libraries' memory over time (DeviceReplay's
  // capacity_over_time, least and most); "" when it stays the same.
  std::string replay_capacity_over_time;
  uint64_t replay_least_capacity_bytes = 0, replay_most_capacity_bytes = 0;
  // When a memory cap refused (the device had room): the cap was at least what was reserved at
  // the error and less than that plus the new segment. The replays use the lower bound, so a
  // setting that avoids the error there avoids it under the real cap too, and one that does
  // not may still avoid it under the real cap.
  std::optional<std::pair<uint64_t, uint64_t>> cap_range;  // [at least, below)
  // With two CUDA graph pools or more: the replay with one pool shared by the graphs.
  std::optional<SharedGraphPool> shared_graph_pool;
  std::string settings_conclusion;   // what the replays say, as one or two sentences
};

// Explains the last `oom` entry (of `device` when given). Fails when there is none.
Result<OomExplanation> explain_oom(const Snapshot& snapshot, std::optional<int64_t> device = {});

nlohmann::json oom_explanation_to_json(const OomExplanation& explanation);
std::string oom_explanation_to_text(const OomExplanation& explanation);

}  // namespace memsnap
