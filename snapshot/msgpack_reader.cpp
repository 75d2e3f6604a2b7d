#include "snapshot/msgpack_reader.h"

#include "snapshot/file_contents.h"
#include "snapshot/msgpack_cursor.h"
#include "snapshot/read_budget.h"

#include <algorithm>
#include <map>
#include <stdexcept>

namespace memsnap {
namespace {

// The fewest bytes each element takes in a file: what a count stated in the file is believed
// up to when room is reserved for it (a segment is an array of 12 values, a block of 6, a
// trace event of 6, a history item of 3, a frame of 3).
constexpr size_t kMinSegmentBytes = 13, kMinBlockBytes = 7, kMinEventBytes = 7, kMinHistoryBytes = 4,
                 kMinFrameBytes = 4;
constexpr size_t kSmallString = 15;  // std::string keeps this many bytes in itself

uint64_t string_cost(std::string_view text) { return text.size() > kSmallString ? text.size() + 1 : 0; }

// Reads the document straight from its bytes (msgpack_cursor.h), each top-level field where it
// lies, in file order (memsnap writes the tables, frames and stacks, before what refers to
// them); a field met before the table it refers to is read after the walk, tables first.
class Reader {
 public:
  Reader(std::string_view bytes, const ReleaseBytes& release) : bytes_(bytes), release_(release), budget_(bytes.size()) {}

  Snapshot read() {
    MsgpackCursor in(bytes_);
    const Where file;
    if (!in.next_is_map()) throw MsgpackError("file: not a memsnap snapshot (top level is not a map)");
    const size_t count = in.map(file);
    // The format tag and version come first, so a foreign file is named as such.
    if (count < 2 || in.str(file.field("map key")) != "format" || !next_is_string(in) ||
        in.str(file.field("format")) != "memsnap-snapshot")
      throw MsgpackError("file: not a memsnap snapshot (no memsnap-snapshot format tag)");
    if (in.str(file.field("map key")) != "version") throw MsgpackError("file: the format version is missing");
    const uint64_t version = in.uint(file.field("version"));
    if (version != kSnapshotFormatVersion)
      throw MsgpackError("version: format version " + std::to_string(version) + " is not supported (this "
                         "memsnap reads version " + std::to_string(kSnapshotFormatVersion) + ")");
    // Fields are read where they lie, in file order, so each byte is passed once and pages
    // behind can go; a field that refers to a table not read yet (stacks before frames,
    // segments or traces before stacks: files from other writers) waits for the walk's end.
    bool frames_read = false;
    bool stacks_read = false;
    for (size_t i = 2; i < count; ++i) {
      std::string key(in.str(file.field("map key")));
      const bool needs_frames = key == "stacks";
      const bool needs_stacks = key == "segments" || key == "device_traces";
      if ((needs_frames && !frames_read) || (needs_stacks && !stacks_read)) {
        waiting_.emplace_back(key, in.offset());
        in.skip(file.field(waiting_.back().first));
        continue;
      }
      read_field(key, in, file);
      frames_read |= key == "frames";
      stacks_read |= key == "stacks";
      release_behind(in.offset());
    }
    if (!in.at_end())
      throw MsgpackError("trailing bytes after the snapshot at offset " + std::to_string(in.offset()));
    // Tables first: the rest refers to them.
    for (const char* table : {"frames", "stacks"})
      for (const auto& [key, offset] : waiting_)
        if (key == table) {
          MsgpackCursor value(bytes_, offset);
          read_field(key, value, file);
        }
    for (const auto& [key, offset] : waiting_)
      if (key != "frames" && key != "stacks") {
        MsgpackCursor value(bytes_, offset);
        read_field(key, value, file);
      }
    return std::move(snapshot_);
  }

 private:
  static bool next_is_string(const MsgpackCursor& in) {
    MsgpackCursor probe = in;
    try {
      probe.str(Where{});
      return true;
    } catch (const MsgpackError&) {
      return false;
    }
  }

  void read_field(const std::string& key, MsgpackCursor& value, const Where& file) {
    const Where where = file.field(key);
    if (key == "source") snapshot_.source = std::string(value.str(where));
    else if (key == "frames") read_frames(value);
    else if (key == "stacks") read_stacks(value);
    else if (key == "process") read_process(value);
    else if (key == "devices") read_devices(value);
    else if (key == "allocator_settings") read_settings(value);
    else if (key == "segments") read_segments(value);
    else if (key == "device_traces") read_traces(value);
    else if (key == "external_annotations") read_annotations(value);
    else if (key == "trace_state_changes") read_trace_state_changes(value);
    else if (key == "statistics") read_statistics(value);
    else if (key == "device_memory") read_device_memory(value, "device_memory", snapshot_.device_memory, false);
    else if (key == "device_memory_before_first_segment")
      read_device_memory(value, "device_memory_before_first_segment", snapshot_.device_memory_before_first_segment, true);
    else if (key == "outside_memory") read_outside_memory(value);
    else value.skip(where);  // unknown keys: newer writers may add fields
  }

  // Lets the file's pages before `offset` go, when the bytes are a mapped file's and nothing
  // still waits to be read from them.
  void release_behind(size_t offset) {
    if (release_ && waiting_.empty() && offset > released_ + kReleaseStep) {
      release_(released_, offset);
      released_ = offset;
    }
  }

  [[noreturn]] static void fail(const Where& where, const std::string& what) {
    throw MsgpackError(where.str() + ": " + what);
  }

  // Room for `count` more elements of `element_bytes` each, as far as the bytes left can hold
  // elements of `min_bytes` (a count the file states is not believed further), charged to the
  // budget first: a vector never grows past what is charged, since a count larger than the
  // file holds ends in an error before.
  template <typename Vector>
  void reserve(Vector& vector, size_t count, size_t min_bytes, const MsgpackCursor& in,
               size_t element_bytes = sizeof(typename Vector::value_type)) {
    const size_t room = std::min(count, in.left() / min_bytes + 1);
    budget_.charge(uint64_t{room} * element_bytes);
    vector.reserve(vector.size() + room);
  }

  // A device index from the file, before anything is sized or named by it.
  static int64_t device_index(int64_t device, const Where& where) {
    if (device < 0 || device >= static_cast<int64_t>(kMaxDevices))
      fail(where, "device " + std::to_string(device) + " is out of range (0 to " + std::to_string(kMaxDevices - 1) + ")");
    return device;
  }
  // A list by device, to be added to the `before` devices read already (a key may repeat).
  static size_t device_count(size_t count, size_t before, const Where& where) {
    if (count > kMaxDevices - std::min(before, kMaxDevices))
      fail(where, "more than " + std::to_string(kMaxDevices) + " devices");
    return count;
  }

  StackIndex stack_index(MsgpackCursor& in, const Where& where) {
    const int64_t index = in.integer(where);
    if (index == kNoStackIndex) return kNoStackIndex;
    if (index < 0 || static_cast<uint64_t>(index) >= snapshot_.stacks.size())
      fail(where, "stack index " + std::to_string(index) + " is out of range (" +
                      std::to_string(snapshot_.stacks.size()) + " stacks)");
    return index;
  }

  std::optional<int64_t> optional_int(MsgpackCursor& in, const Where& where) {
    if (in.nil()) return std::nullopt;
    return in.integer(where);
  }

  // A segment's pool: [first, second] as PyTorch's MempoolId_t; files written before pools
  // were kept hold the integer 0.
  static MempoolId pool_id(MsgpackCursor& in, const Where& where) {
    if (in.next_is_uint()) return {in.uint(where), 0};
    if (!in.next_is_array()) fail(where, "expected a pair of non-negative integers");
    in.array(where, 2);
    const uint64_t first = in.uint(where.element(0));
    return {first, in.uint(where.element(1))};
  }

  void read_frames(MsgpackCursor& in) {
    const Where where{nullptr, "frames"};
    const size_t count = in.array(where);
    reserve(snapshot_.frames, count, kMinFrameBytes, in);
    for (size_t i = 0; i < count; ++i) {
      const Where item = where.element(i);
      in.array(item, 3);
      std::string function(in.str(item));
      std::string file(in.str(item));
      budget_.charge(string_cost(function) + string_cost(file));
      snapshot_.frames.push_back({std::move(function), std::move(file), in.integer(item)});
    }
  }

  void read_stacks(MsgpackCursor& in) {
    const Where where{nullptr, "stacks"};
    const size_t count = in.array(where);
    reserve(snapshot_.stacks, count, 1, in);
    for (size_t i = 0; i < count; ++i) {
      const Where item = where.element(i);
      const size_t frames = in.array(item);
      std::vector<uint32_t>& stack = snapshot_.stacks.emplace_back();
      // (A vector's own allocation costs at least 32 bytes.)
      budget_.charge(32);
      reserve(stack, frames, 1, in);
      for (size_t j = 0; j < frames; ++j) {
        const uint64_t frame = in.uint(item.element(j));
        if (frame >= snapshot_.frames.size())
          fail(item.element(j), "frame index " + std::to_string(frame) + " is out of range (" +
                                    std::to_string(snapshot_.frames.size()) + " frames)");
        stack.push_back(static_cast<uint32_t>(frame));
      }
    }
  }

  void read_process(MsgpackCursor& in) {
    const Where where{nullptr, "process"};
    const size_t count = in.map(where);
    for (size_t i = 0; i < count; ++i) {
      const std::string key(in.str(where.field("map key")));
      const Where at = where.field(key);
      if (key == "host") snapshot_.process.host = std::string(in.str(at));
      else if (key == "pid") snapshot_.process.pid = in.integer(at);
      else if (key == "rank") snapshot_.process.rank = optional_int(in, at);
      else if (key == "local_rank") snapshot_.process.local_rank = optional_int(in, at);
      else if (key == "world_size") snapshot_.process.world_size = optional_int(in, at);
      else if (key == "time_unix_us") snapshot_.process.time_unix_us = in.integer(at);
      else if (key == "clock_offset_us") snapshot_.process.clock_offset_us = in.integer(at);
      else in.skip(at);
    }
  }

  void read_devices(MsgpackCursor& in) {
    const Where where{nullptr, "devices"};
    const size_t count = device_count(in.array(where), snapshot_.devices.size(), where);
    for (size_t i = 0; i < count; ++i) {
      const Where item = where.element(i);
      // [index, name, total_memory] and, under a cap, the cap as memory_cap.h writes it.
      const size_t fields = in.array(item);
      if (fields != 3 && fields != 4) fail(item, "expected 3 or 4 fields, got " + std::to_string(fields));
      const int64_t index = device_index(in.integer(item), item.field("index"));
      std::string name(in.str(item));
      budget_.charge(2 * sizeof(DeviceInfo) + string_cost(name));
      DeviceInfo& device = snapshot_.devices.emplace_back(DeviceInfo{index, std::move(name), in.uint(item), {}});
      if (fields == 4) {
        const std::string_view text = in.str(item.field("memory_cap"));
        budget_.charge(string_cost(text));
        std::string error;
        device.memory_cap = parse_memory_cap_text(text, &error);
        if (!error.empty()) fail(item.field("memory_cap"), error);
      }
    }
  }

  void read_settings(MsgpackCursor& in) {
    const Where where{nullptr, "allocator_settings"};
    const size_t count = in.map(where);
    for (size_t i = 0; i < count; ++i) {
      std::string key(in.str(where.field("map key")));
      std::string value(in.str(where));
      budget_.charge(2 * sizeof(snapshot_.allocator_settings[0]) + string_cost(key) + string_cost(value));
      snapshot_.allocator_settings.emplace_back(std::move(key), std::move(value));
    }
  }

  void read_segments(MsgpackCursor& in) {
    const Where where{nullptr, "segments"};
    const size_t count = in.array(where);
    reserve(snapshot_.segments, count, kMinSegmentBytes, in);
    for (size_t i = 0; i < count; ++i) {
      const Where item = where.element(i);
      in.array(item, 12);
      SnapshotSegment& s = snapshot_.segments.emplace_back();
      s.device = device_index(in.integer(item.field("device")), item.field("device"));
      s.address = in.uint(item.field("address"));
      s.total_size = in.uint(item.field("total_size"));
      s.allocated_size = in.uint(item.field("allocated_size"));
      s.active_size = in.uint(item.field("active_size"));
      s.requested_size = in.uint(item.field("requested_size"));
      s.stream = in.uint(item.field("stream"));
      s.segment_type = std::string(in.str(item.field("segment_type")));
      budget_.charge(string_cost(s.segment_type));
      s.segment_pool_id = pool_id(in, item.field("segment_pool_id"));
      s.is_expandable = in.boolean(item.field("is_expandable"));
      s.stack = stack_index(in, item.field("stack"));
      const Where blocks = item.field("blocks");
      const size_t block_count = in.array(blocks);
      reserve(s.blocks, block_count, kMinBlockBytes, in);
      for (size_t j = 0; j < block_count; ++j) read_block(in, blocks.element(j), s);
    }
  }

  void read_block(MsgpackCursor& in, const Where& where, SnapshotSegment& segment) {
    in.array(where, 6);
    SnapshotBlock& b = segment.blocks.emplace_back();
    b.address = in.uint(where.field("address"));
    b.size = in.uint(where.field("size"));
    b.requested_size = in.uint(where.field("requested_size"));
    const uint64_t state = in.uint(where.field("state"));
    if (state > static_cast<uint64_t>(BlockState::kInactive)) fail(where.field("state"), "unknown block state");
    b.state = static_cast<BlockState>(state);
    b.stack = stack_index(in, where.field("stack"));
    const Where history = where.field("history");
    const size_t items = in.array(history);
    reserve(b.history, items, kMinHistoryBytes, in);
    for (size_t k = 0; k < items; ++k) {
      const Where item = history.element(k);
      in.array(item, 3);
      const uint64_t address = in.uint(item);
      const uint64_t size = in.uint(item);
      b.history.push_back({address, size, stack_index(in, item)});
    }
  }

  void read_traces(MsgpackCursor& in) {
    const Where where{nullptr, "device_traces"};
    const size_t devices = device_count(in.array(where), snapshot_.device_traces.size(), where);
    for (size_t d = 0; d < devices; ++d) {
      const Where device = where.element(d);
      const size_t count = in.array(device);
      budget_.charge(sizeof(DeviceTrace));
      DeviceTrace& trace = snapshot_.device_traces.emplace_back();
      // A row of 24 bytes an event, and a run's time every 4,096.
      const size_t room = std::min(count, in.left() / kMinEventBytes + 1);
      budget_.charge(uint64_t{room} * 25);
      trace.reserve(room);
      uint64_t address = 0;
      int64_t time = 0;
      for (size_t i = 0; i < count; ++i) {
        const Where entry = device.element(i);
        in.array(entry, 6);
        const uint64_t action = in.uint(entry.field("action"));
        if (action >= static_cast<uint64_t>(kTraceActionCount)) fail(entry, "unknown action");
        address += static_cast<uint64_t>(in.integer(entry.field("address")));
        const uint64_t size = in.uint(entry);
        const uint64_t stream = in.uint(entry);
        time += in.integer(entry.field("time_us"));
        trace.push_back({static_cast<TraceAction>(action), address, size, stream, time, stack_index(in, entry)});
        if ((i & 0xffff) == 0) release_behind(in.offset());
      }
    }
  }

  void read_annotations(MsgpackCursor& in) {
    const Where where{nullptr, "external_annotations"};
    const size_t count = in.array(where);
    const size_t room = std::min(count, in.left() / 5 + 1);
    budget_.charge(uint64_t{room} * 24);
    snapshot_.external_annotations.reserve(snapshot_.external_annotations.size() + room);
    for (size_t i = 0; i < count; ++i) {
      const Where item = where.element(i);
      in.array(item, 4);
      const int64_t device = in.integer(item);
      std::string stage(in.str(item));
      std::string name(in.str(item));
      // (Each distinct text is kept once; charged as if each were new, past the first 16 bytes.)
      budget_.charge(string_cost(stage) + string_cost(name));
      snapshot_.external_annotations.push_back({device, std::move(stage), std::move(name), in.integer(item)});
    }
  }

  void read_trace_state_changes(MsgpackCursor& in) {
    const Where where{nullptr, "trace_state_changes"};
    const size_t devices = device_count(in.array(where), snapshot_.trace_state_changes.size(), where);
    reserve(snapshot_.trace_state_changes, devices, 1, in);
    for (size_t d = 0; d < devices; ++d) {
      const Where device = where.element(d);
      const size_t count = in.array(device);
      auto& changes = snapshot_.trace_state_changes.emplace_back();
      reserve(changes, count, 5, in);
      for (size_t i = 0; i < count; ++i) {
        const Where item = device.element(i);
        in.array(item, 4);
        const uint64_t event_index = in.uint(item);
        const std::optional<TraceStateKind> kind = trace_state_kind_from_name(in.str(item));
        if (!kind) fail(item, "unknown kind of trace state change");
        std::string value(in.str(item));
        std::string request(in.str(item));
        budget_.charge(string_cost(value) + string_cost(request));
        changes.push_back({event_index, *kind, std::move(value), std::move(request)});
      }
    }
  }

  // `name`: a literal (Where keeps a view of it). `timed`: each sample ends with its time.
  void read_device_memory(MsgpackCursor& in, std::string_view name, std::vector<DeviceMemorySample>& samples,
                          bool timed) {
    const Where where{nullptr, name};
    const size_t count = device_count(in.array(where), samples.size(), where);
    reserve(samples, count, 5, in);
    for (size_t i = 0; i < count; ++i) {
      const Where item = where.element(i);
      in.array(item, timed ? 5 : 4);
      DeviceMemorySample sample;
      sample.device = device_index(in.integer(item), item.field("device"));
      sample.total_bytes = in.uint(item.field("total"));
      sample.free_bytes = in.uint(item.field("free"));
      if (sample.free_bytes > sample.total_bytes) fail(item, "more bytes free than the device has");
      const Where listed = item.field("processes");
      const size_t processes = in.array(listed);
      reserve(sample.processes, processes, 3, in);
      for (size_t p = 0; p < processes; ++p) {
        const Where process = listed.element(p);
        in.array(process, 2);
        const int64_t pid = in.integer(process);
        sample.processes.emplace_back(pid, in.uint(process));
      }
      if (timed) sample.time_us = in.integer(item.field("time_us"));
      budget_.charge(sizeof(DeviceMemorySample) + sizeof(sample.processes[0]) * sample.processes.capacity());
      samples.push_back(std::move(sample));
    }
  }

  // The fields of an allocation outside the allocator (FORMAT.md: OutsideAllocation).
  OutsideAllocation read_outside_fields(MsgpackCursor& in, const Where& where) {
    OutsideAllocation a;
    const int64_t device = in.integer(where.field("device"));
    a.device = device == -1 ? -1 : device_index(device, where.field("device"));
    a.address = in.uint(where.field("address"));
    a.size = in.uint(where.field("size"));
    const std::optional<OutsideKind> kind = outside_kind_from_name(in.str(where.field("kind")));
    if (!kind) fail(where.field("kind"), "unknown kind of memory");
    a.kind = *kind;
    if ((a.device == -1) != is_host_memory(a.kind)) fail(where, "host memory has device -1, and only host memory");
    a.api = std::string(in.str(where.field("api")));
    a.library = std::string(in.str(where.field("library")));
    budget_.charge(string_cost(a.api) + string_cost(a.library));
    a.stack = stack_index(in, where.field("stack"));
    a.time_us = in.integer(where.field("time_us"));
    return a;
  }

  void read_outside_memory(MsgpackCursor& in) {
    const Where where{nullptr, "outside_memory"};
    OutsideMemory outside;
    const size_t keys = in.map(where);
    for (size_t k = 0; k < keys; ++k) {
      const std::string key(in.str(where.field("map key")));
      const Where at = where.field(key);
      if (key == "unrecorded_reason") {
        outside.unrecorded_reason = std::string(in.str(at));
        budget_.charge(string_cost(outside.unrecorded_reason));
      } else if (key == "live") {
        const size_t count = in.array(at);
        reserve(outside.live, count, 9, in);
        for (size_t i = 0; i < count; ++i) {
          const Where item = at.element(i);
          in.array(item, 8);
          outside.live.push_back(read_outside_fields(in, item));
        }
      } else if (key == "events") {
        const size_t count = in.array(at);
        reserve(outside.events, count, 10, in);
        for (size_t i = 0; i < count; ++i) {
          const Where item = at.element(i);
          in.array(item, 9);
          const std::optional<OutsideAction> action = outside_action_from_name(in.str(item.field("action")));
          if (!action) fail(item.field("action"), "unknown action");
          outside.events.push_back({*action, read_outside_fields(in, item)});
        }
      } else if (key == "recorded_since_us") {
        outside.recorded_since_us = in.integer(at);
      } else if (key == "dropped_events") {
        outside.dropped_events = in.uint(at);
      } else {
        in.skip(at);
      }
    }
    snapshot_.outside_memory = std::move(outside);
  }

  void read_statistics(MsgpackCursor& in) {
    const Where where{nullptr, "statistics"};
    const size_t devices = device_count(in.array(where), snapshot_.statistics.size(), where);
    for (size_t d = 0; d < devices; ++d) {
      const Where device = where.element(d);
      const size_t count = in.map(device);
      budget_.charge(sizeof(Statistics));
      Statistics& statistics = snapshot_.statistics.emplace_back();
      for (size_t i = 0; i < count; ++i) {
        std::string key(in.str(device.field("map key")));
        budget_.charge(2 * sizeof(Statistics::value_type) + string_cost(key));
        statistics.emplace_back(std::move(key), in.integer(device));
      }
    }
  }

  static constexpr size_t kReleaseStep = size_t{1} << 20;
  std::string_view bytes_;
  const ReleaseBytes& release_;
  size_t released_ = 0;  // bytes before this offset were let go
  std::vector<std::pair<std::string, size_t>> waiting_;  // fields read after the walk: key, offset
  ReadBudget budget_;
  Snapshot snapshot_;
};

}  // namespace

// memsnap's files begin with a map whose first key is "format": bytes that start another way
// are not a damaged memsnap file but something else altogether.
bool starts_like_a_memsnap_file(std::string_view bytes) {
  const auto first = static_cast<uint8_t>(bytes[0]);
  const size_t header = first == 0xde ? 3 : first == 0xdf ? 5 : (first & 0xf0) == 0x80 ? 1 : 0;
  if (header == 0) return false;
  constexpr std::string_view kFirstKey = "\xa6" "format";
  const std::string_view after = bytes.substr(std::min(bytes.size(), header));
  const size_t compared = std::min(after.size(), kFirstKey.size());
  return after.substr(0, compared) == kFirstKey.substr(0, compared);  // a cut file may end early
}

Result<Snapshot> snapshot_from_msgpack(std::string_view bytes, const ReleaseBytes& release) {
  if (bytes.empty()) return Result<Snapshot>::failure("empty file");
  if (!starts_like_a_memsnap_file(bytes))
    return Result<Snapshot>::failure("not a memsnap snapshot (nor any other snapshot memsnap reads)");
  if (bytes.size() > kMaxSnapshotFileBytes)
    return Result<Snapshot>::failure("file too large (over 2 GiB)");
  try {
    return Reader(bytes, release).read();
  } catch (const MsgpackError& error) {
    return Result<Snapshot>::failure(error.what());
  } catch (const ReadBudgetExceeded& error) {
    return Result<Snapshot>::failure(error.what());
  } catch (const std::bad_alloc&) {
    return Result<Snapshot>::failure(kNotEnoughMemoryToRead);
  } catch (const std::exception& error) {
    return Result<Snapshot>::failure(std::string("damaged file: ") + error.what());
  }
}

Result<Snapshot> read_msgpack_snapshot(const std::string& path) {
  auto bytes = read_file_contents(path, kMaxSnapshotFileBytes);
  if (!bytes) return Result<Snapshot>::failure(bytes.error());
  auto snapshot = snapshot_from_msgpack(bytes.value());
  if (!snapshot) return Result<Snapshot>::failure(path + ": " + snapshot.error());
  return snapshot;
}

}  // namespace memsnap
