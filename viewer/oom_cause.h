// Why a request could not be served: the one place that decides an out-of-memory error's cause,
// for an error a program recorded (explain-oom, tune) and for one a replay runs into (estimate,
// tune on a device of a given size).
//
// The question a user needs answered first is whether the program needs less memory at that
// point, and that is arithmetic on what the process could have had (the limit):
//   1. the request alone is larger than the device, the memory cap or everything the process
//      could have had: nothing freed and no setting helps (request_too_large), unless memory
//      other libraries of the process held would have made the room (other_libraries);
//   2. the live allocations and the request together exceed the limit: the program needs less
//      live memory at that point, or a larger limit (exhaustion; other_libraries when their
//      memory would have made the room);
//   3. otherwise the memory existed but was cached where the request could not use it, and a
//      setting may help: free blocks too small (fragmentation), on other streams or waiting for
//      them (other_streams), or idle in private pools (private_pools).
// The sizes in 1 and 2 are the least any setting could make of them (each request rounded to
// 512 B, the smallest block), so "no setting helps" holds whatever the settings. A limit known
// only as a range (a memory cap the file does not record, inferred from the device having had
// room) decides only where every value in the range gives the same answer; elsewhere, and where
// no limit is known, the verdict is cannot_judge.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "allocator/memory_cap.h"
#include "viewer/verdict.h"

namespace memsnap {

enum class OomCause {
  kTooLarge,        // the request alone exceeds the device, the cap, or all the process could have had
  kOtherLibraries,  // it fits only with what other libraries of this process held
  kExhaustion,      // the live allocations and the request exceed the limit
  kFragmentation,   // it fits, but no cached block could serve it
  kOtherStreams,    // it fits, but the free memory was on other streams or waiting for them
  kPrivatePools,    // it fits, but private pools (CUDA graphs, MemPool) held the memory idle
  kCannotJudge,     // the data cannot decide
};
std::string_view oom_cause_name(OomCause cause);  // "request_too_large", ..., "cannot_judge"
// Causes no allocator setting can change.
inline bool settings_cannot_help(OomCause cause) {
  return cause == OomCause::kTooLarge || cause == OomCause::kOtherLibraries || cause == OomCause::kExhaustion;
}

// All the allocator could have reserved when the request failed.
struct OomLimit {
  enum class Kind { kExact, kRange, kUnknown };
  Kind kind = Kind::kUnknown;
  uint64_t bytes = 0;  // kExact: the limit; kRange: at least this
  uint64_t below = 0;  // kRange: less than this
  // What it is, for sentences: "the 79.10 GiB the allocator could have had (1.00 GiB reserved
  // plus 78.10 GiB the device had free)", "a memory cap of 8.00 GiB (..., set by ...)"; for a
  // range, its least ("fits in <words>"), and ceiling_words its most ("more than <ceiling_words>").
  std::string words;
  std::string ceiling_words;
  // Whether memory this process held outside the allocator (other libraries) is known: where it
  // is not, "nothing the program frees" is claimed only of what it frees through the allocator.
  bool outside_known = false;
  // Kind::kUnknown: why ("the snapshot holds no figure for the device's memory").
  std::string unknown_reason;
};

struct OomFacts {
  std::string basis;  // where the figures come from: "the figures recorded at the error", ...
  uint64_t requested_bytes = 0;
  uint64_t rounded_bytes = 0;   // under the settings in effect
  uint64_t segment_bytes = 0;   // the new segment it needed
  uint64_t least_request_bytes = 0;  // the request at the smallest rounding any setting gives
  // The live allocations: their blocks, and the least any setting could make of them (their
  // requests at the smallest rounding), as a range where only bounds are known.
  uint64_t live_bytes = 0;
  uint64_t least_live_bytes = 0, least_live_bytes_at_most = 0;
  uint64_t reserved_bytes = 0;
  std::optional<uint64_t> device_total_bytes;
  std::optional<uint64_t> device_free_bytes;
  OomLimit limit;
  // The recorded cap in effect at the error, and whether it (rather than the device) refused.
  std::optional<MemoryCap> cap;
  bool cap_refused = false;
  // Other libraries of this process, where their calls were recorded.
  bool outside_libraries_known = false;
  uint64_t outside_libraries_bytes = 0;
  std::string outside_libraries_words;  // "libnccl.so.2 3.20 GiB (...)"
  // Where the cached memory lay; unknown for an error a replay ran into.
  bool placement_known = false;
  bool small_pool = false;
  uint64_t usable_free_bytes = 0, usable_largest_free = 0;  // the request's pool and stream
  uint64_t usable_fitting_free = 0;  // a block there the request fits: it was pending when asked
  uint64_t other_stream_free_bytes = 0, pending_free_bytes = 0;
  uint64_t private_pool_free_bytes = 0;
  std::string private_pools_words;  // "CUDA graph pool 1 514.00 MiB, ..."
  uint64_t other_pool_free_bytes = 0, inactive_split_bytes = 0, blocked_by_split_rules = 0;
};

struct OomDiagnosis {
  OomCause cause = OomCause::kCannotJudge;
  Verdict verdict;                   // kind kOomCause; answer = oom_cause_name(cause)
  std::vector<std::string> reasons;  // the cause first, then what else stood in the way
};

OomDiagnosis decide_oom_cause(const OomFacts& facts);

// The first request a replay could not serve: the figures oom_cause.h decides its cause from.
struct ReplayFailure {
  size_t entry = 0;
  uint64_t requested_bytes = 0;
  uint64_t allocated_bytes = 0;  // then, after the allocator freed its cache to retry
  uint64_t requested_live_bytes = 0;  // the active blocks' own requests (pending frees too)
  uint64_t live_blocks = 0;
  uint64_t reserved_bytes = 0;
  uint64_t active_bytes = 0;  // allocated and pending free
};

// The cause of a request a replay on a device of `capacity_bytes` could not serve (estimate,
// tune on a device of a given size): the same rules, from the replay's statistics then.
OomDiagnosis decide_replay_failure(const ReplayFailure& failure, uint64_t capacity_bytes);

// The least any setting makes of a request: 512 B blocks (kMinBlockSize).
uint64_t least_block_bytes(uint64_t requested);

}  // namespace memsnap
