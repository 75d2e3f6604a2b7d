#include "snapshot/msgpack_reader.h"

#include "snapshot/file_contents.h"

#include <msgpack.hpp>

#include <algorithm>
#include <limits>
#include <stdexcept>

namespace memsnap {
namespace {

// Thrown inside the reader, turned into a Result at its edge.
struct FormatError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

[[noreturn]] void fail(const std::string& where, const std::string& what) {
  throw FormatError(where + ": " + what);
}

const msgpack::object* as_array(const msgpack::object& o, const std::string& where,
                                size_t expected = std::numeric_limits<size_t>::max()) {
  if (o.type != msgpack::type::ARRAY) fail(where, "expected an array");
  if (expected != std::numeric_limits<size_t>::max() && o.via.array.size != expected)
    fail(where, "expected " + std::to_string(expected) + " fields, found " +
                    std::to_string(o.via.array.size));
  return o.via.array.ptr;
}

uint64_t as_uint(const msgpack::object& o, const std::string& where) {
  if (o.type != msgpack::type::POSITIVE_INTEGER) fail(where, "expected a non-negative integer");
  return o.via.u64;
}

int64_t as_int(const msgpack::object& o, const std::string& where) {
  if (o.type == msgpack::type::NEGATIVE_INTEGER) return o.via.i64;
  if (o.type != msgpack::type::POSITIVE_INTEGER || o.via.u64 > uint64_t(INT64_MAX))
    fail(where, "expected an integer");
  return static_cast<int64_t>(o.via.u64);
}

std::optional<int64_t> optional_int(const msgpack::object& o, const std::string& where) {
  if (o.type == msgpack::type::NIL) return std::nullopt;
  return as_int(o, where);
}

// A segment's pool: [first, second] as PyTorch's MempoolId_t; files written before pools were
// kept hold the integer 0.
MempoolId pool_id(const msgpack::object& o, const std::string& where) {
  if (o.type == msgpack::type::POSITIVE_INTEGER) return {as_uint(o, where), 0};
  if (o.type != msgpack::type::ARRAY || o.via.array.size != 2)
    fail(where, "expected a pair of non-negative integers");
  return {as_uint(o.via.array.ptr[0], where + "[0]"), as_uint(o.via.array.ptr[1], where + "[1]")};
}

std::string as_string(const msgpack::object& o, const std::string& where) {
  if (o.type != msgpack::type::STR) fail(where, "expected a string");
  return std::string(o.via.str.ptr, o.via.str.size);
}

bool as_bool(const msgpack::object& o, const std::string& where) {
  if (o.type != msgpack::type::BOOLEAN) fail(where, "expected true or false");
  return o.via.boolean;
}

std::string at(const std::string& where, size_t index) {
  return where + "[" + std::to_string(index) + "]";
}

class Reader {
 public:
  Snapshot read(const msgpack::object& root) {
    if (root.type != msgpack::type::MAP) fail("file", "not a memsnap snapshot (top level is not a map)");
    const msgpack::object_kv* fields = root.via.map.ptr;
    const size_t count = root.via.map.size;
    // The format tag and version come first, so a foreign file is named as such.
    if (count < 2 || as_key(fields[0]) != "format" ||
        fields[0].val.type != msgpack::type::STR ||
        as_string(fields[0].val, "format") != "memsnap-snapshot")
      fail("file", "not a memsnap snapshot (no memsnap-snapshot format tag)");
    if (as_key(fields[1]) != "version") fail("file", "the format version is missing");
    const uint64_t version = as_uint(fields[1].val, "version");
    if (version != kSnapshotFormatVersion)
      fail("version", "format version " + std::to_string(version) + " is not supported (this "
                      "memsnap reads version " + std::to_string(kSnapshotFormatVersion) + ")");

    // Tables first: the rest refers to them.
    for (size_t i = 2; i < count; ++i) {
      const std::string key = as_key(fields[i]);
      if (key == "frames") read_frames(fields[i].val);
      if (key == "stacks") stacks_field_ = &fields[i].val;
    }
    if (stacks_field_ != nullptr) read_stacks(*stacks_field_);
    for (size_t i = 2; i < count; ++i) {
      const std::string key = as_key(fields[i]);
      const msgpack::object& value = fields[i].val;
      if (key == "source") snapshot_.source = as_string(value, key);
      else if (key == "process") read_process(value);
      else if (key == "devices") read_devices(value);
      else if (key == "allocator_settings") read_settings(value);
      else if (key == "segments") read_segments(value);
      else if (key == "device_traces") read_traces(value);
      else if (key == "external_annotations") read_annotations(value);
      else if (key == "statistics") read_statistics(value);
      // Unknown keys are skipped: newer writers may add fields.
    }
    return std::move(snapshot_);
  }

 private:
  static std::string as_key(const msgpack::object_kv& kv) { return as_string(kv.key, "map key"); }

  StackIndex stack_index(const msgpack::object& o, const std::string& where) {
    const int64_t index = as_int(o, where);
    if (index == kNoStackIndex) return kNoStackIndex;
    if (index < 0 || static_cast<uint64_t>(index) >= snapshot_.stacks.size())
      fail(where, "stack index " + std::to_string(index) + " is out of range (" +
                      std::to_string(snapshot_.stacks.size()) + " stacks)");
    return index;
  }

  void read_frames(const msgpack::object& o) {
    const msgpack::object* items = as_array(o, "frames");
    for (size_t i = 0; i < o.via.array.size; ++i) {
      const std::string where = at("frames", i);
      const msgpack::object* f = as_array(items[i], where, 3);
      snapshot_.frames.push_back(
          {as_string(f[0], where), as_string(f[1], where), as_int(f[2], where)});
    }
  }

  void read_stacks(const msgpack::object& o) {
    const msgpack::object* items = as_array(o, "stacks");
    for (size_t i = 0; i < o.via.array.size; ++i) {
      const std::string where = at("stacks", i);
      const msgpack::object* frames = as_array(items[i], where);
      std::vector<uint32_t>& stack = snapshot_.stacks.emplace_back();
      for (size_t j = 0; j < items[i].via.array.size; ++j) {
        const uint64_t frame = as_uint(frames[j], at(where, j));
        if (frame >= snapshot_.frames.size())
          fail(at(where, j), "frame index " + std::to_string(frame) + " is out of range (" +
                                 std::to_string(snapshot_.frames.size()) + " frames)");
        stack.push_back(static_cast<uint32_t>(frame));
      }
    }
  }

  void read_process(const msgpack::object& o) {
    if (o.type != msgpack::type::MAP) fail("process", "expected a map");
    for (size_t i = 0; i < o.via.map.size; ++i) {
      const std::string key = as_key(o.via.map.ptr[i]);
      const msgpack::object& value = o.via.map.ptr[i].val;
      const std::string where = "process." + key;
      if (key == "host") snapshot_.process.host = as_string(value, where);
      else if (key == "pid") snapshot_.process.pid = as_int(value, where);
      else if (key == "rank") snapshot_.process.rank = optional_int(value, where);
      else if (key == "local_rank") snapshot_.process.local_rank = optional_int(value, where);
      else if (key == "world_size") snapshot_.process.world_size = optional_int(value, where);
      else if (key == "time_unix_us") snapshot_.process.time_unix_us = as_int(value, where);
      else if (key == "clock_offset_us") snapshot_.process.clock_offset_us = as_int(value, where);
    }
  }

  void read_devices(const msgpack::object& o) {
    const msgpack::object* items = as_array(o, "devices");
    for (size_t i = 0; i < o.via.array.size; ++i) {
      const std::string where = at("devices", i);
      const msgpack::object* d = as_array(items[i], where, 3);
      snapshot_.devices.push_back({as_int(d[0], where), as_string(d[1], where), as_uint(d[2], where)});
    }
  }

  void read_settings(const msgpack::object& o) {
    if (o.type != msgpack::type::MAP) fail("allocator_settings", "expected a map");
    for (size_t i = 0; i < o.via.map.size; ++i)
      snapshot_.allocator_settings.emplace_back(
          as_key(o.via.map.ptr[i]), as_string(o.via.map.ptr[i].val, "allocator_settings"));
  }

  void read_segments(const msgpack::object& o) {
    const msgpack::object* items = as_array(o, "segments");
    for (size_t i = 0; i < o.via.array.size; ++i) {
      const std::string where = at("segments", i);
      const msgpack::object* f = as_array(items[i], where, 12);
      SnapshotSegment& s = snapshot_.segments.emplace_back();
      s.device = as_int(f[0], where + ".device");
      s.address = as_uint(f[1], where + ".address");
      s.total_size = as_uint(f[2], where + ".total_size");
      s.allocated_size = as_uint(f[3], where + ".allocated_size");
      s.active_size = as_uint(f[4], where + ".active_size");
      s.requested_size = as_uint(f[5], where + ".requested_size");
      s.stream = as_uint(f[6], where + ".stream");
      s.segment_type = as_string(f[7], where + ".segment_type");
      s.segment_pool_id = pool_id(f[8], where + ".segment_pool_id");
      s.is_expandable = as_bool(f[9], where + ".is_expandable");
      s.stack = stack_index(f[10], where + ".stack");
      const msgpack::object* blocks = as_array(f[11], where + ".blocks");
      for (size_t j = 0; j < f[11].via.array.size; ++j) read_block(blocks[j], at(where + ".blocks", j), s);
    }
  }

  void read_block(const msgpack::object& o, const std::string& where, SnapshotSegment& segment) {
    const msgpack::object* f = as_array(o, where, 6);
    SnapshotBlock& b = segment.blocks.emplace_back();
    b.address = as_uint(f[0], where + ".address");
    b.size = as_uint(f[1], where + ".size");
    b.requested_size = as_uint(f[2], where + ".requested_size");
    const uint64_t state = as_uint(f[3], where + ".state");
    if (state > static_cast<uint64_t>(BlockState::kInactive)) fail(where + ".state", "unknown block state");
    b.state = static_cast<BlockState>(state);
    b.stack = stack_index(f[4], where + ".stack");
    const msgpack::object* history = as_array(f[5], where + ".history");
    for (size_t k = 0; k < f[5].via.array.size; ++k) {
      const std::string item_where = at(where + ".history", k);
      const msgpack::object* h = as_array(history[k], item_where, 3);
      b.history.push_back({as_uint(h[0], item_where), as_uint(h[1], item_where),
                           stack_index(h[2], item_where)});
    }
  }

  void read_traces(const msgpack::object& o) {
    const msgpack::object* devices = as_array(o, "device_traces");
    for (size_t d = 0; d < o.via.array.size; ++d) {
      const std::string where = at("device_traces", d);
      const msgpack::object* entries = as_array(devices[d], where);
      std::vector<TraceEntry>& trace = snapshot_.device_traces.emplace_back();
      uint64_t address = 0;
      int64_t time = 0;
      for (size_t i = 0; i < devices[d].via.array.size; ++i) {
        const std::string entry_where = at(where, i);
        const msgpack::object* f = as_array(entries[i], entry_where, 6);
        const uint64_t action = as_uint(f[0], entry_where + ".action");
        if (action >= static_cast<uint64_t>(kTraceActionCount)) fail(entry_where, "unknown action");
        address += static_cast<uint64_t>(as_int(f[1], entry_where + ".address"));
        time += as_int(f[4], entry_where + ".time_us");
        trace.push_back({static_cast<TraceAction>(action), address, as_uint(f[2], entry_where),
                         as_uint(f[3], entry_where), time, stack_index(f[5], entry_where)});
      }
    }
  }

  void read_annotations(const msgpack::object& o) {
    const msgpack::object* items = as_array(o, "external_annotations");
    for (size_t i = 0; i < o.via.array.size; ++i) {
      const std::string where = at("external_annotations", i);
      const msgpack::object* f = as_array(items[i], where, 4);
      snapshot_.external_annotations.push_back(
          {as_int(f[0], where), as_string(f[1], where), as_string(f[2], where), as_int(f[3], where)});
    }
  }

  void read_statistics(const msgpack::object& o) {
    const msgpack::object* devices = as_array(o, "statistics");
    for (size_t d = 0; d < o.via.array.size; ++d) {
      if (devices[d].type != msgpack::type::MAP) fail(at("statistics", d), "expected a map");
      Statistics& statistics = snapshot_.statistics.emplace_back();
      for (size_t i = 0; i < devices[d].via.map.size; ++i)
        statistics.emplace_back(as_key(devices[d].via.map.ptr[i]),
                                as_int(devices[d].via.map.ptr[i].val, at("statistics", d)));
    }
  }

  Snapshot snapshot_;
  const msgpack::object* stacks_field_ = nullptr;
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

Result<Snapshot> snapshot_from_msgpack(std::string_view bytes) {
  if (bytes.empty()) return Result<Snapshot>::failure("empty file");
  if (!starts_like_a_memsnap_file(bytes))
    return Result<Snapshot>::failure("not a memsnap snapshot (nor any other snapshot memsnap reads)");
  if (bytes.size() > kMaxSnapshotFileBytes)
    return Result<Snapshot>::failure("file too large (over 2 GiB)");
  // Every array element and string byte needs at least one input byte, and every map entry
  // two: capping lengths by the input size bounds what the unpacker may allocate.
  const size_t n = bytes.size();
  const msgpack::unpack_limit limits(/*array=*/n, /*map=*/n / 2, /*str=*/n, /*bin=*/n,
                                     /*ext=*/n, /*depth=*/16);
  try {
    size_t offset = 0;
    msgpack::object_handle handle =
        msgpack::unpack(bytes.data(), bytes.size(), offset, nullptr, nullptr, limits);
    if (offset != bytes.size())
      return Result<Snapshot>::failure("trailing bytes after the snapshot at offset " +
                                       std::to_string(offset));
    return Reader().read(handle.get());
  } catch (const FormatError& error) {
    return Result<Snapshot>::failure(error.what());
  } catch (const msgpack::insufficient_bytes&) {
    return Result<Snapshot>::failure("file is truncated (msgpack data ends early)");
  } catch (const msgpack::depth_size_overflow&) {
    return Result<Snapshot>::failure("damaged file: nesting deeper than the format allows");
  } catch (const msgpack::size_overflow&) {
    return Result<Snapshot>::failure("damaged file: a length field exceeds the file's size");
  } catch (const msgpack::parse_error& error) {
    return Result<Snapshot>::failure(std::string("damaged file: ") + error.what());
  } catch (const std::bad_alloc&) {
    return Result<Snapshot>::failure("file too large to load in memory");
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
