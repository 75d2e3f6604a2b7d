#include "record/allocation_ledger.h"

#include <algorithm>
#include <unordered_map>
#include <utility>

#include "allocator/policy.h"
#include "history/history_recorder.h"
#include "history/symbolizer.h"
#include "record/library_names.h"
#include "snapshot/recorded_stacks.h"
#include "snapshot/snapshot_stacks.h"

namespace memsnap {
namespace {

// An allocation is at once a segment, a block and an active block of exactly its bytes;
// `added` false takes one away.
void count(DeviceStats& stats, size_t size, bool added) {
  const bool small = size <= kSmallSize;
  const auto bytes = static_cast<int64_t>(size);
  const auto change = added ? &DeviceStats::increase : &DeviceStats::decrease;
  for (StatArray* array : {&stats.allocation, &stats.segment, &stats.active}) change(*array, small, 1);
  for (StatArray* array : {&stats.allocated_bytes, &stats.reserved_bytes, &stats.active_bytes,
                           &stats.requested_bytes})
    change(*array, small, bytes);
  ++(added ? stats.num_device_alloc : stats.num_device_free);
}

}  // namespace

AllocationLedger::AllocationLedger(LedgerSettings settings)
    : settings_(settings), created_(now_ticks()), stacks_(settings.max_stack_frames) {}

AllocationLedger::DeviceRecord* AllocationLedger::device_record(int device) {
  if (device < 0 || device >= kMaxDevices) return nullptr;
  const auto index = static_cast<size_t>(device);
  if (index >= devices_.size()) devices_.resize(index + 1);
  if (!devices_[index]) devices_[index] = std::make_unique<DeviceRecord>(settings_.max_entries);
  return devices_[index].get();
}

StackId AllocationLedger::intern(CallStack stack) {
  return stack.count == 0 ? kNoStack : stacks_.intern(stack.frames, stack.count);
}

void AllocationLedger::allocated(int device, uintptr_t address, size_t size, StreamId stream,
                                 CallStack stack, OutsideKind kind, const char* api) {
  const Ticks ticks = now_ticks();
  const bool outside = kept_outside(kind);
  if (is_host_memory(kind)) device = -1;
  std::lock_guard lock(mutex_);
  DeviceRecord* record = outside ? nullptr : device_record(device);
  if (outside ? device >= kMaxDevices : record == nullptr) return;
  const StackId id = intern(stack);
  // An address handed out again while the ledger still holds it: the free that came between
  // went through a call not recorded. The old allocation ends here.
  if (auto old = live_.find(address); old != live_.end()) release(old, stream, kNoStack, ticks);
  live_.emplace(address, Live{size, device, stream, id, ticks, api, kind});
  ++counts_.allocations;
  if (outside) {
    push_outside({ticks, address, size, api, id, id, device, OutsideAction::kAlloc, kind});
    return;
  }
  count(record->stats, size, true);
  record->trace.push({TraceAction::kAlloc, address, size, stream, ticks, id});
}

void AllocationLedger::release(std::map<uintptr_t, Live>::iterator it, StreamId stream, StackId stack,
                               Ticks ticks) {
  const Live live = it->second;
  const uintptr_t address = it->first;
  live_.erase(it);
  ++counts_.frees;
  if (kept_outside(live.kind)) {
    push_outside({ticks, address, live.size, live.api, stack, live.stack, live.device, OutsideAction::kFree, live.kind});
    return;
  }
  DeviceRecord* record = device_record(live.device);
  count(record->stats, live.size, false);
  record->trace.push({TraceAction::kFreeCompleted, address, live.size, stream, ticks, stack});
}

void AllocationLedger::push_outside(const OutsideRecord& record) {
  if (settings_.max_entries == 0) return;
  if (outside_trace_.size() < settings_.max_entries) {
    outside_trace_.push_back(record);
    return;
  }
  outside_trace_[outside_next_] = record;
  outside_next_ = outside_next_ + 1 == outside_trace_.size() ? 0 : outside_next_ + 1;
  ++outside_dropped_;
}

void AllocationLedger::clear_outside_trace() {
  std::lock_guard lock(mutex_);
  outside_trace_.clear();
  outside_next_ = 0;
  outside_dropped_ = 0;
}

bool AllocationLedger::freed(uintptr_t address, StreamId stream, CallStack stack) {
  const Ticks ticks = now_ticks();
  std::lock_guard lock(mutex_);
  auto it = live_.find(address);
  if (it == live_.end()) {
    ++counts_.unknown_frees;
    return false;
  }
  release(it, stream, intern(stack), ticks);
  return true;
}

size_t AllocationLedger::freed_range(uintptr_t address, size_t size, StreamId stream, CallStack stack) {
  const Ticks ticks = now_ticks();
  std::lock_guard lock(mutex_);
  const uintptr_t end = size > UINTPTR_MAX - address ? UINTPTR_MAX : address + size;
  size_t released = 0;
  StackId id = kNoStack;
  for (auto it = live_.lower_bound(address); it != live_.end() && it->first < end;) {
    if (released == 0) id = intern(stack);
    auto next = std::next(it);
    release(it, stream, id, ticks);
    it = next;
    ++released;
  }
  if (released == 0) ++counts_.unknown_frees;
  return released;
}

void AllocationLedger::out_of_memory(int device, size_t requested, size_t device_free,
                                     StreamId stream, CallStack stack, OutsideKind kind, const char* api) {
  const Ticks ticks = now_ticks();
  std::lock_guard lock(mutex_);
  if (kept_outside(kind)) {
    if (is_host_memory(kind)) device = -1;
    if (device >= kMaxDevices) return;
    ++counts_.out_of_memory;
    const StackId id = intern(stack);
    push_outside({ticks, 0, requested, api, id, id, device, OutsideAction::kOom, kind});
    return;
  }
  DeviceRecord* record = device_record(device);
  if (record == nullptr) return;
  ++counts_.out_of_memory;
  ++record->stats.num_ooms;
  record->trace.push({TraceAction::kOom, device_free, requested, stream, ticks, intern(stack)});
}

void AllocationLedger::describe_device(int device, const std::string& name, uint64_t total_memory) {
  std::lock_guard lock(mutex_);
  DeviceRecord* record = device_record(device);
  if (record == nullptr) return;
  record->described = true;
  record->name = name;
  record->total_memory = total_memory;
}

bool AllocationLedger::has_description(int device) const {
  std::lock_guard lock(mutex_);
  if (device < 0 || static_cast<size_t>(device) >= devices_.size()) return false;
  return devices_[static_cast<size_t>(device)] && devices_[static_cast<size_t>(device)]->described;
}

LedgerCounts AllocationLedger::counts() const {
  std::lock_guard lock(mutex_);
  return counts_;
}

namespace {

// The snapshot's stack for each recorded one, symbolized once (the recorder's own frames were
// trimmed when it was captured: call_stack_trim.h).
std::vector<uint32_t> symbolized(const std::vector<uintptr_t>& addresses, SnapshotStackTables& tables) {
  std::vector<uint32_t> frames;
  for (uintptr_t address : addresses)
    for (SourceFrame& frame : process_symbolizer().frames_at(address))
      frames.push_back(tables.intern_frame(std::move(frame)));
  return frames;
}

}  // namespace

Snapshot AllocationLedger::snapshot(const JobPlace& job) const {
  struct DeviceCopy {
    std::vector<RecordedEvent> trace;
    DeviceStats stats;
    bool present = false;
    std::string name;
    uint64_t total_memory = 0;
  };
  std::vector<std::pair<uintptr_t, Live>> live;
  std::vector<DeviceCopy> devices;
  std::unordered_map<StackId, std::vector<uintptr_t>> stack_frames;
  {
    std::lock_guard lock(mutex_);
    live.assign(live_.begin(), live_.end());
    devices.resize(devices_.size());
    for (size_t d = 0; d < devices_.size(); ++d) {
      if (!devices_[d]) continue;
      devices[d] = {devices_[d]->trace.entries(), devices_[d]->stats, true, devices_[d]->name,
                    devices_[d]->total_memory};
    }
    const auto want = [&](StackId id) {
      if (id != kNoStack && !stack_frames.contains(id)) stack_frames.emplace(id, stacks_.frames(id));
    };
    for (const auto& [address, allocation] : live) want(allocation.stack);
    for (const DeviceCopy& device : devices)
      for (const RecordedEvent& event : device.trace) want(event.stack);
  }

  Snapshot snapshot;
  snapshot.process = process_at_snapshot(job);
  // No caching allocator: each block was its own segment, released at its free (replay reads
  // this to tell those releases from a program's empty_cache).
  snapshot.allocator_settings = {{"caching", "false"}};
  SnapshotStackTables tables(snapshot);
  std::unordered_map<StackId, StackIndex> indices;
  const auto index_of = [&](StackId id) -> StackIndex {
    if (id == kNoStack) return kNoStackIndex;
    auto [it, fresh] = indices.try_emplace(id, kNoStackIndex);
    if (fresh) it->second = tables.intern_stack(symbolized(stack_frames.at(id), tables));
    return it->second;
  };

  std::stable_sort(live.begin(), live.end(), [](const auto& a, const auto& b) {
    return a.second.device != b.second.device ? a.second.device < b.second.device : a.first < b.first;
  });
  for (const auto& [address, allocation] : live) {
    if (kept_outside(allocation.kind)) continue;
    const StackIndex stack = index_of(allocation.stack);
    SnapshotSegment& segment = snapshot.segments.emplace_back();
    segment.device = allocation.device;
    segment.address = address;
    segment.total_size = segment.allocated_size = segment.active_size = segment.requested_size =
        allocation.size;
    segment.stream = allocation.stream;
    segment.segment_type = allocation.size <= kSmallSize ? "small" : "large";
    segment.stack = stack;
    segment.blocks.push_back({address, allocation.size, allocation.size, BlockState::kActiveAllocated,
                              stack, {{address, allocation.size, stack}}});
  }

  const TicksToMicroseconds to_us;
  for (size_t d = 0; d < devices.size(); ++d) {
    const DeviceCopy& device = devices[d];
    DeviceTrace& trace = snapshot.device_traces.emplace_back();
    snapshot.statistics.push_back(to_memory_stats(device.stats.settled()));
    if (!device.present) continue;
    snapshot.devices.push_back({static_cast<int64_t>(d), device.name, device.total_memory});
    trace.reserve(device.trace.size() * 3);
    for (const RecordedEvent& event : device.trace) {
      const int64_t time_us = to_us(event.ticks);
      const StackIndex stack = index_of(event.stack);
      const auto entry = [&](TraceAction action) {
        trace.push_back({action, event.address, event.size, event.stream, time_us, stack});
      };
      switch (event.action) {
        case TraceAction::kAlloc:
          entry(TraceAction::kSegmentAlloc);
          entry(TraceAction::kAlloc);
          break;
        case TraceAction::kFreeCompleted:
          entry(TraceAction::kFreeRequested);
          entry(TraceAction::kFreeCompleted);
          entry(TraceAction::kSegmentFree);
          break;
        default:
          entry(event.action);
      }
    }
  }
  fill_outside(snapshot, nullptr);
  return snapshot;
}

void AllocationLedger::add_outside_memory(Snapshot& snapshot, InterpreterFrames* interpreter) const {
  fill_outside(snapshot, interpreter);
}

void AllocationLedger::fill_outside(Snapshot& snapshot, InterpreterFrames* interpreter) const {
  std::vector<std::pair<uintptr_t, Live>> live;
  std::vector<OutsideRecord> events;
  uint64_t dropped = 0;
  std::unordered_map<StackId, std::vector<uintptr_t>> stack_frames;
  {
    std::lock_guard lock(mutex_);
    for (const auto& entry : live_)
      if (kept_outside(entry.second.kind)) live.push_back(entry);
    events.reserve(outside_trace_.size());
    for (size_t i = 0; i < outside_trace_.size(); ++i)
      events.push_back(outside_trace_[(outside_next_ + i) % outside_trace_.size()]);
    dropped = outside_dropped_;
    const auto want = [&](StackId id) {
      if (id != kNoStack && !stack_frames.contains(id)) stack_frames.emplace(id, stacks_.frames(id));
    };
    for (const auto& [address, allocation] : live) want(allocation.stack);
    for (const OutsideRecord& event : events) {
      want(event.stack);
      want(event.origin);
    }
  }

  RecordedStackSymbolizer symbolizer(snapshot, interpreter);
  LibraryNames libraries;
  std::unordered_map<StackId, std::pair<StackIndex, std::string>> known;  // index, library
  const auto of = [&](StackId id) -> const std::pair<StackIndex, std::string>& {
    static const std::pair<StackIndex, std::string> kNone{kNoStackIndex, ""};
    if (id == kNoStack) return kNone;
    auto [it, fresh] = known.try_emplace(id);
    if (fresh) {
      const std::vector<uintptr_t>& words = stack_frames.at(id);
      it->second = {symbolizer.stack_of(words), libraries.library_of(words)};
    }
    return it->second;
  };

  const TicksToMicroseconds to_us;
  OutsideMemory outside;
  std::stable_sort(live.begin(), live.end(), [](const auto& a, const auto& b) {
    return a.second.device != b.second.device ? a.second.device < b.second.device : a.first < b.first;
  });
  outside.live.reserve(live.size());
  for (const auto& [address, allocation] : live) {
    const auto& [stack, library] = of(allocation.stack);
    outside.live.push_back({allocation.device, address, allocation.size, allocation.kind, allocation.api, library,
                            stack, to_us(allocation.ticks)});
  }
  outside.events.reserve(events.size());
  for (const OutsideRecord& event : events) {
    outside.events.push_back({event.action,
                              {event.device, event.address, event.size, event.kind, event.api, of(event.origin).second,
                               of(event.stack).first, to_us(event.ticks)}});
  }
  outside.dropped_events = dropped;
  outside.recorded_since_us = to_us(created_);
  snapshot.outside_memory = std::move(outside);
}

}  // namespace memsnap
