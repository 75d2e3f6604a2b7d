// The bookkeeping of `memsnap record`: every allocation and free a program made itself, through
// the CUDA runtime or driver, kept as blocks of their own — no caching allocator underneath, so
// each allocation is one segment holding one block of exactly the bytes asked for.
//
// It keeps what a snapshot needs: the live allocations by address (with the stack that made
// each), a bounded trace of calls per device (the newest `max_entries`), PyTorch's statistics
// per device (allocated = reserved: nothing is cached), and interned stacks. A snapshot expands
// each call into the trace entries a caching allocator with caching off would have written —
// an allocation is segment_alloc + alloc, a free is free_requested + free_completed +
// segment_free — and its settings say caching false, so every view, explain-oom and replay
// read it as they read any snapshot (replay then asks what a caching allocator would reserve).
//
// Pinned host memory (cudaHostAlloc, cudaHostRegister, ...) is no device's: it is kept as
// memory outside any allocator (Snapshot::outside_memory), with a bounded trace of its own.
// Where a caching allocator owns the device memory the snapshot shows (memsnap.torch recording
// the other libraries' calls in its own process), device allocations are kept that way too
// (`device_memory_as_segments` false) and add_outside_memory() puts them into that snapshot.
//
// Thread-safe: one mutex, held for a map update and a ring write per call. Stacks are captured
// by the caller, outside it. Addresses are unique across devices and the host (unified
// addressing), so a free needs no device: it belongs to the allocation's.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "allocator/device_backend.h"
#include "allocator/device_stats.h"
#include "history/interpreter_frames.h"
#include "history/stack_table.h"
#include "history/trace_ring.h"
#include "snapshot/process_identity.h"
#include "snapshot/snapshot.h"

namespace memsnap {

struct LedgerSettings {
  size_t max_entries = 1000000;          // calls kept in each device's trace (and the outside trace)
  size_t max_stack_frames = size_t{16} << 20;  // stored return addresses, all stacks together
  // Device allocations as segments of their own (memsnap record), or as memory outside an
  // allocator (memsnap.torch, whose allocator's segments the snapshot already holds).
  bool device_memory_as_segments = true;
};

struct LedgerCounts {
  uint64_t allocations = 0;
  uint64_t frees = 0;
  uint64_t unknown_frees = 0;  // frees of addresses the ledger never saw allocated
  uint64_t out_of_memory = 0;
};

// A stack as captured: return addresses, innermost first.
struct CallStack {
  const uintptr_t* frames = nullptr;
  size_t count = 0;
};

class AllocationLedger {
 public:
  // Devices are numbered from 0; events on a device at or past this are not recorded.
  static constexpr int kMaxDevices = 256;

  explicit AllocationLedger(LedgerSettings settings = {});

  // `api` names the call (a string that lives as long as the program); `kind` the memory. Host
  // memory takes no device (any given is ignored).
  void allocated(int device, uintptr_t address, size_t size, StreamId stream, CallStack stack,
                 OutsideKind kind = OutsideKind::kDevice, const char* api = "");
  // False when no live allocation starts at `address` (one made before recording began, or
  // not a pointer a recorded call returned): nothing is recorded then.
  bool freed(uintptr_t address, StreamId stream, CallStack stack);
  // Frees every live allocation that starts within [address, address + size): an unmapped
  // virtual range. Returns how many.
  size_t freed_range(uintptr_t address, size_t size, StreamId stream, CallStack stack);
  // A request the device could not satisfy, with the free bytes it reported (0: unknown).
  void out_of_memory(int device, size_t requested, size_t device_free, StreamId stream,
                     CallStack stack, OutsideKind kind = OutsideKind::kDevice, const char* api = "");
  // The device's name and capacity, for the snapshot (once per device is enough).
  void describe_device(int device, const std::string& name, uint64_t total_memory);
  bool has_description(int device) const;

  LedgerCounts counts() const;
  // Everything recorded so far, symbolized. The lock is held only to copy the records out.
  Snapshot snapshot(const JobPlace& job = {}) const;
  // Sets `snapshot`'s outside_memory to what is kept as memory outside an allocator (all of it
  // when device memory is not kept as segments), its stacks added to the snapshot's tables
  // (`interpreter` resolves interpreter tokens; nullptr drops them).
  void add_outside_memory(Snapshot& snapshot, InterpreterFrames* interpreter = nullptr) const;
  // Forgets the outside trace (live allocations stay: they still hold their memory).
  void clear_outside_trace();

 private:
  struct Live {
    size_t size = 0;
    int device = 0;
    StreamId stream = 0;
    StackId stack = kNoStack;
    Ticks ticks = 0;
    const char* api = "";
    OutsideKind kind = OutsideKind::kDevice;
  };
  // An event of memory kept outside an allocator: `origin` is the allocation's stack (a free's
  // library is the allocating one's).
  struct OutsideRecord {
    Ticks ticks = 0;
    uintptr_t address = 0;
    size_t size = 0;
    const char* api = "";
    StackId stack = kNoStack;
    StackId origin = kNoStack;
    int device = -1;
    OutsideAction action = OutsideAction::kAlloc;
    OutsideKind kind = OutsideKind::kDevice;
  };
  struct DeviceRecord {
    explicit DeviceRecord(size_t max_entries) : trace(max_entries) {}
    TraceRing trace;  // kAlloc, kFreeCompleted (size: the allocation's) and kOom entries
    DeviceStats stats;
    bool described = false;
    std::string name;
    uint64_t total_memory = 0;
  };

  DeviceRecord* device_record(int device);  // under mutex_; nullptr when out of range
  bool kept_outside(OutsideKind kind) const {
    return is_host_memory(kind) || !settings_.device_memory_as_segments;
  }
  void push_outside(const OutsideRecord& record);  // under mutex_
  void fill_outside(Snapshot& snapshot, InterpreterFrames* interpreter) const;
  StackId intern(CallStack stack);          // under mutex_
  void release(std::map<uintptr_t, Live>::iterator it, StreamId stream, StackId stack, Ticks ticks);

  const LedgerSettings settings_;
  const Ticks created_;  // when recording began (OutsideMemory::recorded_since_us)
  mutable std::mutex mutex_;
  std::map<uintptr_t, Live> live_;  // by address
  std::vector<std::unique_ptr<DeviceRecord>> devices_;
  std::vector<OutsideRecord> outside_trace_;  // a ring of max_entries, the oldest at outside_next_
  size_t outside_next_ = 0;
  uint64_t outside_dropped_ = 0;
  StackTable stacks_;
  LedgerCounts counts_;
};

}  // namespace memsnap
