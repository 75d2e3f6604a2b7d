// The Snapshot model: everything known about a process's device memory at one moment, as
// plain data (no I/O). It mirrors PyTorch's snapshot dictionary (same field names, same
// meanings) so memsnap files and PyTorch pickles load into it alike, with one difference:
// frames and stacks are stored once, in tables, and referred to by index.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "allocator/allocator_state.h"
#include "allocator/memory_cap.h"
#include "history/trace_action.h"
#include "history/trace_state.h"
#include "snapshot/annotation_list.h"
#include "snapshot/device_trace.h"

namespace memsnap {

inline constexpr uint32_t kSnapshotFormatVersion = 1;
// Devices a snapshot may name: indexes 0 to kMaxDevices - 1 (a process sees a few dozen at
// most). Readers refuse any other index before anything is sized by one.
inline constexpr size_t kMaxDevices = 1024;

std::string_view block_state_name(BlockState state);  // "active_allocated", ...
std::optional<BlockState> block_state_from_name(std::string_view name);

struct Frame {
  std::string function;
  std::string file;
  int64_t line = 0;
  bool operator==(const Frame&) const = default;
};

// The frame that joins an allocation made during autograd's backward pass to the forward call
// that created the autograd node being run: frames inner to it ran the backward, frames outer
// to it are the forward call's Python frames (PyTorch's "forward_frames"). In a stack read
// from the root: `train.py:57 <module>` ... `model.py:12 forward`, `<autograd backward>`,
// `Engine::thread_main` ... the allocation.
inline constexpr std::string_view kBackwardOfForwardFunction = "<autograd backward>";
inline bool is_backward_of_forward(const Frame& frame) {
  return frame.function == kBackwardOfForwardFunction && frame.file.empty();
}

// Where such a stack splits: the index of its joining frame, or the stack's size when it has
// none. PyTorch's layout holds the frames before it as "frames" and those after it as
// "forward_frames", traceback lines outermost first (traceback_line).
size_t forward_joint(const std::vector<Frame>& frames, const std::vector<uint32_t>& stack);
// '  File "model.py", line 12, in forward\n', as Python's traceback module writes a frame.
std::string traceback_line(const Frame& frame);

// An index into Snapshot::stacks, or kNoStackIndex.
using StackIndex = int64_t;
inline constexpr StackIndex kNoStackIndex = -1;

// An allocation that lived in a block's bytes (the newest last).
struct HistoryItem {
  uint64_t address = 0;
  uint64_t size = 0;  // bytes requested
  StackIndex stack = kNoStackIndex;
  bool operator==(const HistoryItem&) const = default;
};

struct SnapshotBlock {
  uint64_t address = 0;
  uint64_t size = 0;
  uint64_t requested_size = 0;
  BlockState state = BlockState::kInactive;
  StackIndex stack = kNoStackIndex;  // the allocation's stack, for active blocks
  std::vector<HistoryItem> history;
  bool operator==(const SnapshotBlock&) const = default;
};

struct SnapshotSegment {
  int64_t device = 0;
  uint64_t address = 0;
  uint64_t total_size = 0;
  uint64_t allocated_size = 0;
  uint64_t active_size = 0;
  uint64_t requested_size = 0;
  uint64_t stream = 0;
  std::string segment_type;  // "small" or "large"
  MempoolId segment_pool_id;  // (0,0): the global pools; else a CUDA graph's or MemPool's
  bool is_expandable = false;
  StackIndex stack = kNoStackIndex;  // of the allocation that made the segment
  std::vector<SnapshotBlock> blocks;
  bool operator==(const SnapshotSegment&) const = default;
  // Small-pool segment: by its type, or for files without one by size (small segments are
  // the 2 MiB kSmallBuffer; large ones are bigger).
  bool is_small_pool() const {
    return segment_type.empty() ? total_size <= (uint64_t{2} << 20) : segment_type == "small";
  }
};

static_assert(sizeof(TraceEntry) == 40);


struct DeviceInfo {
  int64_t index = 0;
  std::string name;
  uint64_t total_memory = 0;
  // The cap on what the allocator may reserve there when the snapshot was taken, and where it
  // came from; unset where none was set (or the file does not say: PyTorch's pickles).
  std::optional<MemoryCap> memory_cap = std::nullopt;
  bool operator==(const DeviceInfo&) const = default;
};

struct ProcessInfo {
  std::string host;
  int64_t pid = 0;
  std::optional<int64_t> rank;        // in a distributed job
  std::optional<int64_t> local_rank;  // on its host
  std::optional<int64_t> world_size;  // processes in the job
  int64_t time_unix_us = 0;   // when the snapshot was taken
  int64_t clock_offset_us = 0;  // add to a time_us to get Unix time in µs
  bool operator==(const ProcessInfo&) const = default;
};

// A device's memory as the driver saw it when the snapshot was taken: its total and free bytes
// (cudaMemGetInfo) and, where NVML answers, each process using it with the memory it holds there
// (pids as NVML sees them: in a container, the host's). What is neither free nor the allocator's
// reserved bytes was held outside the allocator: the CUDA context, other libraries, other
// processes.
struct DeviceMemorySample {
  int64_t device = 0;
  uint64_t total_bytes = 0;
  uint64_t free_bytes = 0;
  std::vector<std::pair<int64_t, uint64_t>> processes;  // pid, bytes
  // When they were taken (the trace's clock), for the figures before the allocator's first
  // segment; 0 for those of the snapshot's own moment.
  int64_t time_us = 0;
  bool operator==(const DeviceMemorySample&) const = default;
};

// Memory the process held outside the caching allocator, as the CUDA calls that made it were
// seen (CUPTI's callbacks: in the process under memsnap.torch, or under `memsnap record`):
// device memory other libraries asked CUDA for, and pinned host memory.
enum class OutsideKind : uint8_t {
  kDevice,          // cudaMalloc, cuMemAlloc, cuMemMap, ... (and the async and pitched forms)
  kManaged,         // cudaMallocManaged: on the device only where pages were touched there
  kPinnedHost,      // cudaHostAlloc, cudaMallocHost, cuMemHostAlloc: page-locked host memory
  kRegisteredHost,  // cudaHostRegister: the program's own host memory, page-locked
};
std::string_view outside_kind_name(OutsideKind kind);  // "device", "managed", "pinned_host", ...
std::optional<OutsideKind> outside_kind_from_name(std::string_view name);
inline bool is_host_memory(OutsideKind kind) {
  return kind == OutsideKind::kPinnedHost || kind == OutsideKind::kRegisteredHost;
}

struct OutsideAllocation {
  int64_t device = -1;  // -1 for host memory
  uint64_t address = 0;
  uint64_t size = 0;
  OutsideKind kind = OutsideKind::kDevice;
  std::string api;      // the call that made it: "cudaMalloc", "cuMemAlloc", "cudaHostAlloc", ...
  // The shared object that called CUDA for it: the innermost frame of its stack outside CUDA's
  // own libraries ("libnccl.so.2", "libcudnn_engines_precompiled.so.9"); "" when unknown.
  std::string library;
  StackIndex stack = kNoStackIndex;
  int64_t time_us = 0;  // when it was made (an event's: when the event happened)
  bool operator==(const OutsideAllocation&) const = default;
};

enum class OutsideAction : uint8_t { kAlloc, kFree, kOom };
std::string_view outside_action_name(OutsideAction action);  // "alloc", "free", "oom"
std::optional<OutsideAction> outside_action_from_name(std::string_view name);

// An allocation made or freed outside the allocator, or a request outside it that ran out of
// memory. A free carries what the allocation it ended carried, with the free's own stack and
// time; an out-of-memory error carries the request (address 0).
struct OutsideEvent {
  OutsideAction action = OutsideAction::kAlloc;
  OutsideAllocation allocation;
  bool operator==(const OutsideEvent&) const = default;
};

struct OutsideMemory {
  // Why the calls could not be recorded ("another tool holds CUPTI's callbacks: ..."); empty
  // when they were. Unrecorded, `live` and `events` are empty and say nothing.
  std::string unrecorded_reason;
  std::vector<OutsideAllocation> live;  // when the snapshot was taken; by device, then address
  std::vector<OutsideEvent> events;     // oldest first: the newest ones kept
  uint64_t dropped_events = 0;          // older events no longer kept
  // When the recording began (the trace's clock): memory allocated before it is not among
  // `live` or `events`. Unset in files written before it was kept.
  std::optional<int64_t> recorded_since_us;
  bool operator==(const OutsideMemory&) const = default;
};

using Statistics = std::vector<std::pair<std::string, int64_t>>;  // memory_stats() keys

struct Snapshot {
  std::string source = "memsnap";  // or "pytorch"
  std::vector<Frame> frames;
  std::vector<std::vector<uint32_t>> stacks;  // frame indices, innermost first
  std::vector<SnapshotSegment> segments;
  std::vector<DeviceTrace> device_traces;  // by device, oldest first
  // By device (may be shorter than device_traces): where what the trace's events were recorded
  // under changed (history/trace_state.h), in event order; empty when nothing was ever set.
  std::vector<std::vector<TraceStateChange>> trace_state_changes;
  // Key and value, the value as JSON text ("true", "-1", "{\"1\":0}", "\"max_split_size_mb:128\""),
  // so settings keep their types; files of older versions hold plain text.
  std::vector<std::pair<std::string, std::string>> allocator_settings;
  AnnotationList external_annotations;
  std::vector<Statistics> statistics;  // by device
  std::vector<DeviceInfo> devices;
  std::vector<DeviceMemorySample> device_memory;  // by device; empty when not sampled
  // The same figures taken once per device, just before the allocator first asked it for a
  // segment (DeviceCachingAllocator::figures_before_first_segment): what the process held there
  // then, its CUDA context as created and whatever it had allocated before. By device; empty
  // where not taken.
  std::vector<DeviceMemorySample> device_memory_before_first_segment;
  // Memory outside the allocator, where its calls were watched; unset where they were not.
  std::optional<OutsideMemory> outside_memory;
  ProcessInfo process;
  bool operator==(const Snapshot&) const = default;
};

// The devices a snapshot describes (any trace, segment or device entry), in order.
std::vector<int64_t> devices_of(const Snapshot& snapshot);
// The device whose trace has the most entries (the first of them on a tie; 0 when no trace
// has any): the one views show unless asked for another.
int64_t busiest_device(const Snapshot& snapshot);
// "" when `device` is one of them, else a one-line reason naming those there are.
std::string missing_device_error(const Snapshot& snapshot, int64_t device);

}  // namespace memsnap
