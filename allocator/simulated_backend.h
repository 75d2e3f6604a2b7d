// A deterministic fake device: what CI tests, `memsnap replay` and machines without a GPU
// run on.
//
// Each device has a capacity and its own address range; segments are placed first-fit in
// address order (freed ranges are reused, as cudaMalloc tends to), so a run is reproducible.
// A caller may ask for a specific address for the next reservation (replay uses this to
// give segments the addresses a recorded run got). Tests control when events complete and
// can make reservations fail. Releasing a range that is not reserved throws, so a double
// free in the policy cannot go unnoticed.
//
// Expandable segments: address space is reserved like a segment but uses no memory; pages
// mapped into it count against the capacity as they are mapped. Mapping a page twice,
// outside reserved space, or unmapping one that is not mapped throws, as does releasing
// address space with pages still mapped. Fault injection (fail_next_reserves, the failure
// hook) applies to page mapping too: it is how the device runs out of memory there.
#pragma once

#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <unordered_map>
#include <vector>

#include "allocator/device_backend.h"

namespace memsnap {

class SimulatedBackend final : public DeviceBackend {
 public:
  struct Options {
    int device_count = 1;
    size_t capacity_bytes = size_t{80} << 30;  // per device, like an 80 GB H100
    // When true, an event counts as complete as soon as it is queried; when false it stays
    // pending until complete_events()/complete_all_events() or a synchronize.
    bool events_complete_immediately = true;
    bool supports_expandable_segments = true;
  };

  SimulatedBackend() : SimulatedBackend(Options{}) {}
  explicit SimulatedBackend(Options options);

  std::string name() const override { return "simulated"; }
  int device_count() const override { return options_.device_count; }
  std::optional<uintptr_t> reserve(int device, size_t bytes) override;
  void release(int device, uintptr_t address, size_t bytes) override;
  DeviceMemoryInfo memory_info(int device) override;
  std::vector<DeviceProcess> device_processes(int device) override;
  // What device_processes reports for `device` from now on (as NVML would list them).
  void set_device_processes(int device, std::vector<DeviceProcess> processes);
  EventHandle record_event(int device, StreamId stream) override;
  StreamId create_stream(int device) override;
  bool supports_expandable_segments(int device) override;
  std::optional<uintptr_t> reserve_address_space(int device, size_t bytes) override;
  void release_address_space(int device, uintptr_t address, size_t bytes) override;
  bool map_pages(int device, uintptr_t address, size_t bytes, size_t page_size) override;
  void unmap_pages(int device, uintptr_t address, size_t bytes, size_t page_size,
                   StreamId stream) override;
  bool event_completed(EventHandle event) override;
  void synchronize_event(EventHandle event) override;
  void release_event(EventHandle event) override;
  // Every way an event completes here is known (complete_events, a synchronize, an unmap, a
  // query while events complete immediately), so this tells, unless events complete when
  // queried: those complete without being told.
  bool streams_completed_since(int device, uint64_t since, uint64_t& count,
                               std::vector<StreamId>& streams) override;
  CaptureState capture_state(int device, StreamId stream) override;
  std::vector<uintptr_t> node_dependencies(int device, uintptr_t node) override;

  // --- a modelled CUDA graph capture (graph_capture_record_stream_reuse's tests) ---
  // Streams capture into one graph: capture_begin starts it on a stream; capture_work adds a
  // node after the stream's terminals (its new terminal); capture_wait makes `waiter` capture
  // too and follow `other`'s work (stream.wait_stream); capture_end ends it on every stream.
  void capture_begin(StreamId stream);
  uintptr_t capture_work(StreamId stream);
  void capture_wait(StreamId waiter, StreamId other);
  void capture_end(StreamId stream);

  // --- controls for tests and replay ---
  // The next successful reservation (of a segment or of address space) on `device` gets
  // `address` if that range is free (else the usual placement); 0 clears the wish.
  void prefer_address_for_next_reserve(int device, uintptr_t address);
  void fail_next_reserves(int device, int count);
  // Called before each reservation; returning true makes it fail as out of memory.
  void set_reserve_failure_hook(std::function<bool(int device, size_t bytes)> hook);
  void set_events_complete_immediately(bool immediately);
  // Each device's memory from now on (a replay's device whose other users' memory changes over
  // time). Below what is in use, every reservation fails and no memory is free.
  void set_capacity_bytes(size_t bytes);
  void complete_events(StreamId stream);  // every event recorded so far on `stream`
  void complete_all_events();

  // --- observations ---
  size_t used_bytes(int device) const;
  size_t live_segments(int device) const;
  size_t mapped_bytes(int device) const;       // pages mapped into address space (in used_bytes)
  size_t address_spaces(int device) const;     // reserved ranges for expandable segments
  uint64_t map_calls() const;
  uint64_t unmap_calls() const;
  size_t live_events() const;
  uint64_t reserve_calls() const;
  uint64_t failed_reserves() const;
  static uintptr_t base_address(int device);

 private:
  struct DeviceState {
    std::map<uintptr_t, size_t> reserved;  // address -> bytes
    std::map<uintptr_t, size_t> address_spaces;  // address -> bytes, no memory behind them
    std::map<uintptr_t, size_t> mapped_pages;    // page address -> page size
    size_t used = 0;
    int failures_pending = 0;
    std::optional<uintptr_t> preferred_address;
    // The streams on which its events completed, each at the completion count of its latest
    // completion, and the same by count (streams_completed_since reads those after a count).
    std::map<StreamId, uint64_t> completed_streams;
    std::map<uint64_t, StreamId> completions;
    std::vector<DeviceProcess> processes;  // set_device_processes
  };
  struct EventState {
    int device = 0;
    StreamId stream = 0;
    bool completed = false;
  };

  DeviceState& state(int device);
  const DeviceState& state(int device) const;
  std::optional<uintptr_t> place(int device, DeviceState& state, size_t bytes);
  bool take_failure(int device, DeviceState& state, size_t bytes);
  bool inside_address_space(const DeviceState& state, uintptr_t address, size_t bytes) const;
  bool take_range(uintptr_t address, size_t bytes);
  void return_range(uintptr_t address, size_t bytes);
  // Under mutex_: completes one event, or every event recorded so far on a stream, noting
  // the completion for streams_completed_since.
  void complete(EventHandle handle, EventState& event);
  void complete_stream(StreamId stream);
  void note_completion(int device, StreamId stream);

  Options options_;
  mutable std::mutex mutex_;
  std::vector<DeviceState> devices_;
  // Unreserved address space, shared by all devices as CUDA's unified addressing is, so a
  // preferred address (a recorded run's) can be honoured wherever it lies.
  std::map<uintptr_t, size_t> free_ranges_;  // address -> bytes, coalesced
  std::unordered_map<EventHandle, EventState> events_;
  // The events not completed yet, by stream: completing a stream's events touches only them.
  std::unordered_map<StreamId, std::set<EventHandle>> uncompleted_;
  uint64_t completion_count_ = 0;  // completions noted so far, on all devices
  EventHandle next_event_ = 1;
  StreamId next_stream_ = 1;
  std::function<bool(int, size_t)> failure_hook_;
  uint64_t reserve_calls_ = 0;
  uint64_t failed_reserves_ = 0;
  uint64_t map_calls_ = 0;
  uint64_t unmap_calls_ = 0;
  // The modelled capture: each capturing stream's terminals, every node's dependencies.
  uint64_t capture_id_ = 0;
  std::map<StreamId, std::vector<uintptr_t>> capturing_;
  std::map<uintptr_t, std::vector<uintptr_t>> node_dependencies_;
  uintptr_t next_node_ = 0x1000;
};

}  // namespace memsnap
