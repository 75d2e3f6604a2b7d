// The narrow interface between the caching policy and a device.
//
// The policy never calls CUDA itself: it reserves and releases segments, asks for memory
// info, and records/queries events through this interface. Two implementations exist:
// `CudaBackend` (cudaMalloc & co., built when the CUDA toolkit is found) and
// `SimulatedBackend` (a deterministic fake device for tests, CI and replay).
//
// Expandable segments use a second way to get memory: a range of address space is reserved
// once, with no memory behind it, and physical pages are mapped into it and unmapped again
// as the allocator grows and shrinks the segment (the driver's virtual memory API on CUDA).
//
// A backend is shared by all of an allocator's devices and is called with the device's
// allocator lock held (except `reserve` under release_lock_on_cudamalloc), so
// implementations must be thread-safe across devices.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "memsnap/types.h"

namespace memsnap {

// A stream as the allocator sees it, StreamId, is public (memsnap/types.h): an opaque integer
// (a cudaStream_t's value on CUDA; 0 is the device's default stream).

// An event recorded on a stream; opaque to the policy.
using EventHandle = uint64_t;

struct DeviceMemoryInfo {
  size_t free_bytes = 0;
  size_t total_bytes = 0;
};

// A process using a device and the device memory it holds, as the driver's management library
// (NVML) lists them. The pid is as NVML sees it: in a container, the host's.
struct DeviceProcess {
  int64_t pid = 0;
  uint64_t bytes = 0;
  bool operator==(const DeviceProcess&) const = default;
};

// The driver's figures for a device at one moment: its memory and the processes using it.
struct DeviceMemoryFigures {
  DeviceMemoryInfo memory;
  std::vector<DeviceProcess> processes;
  int64_t time_us = 0;  // when: steady-clock µs, the clock of history's trace (steady_time_us())
};

// A device call failed for a reason other than running out of memory.
class DeviceError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class DeviceBackend {
 public:
  virtual ~DeviceBackend() = default;

  virtual std::string name() const = 0;
  virtual int device_count() const = 0;
  // The device's model as its driver names it ("NVIDIA H100 80GB HBM3"), for snapshots.
  virtual std::string device_name(int device) const { return name() + " device " + std::to_string(device); }

  // Reserves a segment of `bytes` on `device`; std::nullopt when the device is out of
  // memory (any other failure throws DeviceError).
  virtual std::optional<uintptr_t> reserve(int device, size_t bytes) = 0;
  virtual void release(int device, uintptr_t address, size_t bytes) = 0;
  virtual DeviceMemoryInfo memory_info(int device) = 0;
  // The processes using `device` and what each holds there, this one included (NVML); empty
  // where that cannot be known.
  virtual std::vector<DeviceProcess> device_processes(int /*device*/) { return {}; }

  // Events mark the point a stream has reached; the allocator uses them to know when a
  // block used on another stream may be reused.
  virtual EventHandle record_event(int device, StreamId stream) = 0;
  virtual bool event_completed(EventHandle event) = 0;
  virtual void synchronize_event(EventHandle event) = 0;
  virtual void release_event(EventHandle event) = 0;
  // A backend that knows when events complete (the simulated device, whose events complete
  // when it is told) can say on which streams they did, so the allocator looks at those
  // streams' pending frees instead of querying every stream's oldest event on each allocation.
  // Returns false when it cannot tell. Otherwise appends to `streams` each stream on which an
  // event of `device` completed after the backend's completion count was `since` (each stream
  // once, in no particular order), and sets `count` to the completion count now.
  virtual bool streams_completed_since(int /*device*/, uint64_t /*since*/, uint64_t& /*count*/,
                                       std::vector<StreamId>& /*streams*/) {
    return false;
  }

  // --- expandable segments ---
  // Whether `device` can map physical pages into reserved address space.
  virtual bool supports_expandable_segments(int device) = 0;
  // Reserves `bytes` of address space (a multiple of the page sizes used) with no memory
  // behind it; std::nullopt when no such range is left.
  virtual std::optional<uintptr_t> reserve_address_space(int device, size_t bytes) = 0;
  // Gives back a range from reserve_address_space; every page in it must be unmapped.
  virtual void release_address_space(int device, uintptr_t address, size_t bytes) = 0;
  // Backs [address, address + bytes) with memory, one separately releasable page of
  // `page_size` bytes at a time (`address` and `bytes` are multiples of it, within a
  // reserved range, not yet mapped). False, with nothing mapped, when the device is out of
  // memory (any other failure throws DeviceError).
  virtual bool map_pages(int device, uintptr_t address, size_t bytes, size_t page_size) = 0;
  // Returns the pages of [address, address + bytes) to the device, after the work queued on
  // `stream` (the segment's) has finished with them: unlike cudaFree, unmapping does not wait.
  virtual void unmap_pages(int device, uintptr_t address, size_t bytes, size_t page_size,
                           StreamId stream) = 0;

  // A new stream for work on `device` (besides stream 0, the default stream). Programs
  // that choose their backend at run time create their streams through it.
  virtual StreamId create_stream(int device) = 0;

  // --- CUDA graph capture (graph_capture_record_stream_reuse) ---
  // What a stream is capturing into: the capture's id and its terminal nodes, the graph nodes
  // the stream's next captured work will depend on. A backend that cannot tell says "not
  // capturing": blocks freed during a capture then wait for its end.
  struct CaptureState {
    bool capturing = false;
    uint64_t capture_id = 0;
    std::vector<uintptr_t> terminals;
  };
  virtual CaptureState capture_state(int /*device*/, StreamId /*stream*/) { return {}; }
  // The nodes a captured graph node depends on.
  virtual std::vector<uintptr_t> node_dependencies(int /*device*/, uintptr_t /*node*/) { return {}; }
};

}  // namespace memsnap
