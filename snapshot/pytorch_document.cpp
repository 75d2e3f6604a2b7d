#include "snapshot/pytorch_document.h"

#include <algorithm>
#include <stdexcept>

#include "snapshot/pickle_extras.h"
#include "snapshot/printable.h"

namespace memsnap {

using pickle::Object;
using pickle::ObjectKind;
using pickle::Tag;
using pickle::Value;

namespace {

constexpr Value kMissing = Value::make(Tag::kHugeInt, 1);  // never produced by a document

// What the records and the model cost, charged to the store's budget (read_budget.h): with
// the tables' nodes and buckets, and a growing vector's spare room.
constexpr uint64_t kFrameCost = 64;           // a FrameKey and its node in frame_ids_
constexpr uint64_t kStackCost = 112;          // a stack's vector, its key and node in stack_ids_
constexpr uint64_t kStackFrameCost = 2 * 2 * sizeof(uint32_t);  // each frame, in the vector and the key
constexpr uint64_t kBlockCost = 48;           // a BlockRecord (40 bytes) and spare room
constexpr uint64_t kSmallString = 15;         // std::string keeps this many bytes in itself

uint64_t string_cost(std::string_view text) { return text.size() > kSmallString ? text.size() + 1 : 0; }

[[noreturn]] void fail(const std::string& where, const std::string& what) {
  throw std::runtime_error(where + ": " + what);
}

std::string at(const std::string& where, size_t index) {
  return where + "[" + std::to_string(index) + "]";
}

std::string dot(const std::string& where, std::string_view key) {
  return where.empty() ? std::string(key) : where + "." + std::string(key);
}

std::string single_quoted(std::string_view text) { return "'" + printable(text) + "'"; }

// A segment's device, before anything is sized or named by it.
int64_t check_device(int64_t device, const std::string& segment) {
  if (device < 0 || device >= static_cast<int64_t>(kMaxDevices))
    fail(dot(segment, "device"), "device " + std::to_string(device) + " is out of range (0 to " +
                                     std::to_string(kMaxDevices - 1) + ")");
  return device;
}

std::optional<TraceAction> action_from_pytorch_name(std::string_view name) {
  if (name == "free") return TraceAction::kFreeCompleted;  // PyTorch 1.13's single free event
  return trace_action_from_name(name);
}

}  // namespace

PyTorchDocument::PyTorchDocument(pickle::ValueStore& store) : store_(store) {
  auto key = [&](std::string_view name) { return store_.intern(name); };
  k_action_ = key("action"); k_addr_ = key("addr"); k_device_free_ = key("device_free");
  k_size_ = key("size"); k_stream_ = key("stream"); k_time_us_ = key("time_us");
  k_frames_ = key("frames"); k_name_ = key("name"); k_filename_ = key("filename");
  k_line_ = key("line"); k_segments_ = key("segments"); k_device_traces_ = key("device_traces");
  k_allocator_settings_ = key("allocator_settings");
  k_external_annotations_ = key("external_annotations"); k_device_ = key("device");
  k_address_ = key("address"); k_total_size_ = key("total_size");
  k_allocated_size_ = key("allocated_size"); k_active_size_ = key("active_size");
  k_requested_size_ = key("requested_size"); k_segment_type_ = key("segment_type");
  k_segment_pool_id_ = key("segment_pool_id"); k_is_expandable_ = key("is_expandable");
  k_blocks_ = key("blocks"); k_state_ = key("state"); k_history_ = key("history");
  k_real_size_ = key("real_size"); k_stage_ = key("stage"); k_source_ = key("source");
  k_format_ = key("format"); k_process_ = key("process"); k_devices_ = key("devices"); k_statistics_ = key("statistics");
  k_host_ = key("host"); k_pid_ = key("pid"); k_rank_ = key("rank");
  k_local_rank_ = key("local_rank"); k_world_size_ = key("world_size");
  k_time_unix_us_ = key("time_unix_us"); k_clock_offset_us_ = key("clock_offset_us");
  k_index_ = key("index"); k_total_memory_ = key("total_memory"); k_memory_cap_ = key("memory_cap");
  k_library_ = key("library");
  k_forward_frames_ = key("forward_frames"); k_memsnap_ = key(kPickleExtrasKey);
}

std::optional<TraceAction> PyTorchDocument::action_named(Value name) {
  const auto id = static_cast<size_t>(name.payload());
  if (id >= action_by_string_.size()) action_by_string_.resize(id + 1, -2);
  if (action_by_string_[id] == -2) {
    const auto action = action_from_pytorch_name(store_.text(name));
    action_by_string_[id] = action ? static_cast<int8_t>(*action) : -1;
  }
  if (action_by_string_[id] < 0) return std::nullopt;
  return static_cast<TraceAction>(action_by_string_[id]);
}

void PyTorchDocument::expect_input_bytes(uint64_t bytes) {
  // Room for the densest trace a pickle holds (about 40 bytes an entry): a growth would copy
  // every entry so far, and pages of the room not used are never touched.
  entries_.reserve(static_cast<size_t>(std::min<uint64_t>(bytes / 40, uint64_t{1} << 26)));
}

Value PyTorchDocument::field(const Object& dict, uint32_t key) const {
  // Snapshot dicts have a dozen keys at most: a scan beats hashing. The last one wins, as in
  // Python.
  Value found = kMissing;
  for (size_t i = 0; i + 1 < dict.items.size(); i += 2)
    if (dict.items[i].is(Tag::kString) && dict.items[i].payload() == key) found = dict.items[i + 1];
  return found;
}

bool PyTorchDocument::has_field(const Object& dict, uint32_t key) const {
  return !(field(dict, key) == kMissing);
}

uint32_t PyTorchDocument::intern_frame(const FrameKey& key) {
  auto [it, added] = frame_ids_.try_emplace(key, static_cast<uint32_t>(frames_.size()));
  if (added) {
    store_.charge(kFrameCost);
    frames_.push_back(key);
  }
  return it->second;
}

StackIndex PyTorchDocument::intern_stack(const std::vector<uint32_t>& frames) {
  std::string bytes(reinterpret_cast<const char*>(frames.data()), frames.size() * sizeof(uint32_t));
  auto [it, added] = stack_ids_.try_emplace(std::move(bytes), static_cast<StackIndex>(stacks_.size()));
  if (added) {
    store_.charge(kStackCost + kStackFrameCost * frames.size());
    stacks_.push_back(frames);
  }
  return it->second;
}

bool PyTorchDocument::parse_frame(const Object& dict, uint32_t& frame, std::string* error) {
  const Value name = field(dict, k_name_);
  const Value file = field(dict, k_filename_);
  const Value line = field(dict, k_line_);
  int64_t line_number = 0;
  if (!name.is(Tag::kString) || !file.is(Tag::kString) || !store_.get_int64(line, line_number)) {
    if (error) *error = "a frame needs string 'name' and 'filename' and an integer 'line'";
    return false;
  }
  frame = intern_frame(
      {static_cast<uint32_t>(name.payload()), static_cast<uint32_t>(file.payload()), line_number});
  return true;
}

bool PyTorchDocument::parse_stack(Value frames, StackIndex& stack, std::string* error) {
  if (frames == kMissing || frames.is(Tag::kEmptyList) || frames.is(Tag::kNone)) {
    stack = kNoStackIndex;
    return true;
  }
  if (frames.is(Tag::kLowered) && frames.lowered_kind() == kStackRecord) {
    stack = static_cast<StackIndex>(frames.lowered_index());
    return true;
  }
  if (part_ && frames.is(Tag::kOuter) && frames.payload() < kOuterStack) {
    const auto index = static_cast<uint32_t>(frames.payload());
    auto [it, added] = outer_stack_ids_.try_emplace(index, kNoStackIndex);
    if (added) {
      store_.charge(kFrameCost);
      it->second = intern_stack({kOuterStack, index});
    }
    stack = it->second;
    return true;
  }
  if (!frames.is(Tag::kObject) || store_.object(frames).kind != ObjectKind::kList) {
    if (error) *error = "expected a list of frames";
    return false;
  }
  const Object& list = store_.object(frames);
  if (list.items.empty()) {
    stack = kNoStackIndex;
    return true;
  }
  std::vector<uint32_t> ids;
  ids.reserve(list.items.size());
  for (size_t i = 0; i < list.items.size(); ++i) {
    const Value item = list.items[i];
    if (item.is(Tag::kLowered) && item.lowered_kind() == kFrameRecord) {
      ids.push_back(static_cast<uint32_t>(item.lowered_index()));
      continue;
    }
    uint32_t id = 0;
    std::string why;
    if (!item.is(Tag::kObject) || store_.object(item).kind != ObjectKind::kDict ||
        !parse_frame(store_.object(item), id, error ? &why : nullptr)) {
      if (error) *error = "[" + std::to_string(i) + "]: " + (why.empty() ? "expected a frame dict" : why);
      return false;
    }
    ids.push_back(id);
  }
  stack = intern_stack(ids);
  return true;
}

bool PyTorchDocument::parse_entry(const Object& dict, TraceEntry& entry, std::string* error) {
  auto bad = [&](const std::string& what) {
    if (error) *error = what;
    return false;
  };
  // One pass over the items (this runs once per trace entry while a pickle streams in).
  Value action = kMissing, addr = kMissing, device_free = kMissing, size = kMissing,
        stream = kMissing, time = kMissing, frames = kMissing, forward = kMissing;
  bool outside = false;
  for (size_t i = 0; i + 1 < dict.items.size(); i += 2) {
    const Value key = dict.items[i];
    if (!key.is(Tag::kString)) continue;
    const auto id = static_cast<uint32_t>(key.payload());
    const Value value = dict.items[i + 1];
    if (id == k_action_) action = value;
    else if (id == k_addr_) addr = value;
    else if (id == k_size_) size = value;
    else if (id == k_stream_) stream = value;
    else if (id == k_time_us_) time = value;
    else if (id == k_frames_) frames = value;
    else if (id == k_device_free_) device_free = value;
    else if (id == k_forward_frames_) forward = value;
    else if (id == k_library_) outside = true;
  }
  // memsnap's JSON: a call outside the allocator (outside_memory.events) names its library.
  if (outside) return bad("a call outside the allocator, not a trace entry");
  // A part cannot follow a forward call's frames (a list shared with other parts).
  if (part_ && !(forward == kMissing) && !forward.is(Tag::kNone)) return bad("forward_frames in a part");
  if (!action.is(Tag::kString)) return bad("action: expected a string");
  const auto parsed = action_named(action);
  if (!parsed) return bad("action: unknown action " + single_quoted(store_.text(action)));
  entry.action = *parsed;
  // An oom entry carries the device's free bytes where others carry an address.
  const Value address = *parsed == TraceAction::kOom && addr == kMissing ? device_free : addr;
  entry.address = 0;
  if (!(address == kMissing) && !store_.get_uint64(address, entry.address))
    return bad("addr: expected a non-negative integer");
  if (!store_.get_uint64(size, entry.size))
    return bad("size: expected a non-negative integer");
  entry.stream = 0;
  if (!(stream == kMissing)) {
    int64_t signed_stream = 0;
    if (store_.get_int64(stream, signed_stream)) entry.stream = static_cast<uint64_t>(signed_stream);
    else if (!store_.get_uint64(stream, entry.stream)) return bad("stream: expected an integer");
  }
  entry.time_us = 0;
  if (!(time == kMissing) && !store_.get_int64(time, entry.time_us))
    return bad("time_us: expected an integer");
  std::string why;
  StackIndex stack = kNoStackIndex;
  if (!parse_stack(frames, stack, error ? &why : nullptr))
    return bad("frames" + (why.empty() || why[0] == '[' ? why : ": " + why));
  entry.stack = static_cast<int32_t>(with_forward_frames(stack, forward));
  return true;
}

// A traceback line: `  File "model.py", line 12, in forward\n    y = self.fc(x)\n`.
uint32_t PyTorchDocument::forward_frame(std::string_view line) {
  constexpr std::string_view kFile = "File \"", kLine = "\", line ", kIn = ", in ";
  const size_t file_at = line.find(kFile);
  const size_t line_at = file_at == std::string_view::npos ? file_at : line.find(kLine, file_at);
  const size_t in_at = line_at == std::string_view::npos ? line_at : line.find(kIn, line_at);
  if (in_at != std::string_view::npos) {
    const std::string_view file = line.substr(file_at + kFile.size(), line_at - file_at - kFile.size());
    const std::string_view number = line.substr(line_at + kLine.size(), in_at - line_at - kLine.size());
    std::string_view name = line.substr(in_at + kIn.size());
    name = name.substr(0, name.find('\n'));
    int64_t line_number = 0;
    bool digits = !number.empty() && number.size() <= 18;
    for (char c : number) {
      digits = digits && c >= '0' && c <= '9';
      if (digits) line_number = line_number * 10 + (c - '0');
    }
    if (digits) return intern_frame({store_.intern(name), store_.intern(file), line_number});
  }
  // Not a traceback line: its first line, as the frame's name.
  std::string_view text = line.substr(std::min(line.find_first_not_of(' '), line.size()));
  text = text.substr(0, std::min<size_t>(text.find('\n'), 200));
  return intern_frame({store_.intern(text), store_.intern(""), 0});
}

StackIndex PyTorchDocument::with_forward_frames(StackIndex stack, Value forward) {
  if (!forward.is(Tag::kObject) || store_.object(forward).kind != ObjectKind::kList) return stack;
  auto [cached, fresh] = forward_suffixes_.try_emplace(forward.payload());
  std::vector<uint32_t>& suffix = cached->second;
  if (fresh) {
    const Object& lines = store_.object(forward);
    for (auto it = lines.items.rbegin(); it != lines.items.rend() && suffix.size() < kMaxForwardFrames; ++it)
      if (it->is(Tag::kString)) suffix.push_back(forward_frame(store_.text(*it)));  // innermost last there
    if (!suffix.empty())
      suffix.insert(suffix.begin(), intern_frame({store_.intern(kBackwardOfForwardFunction), store_.intern(""), 0}));
    store_.charge(kFrameCost + sizeof(uint32_t) * suffix.capacity());
  }
  if (suffix.empty()) return stack;
  std::vector<uint32_t> frames;
  if (stack != kNoStackIndex) frames = stacks_[static_cast<size_t>(stack)];
  // Each stack joined to a forward call is a new one: a file naming many stacks with a long
  // forward list must not multiply into unbounded memory. Past the budget, stacks stay as
  // recorded.
  // Nor past the room the read's budget has left (read_budget.h): the joined stacks are the
  // reader's own making, not the input's, so they stop short (leaving as much room as they
  // took, for the rest of the input) rather than refuse the file.
  const uint64_t cost = kStackCost + kStackFrameCost * (frames.size() + suffix.size());
  if (joined_frames_ + frames.size() + suffix.size() > kMaxJoinedFrames || !store_.has_room(joined_bytes_ + cost))
    return stack;
  frames.insert(frames.end(), suffix.begin(), suffix.end());
  const size_t before = stacks_.size();
  const StackIndex joined = intern_stack(frames);
  if (stacks_.size() != before) {
    joined_frames_ += frames.size();
    joined_bytes_ += cost;
  }
  return joined;
}

bool PyTorchDocument::parse_block(const Object& dict, BlockRecord& block) {
  Value address = kMissing, size = kMissing, requested = kMissing, state = kMissing, frames = kMissing;
  for (size_t i = 0; i + 1 < dict.items.size(); i += 2) {
    const Value key = dict.items[i];
    if (!key.is(Tag::kString)) return false;
    const auto id = static_cast<uint32_t>(key.payload());
    const Value value = dict.items[i + 1];
    if (id == k_address_) address = value;
    else if (id == k_size_) size = value;
    else if (id == k_requested_size_) requested = value;
    else if (id == k_state_) state = value;
    else if (id == k_frames_) frames = value;
    else return false;  // history, forward_frames, anything else: the conversion's
  }
  if (!store_.get_uint64(address, block.address) || !store_.get_uint64(size, block.size)) return false;
  block.requested_size = block.size;
  if (!(requested == kMissing) && !store_.get_uint64(requested, block.requested_size)) return false;
  if (!state.is(Tag::kString)) return false;
  const auto parsed = block_state_from_name(store_.text(state));
  if (!parsed) return false;
  block.state = *parsed;
  StackIndex stack = kNoStackIndex;
  if (!parse_stack(frames, stack, nullptr)) return false;
  block.stack = stack;
  return true;
}

Value PyTorchDocument::lower(pickle::ValueStore& store, Value object) {
  const Object& o = store.object(object);
  if (o.kind == ObjectKind::kList) {
    if (o.items.empty()) return Value::make(Tag::kEmptyList);
    for (const Value item : o.items) {
      const bool frame = item.is(Tag::kLowered) && item.lowered_kind() == kFrameRecord;
      const bool outer_frame = part_ && item.is(Tag::kOuter) && item.payload() < kOuterFrame - 1;
      if (!frame && !outer_frame) return object;
    }
    scratch_frames_.clear();
    for (const Value item : o.items)
      scratch_frames_.push_back(item.is(Tag::kOuter) ? kOuterFrame | static_cast<uint32_t>(item.payload())
                                                     : static_cast<uint32_t>(item.lowered_index()));
    return Value::lowered(kStackRecord, static_cast<uint64_t>(intern_stack(scratch_frames_)));
  }
  if (o.kind != ObjectKind::kDict) return object;
  if (has_field(o, k_action_)) {
    TraceEntry entry;
    if (!parse_entry(o, entry, nullptr)) return object;  // the conversion will say why
    store_.charge(kEntryCost);
    entries_.push_back(entry);
    return Value::lowered(kEntryRecord, entries_.size() - 1);
  }
  if (o.items.size() <= 8 && has_field(o, k_filename_) && has_field(o, k_line_)) {
    uint32_t frame = 0;
    if (parse_frame(o, frame, nullptr)) return Value::lowered(kFrameRecord, frame);
  }
  // (Not in a part decoded alone: its blocks are read in order, as before.)
  if (!part_ && o.items.size() <= 10 && has_field(o, k_state_)) {
    BlockRecord block;
    if (parse_block(o, block)) {
      store_.charge(kBlockCost);
      blocks_.push_back(block);
      return Value::lowered(kBlockRecord, blocks_.size() - 1);
    }
  }
  return object;
}

// ---------------------------------------------------------------- conversion

const Object& PyTorchDocument::dict_at(Value v, const std::string& where) const {
  if (!v.is(Tag::kObject) || store_.object(v).kind != ObjectKind::kDict) fail(where, "expected a dict");
  return store_.object(v);
}

const Object& PyTorchDocument::list_at(Value v, const std::string& where) const {
  static const Object kEmpty{};
  if (v.is(Tag::kEmptyList)) return kEmpty;
  if (!v.is(Tag::kObject) || (store_.object(v).kind != ObjectKind::kList &&
                              store_.object(v).kind != ObjectKind::kTuple))
    fail(where, "expected a list");
  return store_.object(v);
}

uint64_t PyTorchDocument::uint_field(const Object& dict, uint32_t key, const std::string& where,
                                     uint64_t fallback, bool required) const {
  const Value v = field(dict, key);
  if (v == kMissing) {
    if (required) fail(dot(where, store_.text(key)), "missing");
    return fallback;
  }
  uint64_t out = 0;
  if (!store_.get_uint64(v, out)) fail(dot(where, store_.text(key)), "expected a non-negative integer");
  return out;
}

int64_t PyTorchDocument::int_field(const Object& dict, uint32_t key, const std::string& where,
                                   int64_t fallback) const {
  const Value v = field(dict, key);
  if (v == kMissing || v.is(Tag::kNone)) return fallback;
  int64_t out = 0;
  if (!store_.get_int64(v, out)) fail(dot(where, store_.text(key)), "expected an integer");
  return out;
}

std::optional<int64_t> PyTorchDocument::optional_int_field(const Object& dict, uint32_t key,
                                                           const std::string& where) const {
  const Value v = field(dict, key);
  if (v == kMissing || v.is(Tag::kNone)) return std::nullopt;
  return int_field(dict, key, where, 0);
}

std::string PyTorchDocument::string_field(const Object& dict, uint32_t key, const std::string& where,
                                          std::string fallback) const {
  const Value v = field(dict, key);
  if (v == kMissing) return fallback;
  if (!v.is(Tag::kString)) fail(dot(where, store_.text(key)), "expected a string");
  return std::string(store_.text(v));
}

StackIndex PyTorchDocument::stack_field(const Object& dict, uint32_t key, const std::string& where) {
  StackIndex stack = kNoStackIndex;
  std::string why;
  if (!parse_stack(field(dict, key), stack, &why))
    throw std::runtime_error(dot(where, store_.text(key)) + (why[0] == '[' ? "" : ": ") + why);
  return with_forward_frames(stack, field(dict, k_forward_frames_));
}

SnapshotBlock PyTorchDocument::convert_block(Value v, uint64_t expected_address,
                                             const std::string& where) {
  const Object& dict = dict_at(v, where);
  SnapshotBlock block;
  block.address = uint_field(dict, k_address_, where, expected_address);
  block.size = uint_field(dict, k_size_, where, 0, true);
  block.requested_size = uint_field(dict, k_requested_size_, where, block.size);
  const std::string state = string_field(dict, k_state_, where, "");
  const auto parsed = block_state_from_name(state);
  if (!parsed) fail(dot(where, "state"), "unknown block state " + single_quoted(state));
  block.state = *parsed;
  block.stack = stack_field(dict, k_frames_, where);
  const Value history = field(dict, k_history_);
  if (!(history == kMissing)) {
    const std::string history_where = dot(where, "history");
    const Object& items = list_at(history, history_where);
    for (size_t i = 0; i < items.items.size(); ++i) {
      const std::string item_where = at(history_where, i);
      const Object& item = dict_at(items.items[i], item_where);
      HistoryItem h;
      store_.charge(2 * sizeof(HistoryItem));
      h.address = uint_field(item, k_addr_, item_where, block.address);
      h.size = uint_field(item, k_real_size_, item_where, 0);
      h.stack = stack_field(item, k_frames_, item_where);
      block.history.push_back(h);
    }
    // PyTorch kept block history newest first (a linked list grown at its head); the model
    // keeps it newest last, as memsnap writes it.
    if (pytorch_source_) std::reverse(block.history.begin(), block.history.end());
    // Old layouts name an active block's stack only through its newest history item.
    if (block.stack == kNoStackIndex && block.state != BlockState::kInactive && !block.history.empty())
      block.stack = block.history.back().stack;
  }
  return block;
}

void PyTorchDocument::check_segment(Value v, size_t index) const {
  const std::string where = at("segments", index);
  const Object& dict = dict_at(v, where);
  check_device(int_field(dict, k_device_, where, 0), where);
  uint_field(dict, k_address_, where, 0, true);
  uint_field(dict, k_total_size_, where, 0, true);
}

SnapshotSegment PyTorchDocument::convert_segment(Value v, const std::string& where) {
  const Object& dict = dict_at(v, where);
  SnapshotSegment segment;
  segment.device = check_device(int_field(dict, k_device_, where, 0), where);
  segment.address = uint_field(dict, k_address_, where, 0, true);
  segment.total_size = uint_field(dict, k_total_size_, where, 0, true);
  segment.stream = static_cast<uint64_t>(int_field(dict, k_stream_, where, 0));
  segment.segment_type = string_field(dict, k_segment_type_, where, "large");
  const Value pool = field(dict, k_segment_pool_id_);
  if (pool.is(Tag::kObject) && (store_.object(pool).kind == ObjectKind::kTuple ||
                                 store_.object(pool).kind == ObjectKind::kList)) {
    // PyTorch's MempoolId_t pair (a list in JSON): (0, 0) is the default pool, (n, 0) a graph's,
    // (0, n) a user's.
    const auto& parts = store_.object(pool).items;
    int64_t first = 0, second = 0;
    if (parts.size() != 2 || !store_.get_int64(parts[0], first) ||
        !store_.get_int64(parts[1], second) || first < 0 || second < 0)
      fail(dot(where, "segment_pool_id"), "expected a pair of non-negative integers");
    segment.segment_pool_id = {static_cast<uint64_t>(first), static_cast<uint64_t>(second)};
  } else {
    // A single number (older files): a graph's pool when not 0.
    const int64_t id = int_field(dict, k_segment_pool_id_, where, 0);
    if (id < 0) fail(dot(where, "segment_pool_id"), "negative");
    segment.segment_pool_id = {static_cast<uint64_t>(id), 0};
  }
  const Value expandable = field(dict, k_is_expandable_);
  segment.is_expandable = expandable.is(Tag::kTrue);
  segment.stack = stack_field(dict, k_frames_, where);
  const std::string blocks_where = dot(where, "blocks");
  const Object& blocks = list_at(field(dict, k_blocks_) == kMissing ? Value::make(Tag::kEmptyList)
                                                                    : field(dict, k_blocks_),
                                 blocks_where);
  uint64_t next_address = segment.address;
  uint64_t allocated = 0, active = 0, requested = 0;
  store_.charge(sizeof(SnapshotBlock) * blocks.items.size());
  segment.blocks.reserve(blocks.items.size());
  for (size_t i = 0; i < blocks.items.size(); ++i) {
    const Value item = blocks.items[i];
    SnapshotBlock block;
    if (item.is(Tag::kLowered) && item.lowered_kind() == kBlockRecord && item.lowered_index() < blocks_.size()) {
      const BlockRecord& record = blocks_[item.lowered_index()];
      block.address = record.address;
      block.size = record.size;
      block.requested_size = record.requested_size;
      block.state = record.state;
      block.stack = record.stack;
    } else {
      block = convert_block(item, next_address, at(blocks_where, i));
    }
    next_address = block.address + block.size;
    if (block.state == BlockState::kActiveAllocated) {
      allocated += block.size;
      requested += block.requested_size;
    }
    if (block.state != BlockState::kInactive) active += block.size;
    segment.blocks.push_back(std::move(block));
  }
  segment.allocated_size = uint_field(dict, k_allocated_size_, where, allocated);
  segment.active_size = uint_field(dict, k_active_size_, where, active);
  segment.requested_size = uint_field(dict, k_requested_size_, where, requested);
  return segment;
}

DeviceTrace PyTorchDocument::convert_trace(Value v, const std::string& where) {
  const Object& list = list_at(v, where);
  DeviceTrace trace;
  // The common case: one device whose entries were lowered in order, while streaming.
  bool whole_in_order = list.items.size() == entries_.size();
  for (size_t i = 0; whole_in_order && i < list.items.size(); ++i)
    whole_in_order = list.items[i] == Value::lowered(kEntryRecord, i);
  if (whole_in_order) return std::move(entries_);
  store_.charge(kEntryCost * list.items.size());
  trace.reserve(list.items.size());
  for (size_t i = 0; i < list.items.size(); ++i) {
    const Value item = list.items[i];
    if (item.is(Tag::kLowered) && item.lowered_kind() == kEntryRecord && item.lowered_index() < entries_.size()) {
      trace.push_back(entries_[item.lowered_index()]);
      continue;
    }
    const std::string entry_where = at(where, i);
    TraceEntry entry;
    std::string why;
    if (!parse_entry(dict_at(item, entry_where), entry, &why))
      throw std::runtime_error(entry_where + "." + why);
    trace.push_back(entry);
  }
  return trace;
}

void PyTorchDocument::convert_extras(const Object& root, Snapshot& out) {
  out.source = string_field(root, k_source_, "", "pytorch");
  const Value settings = field(root, k_allocator_settings_);
  if (!(settings == kMissing)) {
    const Object& dict = dict_at(settings, "allocator_settings");
    for (size_t i = 0; i + 1 < dict.items.size(); i += 2) {
      out.allocator_settings.emplace_back(store_.repr(dict.items[i]), store_.json_text(dict.items[i + 1]));
      store_.charge(2 * sizeof(out.allocator_settings[0]) + string_cost(out.allocator_settings.back().first) +
                    string_cost(out.allocator_settings.back().second));
    }
  }
  const Value annotations = field(root, k_external_annotations_);
  if (!(annotations == kMissing)) {
    const Object& list = list_at(annotations, "external_annotations");
    for (size_t i = 0; i < list.items.size(); ++i) {
      const std::string where = at("external_annotations", i);
      const Object& a = dict_at(list.items[i], where);
      store_.charge(2 * sizeof(int64_t) * 3);  // a row of the AnnotationList
      out.external_annotations.push_back({int_field(a, k_device_, where, 0),
                                          string_field(a, k_stage_, where, ""),
                                          string_field(a, k_name_, where, ""),
                                          int_field(a, k_time_us_, where, 0)});
    }
  }
  // memsnap's JSON export: process, devices and statistics.
  const Value process = field(root, k_process_);
  if (!(process == kMissing)) {
    const Object& p = dict_at(process, "process");
    out.process.host = string_field(p, k_host_, "process", "");
    out.process.pid = int_field(p, k_pid_, "process", 0);
    out.process.rank = optional_int_field(p, k_rank_, "process");
    out.process.local_rank = optional_int_field(p, k_local_rank_, "process");
    out.process.world_size = optional_int_field(p, k_world_size_, "process");
    out.process.time_unix_us = int_field(p, k_time_unix_us_, "process", 0);
    out.process.clock_offset_us = int_field(p, k_clock_offset_us_, "process", 0);
  }
  const Value devices = field(root, k_devices_);
  if (!(devices == kMissing)) {
    const Object& list = list_at(devices, "devices");
    if (list.items.size() > kMaxDevices) fail("devices", "more than " + std::to_string(kMaxDevices) + " devices");
    for (size_t i = 0; i < list.items.size(); ++i) {
      const std::string where = at("devices", i);
      const Object& d = dict_at(list.items[i], where);
      store_.charge(2 * sizeof(DeviceInfo));
      const int64_t index = int_field(d, k_index_, where, 0);
      if (index < 0 || index >= static_cast<int64_t>(kMaxDevices))
        fail(dot(where, "index"), "device " + std::to_string(index) + " is out of range (0 to " +
                                      std::to_string(kMaxDevices - 1) + ")");
      DeviceInfo& device =
          out.devices.emplace_back(DeviceInfo{index, string_field(d, k_name_, where, ""), uint_field(d, k_total_memory_, where, 0), {}});
      const std::string cap = string_field(d, k_memory_cap_, where, "none");
      std::string error;
      device.memory_cap = parse_memory_cap_text(cap, &error);
      if (!error.empty()) fail(dot(where, "memory_cap"), error);
    }
  }
  convert_memsnap_extras(root, out);
  const Value statistics = field(root, k_statistics_);
  if (!(statistics == kMissing)) {
    const Object& list = list_at(statistics, "statistics");
    if (list.items.size() > kMaxDevices) fail("statistics", "more than " + std::to_string(kMaxDevices) + " devices");
    for (size_t i = 0; i < list.items.size(); ++i) {
      const std::string where = at("statistics", i);
      const Object& d = dict_at(list.items[i], where);
      Statistics values;
      for (size_t k = 0; k + 1 < d.items.size(); k += 2) {
        int64_t value = 0;
        if (!d.items[k].is(Tag::kString) || !store_.get_int64(d.items[k + 1], value))
          fail(where, "expected a map of names to integers");
        store_.charge(2 * sizeof(Statistics::value_type) + string_cost(store_.text(d.items[k])));
        values.emplace_back(std::string(store_.text(d.items[k])), value);
      }
      out.statistics.push_back(std::move(values));
    }
  }
}

Snapshot PyTorchDocument::convert(Value root) {
  Snapshot out;
  out.source = "pytorch";
  Value segments = root;
  Value extras = kMissing;  // what memsnap wrote beside PyTorch's keys (pickle_extras.h)
  const Object* root_dict = nullptr;
  if (root.is(Tag::kObject) && store_.object(root).kind == ObjectKind::kDict) {
    root_dict = &store_.object(root);
    // Written by PyTorch, not exported by memsnap (whose JSON names its format, and keeps
    // histories oldest first whatever the snapshot's source).
    pytorch_source_ = string_field(*root_dict, k_format_, "", "") != "memsnap-snapshot";
    segments = field(*root_dict, k_segments_);
    if (segments == kMissing) fail("snapshot", "not a memory snapshot (no 'segments')");
    extras = field(*root_dict, k_memsnap_);
    if (!(extras == kMissing) && !extras.is(Tag::kString)) fail(std::string(kPickleExtrasKey), "expected a string");
  } else if (!root.is(Tag::kEmptyList) &&
             !(root.is(Tag::kObject) && store_.object(root).kind == ObjectKind::kList)) {
    fail("snapshot", "not a memory snapshot (expected a dict or a list of segments)");
  }
  const Object& segment_list = list_at(segments, "segments");
  int64_t device_count = 0;
  for (size_t i = 0; i < segment_list.items.size(); ++i) {
    store_.charge(2 * sizeof(SnapshotSegment));
    out.segments.push_back(convert_segment(segment_list.items[i], at("segments", i)));
    device_count = std::max(device_count, out.segments.back().device + 1);
  }
  if (root_dict != nullptr) {
    const Value traces = field(*root_dict, k_device_traces_);
    if (!(traces == kMissing)) {
      const Object& list = list_at(traces, "device_traces");
      if (list.items.size() > kMaxDevices) fail("device_traces", "more than " + std::to_string(kMaxDevices) + " devices");
      store_.charge(sizeof(DeviceTrace) * list.items.size());
      for (size_t d = 0; d < list.items.size(); ++d)
        out.device_traces.push_back(convert_trace(list.items[d], at("device_traces", d)));
      device_count = std::max<int64_t>(device_count, static_cast<int64_t>(list.items.size()));
    }
    convert_extras(*root_dict, out);
  }
  entries_.clear();
  entries_.shrink_to_fit();
  std::vector<BlockRecord>().swap(blocks_);
  store_.charge(sizeof(Frame) * frames_.size());
  out.frames.reserve(frames_.size());
  for (const FrameKey& key : frames_) {
    store_.charge(string_cost(store_.text(key.name)) + string_cost(store_.text(key.file)));
    out.frames.push_back({std::string(store_.text(key.name)), std::string(store_.text(key.file)), key.line});
  }
  out.stacks = std::move(stacks_);
  if (!(extras == kMissing))
    if (const std::optional<std::string> error = merge_pickle_extras(store_.text(extras), out)) throw std::runtime_error(*error);
  if (out.devices.empty())
    for (int64_t d = 0; d < device_count; ++d) out.devices.push_back({d, "", 0, {}});
  return out;
}

}  // namespace memsnap
