#include "viewer/oom_explanation.h"

#include "allocator/counted.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <sstream>

#include "allocator/device_stats.h"
#include "allocator/policy.h"
#include "viewer/frame_labels.h"
#include "replay/recorded_config.h"
#include "replay/snapshot_replay.h"
#include "viewer/byte_text.h"
#include "viewer/outside_holders.h"

namespace memsnap {
namespace {

constexpr size_t kHolders = 5;
constexpr size_t kFramesPerStack = 4;

using text::bytes;

// The user's line first (the innermost Python frame, when the stack has one below C++
// frames), then the innermost frames.
std::vector<std::string> frames_of(const Snapshot& snapshot, StackIndex stack) {
  const std::vector<uint32_t> frames = visible_frames_outermost_first(snapshot, stack, {});
  std::vector<std::string> out;
  if (frames.empty()) return out;
  const std::optional<uint32_t> headline = headline_frame(snapshot, stack, {});
  if (headline && *headline != frames.back()) out.push_back(frame_label(snapshot.frames[*headline]));
  for (auto it = frames.rbegin(); it != frames.rend() && out.size() < kFramesPerStack; ++it)
    if (!headline || *it != *headline || *headline == frames.back()) out.push_back(frame_label(snapshot.frames[*it]));
  return out;
}

// A library's allocation read from its caller: the innermost Python line outside installed
// packages (the user's code that called into the library), then the innermost frames; as
// frames_of when no such line is on the stack.
std::vector<std::string> caller_frames_of(const Snapshot& snapshot, StackIndex stack) {
  const std::vector<uint32_t> frames = visible_frames_outermost_first(snapshot, stack, {});
  for (auto it = frames.rbegin(); it != frames.rend(); ++it) {
    const Frame& frame = snapshot.frames[*it];
    if (!frame_is_python(frame) || frame.file.find("-packages/") != std::string::npos) continue;
    std::vector<std::string> out = {frame_label(frame)};
    for (auto inner = frames.rbegin(); inner != frames.rend() && out.size() < kFramesPerStack; ++inner)
      if (inner != it) out.push_back(frame_label(snapshot.frames[*inner]));
    return out;
  }
  return frames_of(snapshot, stack);
}

// What other libraries held at the error (outside_holders.h), each read from its caller's line.
std::optional<std::vector<OomExplanation::OutsideHolder>> outside_libraries_at(const Snapshot& snapshot, int64_t device,
                                                                                int64_t time_us, std::string& reason) {
  const std::optional<std::vector<OutsideHolder>> held = outside_holders_at(snapshot, device, time_us, reason);
  if (!held) return std::nullopt;
  std::vector<OomExplanation::OutsideHolder> out;
  for (const OutsideHolder& h : *held)
    out.push_back({h.library, h.bytes, h.allocations, caller_frames_of(snapshot, h.largest_stack)});
  return out;
}

// "libnccl.so.2 3.20 GiB (ncclCommInitRank, train.py:40)", the first few.
std::string holders_text(const std::vector<OomExplanation::OutsideHolder>& holders) {
  std::string out;
  for (size_t i = 0; i < holders.size() && i < 3; ++i) {
    const auto& h = holders[i];
    out += (i ? "; " : "") + (h.library.empty() ? std::string("a library not known") : h.library) + " " + bytes(h.bytes);
    if (!h.frames.empty()) out += " (" + h.frames[0] + ")";
  }
  if (holders.size() > 3) out += "; ...";
  return out;
}

// The last oom entry (of `device` when given): device and index into its trace.
std::optional<std::pair<size_t, size_t>> find_oom(const Snapshot& snapshot,
                                                  std::optional<int64_t> device) {
  std::optional<std::pair<size_t, size_t>> found;
  int64_t latest = 0;
  for (size_t d = 0; d < snapshot.device_traces.size(); ++d) {
    if (device && static_cast<int64_t>(d) != *device) continue;
    const auto& trace = snapshot.device_traces[d];
    for (size_t i = trace.size(); i-- > 0;) {
      if (trace[i].action != TraceAction::kOom) continue;
      if (!found || trace[i].time_us > latest) {
        found = {d, i};
        latest = trace[i].time_us;
      }
      break;
    }
  }
  return found;
}

// `segments`: the snapshot's, or those rebuilt at the error; frames come from `snapshot`.
void measure_state(const Snapshot& snapshot, const std::vector<SnapshotSegment>& segments,
                   const AllocatorConfig& config, OomExplanation& x) {
  std::map<StackIndex, OomHolder> holders;
  std::map<MempoolId, uint64_t> private_free;
  for (const SnapshotSegment& segment : segments) {
    if (segment.device != x.device) continue;
    x.reserved_bytes += segment.total_size;
    const bool small = segment.is_small_pool();
    for (const SnapshotBlock& block : segment.blocks) {
      if (block.state == BlockState::kActiveAllocated) {
        x.allocated_bytes += block.size;
        ++x.allocated_blocks;
        OomHolder& holder = holders[block.stack];
        holder.stack = block.stack;
        holder.bytes += block.size;
        ++holder.blocks;
        continue;
      }
      if (block.state == BlockState::kActivePendingFree) {
        x.pending_free_bytes += block.size;
        continue;
      }
      x.free_bytes += block.size;
      ++x.free_blocks;
      if (segment.blocks.size() > 1) x.inactive_split_bytes += block.size;
      if (!segment.segment_pool_id.is_global()) {
        x.private_pool_free_bytes += block.size;
        private_free[segment.segment_pool_id] += block.size;
      } else if (small != x.small_pool) {
        x.other_pool_free_bytes += block.size;
      } else if (segment.stream != x.stream) {
        x.other_stream_free_bytes += block.size;
      } else {
        x.usable_free_bytes += block.size;
        x.usable_largest_free = std::max<uint64_t>(x.usable_largest_free, block.size);
        if (block.size >= x.rounded_bytes && !block_fits_split_rules(block.size, x.rounded_bytes, config))
          x.blocked_by_split_rules += block.size;
      }
    }
  }
  for (const auto& [pool, free] : private_free) x.private_pools_free.emplace_back(pool, free);
  std::stable_sort(x.private_pools_free.begin(), x.private_pools_free.end(),
                   [](const auto& a, const auto& b) { return a.second > b.second; });
  for (auto& [stack, holder] : holders) x.holders.push_back(std::move(holder));
  std::sort(x.holders.begin(), x.holders.end(),
            [](const OomHolder& a, const OomHolder& b) { return a.bytes > b.bytes; });
  if (x.holders.size() > kHolders) x.holders.resize(kHolders);
  for (OomHolder& holder : x.holders) holder.frames = frames_of(snapshot, holder.stack);
}

// Free memory in the wrong place is named first, since it is what settings can change; a
// memory cap, when one refused, is said too.
void diagnose(OomExplanation& x) {
  const std::string pool = x.small_pool ? "small" : "large";
  const bool capped = x.device_free_bytes && *x.device_free_bytes >= x.segment_bytes;
  // Everything this process could have had: what the allocator reserved and what the device
  // still had free. A request beyond it (or beyond the device) fits under no setting.
  const uint64_t attainable = x.reserved_bytes + x.device_free_bytes.value_or(0);
  if (x.device_total_bytes && x.rounded_bytes > *x.device_total_bytes) {
    x.cause = OomCause::kTooLarge;
    x.reasons.push_back("The request alone (" + bytes(x.requested_bytes) + ") is larger than the device's total memory (" +
                        bytes(*x.device_total_bytes) +
                        "). Nothing this program frees and no allocator setting can make it fit: the size asked for is "
                        "the problem; look at the line that asked for it and how it computed the size.");
    return;
  }
  if (x.device_free_bytes && x.rounded_bytes > attainable) {
    const std::string beyond = "The request alone (" + bytes(x.requested_bytes) +
                               ") is larger than everything the allocator could have had (" + bytes(x.reserved_bytes) +
                               " reserved plus " + bytes(*x.device_free_bytes) + " the device had free: " +
                               bytes(attainable) + ")";
    // Memory this process held outside the allocator, through other libraries, is what the
    // program can give back: with it the request would fit.
    if (x.outside_libraries && x.outside_libraries_bytes > 0 && x.rounded_bytes <= attainable + x.outside_libraries_bytes) {
      x.cause = OomCause::kOtherLibraries;
      x.reasons.push_back(beyond + ", because other libraries of this process held " + bytes(x.outside_libraries_bytes) +
                          " of the device outside it: " + holders_text(*x.outside_libraries) +
                          ". With that memory the request would fit. No allocator setting makes room: have those "
                          "libraries hold less (free their arrays, empty their caches, such as CuPy's memory pool) "
                          "before this request.");
      return;
    }
    x.cause = OomCause::kTooLarge;
    if (x.outside_allocator_bytes && *x.outside_allocator_bytes > x.outside_libraries_bytes && !x.outside_libraries)
      x.reasons.push_back(beyond + "; " + bytes(*x.outside_allocator_bytes) +
                          " more was in use outside the allocator: this process's CUDA context, memory other libraries "
                          "of this process took, other processes. No allocator setting can make it fit; whether "
                          "memory this program holds through other libraries could, the snapshot cannot say (" +
                          (x.outside_unknown_reason.empty() ? std::string("the calls outside the allocator were not recorded")
                                                            : x.outside_unknown_reason) +
                          ").");
    else if (!x.outside_allocator_bytes && !x.outside_libraries)
      // (PyTorch's pickles: neither the device's size nor memory outside the allocator is known.)
      x.reasons.push_back(beyond + ". No allocator setting can make it fit, nor anything the program frees through "
                          "the allocator (memory it may hold outside the allocator, through other libraries, this "
                          "snapshot does not show): the size asked for is the likely problem; look at the line that "
                          "asked for it and how it computed the size.");
    else
      x.reasons.push_back(beyond + ". Nothing this program frees and no allocator setting can make it fit: the size "
                          "asked for is the problem; look at the line that asked for it and how it computed the size.");
    return;
  }
  if (x.usable_free_bytes >= x.rounded_bytes) {
    x.cause = OomCause::kFragmentation;
    x.reasons.push_back(bytes(x.usable_free_bytes) + " was cached free in the " + pool +
                        " pool on this stream, more than the request, but no single block fits "
                        "it: the largest is " + bytes(x.usable_largest_free) +
                        " (fragmentation).");
  } else if (x.usable_free_bytes + x.other_stream_free_bytes + x.pending_free_bytes >=
             x.rounded_bytes) {
    x.cause = OomCause::kOtherStreams;
    x.reasons.push_back(bytes(x.other_stream_free_bytes) + " was cached free on other streams and " +
                        bytes(x.pending_free_bytes) +
                        " was freed but waiting for other streams' work: a block is only reused "
                        "on the stream it was allocated on, so none of it could serve this "
                        "request on stream " + format_hex(x.stream) + ".");
  } else if (x.private_pool_free_bytes > 0 &&
             x.private_pool_free_bytes + (capped ? 0 : x.device_free_bytes.value_or(0)) >=
                 x.segment_bytes) {
    // Releasing what the private pools cached would have made room for the new segment.
    x.cause = OomCause::kPrivatePools;
    std::string pools;
    for (const auto& [id, free] : x.private_pools_free)
      pools += (pools.empty() ? "" : ", ") + pool_display_name(id) + " " + bytes(free);
    x.reasons.push_back(
        bytes(x.private_pool_free_bytes) + " was cached free inside private pools (" + pools +
        "), which serve only their own CUDA graphs or MemPool scope, so this request could not "
        "use it; released, it would have made room for the " + bytes(x.segment_bytes) +
        " segment. Share one pool between graphs that run one after another "
        "(torch.cuda.graph(g2, pool=g1.pool()), or one graph_pool_handle() for all), allocate "
        "temporaries before capture rather than after it, capture fewer graphs, or free graphs "
        "no longer needed (their pools go back at the next empty_cache).");
  } else if (capped) {
    x.cause = OomCause::kMemoryCap;
  } else {
    x.cause = OomCause::kExhaustion;
    const uint64_t available = x.reserved_bytes + x.device_free_bytes.value_or(0);
    const uint64_t needed = x.allocated_bytes + x.rounded_bytes;
    x.reasons.push_back("The memory was in use: the program held " + bytes(x.allocated_bytes) +
                        " in " + std::to_string(x.allocated_blocks) +
                        " live blocks, and with this request it would need " + bytes(needed) +
                        ", while the allocator had " + bytes(x.reserved_bytes) + " reserved" +
                        (x.device_free_bytes ? " and the device " + bytes(*x.device_free_bytes) +
                                                   " more (" + bytes(available) + " in all)"
                                             : "") +
                        ". Free or shrink what the largest holders below keep alive.");
    // Other libraries' memory, from the recorded calls: what it took, and whether with it the
    // live tensors and the request could fit at all.
    if (x.outside_libraries && x.outside_libraries_bytes > 0) {
      std::string reason = "Other libraries of this process held " + bytes(x.outside_libraries_bytes) +
                           " of the device outside the allocator: " + holders_text(*x.outside_libraries) + ".";
      if (x.device_total_bytes && needed <= *x.device_total_bytes &&
          needed + x.outside_libraries_bytes > *x.device_total_bytes)
        reason += " With it, the live tensors and this request (" + bytes(needed) + ") could not fit in the device's " +
                  bytes(*x.device_total_bytes) + " even after emptying the cache; without it they would.";
      x.reasons.push_back(std::move(reason));
    }
    // What the allocator could not have: the device's memory held outside it. Said when it
    // matters: the live tensors and the request would fit in the device's memory.
    if (x.outside_allocator_bytes && x.device_total_bytes && needed <= *x.device_total_bytes &&
        *x.outside_allocator_bytes > x.outside_libraries_bytes) {
      if (x.outside_libraries)
        x.reasons.push_back(
            "The " + bytes(needed) + " it needed would fit in the device's " + bytes(*x.device_total_bytes) + "; " +
            bytes(*x.outside_allocator_bytes - x.outside_libraries_bytes) +
            " of it was in use outside the allocator by no recorded call: this process's CUDA context (module "
            "images, local memory) and other processes on the device (nvidia-smi lists them).");
      else
        x.reasons.push_back(
            "The " + bytes(needed) + " it needed would fit in the device's " + bytes(*x.device_total_bytes) +
            "; " + bytes(*x.outside_allocator_bytes) +
            " of it was in use outside the allocator: this process's CUDA context, memory other libraries took "
            "from the driver (NCCL, cuDNN, another allocator) and other processes on the device. nvidia-smi lists "
            "the processes; memsnap.torch's recording (or memsnap record) shows this process's own allocations "
            "outside the allocator, with their stacks.");
    }
  }
  if (capped)
    x.reasons.push_back("The device was not full: it had " + bytes(*x.device_free_bytes) +
                        " free, more than the " + bytes(x.segment_bytes) +
                        " segment the request needed. A memory cap refused it "
                        "(torch.cuda.set_per_process_memory_fraction, or memsnap's "
                        "set_memory_fraction), with " + bytes(x.reserved_bytes) +
                        " already reserved by the allocator.");
  if (x.blocked_by_split_rules > 0)
    x.reasons.push_back(bytes(x.blocked_by_split_rules) +
                        " of free blocks were large enough but out of bounds for this request "
                        "under max_split_size_mb (a request below it never takes a block at or "
                        "above it; one above it takes only blocks less than "
                        "max_non_split_rounding_mb larger).");
  if (x.inactive_split_bytes > 0)
    x.reasons.push_back(bytes(x.inactive_split_bytes) +
                        " was free inside segments that also hold live blocks (inactive split): "
                        "it cannot go back to the device to make room for a new segment.");
  if (x.cause != OomCause::kOtherStreams && x.other_stream_free_bytes + x.pending_free_bytes > 0)
    x.reasons.push_back(bytes(x.other_stream_free_bytes + x.pending_free_bytes) +
                        " was free or waiting on other streams, where this stream cannot use it.");
  if (x.cause != OomCause::kPrivatePools && x.private_pool_free_bytes > 0)
    x.reasons.push_back(bytes(x.private_pool_free_bytes) +
                        " was cached free inside private pools (CUDA graphs, MemPool), out of "
                        "reach of requests outside them.");
  if (x.other_pool_free_bytes > 0)
    x.reasons.push_back(bytes(x.other_pool_free_bytes) + " was free in the " +
                        (x.small_pool ? "large" : "small") +
                        " pool, which serves requests of the other size class.");
  if (x.events_after_oom > 0)
    x.reasons.push_back("Note: the snapshot was taken " + std::to_string(x.events_after_oom) +
                        " trace events after the error; " +
                        (x.state_rebuilt ? "the memory figures are those at the error, rebuilt by replaying the trace."
                                         : "the memory figures are the snapshot's."));
}

void replay_settings(const Snapshot& snapshot, const AllocatorConfig& recorded, OomExplanation& x) {
  // A recording without caching (memsnap record) has no settings to replay as recorded: every
  // row is its requests through a caching allocator.
  std::vector<std::pair<std::string, bool>> candidates;
  if (recorded.caching)
    candidates.emplace_back(to_config_string(recorded), true);
  else
    x.settings_note = "the recording had no caching allocator: each row replays its requests "
                      "through PyTorch's caching allocator with those settings";
  auto add = [&](const std::string& text) {
    for (const auto& [existing, is_recorded] : candidates)
      if (existing == text) return;
    candidates.emplace_back(text, false);
  };
  add("");
  if (recorded.max_split_size == kNoMaxSplitSize) {
    // Keeping blocks at least as large as the request whole, and a few usual values.
    uint64_t mib = 32;  // PyTorch wants more than max_non_split_rounding_mb (20)
    while (mib < (x.rounded_bytes >> 20) && mib < (uint64_t{1} << 20)) mib *= 2;
    add("max_split_size_mb:" + std::to_string(mib));
    for (const char* split : {"64", "128", "256", "512"}) add(std::string("max_split_size_mb:") + split);
  }
  add("roundup_power2_divisions:4");
  if (recorded.max_split_size == kNoMaxSplitSize) add("max_split_size_mb:128,roundup_power2_divisions:4");
  add("expandable_segments:True");
  for (const auto& [text, is_recorded] : candidates) {
    Result<AllocatorConfig> config = parse_allocator_config(text);
    if (!config) continue;
    SnapshotReplayOptions options;
    options.config = config.value();
    Result<SnapshotReplay> replay = replay_snapshot(snapshot, options);
    if (!replay) {
      x.settings_note = replay.error();
      return;
    }
    for (const DeviceReplay& d : replay->devices) {
      if (d.device != x.device) continue;
      if (x.replay_capacity_source.empty()) {
        x.replay_capacity_bytes = d.capacity_bytes;
        x.replay_capacity_source = d.capacity_source;
        x.replay_capacity_over_time = d.capacity_over_time;
        x.replay_least_capacity_bytes = d.least_capacity_bytes;
        x.replay_most_capacity_bytes = d.most_capacity_bytes;
      }
      OomSetting setting;
      setting.config = text;
      setting.recorded = is_recorded;
      setting.avoided = d.reproduced_ooms == 0 && d.failed_allocs == 0;
      setting.peak_reserved_bytes = d.stats.reserved_bytes[kAggregate].peak;
      setting.segment_allocs = static_cast<int64_t>(d.replayed_segment_allocs.size());
      if (is_recorded && setting.avoided)
        x.settings_note = "the replay under the recorded settings does not run out of memory "
                          "(the trace may be incomplete, or the limit was lower than it shows), "
                          "so these results are only indicative";
      if (is_recorded && !d.start.problems.empty())
        x.settings_note = "the trace is inconsistent with the snapshot; these results are only "
                          "indicative";
      x.settings.push_back(setting);
    }
  }
}

std::string shared_pool_words(const OomExplanation& x) {
  const SharedGraphPool& shared = *x.shared_graph_pool;
  const uint64_t needed = shared.shared_reserved_bytes + x.segment_bytes;
  std::string out = "Replayed with one pool shared by the " + std::to_string(shared.graphs) +
                    " graphs (torch.cuda.graph(g2, pool=g1.pool())), " + bytes(shared.shared_reserved_bytes) +
                    " is reserved before the request instead of " + bytes(shared.apart_reserved_bytes) +
                    "; with the request's segment that is " + bytes(needed);
  const uint64_t limit = x.replay_capacity_bytes;
  if (needed <= limit)
    out += ", within the replay's " + bytes(limit) + ": sharing avoids the error.";
  else if (x.cap_range && needed < x.cap_range->second)
    out += ": sharing avoids the error if the cap was at least that (the recording says only that it lay between " +
           bytes(x.cap_range->first) + " and " + bytes(x.cap_range->second) + ").";
  else
    out += ", more than the " + bytes(x.cap_range ? x.cap_range->second : limit) +
           " the process could have had: sharing alone does not avoid the error.";
  return out + " Share a pool only between graphs that replay in the order they were captured and never at once.";
}

// Whether the live tensors and the request alone exceed the memory the process could have had:
// only then is "the program needs less live memory" true. When they fit, it is how the cached
// memory lay (split between segments, streams or pools) that no setting tried could serve the
// request from. Under a memory cap known only as a range, and within 5% of the limit, the
// recording cannot tell; with no figure for the device's memory, it cannot either.
std::string live_memory_words(const OomExplanation& x) {
  const uint64_t needed = x.allocated_bytes + x.rounded_bytes;
  const std::string figures = "The live tensors (" + bytes(x.allocated_bytes) + ") and the request (" +
                              bytes(x.rounded_bytes) + ") come to " + bytes(needed);
  if (x.replay_capacity_source == "default")
    return "Whether the live tensors alone are too many, the recording cannot say: it holds no figure for the "
           "device's memory.";
  if (x.cap_range) {
    if (needed <= x.cap_range->first)
      return figures + ", which fits under the lowest the cap can have been (" + bytes(x.cap_range->first) +
             "): not too much live memory, but cached memory that none of these settings could serve the request "
             "from (split between segments, streams or pools).";
    if (needed >= x.cap_range->second)
      return figures + ", more than the cap can have been: the program needs less memory at this point, or a "
             "larger cap.";
    return figures + ", between the lowest and the highest the cap can have been (" + bytes(x.cap_range->first) +
           " to " + bytes(x.cap_range->second) +
           "): whether the program needs less live memory or a setting would do under the real cap, the recording "
           "cannot say.";
  }
  const uint64_t limit = x.replay_capacity_bytes;
  if (needed > limit) {
    // Other libraries' memory is part of what the process could not have.
    if (x.outside_libraries_bytes > 0)
      return figures + ", more than the " + bytes(limit) +
             " the process could have had: the program needs less live memory at this point, or other libraries "
             "less of the device (they held " + bytes(x.outside_libraries_bytes) + " of it).";
    return figures + ", more than the " + bytes(limit) +
           " the process could have had: the program needs less live memory at this point (or a larger share of "
           "the device).";
  }
  if (needed > limit - limit / 20)
    return figures + ", within 5% of the " + bytes(limit) +
           " the process could have had: too close to tell whether the program needs less live memory or the cached "
           "memory could not serve the request.";
  return figures + ", which fits in the " + bytes(limit) +
         " the process could have had: not too much live memory, but cached memory that none of these settings "
         "could serve the request from (split between segments, streams or pools).";
}

// What the replays conclude. Free memory in private pools points at the pools; otherwise
// live_memory_words says whether the live memory alone was too much.
std::string conclude_settings(const OomExplanation& x) {
  if (x.settings.empty()) return "";
  for (const OomSetting& s : x.settings)
    if (s.avoided && !s.recorded) return "Try: " + (s.config.empty() ? std::string("defaults") : s.config);
  std::string out = "None of these settings avoids it";
  if (x.cap_range)
    out += " under a cap of " + bytes(x.replay_capacity_bytes) + ", the lowest the recording allows (the cap refused " +
           bytes(x.cap_range->second) + " with " + bytes(x.cap_range->first) +
           " reserved, so it lay between the two; whether a setting would avoid it under the real cap, the recording "
           "cannot say)";
  out += ".";
  if (x.private_pool_free_bytes > 0) {
    out += " " + bytes(x.private_pool_free_bytes) + " sat idle in " + counted(x.private_pools_free.size(), "private pool") +
           ", which no setting makes available to other requests: share one pool between graphs, capture fewer "
           "graphs, or free graphs no longer needed.";
    if (x.shared_graph_pool) out += " " + shared_pool_words(x);
  } else {
    out += " " + live_memory_words(x);
  }
  return out;
}

}  // namespace

std::string_view oom_cause_name(OomCause cause) {
  switch (cause) {
    case OomCause::kMemoryCap: return "memory_cap";
    case OomCause::kFragmentation: return "fragmentation";
    case OomCause::kOtherStreams: return "other_streams";
    case OomCause::kExhaustion: return "exhaustion";
    case OomCause::kTooLarge: return "request_too_large";
    case OomCause::kPrivatePools: return "private_pools";
    case OomCause::kOtherLibraries: return "other_libraries";
  }
  return "exhaustion";
}

Result<OomExplanation> explain_oom(const Snapshot& snapshot, std::optional<int64_t> device) {
  const auto found = find_oom(snapshot, device);
  if (!found)
    return Result<OomExplanation>::failure(
        "explain-oom: the snapshot has no out-of-memory event" +
        (device ? " on device " + std::to_string(*device) : std::string()) +
        " (take it when the error happens, e.g. with dump_snapshot_on_oom, and record history "
        "at level 'all')");
  const auto [d, index] = *found;
  const DeviceTrace& trace = snapshot.device_traces[d];
  const TraceEntry& oom = trace[index];
  const Result<AllocatorConfig> recorded_result = recorded_allocator_config(snapshot);
  const AllocatorConfig recorded = recorded_result ? recorded_result.value() : AllocatorConfig{};

  OomExplanation x;
  x.device = static_cast<int64_t>(d);
  // In unsigned arithmetic: a hostile file's times must not overflow.
  x.time_us = static_cast<int64_t>(static_cast<uint64_t>(oom.time_us) -
                                   static_cast<uint64_t>(trace.front().time_us));
  x.requested_bytes = oom.size;
  x.rounded_bytes = round_size(std::max<uint64_t>(oom.size, 1), recorded);
  x.small_pool = is_small_request(x.rounded_bytes);
  x.segment_bytes = segment_size_for(x.rounded_bytes, recorded);
  x.stream = oom.stream;
  if (oom.address > 0) x.device_free_bytes = oom.address;
  x.request_frames = frames_of(snapshot, oom.stack);
  for (size_t i = index + 1; i < trace.size(); ++i)
    if (trace[i].action != TraceAction::kSnapshot) ++x.events_after_oom;
  for (const DeviceInfo& info : snapshot.devices)
    if (info.index == x.device && info.total_memory > 0) x.device_total_bytes = info.total_memory;
  // Memory changed after the error (an at-exit snapshot, a program that went on): the state at
  // the error is rebuilt by replaying the trace up to it, when the replay is exact.
  std::optional<StateAfterEntry> at_error;
  if (x.events_after_oom > 0) {
    Result<StateAfterEntry> state = state_after_entry(snapshot, x.device, index);
    if (state && state.value().exact && state.value().problems.empty()) {
      at_error = std::move(state).value();
      for (SnapshotSegment& segment : at_error->segments) segment.device = x.device;
      x.state_rebuilt = true;
    }
  }
  measure_state(snapshot, at_error ? at_error->segments : snapshot.segments, recorded, x);
  // (Only when the reserved bytes are those at the error, as the free bytes are.)
  if (x.device_total_bytes && x.device_free_bytes && (x.events_after_oom == 0 || x.state_rebuilt) &&
      *x.device_free_bytes <= *x.device_total_bytes - std::min(*x.device_total_bytes, x.reserved_bytes))
    x.outside_allocator_bytes = *x.device_total_bytes - *x.device_free_bytes - x.reserved_bytes;
  x.outside_libraries = outside_libraries_at(snapshot, x.device, oom.time_us, x.outside_unknown_reason);
  if (x.outside_libraries)
    for (const auto& holder : *x.outside_libraries) x.outside_libraries_bytes += holder.bytes;
  diagnose(x);
  if (x.device_free_bytes && *x.device_free_bytes >= x.segment_bytes)
    x.cap_range = std::make_pair(x.reserved_bytes, x.reserved_bytes + x.segment_bytes);
  if (x.cause == OomCause::kTooLarge) {
    x.settings_note = "no setting was replayed: none can make a request larger than the device fit";
  } else if (x.cause == OomCause::kOtherLibraries) {
    x.settings_note = "no setting was replayed: none can make room that other libraries hold";
  } else {
    replay_settings(snapshot, recorded, x);
    if (x.private_pool_free_bytes > 0 && !x.settings.empty())
      x.shared_graph_pool = replay_with_one_graph_pool(snapshot, x.device, index, recorded);
  }
  x.settings_conclusion = conclude_settings(x);
  return x;
}

}  // namespace memsnap
