// The whole device beside a timeline of active memory: at each of the timeline's samples, what
// the allocator reserved and what each of the process's other libraries held on the device
// (from the CUDA calls recorded outside the allocator, Snapshot::outside_memory, placed on the
// trace by their times); and, once, at the snapshot, what only the driver's figures know: the
// CUDA context and the rest of this process's memory that no recorded call made, other
// processes, the device's size. Only what the data supports: where the recorded calls do not
// reach back to a sample, or the trace has no times to place them by, the libraries are not
// known there, and the note says why.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "snapshot/snapshot.h"

namespace memsnap {

struct WholeDeviceTimeline {
  std::vector<uint64_t> reserved_bytes;  // per sample: the allocator's segments on the device
  // The libraries that held device memory in the trace's span, the most at any one time first
  // ("" when the library is not known); past kMaxLibraries, the rest merge into one last entry
  // (`libraries_merged`).
  static constexpr size_t kMaxLibraries = 8;
  std::vector<std::string> libraries;
  bool libraries_merged = false;
  std::vector<std::vector<uint64_t>> library_bytes;  // per sample, by library
  // The first sample at which the libraries' memory is known (the number of samples when at
  // none); `libraries_note` says why it is not known before.
  size_t libraries_known_from = 0;
  std::string libraries_note;
  // The most the allocator and the libraries held together at any event of the window (not
  // only at the samples; the allocator's bytes alone where the libraries are not known), and at
  // which event.
  uint64_t peak_bytes = 0;
  uint64_t peak_event = 0;
  uint64_t peak_entry = 0;  // the same, as the trace numbers its entries
  // At the snapshot, from its driver figures (unset where it holds none for the device).
  std::optional<uint64_t> device_total_bytes;
  std::optional<uint64_t> device_free_bytes;
  // This process's memory that no recorded call made (the CUDA context, module images, local
  // memory): known where NVML listed the process and the calls were recorded.
  std::optional<uint64_t> context_bytes;
  std::optional<uint64_t> other_processes_bytes;  // where NVML listed the processes
  std::string snapshot_note;  // what the snapshot's figures cannot say
};

// `samples`: the timeline's event indices (alloc and free events of `device`'s trace, counted
// from 0; their count for the state after the trace), ascending, each placed at its event's
// time. [window_begin, window_end]: the event indices whose peak is asked for.
WholeDeviceTimeline whole_device_timeline(const Snapshot& snapshot, int64_t device, const std::vector<uint64_t>& samples,
                                          uint64_t window_begin, uint64_t window_end);

}  // namespace memsnap
