#include "history/history_recorder.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cstring>
#include <stdexcept>

#include "allocator/caching_allocator.h"
#include "history/stack_capture.h"

namespace memsnap {
namespace {

constexpr std::array<std::string_view, 4> kLevelNames = {"off", "state", "alloc", "all"};

// Frames of the recorder and the allocator above the user's call: capture_stack's caller
// (capture), the hook, and the allocator's own frames are dropped later by name, so only
// the capture helper itself is skipped here.
constexpr size_t kCaptureSkip = 1;

}  // namespace

std::string_view history_level_name(HistoryLevel level) {
  return kLevelNames[static_cast<size_t>(level)];
}

std::optional<HistoryLevel> history_level_from_name(std::string_view name) {
  for (size_t i = 0; i < kLevelNames.size(); ++i)
    if (kLevelNames[i] == name) return static_cast<HistoryLevel>(i);
  return std::nullopt;
}

int64_t steady_time_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

HistoryRecorder::HistoryRecorder(CachingAllocator& allocator) : allocator_(allocator) {
  for (int d = 0; d < allocator.device_count(); ++d)
    devices_.push_back(std::make_unique<DeviceRecord>());
}

HistoryRecorder::~HistoryRecorder() {
  {
    std::unique_lock gone(lifetime_->mutex);  // waits for a hook using the recorder
    lifetime_->alive = false;
  }
  allocator_.set_observer(nullptr);
}

template <typename Fn>
decltype(auto) HistoryRecorder::locked(int device, Fn&& fn) const {
  if (device < 0 || device >= device_count())
    throw std::out_of_range("history: no device " + std::to_string(device));
  DeviceRecord& record = *devices_[static_cast<size_t>(device)];
  return allocator_.device(device).with_lock([&]() -> decltype(auto) { return fn(record); });
}

void HistoryRecorder::configure(const HistorySettings& settings, std::optional<int> device) {
  if (device && (*device < 0 || *device >= device_count()))
    throw std::out_of_range("history: no device " + std::to_string(*device));
  // The walk's fallback is loaded here, not at the first capture under the allocator's lock.
  if (settings.cpp_stacks) prepare_stack_capture();
  for (int d = 0; d < device_count(); ++d) {
    if (device && *device != d) continue;
    // The recorder watches only the devices it records: an allocator with no observer runs
    // its fastest path. It starts watching before recording starts and stops after recording
    // stops, so no event is seen half-recorded.
    DeviceCachingAllocator& watched = allocator_.device(d);
    const bool records = settings.level != HistoryLevel::kOff;
    if (records) watched.set_observer(this);
    locked(d, [&](DeviceRecord& record) {
      const bool was_recording = record.settings.level != HistoryLevel::kOff;
      record.settings = settings;
      record.trace.set_capacity(settings.level >= HistoryLevel::kAlloc ? settings.max_entries : 0);
      if (records) {
        // Changes of settings are seen only while watching: the settings now are where the
        // log picks up.
        const std::string config = to_config_string(watched.config_while_locked());
        if (!was_recording) record.settings_changed = false;
        if (record.state.current(TraceStateKind::kSettings) != config) {
          if (record.state.current(TraceStateKind::kSettings)) record.settings_changed = true;
          set_state(record, TraceStateKind::kSettings, config);
        }
        // The cap now (set before recording began, or none): a trace always says its cap.
        set_state(record, TraceStateKind::kMemoryCap, memory_cap_text(watched.memory_cap_while_locked()));
      }
    });
    if (!records) watched.set_observer(nullptr);
  }
}

HistorySettings HistoryRecorder::settings(int device) const {
  return locked(device, [](const DeviceRecord& record) { return record.settings; });
}

void HistoryRecorder::clear(std::optional<int> device) {
  for (int d = 0; d < device_count(); ++d) {
    if (device && *device != d) continue;
    // Which allocations are live: asked of the allocator before taking the lock again
    // (segment_records takes it itself). Entries newer than the question stay.
    const Ticks asked_at = now_ticks();
    std::vector<uintptr_t> live;
    for (const SegmentRecord& segment : allocator_.device(d).segment_records())
      for (const BlockRecord& block : segment.blocks)
        if (block.state != BlockState::kInactive) live.push_back(block.address);
    std::sort(live.begin(), live.end());
    locked(d, [&](DeviceRecord& record) {
      record.trace.clear();
      record.annotations.clear();
      record.last_allocations.erase_if([&](const AddressHistory::Entry& entry) {
        return entry.ticks < asked_at && !std::binary_search(live.begin(), live.end(), entry.address);
      });
    });
  }
}

StackId HistoryRecorder::capture(DeviceRecord& record) const {
  if (record.settings.interpreter_stacks && interpreter_ != nullptr)
    return capture_with_interpreter(record);
  if (!record.settings.cpp_stacks) return kNoStack;
  uintptr_t frames[kMaxStackDepth];
  if (record.settings.unwinder == StackUnwinder::kFramePointers)
    return record.stacks.intern(
        frames, capture_stack_frame_pointers(frames, kMaxStackDepth, kCaptureSkip));
  // A call path walked before comes with the id it was interned as in this table (and then
  // without its frames).
  StackNote* note = nullptr;
  const size_t count =
      capture_stack(frames, kMaxStackDepth, kCaptureSkip, &note, {}, 0, record.stacks.key());
  if (note != nullptr && note->owner == record.stacks.key()) return note->value;
  const StackId id = record.stacks.intern(frames, count);
  if (note != nullptr && id != kNoStack) *note = {record.stacks.key(), id};
  return id;
}

// C++ frames up to the innermost run of the interpreter, then the interpreter's tokens: one
// interned stack. The walker's note (the id of a repeated C++ path) cannot be used here,
// since the same C++ path runs under many interpreter stacks. The interpreter's frames are
// taken first: its two innermost tokens (the line that called into C++, and its caller's)
// are the key the walker finds this line's C++ path under.
StackId HistoryRecorder::capture_with_interpreter(DeviceRecord& record) const {
  uintptr_t frames[kMaxStackDepth + kMaxInterpreterTokens];
  if (!record.settings.cpp_stacks)
    return record.stacks.intern(frames, interpreter_->capture(frames, kMaxInterpreterTokens));
  // The tokens go behind the room for C++ frames, and move down to follow them.
  uintptr_t* const tokens = frames + kMaxStackDepth;
  const size_t token_count = interpreter_->capture(tokens, kMaxInterpreterTokens);
  size_t count = 0;
  if (record.settings.unwinder == StackUnwinder::kFramePointers) {
    count = capture_stack_frame_pointers(frames, kMaxStackDepth, kCaptureSkip, interpreter_stop_);
  } else {
    const uint64_t key = token_count == 0 ? 0
                         : (tokens[0] * 0x9E3779B97F4A7C15ull) ^ (token_count > 1 ? tokens[1] : 0);
    count = capture_stack(frames, kMaxStackDepth, kCaptureSkip, nullptr, interpreter_stop_, key);
  }
  std::memmove(frames + count, tokens, token_count * sizeof(uintptr_t));  // (down, or in place)
  return record.stacks.intern(frames, count + token_count);
}

void HistoryRecorder::push(DeviceRecord& record, TraceAction action, uintptr_t address,
                           size_t size, StreamId stream, StackId stack) {
  if (skips(record, action)) return;
  record.trace.push({action, address, size, stream, now_ticks(), stack, trace_labels::current()});
}

void HistoryRecorder::on_alloc(int device, const Block& block) {
  DeviceRecord* record = record_at(device, HistoryLevel::kState);
  if (record == nullptr) return;
  StackId stack = record->segment_stack;
  record->segment_stack = kNoStack;
  if (stack == kNoStack) stack = capture(*record);
  block.observer_tag = stack;
  const Ticks now = now_ticks();
  record->last_allocations.record(block.segment->address, block.segment->size,
                                  {block.address, block.size, block.requested_size, stack, now},
                                  {block.segment->observer_hint, block.observer_hint});
  if (record->settings.level >= HistoryLevel::kAlloc && !skips(*record, TraceAction::kAlloc))
    record->trace.push({TraceAction::kAlloc, block.address, block.requested_size, block.stream, now,
                        record->settings.stack_context >= StackContext::kAlloc ? stack : kNoStack,
                        trace_labels::current()});
}

void HistoryRecorder::on_free_requested(int device, const Block& block) {
  DeviceRecord* record = record_at(device, HistoryLevel::kAll);
  if (record == nullptr) return;
  // As PyTorch: the free's own stack under context "all"; the allocation's under "alloc".
  const StackId stack = record->settings.stack_context == StackContext::kAll     ? capture(*record)
                        : record->settings.stack_context == StackContext::kAlloc ? block.observer_tag
                                                                                 : kNoStack;
  // With no other streams to wait for, the completion is reported next, on this thread, with
  // the same stack.
  record->last_freed_address = block.stream_uses.empty() ? block.address : 0;
  record->last_freed_ticks = now_ticks();
  record->last_freed_stack = stack;
  if (skips(*record, TraceAction::kFreeRequested)) return;
  record->trace.push({TraceAction::kFreeRequested, block.address, block.requested_size,
                      block.stream, record->last_freed_ticks, stack, trace_labels::current()});
}

void HistoryRecorder::on_free_completed(int device, const Block& block) {
  DeviceRecord* record = record_at(device, HistoryLevel::kAll);
  if (record == nullptr) return;
  // As PyTorch: a completion right after its free carries the free's stack (its own under
  // context "all", the allocation's under "alloc"); a deferred one (record_stream) the stack of
  // the call that completed it, a later allocation or empty_cache. Under "state" trace entries
  // carry none.
  Ticks ticks;
  StackId stack;
  if (record->last_freed_address == block.address) {
    ticks = record->last_freed_ticks;
    stack = record->last_freed_stack;
    record->last_freed_address = 0;
  } else {
    ticks = now_ticks();
    stack = record->settings.stack_context >= StackContext::kAlloc ? capture(*record) : kNoStack;
  }
  if (skips(*record, TraceAction::kFreeCompleted)) return;
  record->trace.push({TraceAction::kFreeCompleted, block.address, block.requested_size,
                      block.stream, ticks, stack, trace_labels::current()});
}

void HistoryRecorder::on_segment_alloc(int device, const Segment& segment) {
  DeviceRecord* record = record_at(device, HistoryLevel::kState);
  if (record == nullptr) return;
  // The allocation that needed this segment follows at once on this thread: one capture
  // serves both.
  record->segment_stack = capture(*record);
  if (record->settings.level >= HistoryLevel::kAll)
    push(*record, TraceAction::kSegmentAlloc, segment.address, segment.size, segment.stream,
         record->settings.stack_context >= StackContext::kAlloc ? record->segment_stack : kNoStack);
}

void HistoryRecorder::on_segment_free(int device, const Segment& segment) {
  DeviceRecord* record = record_at(device, HistoryLevel::kState);
  if (record == nullptr) return;
  record->last_allocations.forget(segment.address, segment.size);
  if (record->settings.level >= HistoryLevel::kAll)
    push(*record, TraceAction::kSegmentFree, segment.address, segment.size, segment.stream,
         capture_for(*record, StackContext::kAll));
}

void HistoryRecorder::on_segment_map(int device, const Segment& segment, uintptr_t address,
                                     size_t bytes) {
  DeviceRecord* record = record_at(device, HistoryLevel::kState);
  if (record == nullptr) return;
  // As for a new segment, the allocation that needed these pages follows on this thread.
  record->segment_stack = capture(*record);
  if (record->settings.level >= HistoryLevel::kAll)
    push(*record, TraceAction::kSegmentMap, address, bytes, segment.stream,
         record->settings.stack_context >= StackContext::kAlloc ? record->segment_stack : kNoStack);
}

void HistoryRecorder::on_segment_unmap(int device, const Segment& segment, uintptr_t address,
                                       size_t bytes) {
  DeviceRecord* record = record_at(device, HistoryLevel::kState);
  if (record == nullptr) return;
  record->last_allocations.forget(address, bytes);  // unmapped bytes keep no history
  if (record->settings.level >= HistoryLevel::kAll)
    push(*record, TraceAction::kSegmentUnmap, address, bytes, segment.stream,
         capture_for(*record, StackContext::kAll));
}

void HistoryRecorder::on_oom(int device, const OomInfo& info) {
  DeviceRecord* record = record_at(device, HistoryLevel::kState);
  if (record == nullptr) return;
  // Pages mapped for this request before it failed serve no allocation: their stack must not
  // be handed to the next one.
  record->segment_stack = kNoStack;
  if (record->settings.level < HistoryLevel::kAll) return;
  // Like PyTorch, the address of an oom entry holds the device's free bytes at the time
  // (what explain-oom and replay need), and `size` the request.
  push(*record, TraceAction::kOom, info.device_free_bytes, info.requested_bytes, info.stream,
       capture_for(*record, StackContext::kAll));
}

void HistoryRecorder::on_settings_changed(int device, const AllocatorConfig& config,
                                          const std::string& request) {
  DeviceRecord* record = record_at(device, HistoryLevel::kState);
  if (record == nullptr) return;
  record->settings_changed = true;
  set_state(*record, TraceStateKind::kSettings, to_config_string(config), request);
}

void HistoryRecorder::on_memory_cap_changed(int device, const std::optional<MemoryCap>& cap) {
  DeviceRecord* record = record_at(device, HistoryLevel::kState);
  if (record == nullptr) return;
  set_state(*record, TraceStateKind::kMemoryCap, memory_cap_text(cap));
}

void HistoryRecorder::annotate(std::string name, bool start, std::optional<int> device) {
  const int64_t now = steady_time_us();
  for (int d = 0; d < device_count(); ++d) {
    if (device && *device != d) continue;
    locked(d, [&](DeviceRecord& record) {
      if (record.settings.level == HistoryLevel::kOff) return;
      if (record.annotations.size() >= std::max<size_t>(record.settings.max_entries, 1))
        record.annotations.erase(record.annotations.begin());
      record.annotations.push_back({d, start, name, now});
    });
  }
}

void HistoryRecorder::record_snapshot_taken(int device) {
  locked(device, [&](DeviceRecord& record) {
    if (record.settings.level >= HistoryLevel::kAll)
      push(record, TraceAction::kSnapshot, 0, 0, 0, kNoStack);
  });
}

std::vector<HistoryEvent> HistoryRecorder::trace(int device) const {
  const std::vector<RecordedEvent> recorded =
      locked(device, [](const DeviceRecord& record) { return record.trace.entries(); });
  const TicksToMicroseconds to_us;
  std::vector<HistoryEvent> out;
  out.reserve(recorded.size());
  for (const RecordedEvent& e : recorded)
    out.push_back({e.action, e.address, e.size, e.stream, to_us(e.ticks), e.stack, e.label()});
  return out;
}

HistoryRecorder::TraceRead HistoryRecorder::trace_read(int device) const {
  std::vector<RecordedEvent> recorded;
  TraceRead read;
  locked(device, [&](const DeviceRecord& record) {
    recorded = record.trace.entries();
    read.changes = record.state.changes_for(record.trace.oldest_sequence(), recorded.size());
    if (!record.settings_changed)
      std::erase_if(read.changes, [](const TraceStateChange& change) {
        return change.kind == TraceStateKind::kSettings;
      });
  });
  const TicksToMicroseconds to_us;
  read.events.reserve(recorded.size());
  for (const RecordedEvent& e : recorded)
    read.events.push_back({e.action, e.address, e.size, e.stream, to_us(e.ticks), e.stack, e.label()});
  return read;
}

uint64_t HistoryRecorder::dropped_trace_entries(int device) const {
  return locked(device, [](const DeviceRecord& record) { return record.trace.dropped(); });
}

std::vector<BlockHistoryEntry> HistoryRecorder::history_within(int device, uintptr_t address,
                                                               size_t size) const {
  const std::vector<AddressHistory::Entry> kept = locked(device, [&](const DeviceRecord& record) {
    return record.last_allocations.within(address, size);
  });
  const TicksToMicroseconds to_us;
  std::vector<BlockHistoryEntry> out;
  out.reserve(kept.size());
  for (const AddressHistory::Entry& e : kept)
    out.push_back({e.address, e.block_size, e.requested_size, e.stack, to_us(e.ticks)});
  return out;
}

std::vector<Annotation> HistoryRecorder::annotations() const {
  std::vector<Annotation> out;
  for (int d = 0; d < device_count(); ++d)
    locked(d, [&](const DeviceRecord& record) {
      out.insert(out.end(), record.annotations.begin(), record.annotations.end());
    });
  return out;
}

std::vector<uintptr_t> HistoryRecorder::stack_frames(int device, StackId id) const {
  return locked(device, [&](const DeviceRecord& record) { return record.stacks.frames(id); });
}

size_t HistoryRecorder::stack_count(int device) const {
  return locked(device, [](const DeviceRecord& record) { return record.stacks.size(); });
}

ScopedAnnotation::ScopedAnnotation(HistoryRecorder& recorder, std::string name,
                                   std::optional<int> device)
    : recorder_(recorder), name_(std::move(name)), device_(device) {
  recorder_.annotate(name_, /*start=*/true, device_);
}

ScopedAnnotation::~ScopedAnnotation() {
  try {
    recorder_.annotate(name_, /*start=*/false, device_);
  } catch (const std::exception&) {
    // Out of host memory while unwinding a scope: losing one END mark is the lesser harm.
  }
}

}  // namespace memsnap
