#include "python/native/torch_snapshot.h"

#include <pybind11/stl.h>

#include <vector>

#include "allocator/policy.h"

namespace memsnap::pytorch {
namespace py = pybind11;
namespace {

// Frames and stacks are built once each and shared by every entry that names them (as
// PyTorch shares frame dictionaries); pickle then writes each once.
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

  py::list of(StackIndex stack) {
    if (stack < 0 || static_cast<size_t>(stack) >= stacks_.size()) return empty_;
    py::object& cached = stacks_[static_cast<size_t>(stack)];
    if (!cached) {
      py::list list;
      for (uint32_t frame : snapshot_.stacks[static_cast<size_t>(stack)]) list.append(frames_[frame]);
      cached = std::move(list);
    }
    return py::reinterpret_borrow<py::list>(cached);
  }

 private:
  const Snapshot& snapshot_;
  std::vector<py::dict> frames_;
  std::vector<py::object> stacks_;
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
    segment["frames"] = frames.of(s.stack);
    py::list blocks;
    for (const SnapshotBlock& b : s.blocks) {
      py::dict block;
      block["address"] = b.address;
      block["size"] = b.size;
      block["requested_size"] = b.requested_size;
      block["state"] = kState[static_cast<size_t>(b.state)];
      block["frames"] = b.state == BlockState::kInactive ? py::list() : frames.of(b.stack);
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
      entry["frames"] = frames.of(e.stack);
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
