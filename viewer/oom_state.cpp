#include "viewer/oom_state.h"

#include <algorithm>
#include <map>

#include "allocator/device_stats.h"
#include "allocator/policy.h"
#include "replay/recorded_caps.h"
#include "replay/recorded_config.h"
#include "replay/snapshot_replay.h"
#include "viewer/byte_text.h"
#include "viewer/frame_labels.h"
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
std::optional<std::vector<OomState::OutsideHolder>> outside_libraries_at(const Snapshot& snapshot, int64_t device,
                                                                         int64_t time_us, std::string& reason) {
  const std::optional<std::vector<OutsideHolder>> held = outside_holders_at(snapshot, device, time_us, reason);
  if (!held) return std::nullopt;
  std::vector<OomState::OutsideHolder> out;
  for (const OutsideHolder& h : *held)
    out.push_back({h.library, h.bytes, h.allocations, caller_frames_of(snapshot, h.largest_stack)});
  return out;
}

// "libnccl.so.2 3.20 GiB (ncclCommInitRank, train.py:40)", the first few.
std::string holders_text(const std::vector<OomState::OutsideHolder>& holders) {
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
std::optional<std::pair<size_t, size_t>> find_oom(const Snapshot& snapshot, std::optional<int64_t> device) {
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
                   const AllocatorConfig& config, OomState& x) {
  std::map<StackIndex, OomHolder> holders;
  std::map<MempoolId, uint64_t> private_free;
  for (const SnapshotSegment& segment : segments) {
    if (segment.device != x.device) continue;
    x.reserved_bytes += segment.total_size;
    const bool small = segment.is_small_pool();
    for (const SnapshotBlock& block : segment.blocks) {
      if (block.state == BlockState::kActiveAllocated) {
        x.allocated_bytes += block.size;
        x.least_live_bytes += std::min<uint64_t>(block.size, least_block_bytes(block.requested_size ? block.requested_size : block.size));
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
        else if (block.size >= x.rounded_bytes && !segment.is_expandable)
          x.usable_fitting_free = std::max<uint64_t>(x.usable_fitting_free, block.size);
      }
    }
  }
  for (const auto& [pool, free] : private_free) x.private_pools_free.emplace_back(pool, free);
  std::stable_sort(x.private_pools_free.begin(), x.private_pools_free.end(),
                   [](const auto& a, const auto& b) { return a.second > b.second; });
  for (auto& [stack, holder] : holders) x.holders.push_back(std::move(holder));
  std::sort(x.holders.begin(), x.holders.end(), [](const OomHolder& a, const OomHolder& b) { return a.bytes > b.bytes; });
  if (x.holders.size() > kHolders) x.holders.resize(kHolders);
  for (OomHolder& holder : x.holders) holder.frames = frames_of(snapshot, holder.stack);
}

// All the allocator could have reserved at the error: the reserved bytes and the device's free
// bytes, under the recorded cap; a cap the file does not record known only as a range.
void find_limit(OomState& x, bool figures_at_error) {
  OomLimit& limit = x.limit;
  limit.outside_known = x.outside_libraries.has_value();
  if (!figures_at_error) {
    limit.unknown_reason = "the snapshot was taken " + std::to_string(x.events_after_oom) +
                           " trace events after the error and the state at the error could not be rebuilt from the "
                           "trace";
    return;
  }
  const uint64_t free = x.device_free_bytes.value_or(0);
  const uint64_t attainable = x.reserved_bytes + free;
  const std::string attainable_words = "the " + bytes(attainable) + " the allocator could have had (" +
                                       bytes(x.reserved_bytes) + " reserved plus " + bytes(free) +
                                       " the device had free)";
  if (x.cap_known) {
    limit.kind = OomLimit::Kind::kExact;
    if (x.cap && x.cap->bytes < attainable) {
      limit.bytes = x.cap->bytes;
      limit.words = memory_cap_words(*x.cap);
    } else {
      limit.bytes = attainable;
      limit.words = attainable_words;
    }
    return;
  }
  if (free >= x.segment_bytes) {
    // The device had room for the segment: a cap refused it, at least the reserved bytes and
    // below them plus the segment.
    x.cap_range = std::make_pair(x.reserved_bytes, x.reserved_bytes + x.segment_bytes);
    limit.kind = OomLimit::Kind::kRange;
    limit.bytes = x.cap_range->first;
    limit.below = x.cap_range->second;
    const std::string why = "this file does not record the cap, but the device had " + bytes(free) +
                            " free, so a cap refused the new " + bytes(x.segment_bytes) + " segment with " +
                            bytes(x.reserved_bytes) + " reserved";
    limit.words = "the least the memory cap can have been (" + bytes(limit.bytes) + ": " + why + ")";
    limit.ceiling_words = "the most the memory cap can have been (below " + bytes(limit.below) + ": " + why + ")";
    return;
  }
  limit.kind = OomLimit::Kind::kExact;
  limit.bytes = attainable;
  limit.words = attainable_words;
}

OomFacts facts_of(const OomState& x) {
  OomFacts f;
  f.basis = x.state_rebuilt ? "the state at the error, rebuilt by replaying the trace" : "the figures recorded at the error";
  f.requested_bytes = x.requested_bytes;
  f.rounded_bytes = x.rounded_bytes;
  f.segment_bytes = x.segment_bytes;
  f.least_request_bytes = least_block_bytes(x.requested_bytes);
  f.live_bytes = x.allocated_bytes;
  f.least_live_bytes = f.least_live_bytes_at_most = x.least_live_bytes;
  f.reserved_bytes = x.reserved_bytes;
  f.device_total_bytes = x.device_total_bytes;
  f.device_free_bytes = x.device_free_bytes;
  f.limit = x.limit;
  f.cap = x.cap;
  f.cap_refused = x.cap && x.device_free_bytes && *x.device_free_bytes >= x.segment_bytes &&
                  x.reserved_bytes + x.segment_bytes > x.cap->bytes;
  f.outside_libraries_known = x.outside_libraries.has_value();
  f.outside_libraries_bytes = x.outside_libraries_bytes;
  if (x.outside_libraries) f.outside_libraries_words = holders_text(*x.outside_libraries);
  f.placement_known = x.limit.kind != OomLimit::Kind::kUnknown;
  f.small_pool = x.small_pool;
  f.usable_free_bytes = x.usable_free_bytes;
  f.usable_largest_free = x.usable_largest_free;
  f.usable_fitting_free = x.usable_fitting_free;
  f.other_stream_free_bytes = x.other_stream_free_bytes;
  f.pending_free_bytes = x.pending_free_bytes;
  f.private_pool_free_bytes = x.private_pool_free_bytes;
  for (const auto& [id, free] : x.private_pools_free)
    f.private_pools_words += (f.private_pools_words.empty() ? "" : ", ") + pool_display_name(id) + " " + bytes(free);
  f.other_pool_free_bytes = x.other_pool_free_bytes;
  f.inactive_split_bytes = x.inactive_split_bytes;
  f.blocked_by_split_rules = x.blocked_by_split_rules;
  return f;
}

// Memory the allocator never had, said where it matters to a cause no setting changes: what the
// device held outside the allocator, and what of it the snapshot can attribute.
void outside_reasons(OomState& x) {
  const OomCause cause = x.diagnosis.cause;
  if (cause != OomCause::kTooLarge && cause != OomCause::kExhaustion) return;
  if (!x.outside_allocator_bytes || !x.device_total_bytes || *x.outside_allocator_bytes <= x.outside_libraries_bytes) return;
  const uint64_t needed = cause == OomCause::kTooLarge ? least_block_bytes(x.requested_bytes)
                                                       : x.least_live_bytes + least_block_bytes(x.requested_bytes);
  if (needed > *x.device_total_bytes) return;
  const uint64_t unattributed = *x.outside_allocator_bytes - x.outside_libraries_bytes;
  std::string reason = "The " + bytes(needed) + " it needed would fit in the device's " + bytes(*x.device_total_bytes) + "; " +
                       bytes(unattributed) + " of it was in use outside the allocator";
  if (x.outside_libraries)
    reason += " by no recorded call: this process's CUDA context (module images, local memory) and other processes on "
              "the device (nvidia-smi lists them).";
  else
    reason += ": this process's CUDA context, memory other libraries took from the driver (NCCL, cuDNN, another "
              "allocator) and other processes on the device. nvidia-smi lists the processes; memsnap.torch's recording "
              "(or memsnap record) shows this process's own allocations outside the allocator, with their stacks" +
              (x.outside_unknown_reason.empty() ? std::string(".") : " (here: " + x.outside_unknown_reason + ").");
  x.diagnosis.reasons.push_back(std::move(reason));
}

}  // namespace

Result<OomState> oom_state(const Snapshot& snapshot, std::optional<int64_t> device) {
  const auto found = find_oom(snapshot, device);
  if (!found)
    return Result<OomState>::failure(
        "explain-oom: the snapshot has no out-of-memory event" +
        (device ? " on device " + std::to_string(*device) : std::string()) +
        " (take it when the error happens, e.g. with dump_snapshot_on_oom, and record history at level 'all')");
  const auto [d, index] = *found;
  const DeviceTrace& trace = snapshot.device_traces[d];
  const TraceEntry& oom = trace[index];
  const Result<AllocatorConfig> recorded_result = recorded_allocator_config(snapshot);
  const AllocatorConfig recorded = recorded_result ? recorded_result.value() : AllocatorConfig{};

  OomState x;
  x.device = static_cast<int64_t>(d);
  x.entry = index;
  // In unsigned arithmetic: a hostile file's times must not overflow.
  x.time_us = static_cast<int64_t>(static_cast<uint64_t>(oom.time_us) - static_cast<uint64_t>(trace.front().time_us));
  x.requested_bytes = oom.size;
  x.rounded_bytes = round_size(std::max<uint64_t>(oom.size, 1), recorded);
  x.small_pool = is_small_request(x.rounded_bytes);
  x.segment_bytes = segment_size_for(x.rounded_bytes, recorded);
  x.stream = oom.stream;
  // The device's free bytes then: an oom entry always carries them (0: the device was full).
  x.device_free_bytes = oom.address;
  x.request_frames = frames_of(snapshot, oom.stack);
  for (size_t i = index + 1; i < trace.size(); ++i)
    if (trace[i].action != TraceAction::kSnapshot) ++x.events_after_oom;
  for (const DeviceInfo& info : snapshot.devices)
    if (info.index == x.device && info.total_memory > 0) x.device_total_bytes = info.total_memory;
  const RecordedCaps caps(snapshot, x.device, recorded);
  x.cap_known = caps.known();
  if (x.cap_known) x.cap = caps.at(index);
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
  const bool figures_at_error = x.events_after_oom == 0 || x.state_rebuilt;
  if (x.device_total_bytes && figures_at_error &&
      *x.device_free_bytes <= *x.device_total_bytes - std::min(*x.device_total_bytes, x.reserved_bytes))
    x.outside_allocator_bytes = *x.device_total_bytes - *x.device_free_bytes - x.reserved_bytes;
  x.outside_libraries = outside_libraries_at(snapshot, x.device, oom.time_us, x.outside_unknown_reason);
  if (x.outside_libraries)
    for (const auto& holder : *x.outside_libraries) x.outside_libraries_bytes += holder.bytes;
  find_limit(x, figures_at_error);
  x.diagnosis = decide_oom_cause(facts_of(x));
  outside_reasons(x);
  if (x.events_after_oom > 0)
    x.diagnosis.reasons.push_back("Note: the snapshot was taken " + std::to_string(x.events_after_oom) +
                                  " trace events after the error; " +
                                  (x.state_rebuilt ? "the memory figures are those at the error, rebuilt by replaying the trace."
                                                   : "the memory figures are the snapshot's."));
  return x;
}

}  // namespace memsnap
