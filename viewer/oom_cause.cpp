#include "viewer/oom_cause.h"

#include <algorithm>

#include "allocator/policy.h"
#include "viewer/byte_text.h"

namespace memsnap {
namespace {

using text::bytes;

// Where the request stands against the limit: beyond it, within it, or (a range) cannot say.
enum class Against { kBeyond, kWithin, kUndecided };

// `least` to `most`: the bytes needed (a range where only bounds are known).
Against against(const OomLimit& limit, uint64_t least, uint64_t most) {
  switch (limit.kind) {
    case OomLimit::Kind::kExact:
      if (least > limit.bytes) return Against::kBeyond;
      if (most <= limit.bytes) return Against::kWithin;
      return Against::kUndecided;
    case OomLimit::Kind::kRange:
      if (least >= limit.below) return Against::kBeyond;
      if (most <= limit.bytes) return Against::kWithin;
      return Against::kUndecided;
    case OomLimit::Kind::kUnknown: return Against::kUndecided;
  }
  return Against::kUndecided;
}

std::string needed_words(uint64_t least, uint64_t most) {
  return least == most ? bytes(least) : bytes(least) + " to " + bytes(most);
}

void add_evidence(const OomFacts& f, Verdict& v) {
  v.add("requested_bytes", f.requested_bytes);
  v.add("rounded_bytes", f.rounded_bytes);
  v.add("least_request_bytes", f.least_request_bytes);
  v.add("live_bytes", f.live_bytes);
  v.add("least_live_bytes", f.least_live_bytes);
  if (f.least_live_bytes_at_most != f.least_live_bytes) v.add("least_live_bytes_at_most", f.least_live_bytes_at_most);
  v.add("reserved_bytes", f.reserved_bytes);
  if (f.limit.kind == OomLimit::Kind::kExact) v.add("limit_bytes", f.limit.bytes);
  if (f.limit.kind == OomLimit::Kind::kRange) {
    v.add("limit_at_least_bytes", f.limit.bytes);
    v.add("limit_below_bytes", f.limit.below);
  }
  if (f.device_total_bytes) v.add("device_total_bytes", *f.device_total_bytes);
  if (f.device_free_bytes) v.add("device_free_bytes", *f.device_free_bytes);
  if (f.cap) v.add("cap_bytes", f.cap->bytes);
  if (f.outside_libraries_known) v.add("outside_libraries_bytes", f.outside_libraries_bytes);
  if (f.placement_known) {
    v.add("usable_free_bytes", f.usable_free_bytes);
    v.add("usable_largest_free_bytes", f.usable_largest_free);
    v.add("usable_fitting_free_bytes", f.usable_fitting_free);
    v.add("other_stream_free_bytes", f.other_stream_free_bytes);
    v.add("pending_free_bytes", f.pending_free_bytes);
    v.add("private_pool_free_bytes", f.private_pool_free_bytes);
    v.add("other_pool_free_bytes", f.other_pool_free_bytes);
    v.add("inactive_split_bytes", f.inactive_split_bytes);
  }
}

const char* kNoSetting = "no allocator setting can make it fit";

// The request alone is beyond the limit: what it is larger than, and what to do. `whole`: the
// limit is the device or a cap, which nothing the process holds elsewhere changes.
std::string too_large_sentence(const OomFacts& f, const std::string& what, const std::string& advice, bool whole) {
  if (!whole && !f.limit.outside_known)
    return "The request alone (" + bytes(f.requested_bytes) + ") is larger than " + what +
           ": nothing the program frees through the allocator and " + kNoSetting +
           " (memory the process may hold outside the allocator, through other libraries, this snapshot does not "
           "show); " + advice;
  return "The request alone (" + bytes(f.requested_bytes) + ") is larger than " + what + ": nothing this program frees and " +
         kNoSetting + "; " + advice;
}

// Memory other libraries held would have made the room for `needed`.
bool libraries_make_room(const OomFacts& f, uint64_t needed) {
  return f.outside_libraries_known && f.outside_libraries_bytes > 0 && f.limit.kind == OomLimit::Kind::kExact &&
         needed <= f.limit.bytes + f.outside_libraries_bytes;
}

std::string libraries_sentence(const OomFacts& f, const std::string& what, const std::string& verb, uint64_t needed) {
  return what + " (" + bytes(needed) + ") " + verb + " more than " + f.limit.words + ", because other libraries of this process held " +
         bytes(f.outside_libraries_bytes) + " of the device outside the allocator: " + f.outside_libraries_words +
         ". With that memory it would fit. No allocator setting makes room: have those libraries hold less (free "
         "their arrays, empty their caches, such as CuPy's memory pool) before this request.";
}

// Where the cached memory lay when the request fit the limit: the cause and its sentence.
std::pair<OomCause, std::string> misplaced(const OomFacts& f) {
  const std::string pool = f.small_pool ? "small" : "large";
  if (!f.placement_known)
    return {OomCause::kFragmentation,
            "the memory cached then could not serve it (no cached block fitted and no new segment could be made)"};
  if (f.usable_fitting_free > 0)
    return {OomCause::kOtherStreams,
            "a cached block it fits (" + bytes(f.usable_fitting_free) +
                ") was there after the error: when the request searched the cache that memory was still freed but "
                "waiting for other streams' work (record_stream). The allocator's recovery waits for every stream, "
                "then asks the device for a new segment without searching the cache again (as PyTorch's does), so the "
                "request failed beside it. Free such tensors earlier, or synchronize the side streams before large "
                "requests"};
  if (f.usable_free_bytes >= f.rounded_bytes)
    return {OomCause::kFragmentation,
            bytes(f.usable_free_bytes) + " was cached free in the " + pool +
                " pool on this stream, more than the request, yet no single block fits it: the largest is " +
                bytes(f.usable_largest_free) + " (fragmentation)"};
  if (f.usable_free_bytes + f.other_stream_free_bytes + f.pending_free_bytes >= f.rounded_bytes)
    return {OomCause::kOtherStreams,
            bytes(f.other_stream_free_bytes) + " was cached free on other streams and " + bytes(f.pending_free_bytes) +
                " was freed but waiting for other streams' work: a block is reused only on the stream it was "
                "allocated on, so none of it could serve this request"};
  const uint64_t headroom =
      f.limit.kind == OomLimit::Kind::kUnknown ? 0 : f.limit.bytes - std::min(f.limit.bytes, f.reserved_bytes);
  if (f.private_pool_free_bytes > 0 && f.private_pool_free_bytes + headroom >= f.segment_bytes)
    return {OomCause::kPrivatePools,
            bytes(f.private_pool_free_bytes) + " was cached free inside private pools (" + f.private_pools_words +
                "), which serve only their own CUDA graphs or MemPool scope; released, it would have made room for "
                "the " + bytes(f.segment_bytes) +
                " segment. Share one pool between graphs that run one after another "
                "(torch.cuda.graph(g2, pool=g1.pool()), or one graph_pool_handle() for all), allocate temporaries "
                "before capture rather than after it, capture fewer graphs, or free graphs no longer needed"};
  std::string spread = "the free memory lay where the request could not use it: " + bytes(f.usable_free_bytes) +
                       " usable here (the largest block " + bytes(f.usable_largest_free) + ")";
  if (f.other_pool_free_bytes > 0) spread += ", " + bytes(f.other_pool_free_bytes) + " in the " + (f.small_pool ? "large" : "small") + " pool";
  if (f.inactive_split_bytes > 0) spread += ", " + bytes(f.inactive_split_bytes) + " inside segments that also hold live blocks";
  if (f.private_pool_free_bytes > 0) spread += ", " + bytes(f.private_pool_free_bytes) + " in private pools";
  if (f.live_bytes > f.least_live_bytes_at_most)
    spread += "; and the settings' rounding made the live blocks " + bytes(f.live_bytes - f.least_live_bytes_at_most) +
              " larger than their requests at the smallest rounding";
  return {OomCause::kFragmentation, spread + " (fragmentation)"};
}

// What else stood in the way, said after a cause that settings can change.
void secondary_reasons(const OomFacts& f, OomCause cause, std::vector<std::string>& reasons) {
  if (f.cap_refused && f.cap && f.device_free_bytes)
    reasons.push_back("The device was not full (" + bytes(*f.device_free_bytes) + " free): " + memory_cap_words(*f.cap) +
                      " refused the new " + bytes(f.segment_bytes) + " segment, with " + bytes(f.reserved_bytes) +
                      " already reserved.");
  if (!f.placement_known) return;
  if (f.blocked_by_split_rules > 0)
    reasons.push_back(bytes(f.blocked_by_split_rules) +
                      " of free blocks were large enough but out of bounds for this request under max_split_size_mb "
                      "(a request below it never takes a block at or above it; one above it takes only blocks less "
                      "than max_non_split_rounding_mb larger).");
  if (cause != OomCause::kFragmentation && f.inactive_split_bytes > 0)
    reasons.push_back(bytes(f.inactive_split_bytes) +
                      " was free inside segments that also hold live blocks (inactive split): it cannot go back to "
                      "the device to make room for a new segment.");
  if (cause != OomCause::kOtherStreams && f.other_stream_free_bytes + f.pending_free_bytes > 0)
    reasons.push_back(bytes(f.other_stream_free_bytes + f.pending_free_bytes) +
                      " was free or waiting on other streams, where this stream cannot use it.");
  if (cause != OomCause::kPrivatePools && f.private_pool_free_bytes > 0)
    reasons.push_back(bytes(f.private_pool_free_bytes) +
                      " was cached free inside private pools (CUDA graphs, MemPool), out of reach of requests outside "
                      "them.");
}

}  // namespace

std::string_view oom_cause_name(OomCause cause) {
  switch (cause) {
    case OomCause::kTooLarge: return "request_too_large";
    case OomCause::kOtherLibraries: return "other_libraries";
    case OomCause::kExhaustion: return "exhaustion";
    case OomCause::kFragmentation: return "fragmentation";
    case OomCause::kOtherStreams: return "other_streams";
    case OomCause::kPrivatePools: return "private_pools";
    case OomCause::kCannotJudge: return kCannotJudgeAnswer;
  }
  return kCannotJudgeAnswer;
}

uint64_t least_block_bytes(uint64_t requested) {
  const uint64_t blocks = (std::max<uint64_t>(requested, 1) + kMinBlockSize - 1) / kMinBlockSize;
  return blocks * kMinBlockSize;
}

OomDiagnosis decide_oom_cause(const OomFacts& f) {
  OomDiagnosis out;
  Verdict& v = out.verdict;
  v.kind = VerdictKind::kOomCause;
  v.basis = f.basis;
  add_evidence(f, v);
  const auto decide = [&](OomCause cause, std::string sentence) {
    out.cause = cause;
    v.answer = std::string(oom_cause_name(cause));
    out.reasons.insert(out.reasons.begin(), sentence);
    v.sentence = std::move(sentence);
    return out;
  };
  const auto cannot_judge = [&](std::string reason) {
    v.reason = reason;
    return decide(OomCause::kCannotJudge,
                  "Cannot judge whether the program needs less memory at this point, because " + reason + ".");
  };

  // 1. The request alone.
  const uint64_t request = f.least_request_bytes;
  if (f.device_total_bytes && *f.device_total_bytes > 0 && request > *f.device_total_bytes)
    return decide(OomCause::kTooLarge,
                  too_large_sentence(f, "the device's total memory (" + bytes(*f.device_total_bytes) + ")",
                                     "the size asked for is the problem: look at the line that asked for it and how it "
                                     "computed the size.",
                                     true));
  if (f.cap && request > f.cap->bytes)
    return decide(OomCause::kTooLarge,
                  too_large_sentence(f, memory_cap_words(*f.cap), "ask for less, or raise the cap.", true));
  const Against request_against = against(f.limit, request, request);
  switch (request_against) {
    case Against::kBeyond:
      if (libraries_make_room(f, request)) return decide(OomCause::kOtherLibraries, libraries_sentence(f, "The request alone", "needs", request));
      return decide(OomCause::kTooLarge,
                    too_large_sentence(f, f.limit.ceiling_words.empty() ? f.limit.words : f.limit.ceiling_words,
                                       "the size asked for is the problem: look at the line that asked for it and "
                                       "how it computed the size.",
                                       f.limit.kind == OomLimit::Kind::kRange));
    case Against::kUndecided:
      if (f.limit.kind == OomLimit::Kind::kUnknown) return cannot_judge(f.limit.unknown_reason);
      break;  // the live memory may still decide
    case Against::kWithin: break;
  }

  // 2. The live allocations and the request.
  const uint64_t least = f.least_live_bytes + request;
  const uint64_t most = f.least_live_bytes_at_most + request;
  const std::string figures = "The live allocations (" + needed_words(f.least_live_bytes, f.least_live_bytes_at_most) +
                              ") and the request (" + bytes(f.requested_bytes) + ") come to " + needed_words(least, most);
  switch (against(f.limit, least, most)) {
    case Against::kBeyond:
      if (libraries_make_room(f, least))
        return decide(OomCause::kOtherLibraries, libraries_sentence(f, "The live allocations with the request", "need", least));
      return decide(OomCause::kExhaustion,
                    figures + ", more than " + (f.limit.ceiling_words.empty() ? f.limit.words : f.limit.ceiling_words) +
                        ": the program needs less live memory at this point (or " +
                        (f.cap || f.limit.kind == OomLimit::Kind::kRange ? "a larger cap" : "a larger share of the device") +
                        "); " + kNoSetting + ". Free or shrink what the largest holders keep alive." +
                        (request_against == Against::kUndecided
                             ? " Whether the request alone is larger than the cap, the recording cannot say."
                             : ""));
    case Against::kUndecided:
      if (f.limit.kind == OomLimit::Kind::kRange)
        return cannot_judge("the memory cap is not recorded: it refused a new segment with " + bytes(f.reserved_bytes) +
                            " reserved, so it lay between " + bytes(f.limit.bytes) + " and " + bytes(f.limit.below) +
                            ", and the live allocations with the request (" + needed_words(least, most) +
                            ") fall within that range");
      if (f.limit.kind == OomLimit::Kind::kUnknown) return cannot_judge(f.limit.unknown_reason);
      return cannot_judge("the live allocations with the request (" + needed_words(least, most) +
                          ") are known only within bounds that straddle " + f.limit.words);
    case Against::kWithin: break;
  }

  // 3. It fit: the cached memory lay where the request could not use it.
  auto [cause, where] = misplaced(f);
  std::string sentence = figures + ", which fits in " + f.limit.words + ": not too much live memory, but " + where + ".";
  decide(cause, std::move(sentence));
  secondary_reasons(f, cause, out.reasons);
  return out;
}

OomDiagnosis decide_replay_failure(const ReplayFailure& f, uint64_t capacity_bytes) {
  OomFacts facts;
  facts.basis = "the replay's state where the request failed, on a device of " + bytes(capacity_bytes);
  facts.requested_bytes = f.requested_bytes;
  facts.rounded_bytes = f.requested_bytes;
  facts.least_request_bytes = least_block_bytes(f.requested_bytes);
  facts.live_bytes = f.allocated_bytes;
  // The live requests at the smallest rounding: the statistics count the active blocks'
  // requests, pending frees included (those are at most the pending blocks' bytes), and each
  // request rounds up by less than a block.
  const uint64_t pending = f.active_bytes - std::min(f.active_bytes, f.allocated_bytes);
  facts.least_live_bytes = f.requested_live_bytes - std::min(f.requested_live_bytes, pending);
  facts.least_live_bytes_at_most =
      std::max(facts.least_live_bytes, std::min<uint64_t>(f.allocated_bytes, f.requested_live_bytes + f.live_blocks * (kMinBlockSize - 1)));
  facts.reserved_bytes = f.reserved_bytes;
  facts.limit.kind = OomLimit::Kind::kExact;
  facts.limit.bytes = capacity_bytes;
  facts.limit.words = "the " + bytes(capacity_bytes) + " the device gives the allocator";
  return decide_oom_cause(facts);
}

}  // namespace memsnap
