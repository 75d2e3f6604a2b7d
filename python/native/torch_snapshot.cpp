#include "python/native/torch_snapshot.h"

#include <pybind11/stl.h>

#include <vector>

#include "allocator/policy.h"

namespace memsnap::pytorch {
namespace py = pybind11;
namespace {

// Frames and stacks are built once each and shared by every entry that names them (as
// PyTorch shares frame dictionaries); pickle then writes each once. A stack that goes on past
// the frame joining a backward allocation to its forward call is split as PyTorch splits it:
// "frames" up to that frame, "forward_frames" the forward call's traceback lines after it.
class FrameLists {
 public:
  explicit FrameLists(const Snapshot& snapshot) : snapshot_(snapshot) {
    frames_.reserve(snapshot.frames.size());
    for (const Frame& frame : snapshot.frames) {
      py::dict d;
      d["filename"] = frame.file.empty() ? std::string("??") : frame.file;
      d["line"] = frame.line;
      d["name"] = frame.function;
      frames_.push_back(std::move(d));
    }
    stacks_.resize(snapshot.stacks.size());
  }

  // Sets "frames" (and "forward_frames" when the stack has them) of an entry or block.
  void put(py::dict& into, StackIndex stack) {
    if (stack < 0 || static_cast<size_t>(stack) >= stacks_.size()) {
      into["frames"] = empty_;
      return;
    }
    Lists& lists = stacks_[static_cast<size_t>(stack)];
    if (!lists.frames) build(lists, snapshot_.stacks[static_cast<size_t>(stack)]);
    into["frames"] = lists.frames;
    if (lists.forward) into["forward_frames"] = lists.forward;
  }

 private:
  struct Lists {
    py::object frames, forward;
  };

  void build(Lists& lists, const std::vector<uint32_t>& stack) {
    py::list frames;
    size_t i = 0;
    for (; i < stack.size() && !is_backward_of_forward(snapshot_.frames[stack[i]]); ++i)
      frames.append(frames_[stack[i]]);
    lists.frames = std::move(frames);
    if (i + 1 >= stack.size()) return;
    py::list forward;  // outermost first, as Python's traceback lines are
    for (size_t j = stack.size(); j-- > i + 1;) {
      const Frame& frame = snapshot_.frames[stack[j]];
      forward.append("  File \"" + frame.file + "\", line " + std::to_string(frame.line) + ", in " +
                     frame.function + "\n");
    }
    lists.forward = std::move(forward);
  }

  const Snapshot& snapshot_;
  std::vector<py::dict> frames_;
  std::vector<Lists> stacks_;
  py::list empty_;
};

py::dict settings_of(const AllocatorConfig& config) {
  py::dict settings;
  settings["PYTORCH_CUDA_ALLOC_CONF"] = config.source;
  settings["max_split_size"] = config.max_split_size == kNoMaxSplitSize
                                   ? int64_t{-1}
                                   : static_cast<int64_t>(config.max_split_size);
  settings["garbage_collection_threshold"] = config.garbage_collection_threshold;
  settings["expandable_segments"] = config.expandable_segments;
  settings["release_lock_on_cudamalloc"] = config.release_lock_on_cudamalloc;
  // PyTorch keys the divisions by the interval's power of two in MiB: "1", "2", "4", ...
  py::dict divisions;
  for (size_t i = 0; i < config.roundup_power2_divisions.size(); ++i)
    divisions[py::str(std::to_string(size_t{1} << i))] = config.roundup_power2_divisions[i];
  settings["roundup_power2_divisions"] = divisions;
  return settings;
}

}  // namespace

py::dict to_torch_snapshot(const Snapshot& snapshot, const AllocatorConfig& config) {
  FrameLists frames(snapshot);
  const int64_t to_unix_us = snapshot.process.clock_offset_us;
  const py::str kState[] = {py::str("active_allocated"), py::str("active_pending_free"),
                            py::str("inactive")};

  py::list segments;
  for (const SnapshotSegment& s : snapshot.segments) {
    py::dict segment;
    segment["device"] = s.device;
    segment["address"] = s.address;
    segment["total_size"] = s.total_size;
    segment["allocated_size"] = s.allocated_size;
    segment["active_size"] = s.active_size;
    segment["requested_size"] = s.requested_size;
    segment["stream"] = s.stream;
    segment["segment_type"] = s.segment_type;
    segment["segment_pool_id"] = py::make_tuple(s.segment_pool_id.first, s.segment_pool_id.second);
    segment["is_expandable"] = s.is_expandable;
    frames.put(segment, s.stack);
    py::list blocks;
    for (const SnapshotBlock& b : s.blocks) {
      py::dict block;
      block["address"] = b.address;
      block["size"] = b.size;
      block["requested_size"] = b.requested_size;
      block["state"] = kState[static_cast<size_t>(b.state)];
      frames.put(block, b.state == BlockState::kInactive ? kNoStackIndex : b.stack);
      blocks.append(std::move(block));
    }
    segment["blocks"] = std::move(blocks);
    segments.append(std::move(segment));
  }

  const py::str na("N/A"), no_metadata("");
  py::list traces;
  for (const std::vector<TraceEntry>& device_trace : snapshot.device_traces) {
    py::list trace;
    for (const TraceEntry& e : device_trace) {
      py::dict entry;
      entry["action"] = py::str(std::string(trace_action_name(e.action)));
      // An oom entry's address holds the device's free bytes (PyTorch names it device_free).
      if (e.action == TraceAction::kOom)
        entry["device_free"] = e.address;
      else
        entry["addr"] = e.address;
      entry["size"] = e.size;
      entry["stream"] = e.stream;
      entry["time_us"] = e.time_us + to_unix_us;
      entry["compile_context"] = na;
      entry["user_metadata"] = no_metadata;
      frames.put(entry, e.stack);
      trace.append(std::move(entry));
    }
    traces.append(std::move(trace));
  }

  py::list annotations;
  for (const SnapshotAnnotation& a : snapshot.external_annotations) {
    py::dict annotation;
    annotation["device"] = a.device;
    annotation["time_us"] = a.time_us + to_unix_us;
    annotation["stage"] = a.stage;
    annotation["name"] = a.name;
    annotations.append(std::move(annotation));
  }

  py::dict out;
  out["segments"] = std::move(segments);
  out["device_traces"] = std::move(traces);
  out["allocator_settings"] = settings_of(config);
  out["external_annotations"] = std::move(annotations);
  return out;
}

}  // namespace memsnap::pytorch
