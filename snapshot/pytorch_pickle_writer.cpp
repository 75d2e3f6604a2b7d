#include "snapshot/pytorch_pickle_writer.h"

#include <array>
#include <bit>
#include <cstring>
#include <memory>
#include <optional>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "snapshot/json_writer.h"
#include "snapshot/pickle_extras.h"

namespace memsnap {
namespace {

// Pickle's opcodes (protocol 4) that the snapshot needs.
enum Op : char {
  kProto = '\x80', kStop = '.', kMark = '(', kEmptyDict = '}', kEmptyList = ']', kSetItems = 'u',
  kAppends = 'e', kShortUnicode = '\x8c', kUnicode = 'X', kUnicode8 = '\x8d', kInt1 = 'K',
  kInt2 = 'M', kInt4 = 'J', kLong1 = '\x8a', kTrue = '\x88', kFalse = '\x89', kNone = 'N',
  kFloat = 'G', kTuple2 = '\x86', kMemoize = '\x94', kGet = 'h', kLongGet = 'j',
};

// Writes opcodes into a buffer of its own and hands it to the sink whenever a MiB is full
// (a piece may end inside a value: the sink takes a byte stream). Every opcode but a string's
// text fits in the room kept past the MiB, so each write checks the room once.
class PickleOut {
 public:
  explicit PickleOut(const ByteSink& sink)
      : sink_(sink), buffer_(new char[kPiece + kRoom]), at_(buffer_.get()), full_(buffer_.get() + kPiece) {
    op(kProto);
    *at_++ = '\x04';
  }

  void finish() {
    op(kStop);
    flush();
  }

  // The memo index the object on top of the stack gets.
  uint32_t memoize() {
    op(kMemoize);
    return next_memo_++;
  }

  void get(uint32_t memo) {
    char* out = room();
    if (memo < 256) {
      out[0] = kGet;
      out[1] = static_cast<char>(memo);
      at_ = out + 2;
    } else {
      out[0] = kLongGet;
      at_ = little_endian(out + 1, memo, 4);
    }
  }

  // A string written once, then named by the memo; returns its memo index.
  uint32_t text(std::string_view value) {
    auto [it, fresh] = strings_.try_emplace(std::string(value), 0);
    if (!fresh) {
      get(it->second);
      return it->second;
    }
    char* out = room();
    if (value.size() < 256) {
      out[0] = kShortUnicode;
      out[1] = static_cast<char>(value.size());
      at_ = out + 2;
    } else if (value.size() <= 0xFFFFFFFFu) {
      out[0] = kUnicode;
      at_ = little_endian(out + 1, value.size(), 4);
    } else {
      out[0] = kUnicode8;
      at_ = little_endian(out + 1, value.size(), 8);
    }
    bytes(value);
    it->second = memoize();
    return it->second;
  }

  // A string of static storage (a literal, an action's name): remembered by its address, so a
  // key written for every entry costs a probe or two of a small table.
  void literal(std::string_view value) {
    const auto address = reinterpret_cast<uintptr_t>(value.data());
    size_t slot = (address * 0x9E3779B97F4A7C15ull) >> (64 - kLiteralSlotBits);
    for (;; slot = (slot + 1) % literal_slots_.size()) {
      LiteralSlot& at = literal_slots_[slot];
      if (at.data == value.data() && at.size == value.size()) return get(at.memo);
      if (at.data == nullptr) break;
    }
    // (text() names a string written before by its memo, so each is written once.)
    const uint32_t memo = text(value);
    // Kept while the table is at most half full; past that, text() answers.
    if (literals_kept_ < literal_slots_.size() / 2) {
      literal_slots_[slot] = {value.data(), value.size(), memo};
      ++literals_kept_;
    }
  }

  void integer(int64_t value) {
    char* out = room();
    if (value >= 0 && value < 256) {
      out[0] = kInt1;
      out[1] = static_cast<char>(value);
      at_ = out + 2;
    } else if (value >= 0 && value < 65536) {
      out[0] = kInt2;
      at_ = little_endian(out + 1, static_cast<uint64_t>(value), 2);
    } else if (value >= INT32_MIN && value <= INT32_MAX) {
      out[0] = kInt4;
      at_ = little_endian(out + 1, static_cast<uint32_t>(static_cast<int32_t>(value)), 4);
    } else {
      long1(static_cast<uint64_t>(value), value < 0);
    }
  }

  void unsigned_integer(uint64_t value) {
    if (value <= static_cast<uint64_t>(INT64_MAX)) return integer(static_cast<int64_t>(value));
    long1(value, false);
  }

  void boolean(bool value) { op(value ? kTrue : kFalse); }
  void none() { op(kNone); }

  void real(double value) {
    char* out = room();
    out[0] = kFloat;
    const uint64_t bits = std::bit_cast<uint64_t>(value);
    for (int i = 0; i < 8; ++i) out[1 + i] = static_cast<char>(bits >> (56 - 8 * i));  // big-endian
    at_ = out + 9;
  }

  void op(Op code) {
    *room() = code;
    ++at_;
  }

 private:
  static constexpr size_t kPiece = SinkBuffer::kPiece;
  static constexpr size_t kRoom = 16;  // the longest opcode with its argument: LONG1's 11 bytes
  static constexpr unsigned kLiteralSlotBits = 8;

  struct LiteralSlot {
    const char* data = nullptr;
    size_t size = 0;
    uint32_t memo = 0;
  };

  // Where the next opcode goes, with at least kRoom bytes free there.
  char* room() {
    if (at_ >= full_) flush();
    return at_;
  }

  static char* little_endian(char* out, uint64_t value, int count) {
    for (int i = 0; i < count; ++i) out[i] = static_cast<char>(value >> (8 * i));
    return out + count;
  }

  // A string's text, of any length.
  void bytes(std::string_view value) {
    const size_t free = static_cast<size_t>(full_ + kRoom - at_);
    if (value.size() <= free) {
      std::memcpy(at_, value.data(), value.size());
      at_ += value.size();
      return;
    }
    flush();
    if (value.size() >= kPiece) {
      sink_(value);
    } else {
      std::memcpy(at_, value.data(), value.size());
      at_ += value.size();
    }
  }

  // Two's complement, little-endian, in as few bytes as keep the sign; a uint64 past INT64_MAX
  // gets a ninth, zero byte.
  void long1(uint64_t bits, bool negative) {
    // The bits that differ from the sign, and one byte more than they fill for the sign.
    const uint64_t magnitude = negative ? ~bits : bits;
    const int count = std::bit_width(magnitude) / 8 + 1;  // 1 .. 9
    char* out = room();
    out[0] = kLong1;
    out[1] = static_cast<char>(count);
    for (int i = 0; i < count; ++i) out[2 + i] = static_cast<char>(i < 8 ? bits >> (8 * i) : 0);
    at_ = out + 2 + count;
  }

  void flush() {
    if (at_ != buffer_.get()) sink_(std::string_view(buffer_.get(), static_cast<size_t>(at_ - buffer_.get())));
    at_ = buffer_.get();
  }

  const ByteSink& sink_;
  std::unique_ptr<char[]> buffer_;
  char* at_;
  char* const full_;  // past this, the buffer is handed on before the next opcode
  uint32_t next_memo_ = 0;
  std::unordered_map<std::string, uint32_t> strings_;
  std::array<LiteralSlot, size_t{1} << kLiteralSlotBits> literal_slots_{};  // open addressing
  size_t literals_kept_ = 0;
};

class SnapshotPickler {
 public:
  SnapshotPickler(const Snapshot& snapshot, const ByteSink& sink)
      : s_(snapshot),
        p_(sink),
        frame_memo_(snapshot.frames.size(), kUnwritten),
        stack_memo_(snapshot.stacks.size()) {}

  void write() {
    p_.op(kEmptyDict);
    p_.op(kMark);
    p_.literal("segments");
    segments();
    p_.literal("device_traces");
    traces();
    p_.literal("allocator_settings");
    settings();
    p_.literal("external_annotations");
    annotations();
    // What PyTorch's layout has no key for (pickle_extras.h), where there is any.
    if (const std::string extras = pickle_extras_text(s_); !extras.empty()) {
      p_.literal(kPickleExtrasKey);
      p_.text(extras);
    }
    p_.op(kSetItems);
    p_.finish();
  }

 private:
  static constexpr uint32_t kUnwritten = ~uint32_t{0};
  // A stack's lists once written: "frames", and "forward_frames" when it has them.
  struct StackMemo {
    uint32_t frames = kUnwritten;
    uint32_t forward = kUnwritten;
  };

  void frame(uint32_t index) {
    uint32_t& memo = frame_memo_[index];
    if (memo != kUnwritten) return p_.get(memo);
    const Frame& f = s_.frames[index];
    p_.op(kEmptyDict);
    memo = p_.memoize();
    p_.op(kMark);
    p_.literal("filename");
    p_.text(f.file);
    p_.literal("line");
    p_.integer(f.line);
    p_.literal("name");
    p_.text(f.function);
    p_.op(kSetItems);
  }

  // "frames" (and "forward_frames" when the stack is joined to a forward call), as items of
  // the dict being written.
  void stack_items(StackIndex stack) {
    p_.literal("frames");
    if (stack < 0 || static_cast<size_t>(stack) >= s_.stacks.size()) {
      p_.op(kEmptyList);
      return;
    }
    StackMemo& memo = stack_memo_[static_cast<size_t>(stack)];
    if (memo.frames != kUnwritten) {  // written before: named by the memo
      p_.get(memo.frames);
      if (memo.forward != kUnwritten) {
        p_.literal("forward_frames");
        p_.get(memo.forward);
      }
      return;
    }
    const std::vector<uint32_t>& frames = s_.stacks[static_cast<size_t>(stack)];
    const size_t joint = forward_joint(s_.frames, frames);
    p_.op(kEmptyList);
    memo.frames = p_.memoize();
    if (joint > 0) {
      p_.op(kMark);
      for (size_t i = 0; i < joint; ++i) frame(frames[i]);
      p_.op(kAppends);
    }
    if (joint + 1 >= frames.size()) return;
    p_.literal("forward_frames");
    p_.op(kEmptyList);
    memo.forward = p_.memoize();
    p_.op(kMark);
    for (size_t i = frames.size(); i-- > joint + 1;)  // outermost first, as tracebacks read
      p_.text(traceback_line(s_.frames[frames[i]]));
    p_.op(kAppends);
  }

  void segments() {
    p_.op(kEmptyList);
    if (s_.segments.empty()) return;
    p_.op(kMark);
    for (const SnapshotSegment& segment : s_.segments) {
      p_.op(kEmptyDict);
      p_.op(kMark);
      p_.literal("device");
      p_.integer(segment.device);
      p_.literal("address");
      p_.unsigned_integer(segment.address);
      p_.literal("total_size");
      p_.unsigned_integer(segment.total_size);
      p_.literal("allocated_size");
      p_.unsigned_integer(segment.allocated_size);
      p_.literal("active_size");
      p_.unsigned_integer(segment.active_size);
      p_.literal("requested_size");
      p_.unsigned_integer(segment.requested_size);
      p_.literal("stream");
      p_.integer(static_cast<int64_t>(segment.stream));  // PyTorch's int64 of the handle's bits
      p_.literal("segment_type");
      p_.text(segment.segment_type.empty() ? (segment.is_small_pool() ? "small" : "large") : segment.segment_type);
      p_.literal("segment_pool_id");
      p_.unsigned_integer(segment.segment_pool_id.first);
      p_.unsigned_integer(segment.segment_pool_id.second);
      p_.op(kTuple2);
      p_.literal("is_expandable");
      p_.boolean(segment.is_expandable);
      stack_items(segment.stack);
      p_.literal("blocks");
      p_.op(kEmptyList);
      if (!segment.blocks.empty()) {
        p_.op(kMark);
        for (const SnapshotBlock& block : segment.blocks) {
          p_.op(kEmptyDict);
          p_.op(kMark);
          p_.literal("address");
          p_.unsigned_integer(block.address);
          p_.literal("size");
          p_.unsigned_integer(block.size);
          p_.literal("requested_size");
          p_.unsigned_integer(block.requested_size);
          p_.literal("state");
          p_.literal(block_state_name(block.state));
          stack_items(block.state == BlockState::kInactive ? kNoStackIndex : block.stack);
          p_.op(kSetItems);
        }
        p_.op(kAppends);
      }
      p_.op(kSetItems);
    }
    p_.op(kAppends);
  }

  void traces() {
    const int64_t to_unix_us = s_.process.clock_offset_us;
    p_.op(kEmptyList);
    if (s_.device_traces.empty()) return;
    p_.op(kMark);
    for (size_t d = 0; d < s_.device_traces.size(); ++d) {
      const DeviceTrace& trace = s_.device_traces[d];
      p_.op(kEmptyList);
      if (trace.empty()) continue;
      // What each entry was recorded under, as PyTorch writes it on every entry.
      static const std::vector<TraceStateChange> kNone;
      const std::vector<TraceStateChange>& changes = d < s_.trace_state_changes.size() ? s_.trace_state_changes[d] : kNone;
      size_t next_change = 0;
      std::string user_metadata;
      std::string compile_context;
      // Python's pickler batches a list's items by the thousand; so does this.
      for (size_t start = 0; start < trace.size(); start += 1000) {
        p_.op(kMark);
        for (size_t i = start; i < std::min(trace.size(), start + 1000); ++i) {
          for (; next_change < changes.size() && changes[next_change].event_index <= i; ++next_change) {
            if (changes[next_change].kind == TraceStateKind::kUserMetadata) user_metadata = changes[next_change].value;
            if (changes[next_change].kind == TraceStateKind::kCompileContext) compile_context = changes[next_change].value;
          }
          entry(trace[i], to_unix_us, user_metadata, compile_context);
        }
        p_.op(kAppends);
      }
    }
    p_.op(kAppends);
  }

  void entry(const TraceEntry& e, int64_t to_unix_us, const std::string& user_metadata,
             const std::string& compile_context) {
    p_.op(kEmptyDict);
    p_.op(kMark);
    p_.literal("action");
    p_.literal(trace_action_name(e.action));
    // An oom entry's address holds the device's free bytes (PyTorch names it device_free).
    p_.literal(e.action == TraceAction::kOom ? "device_free" : "addr");
    p_.unsigned_integer(e.address);
    p_.literal("size");
    p_.unsigned_integer(e.size);
    p_.literal("stream");
    p_.integer(static_cast<int64_t>(e.stream));
    p_.literal("time_us");
    p_.integer(e.time_us + to_unix_us);
    p_.literal("compile_context");
    if (compile_context.empty())
      p_.literal("N/A");  // PyTorch's word for none
    else
      p_.text(compile_context);
    p_.literal("user_metadata");
    if (user_metadata.empty())
      p_.literal("");
    else
      p_.text(user_metadata);
    // PyTorch's snapshot marker entries (empty_cache's, _snapshot()'s) carry no frames.
    if (e.action != TraceAction::kSnapshot || e.stack != kNoStackIndex) stack_items(e.stack);
    p_.op(kSetItems);
  }

  void json_value(const nlohmann::json& value) {
    switch (value.type()) {
      case nlohmann::json::value_t::boolean: return p_.boolean(value.get<bool>());
      case nlohmann::json::value_t::number_integer: return p_.integer(value.get<int64_t>());
      case nlohmann::json::value_t::number_unsigned: return p_.unsigned_integer(value.get<uint64_t>());
      case nlohmann::json::value_t::number_float: return p_.real(value.get<double>());
      case nlohmann::json::value_t::string: p_.text(value.get_ref<const std::string&>()); return;
      case nlohmann::json::value_t::array:
        p_.op(kEmptyList);
        if (value.empty()) return;
        p_.op(kMark);
        for (const nlohmann::json& item : value) json_value(item);
        return p_.op(kAppends);
      case nlohmann::json::value_t::object:
        p_.op(kEmptyDict);
        if (value.empty()) return;
        p_.op(kMark);
        for (const auto& [key, item] : value.items()) {
          p_.text(key);
          json_value(item);
        }
        return p_.op(kSetItems);
      default: return p_.none();
    }
  }

  // memsnap's divisions per power-of-two interval: an array, or in files of older versions
  // text ("0,4,0,...").
  static std::optional<std::vector<int64_t>> divisions(const nlohmann::json& value) {
    std::vector<int64_t> out;
    if (value.is_array()) {
      for (const nlohmann::json& item : value) {
        if (!item.is_number_integer()) return std::nullopt;
        out.push_back(item.get<int64_t>());
      }
      return out;
    }
    if (!value.is_string()) return std::nullopt;
    const std::string& text = value.get_ref<const std::string&>();
    int64_t current = 0;
    bool digits = false;
    for (size_t i = 0; i <= text.size(); ++i) {
      if (i == text.size() || text[i] == ',') {
        if (!digits) return std::nullopt;
        out.push_back(current);
        current = 0;
        digits = false;
      } else if (text[i] >= '0' && text[i] <= '9' && current < (int64_t{1} << 40)) {
        current = current * 10 + (text[i] - '0');
        digits = true;
      } else {
        return std::nullopt;
      }
    }
    return out;
  }

  // PyTorch's names for memsnap's settings: the configuration text as PYTORCH_CUDA_ALLOC_CONF,
  // roundup_power2_divisions keyed by the interval's power of two in MiB ("1", "2", "4", ...).
  // A PyTorch file's settings are written back as they were.
  void settings() {
    p_.op(kEmptyDict);
    if (s_.allocator_settings.empty()) return;
    p_.op(kMark);
    const bool memsnap_names = s_.source != "pytorch";
    for (const auto& [key, text] : s_.allocator_settings) {
      const nlohmann::json value = setting_value_json(text);
      if (memsnap_names && key == "config") {
        p_.literal("PYTORCH_CUDA_ALLOC_CONF");
        json_value(value);
      } else if (memsnap_names && key == "roundup_power2_divisions" && divisions(value)) {
        nlohmann::json by_interval = nlohmann::json::object();
        const std::vector<int64_t> counts = *divisions(value);
        for (size_t i = 0; i < counts.size() && i < 64; ++i) by_interval[std::to_string(uint64_t{1} << i)] = counts[i];
        p_.text(key);
        json_value(by_interval);
      } else {
        p_.text(key);
        json_value(value);
      }
    }
    p_.op(kSetItems);
  }

  void annotations() {
    const int64_t to_unix_us = s_.process.clock_offset_us;
    p_.op(kEmptyList);
    if (s_.external_annotations.empty()) return;
    p_.op(kMark);
    for (const SnapshotAnnotation& a : s_.external_annotations) {
      p_.op(kEmptyDict);
      p_.op(kMark);
      p_.literal("device");
      p_.integer(a.device);
      p_.literal("time_us");
      p_.integer(a.time_us + to_unix_us);
      p_.literal("stage");
      p_.text(a.stage);
      p_.literal("name");
      p_.text(a.name);
      p_.op(kSetItems);
    }
    p_.op(kAppends);
  }

  const Snapshot& s_;
  PickleOut p_;
  std::vector<uint32_t> frame_memo_;
  std::vector<StackMemo> stack_memo_;
};

}  // namespace

void write_pytorch_pickle(const Snapshot& snapshot, const ByteSink& sink) { SnapshotPickler(snapshot, sink).write(); }

std::string to_pytorch_pickle(const Snapshot& snapshot) {
  std::string out;
  write_pytorch_pickle(snapshot, [&](std::string_view piece) { out += piece; });
  return out;
}

}  // namespace memsnap
