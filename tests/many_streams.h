// The traces of tests/cli/many_streams.py, made in memory (issue 53: a trace whose every event
// is on a stream of its own took time quadratic in its events to replay and tune): every
// event on a new stream, or all on stream 0. The first half of the events allocates, each
// request 512 bytes larger than the one before from 10 MiB (a segment of its own), and the
// second half frees them in the same order, so on one stream as on many every allocation
// reserves a segment and the allocator decides the same but for the streams.
#pragma once

#include <cstdint>
#include <vector>

#include "replay/allocation_trace.h"
#include "snapshot/snapshot.h"

namespace memsnap::testing {

inline constexpr uint64_t kManyStreamsFirstSize = uint64_t{10} << 20;

// The request of allocation `id` (1, 2, ...).
inline uint64_t many_streams_size(uint64_t id) { return kManyStreamsFirstSize + 512 * (id - 1); }

inline std::vector<TraceEvent> many_streams_events(size_t count, bool one_stream) {
  std::vector<TraceEvent> out(count);
  const size_t allocs = (count + 1) / 2;
  for (size_t i = 0; i < count; ++i) {
    TraceEvent& e = out[i];
    e.kind = i < allocs ? TraceEvent::Kind::kAlloc : TraceEvent::Kind::kFree;
    e.id = i < allocs ? i + 1 : i - allocs + 1;
    e.bytes = i < allocs ? many_streams_size(e.id) : 0;
    e.stream = one_stream ? 0 : static_cast<int64_t>(i);
  }
  return out;
}

inline AllocationTrace many_streams_trace(size_t count, bool one_stream) {
  return AllocationTrace{many_streams_events(count, one_stream)};
}

// The same events as a PyTorch snapshot's trace (no segments at its end): each allocation
// after the segment_alloc that made room for it (addresses 1 GiB apart from 1 TiB), each free a
// free_requested and its free_completed; with `deferred`, every free completes only at the end
// of the trace (the replay waits for each on a stream of its own).
inline Snapshot many_streams_snapshot(size_t count, bool one_stream, bool deferred = false) {
  constexpr uint64_t kSegmentRounding = uint64_t{2} << 20;
  Snapshot snapshot;
  snapshot.source = "pytorch";
  DeviceTrace& trace = snapshot.device_traces.emplace_back();
  std::vector<TraceEntry> completions;
  int64_t time = 0;  // µs, one an entry
  for (const TraceEvent& e : many_streams_events(count, one_stream)) {
    const uint64_t address = (uint64_t{1} << 40) + (e.id << 30);
    const uint64_t size = many_streams_size(e.id);
    const auto stream = static_cast<uint64_t>(e.stream);
    if (e.kind == TraceEvent::Kind::kAlloc) {
      const uint64_t segment = (size + kSegmentRounding - 1) / kSegmentRounding * kSegmentRounding;
      trace.push_back(TraceEntry(TraceAction::kSegmentAlloc, address, segment, stream, time++));
      trace.push_back(TraceEntry(TraceAction::kAlloc, address, size, stream, time++));
      continue;
    }
    trace.push_back(TraceEntry(TraceAction::kFreeRequested, address, size, stream, time++));
    if (deferred) {
      completions.push_back(TraceEntry(TraceAction::kFreeCompleted, address, size, stream));
    } else {
      trace.push_back(TraceEntry(TraceAction::kFreeCompleted, address, size, stream, time++));
    }
  }
  for (TraceEntry& e : completions) {
    e.time_us = time++;
    trace.push_back(e);
  }
  return snapshot;
}

}  // namespace memsnap::testing
