// Records what happened to the allocator's memory, for snapshots: a bounded trace of events
// per device, the allocation that last lived in each stretch of memory with the C++ stack
// that asked for it, and user annotations of program phases.
//
// It watches the allocator through AllocatorObserver (a layer, not flags in the policy), so
// with recording off the allocator pays one virtual call per event. Levels, as PyTorch's:
//   off    nothing;
//   state  remember the stack of each allocation (what snapshots show for live blocks);
//   alloc  also a trace of allocations;
//   all    also frees, segment events and out-of-memory events.
// Stacks are captured as raw addresses and interned (stack_table.h); symbols are resolved
// only when a snapshot asks (symbolizer.h).
//
// Thread-safety: everything kept for a device is guarded by that device's allocator lock.
// The hooks already run under it, so recording an event takes no lock of its own; settings,
// clearing and reads take it through DeviceCachingAllocator::with_lock.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <vector>

#include "allocator/allocator_observer.h"
#include "history/address_history.h"
#include "history/interpreter_frames.h"
#include "history/stack_capture.h"
#include "history/stack_table.h"
#include "history/tick_clock.h"
#include "history/trace_ring.h"
#include "history/trace_state.h"
#include "history/trace_state_log.h"

static_assert(memsnap::kNoStack == memsnap::Block::kNoObserverTag,
              "a block without a tag reads as a block without a stack");

namespace memsnap {

class CachingAllocator;

enum class HistoryLevel : uint8_t { kOff, kState, kAlloc, kAll };
std::string_view history_level_name(HistoryLevel level);
std::optional<HistoryLevel> history_level_from_name(std::string_view name);

// Which records carry a stack, as PyTorch's `context` of _record_memory_history: kState, live
// allocations only; kAlloc, also the trace's allocations (and segments made for them), and its
// frees carry the stack of the allocation they end; kAll, frees their own stack, and segment
// releases and out-of-memory errors theirs. A free completed later than requested
// (record_stream) carries the stack of the call that completed it.
enum class StackContext : uint8_t { kState, kAlloc, kAll };

struct HistorySettings {
  HistoryLevel level = HistoryLevel::kOff;
  size_t max_entries = 100000;  // trace entries kept per device
  bool cpp_stacks = true;       // capture C++ stacks (else entries carry no stack)
  StackUnwinder unwinder = StackUnwinder::kDwarf;
  // Capture the interpreter's frames too (set_interpreter_frames names the source).
  bool interpreter_stacks = false;
  // Trace actions not to record (bit 1 << TraceAction), as PyTorch's skip_actions.
  uint32_t skipped_actions = 0;
  StackContext stack_context = StackContext::kAll;
};

// The allocation that last occupied a stretch of a segment.
struct BlockHistoryEntry {
  uintptr_t address = 0;
  size_t block_size = 0;      // bytes it occupied (after rounding)
  size_t requested_size = 0;  // bytes asked for
  StackId stack = kNoStack;
  int64_t time_us = 0;
};

struct Annotation {
  int device = 0;
  bool start = true;  // START or END of the named phase
  std::string name;
  int64_t time_us = 0;
};

// A trace entry as read back, its time in steady-clock microseconds.
struct HistoryEvent {
  TraceAction action = TraceAction::kAlloc;
  uintptr_t address = 0;
  size_t size = 0;  // requested bytes for allocations, segment bytes for segment events
  StreamId stream = 0;
  int64_t time_us = 0;
  StackId stack = kNoStack;
  LabelId label = kNoLabel;  // what the recording thread worked under (trace_labels.h)
};

int64_t steady_time_us();

class HistoryRecorder final : public AllocatorObserver {
 public:
  // Watches `allocator` (as its observer) until destroyed; records nothing until configured.
  explicit HistoryRecorder(CachingAllocator& allocator);
  ~HistoryRecorder() override;
  HistoryRecorder(const HistoryRecorder&) = delete;
  HistoryRecorder& operator=(const HistoryRecorder&) = delete;

  // Applies to one device, or to all when `device` is empty. Lowering the trace capacity
  // keeps the newest entries.
  void configure(const HistorySettings& settings, std::optional<int> device = std::nullopt);
  HistorySettings settings(int device) const;
  // Forgets the trace, annotations and the history of freed memory (live allocations keep
  // theirs, so snapshots still say who holds what). Takes each device's allocator lock.
  void clear(std::optional<int> device = std::nullopt);

  // The source of interpreter frames for settings with interpreter_stacks. Set it once,
  // before any device records them; it must outlive the recorder (snapshots resolve its
  // tokens). With its frames, a stack's C++ walk ends at the interpreter's innermost
  // evaluation loop: the frames above it are the interpreter's own.
  void set_interpreter_frames(InterpreterFrames* source) {
    interpreter_ = source;
    interpreter_stop_ = source != nullptr ? source->evaluation_loop_code() : StopCode{};
  }
  InterpreterFrames* interpreter_frames() const { return interpreter_; }

  void annotate(std::string name, bool start, std::optional<int> device = std::nullopt);
  void record_snapshot_taken(int device);


  // --- reads, for snapshots ---
  int device_count() const { return static_cast<int>(devices_.size()); }
  std::vector<HistoryEvent> trace(int device) const;
  // The trace and where the settings its events were recorded under changed (the allocator's
  // settings changed while recording: TraceStateKind::kSettings), read together so the
  // changes' event indices are those of `events`.
  struct TraceRead {
    std::vector<HistoryEvent> events;
    std::vector<TraceStateChange> changes;
  };
  TraceRead trace_read(int device) const;
  uint64_t dropped_trace_entries(int device) const;
  // History entries that lie within [address, address + size), in address order.
  std::vector<BlockHistoryEntry> history_within(int device, uintptr_t address, size_t size) const;
  std::vector<Annotation> annotations() const;
  // The frames of a stack recorded on `device`, innermost first (empty for kNoStack).
  std::vector<uintptr_t> stack_frames(int device, StackId id) const;
  size_t stack_count(int device) const;  // distinct stacks interned for `device`

  // --- AllocatorObserver ---
  void on_alloc(int device, const Block& block) override;
  void on_free_requested(int device, const Block& block) override;
  void on_free_completed(int device, const Block& block) override;
  void on_segment_alloc(int device, const Segment& segment) override;
  void on_segment_free(int device, const Segment& segment) override;
  void on_segment_map(int device, const Segment& segment, uintptr_t address, size_t bytes) override;
  void on_segment_unmap(int device, const Segment& segment, uintptr_t address,
                        size_t bytes) override;
  void on_oom(int device, const OomInfo& info) override;
  void on_settings_changed(int device, const AllocatorConfig& config, const std::string& request) override;
  void on_memory_cap_changed(int device, const std::optional<MemoryCap>& cap) override;

  // For hooks that may outlive the recorder (the out-of-memory snapshot hook lives as long as
  // the allocator): a user takes `mutex` shared and uses the recorder only while `alive`; the
  // destructor takes it exclusively (waiting for users) and clears `alive`.
  struct Lifetime {
    std::shared_mutex mutex;
    bool alive = true;
  };
  std::shared_ptr<Lifetime> lifetime() const { return lifetime_; }

 private:
  // Guarded by the device's allocator lock (see the top of this file).
  struct DeviceRecord {
    HistorySettings settings;
    TraceRing trace;
    AddressHistory last_allocations;
    StackTable stacks;
    std::vector<Annotation> annotations;
    StackId segment_stack = kNoStack;  // captured for a new segment, reused by its allocation
    // A free that completes at once is reported twice in a row (requested, completed): the
    // second report reuses the first one's time and lookup.
    uintptr_t last_freed_address = 0;
    Ticks last_freed_ticks = 0;
    StackId last_freed_stack = kNoStack;
    // The allocator's settings, and where they changed.
    TraceStateLog state;
    bool settings_changed = false;  // since recording began: only then are settings logged
  };
  void set_state(DeviceRecord& record, TraceStateKind kind, std::string value, std::string request = {}) {
    record.state.set(kind, std::move(value), record.trace.next_sequence(), record.trace.oldest_sequence(),
                     std::move(request));
  }
  // Captures a stack for a record of this context, or none when the settings ask for none.
  StackId capture_for(DeviceRecord& record, StackContext needed) const {
    return record.settings.stack_context >= needed ? capture(record) : kNoStack;
  }

  // The device's record when its level is at least `at_least`; for hooks, which hold the lock.
  DeviceRecord* record_at(int device, HistoryLevel at_least) const {
    if (device < 0 || device >= device_count()) return nullptr;
    DeviceRecord* record = devices_[static_cast<size_t>(device)].get();
    return record->settings.level >= at_least ? record : nullptr;
  }
  // Runs `fn(record)` under device `device`'s allocator lock.
  template <typename Fn>
  decltype(auto) locked(int device, Fn&& fn) const;
  StackId capture(DeviceRecord& record) const;
  static bool skips(const DeviceRecord& record, TraceAction action) {
    return (record.settings.skipped_actions >> static_cast<unsigned>(action)) & 1u;
  }
  StackId capture_with_interpreter(DeviceRecord& record) const;
  static void push(DeviceRecord& record, TraceAction action, uintptr_t address, size_t size,
                   StreamId stream, StackId stack);

  CachingAllocator& allocator_;
  std::shared_ptr<Lifetime> lifetime_ = std::make_shared<Lifetime>();
  std::vector<std::unique_ptr<DeviceRecord>> devices_;
  InterpreterFrames* interpreter_ = nullptr;
  StopCode interpreter_stop_;
};

// Names a phase of the program for as long as it lives: START when made, END when destroyed.
class ScopedAnnotation {
 public:
  ScopedAnnotation(HistoryRecorder& recorder, std::string name,
                   std::optional<int> device = std::nullopt);
  ~ScopedAnnotation();
  ScopedAnnotation(const ScopedAnnotation&) = delete;
  ScopedAnnotation& operator=(const ScopedAnnotation&) = delete;

 private:
  HistoryRecorder& recorder_;
  std::string name_;
  std::optional<int> device_;
};

}  // namespace memsnap
