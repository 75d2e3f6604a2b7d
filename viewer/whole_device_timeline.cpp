#include "viewer/whole_device_timeline.h"

#include <algorithm>
#include <limits>
#include <numeric>
#include <utility>

#include "snapshot/outside_device_history.h"
#include "viewer/device_memory_account.h"
#include "viewer/memory_peaks.h"

namespace memsnap {
namespace {

// The x axis's events: the timeline's (timeline.cpp).
bool axis_event(TraceAction action) { return action == TraceAction::kAlloc || action == TraceAction::kFreeCompleted; }

// Each library's column: the libraries that held the most at any one time keep their own, the
// rest share the last. Fills `out.libraries`; returns the column of each library.
std::vector<size_t> library_columns(const OutsideDeviceHistory& changes, WholeDeviceTimeline& out) {
  std::vector<uint64_t> held(changes.before), most(changes.libraries.size(), 0);
  for (size_t i = 0; i < held.size(); ++i) most[i] = held_bytes(held[i]);
  for (const OutsideDeviceHistory::Change& change : changes.changes) {
    held[change.library] += change.bytes;
    most[change.library] = std::max(most[change.library], held_bytes(held[change.library]));
  }
  std::vector<size_t> order(changes.libraries.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t x, size_t y) {
    return most[x] != most[y] ? most[x] > most[y] : changes.libraries[x] < changes.libraries[y];
  });
  // Libraries that never held anything (a free without its allocation) have no column.
  while (!order.empty() && most[order.back()] == 0) order.pop_back();
  constexpr size_t kMax = WholeDeviceTimeline::kMaxLibraries;
  const size_t named = order.size() > kMax ? kMax - 1 : order.size();
  std::vector<size_t> column(changes.libraries.size(), named);
  for (size_t k = 0; k < named; ++k) {
    column[order[k]] = k;
    out.libraries.push_back(changes.libraries[order[k]]);
  }
  if (order.size() > named) {
    out.libraries_merged = true;
    out.libraries.push_back(std::to_string(order.size() - named) + " other libraries");
  }
  return column;
}

void describe_snapshot_figures(const Snapshot& snapshot, int64_t device, WholeDeviceTimeline& out) {
  for (const DeviceMemoryAccount& account : account_device_memory(snapshot)) {
    if (account.device != device) continue;
    out.device_total_bytes = account.total_bytes;
    out.device_free_bytes = account.free_bytes;
    out.context_bytes = account.context_bytes;
    if (account.processes_listed) out.other_processes_bytes = account.other_processes_bytes;
    out.snapshot_note = account.note;
    return;
  }
  out.snapshot_note =
      "the snapshot holds no driver figures for this device, so its size, the CUDA context and other processes are not "
      "known (PyTorch's snapshots do not sample them; memsnap's do)";
}

}  // namespace

WholeDeviceTimeline whole_device_timeline(const Snapshot& snapshot, int64_t device, const std::vector<uint64_t>& samples,
                                          uint64_t window_begin, uint64_t window_end) {
  WholeDeviceTimeline out;
  static const DeviceTrace kNoTrace;
  const DeviceTrace& trace = device >= 0 && static_cast<size_t>(device) < snapshot.device_traces.size()
                                 ? snapshot.device_traces[static_cast<size_t>(device)] : kNoTrace;
  describe_snapshot_figures(snapshot, device, out);

  // Reserved before the trace: the segments at the snapshot less what the trace's segment
  // events added.
  uint64_t reserved = 0;
  for (const SnapshotSegment& segment : snapshot.segments)
    if (segment.device == device) reserved += segment.total_size;
  // Whether the trace's events carry times to place the libraries' calls by: two of them at
  // different times.
  bool timed = false;
  uint64_t events = 0;
  std::optional<int64_t> first_time;
  for (const TraceEntry& e : trace) {
    reserved -= static_cast<uint64_t>(reserved_change(e));
    if (!axis_event(e.action)) continue;
    ++events;
    if (first_time && e.time_us != *first_time) timed = true;
    if (!first_time) first_time = e.time_us;
  }

  // From when the libraries' memory is known.
  const OutsideDeviceHistory changes = outside_device_history(snapshot, device);
  const std::vector<size_t> column = library_columns(changes, out);
  int64_t known_from_time = changes.known_from_us;
  out.libraries_note = changes.note;
  if (!timed && !out.libraries.empty() && events > 1) {
    known_from_time = std::numeric_limits<int64_t>::max();
    out.libraries_note = "the trace's events carry no times, so the calls outside the allocator cannot be placed on it";
  }

  // One walk over the trace: the allocator's reserved bytes and the libraries' after each
  // alloc and free event, kept at the samples; the peak from every event in the window.
  const size_t columns = out.libraries.size();
  std::vector<uint64_t> held(columns, 0);
  for (size_t i = 0; i < changes.before.size(); ++i)
    if (column[i] < columns) held[column[i]] += changes.before[i];
  size_t next_change = 0;
  size_t next_sample = 0;
  std::vector<bool> known(samples.size(), false);
  const auto at_event = [&](uint64_t index, uint64_t entry, int64_t time_us) {
    for (; next_change < changes.changes.size() && changes.changes[next_change].time_us <= time_us; ++next_change) {
      const OutsideDeviceHistory::Change& change = changes.changes[next_change];
      if (column[change.library] < columns) held[column[change.library]] += change.bytes;
    }
    const bool libraries_known = time_us >= known_from_time;
    uint64_t libraries_bytes = 0;
    if (libraries_known)
      for (uint64_t bytes : held) libraries_bytes += held_bytes(bytes);
    const uint64_t whole = held_bytes(reserved) + libraries_bytes;
    if (index >= window_begin && index <= window_end && (index == window_begin || whole > out.peak_bytes)) {
      out.peak_bytes = whole;
      out.peak_event = index;
      out.peak_entry = entry;
    }
    for (; next_sample < samples.size() && samples[next_sample] <= index; ++next_sample) {
      out.reserved_bytes.push_back(held_bytes(reserved));
      std::vector<uint64_t> row(columns, 0);
      if (libraries_known)
        for (size_t c = 0; c < columns; ++c) row[c] = held_bytes(held[c]);
      out.library_bytes.push_back(std::move(row));
      known[next_sample] = libraries_known;
    }
  };
  uint64_t index = 0, entry = 0;
  int64_t last_time = first_time.value_or(0);
  for (const TraceEntry& e : trace) {
    reserved += static_cast<uint64_t>(reserved_change(e));
    if (axis_event(e.action)) {
      last_time = e.time_us;
      at_event(index++, entry, e.time_us);
    }
    ++entry;
  }
  // The axis's end, past the last event: the state after the trace (named by its last entry).
  at_event(index, trace.empty() ? 0 : trace.size() - 1, last_time);
  // Samples past the axis (none from a timeline) read the end too.
  for (; next_sample < samples.size(); ++next_sample) {
    const bool first = out.reserved_bytes.empty();
    out.reserved_bytes.push_back(first ? 0 : out.reserved_bytes.back());
    out.library_bytes.push_back(first ? std::vector<uint64_t>(columns, 0) : out.library_bytes.back());
    known[next_sample] = !first && known[next_sample - 1];
  }
  out.libraries_known_from = samples.size();
  while (out.libraries_known_from > 0 && known[out.libraries_known_from - 1]) --out.libraries_known_from;
  return out;
}

}  // namespace memsnap
