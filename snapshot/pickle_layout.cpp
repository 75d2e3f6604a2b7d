#include "snapshot/pickle_layout.h"

#include <cstring>
#include <initializer_list>
#include <vector>

namespace memsnap::pickle {
namespace {

constexpr uint64_t kProgressBytes = uint64_t{256} << 10;  // about how often progress is told
constexpr size_t kMaxMarks = 512;  // as the machine allows
constexpr uint64_t kNone = ~uint64_t{0};

uint64_t little_endian(const uint8_t* at, size_t bytes) {
  uint64_t v = 0;
  for (size_t i = bytes; i-- > 0;) v = (v << 8) | at[i];
  return v;
}

struct OpenMark {
  uint64_t offset;
  uint64_t memo;            // memo entries made before it
  uint64_t after_appends;   // the APPENDS it directly follows (another batch), or kNone
};

// What the scan does with each opcode. Below kShortString: the bytes the opcode and its
// fixed argument take, all the scan needs of most. Then what the quick loop walks too (a
// one-byte length, MEMOIZE), and what it leaves to the switch.
enum : uint8_t { kShortString = 0xF0, kShortOther, kMemoize, kSpecial, kUnsupported = 0xFF };

struct OpcodeTable {
  uint8_t kind[256];
  uint8_t walk[256];  // the quick loop's handler (kWalk in scan): by kind
  constexpr OpcodeTable() : kind(), walk() {
    for (uint8_t& k : kind) k = kUnsupported;
    // No argument: POP, DUP, NONE, NEWTRUE, NEWFALSE, EMPTY_LIST/DICT/TUPLE/SET,
    // TUPLE1-3, APPEND, SETITEM.
    for (const int op : std::initializer_list<int>{'0', '2', 'N', 0x88, 0x89, ']', '}', ')', 0x8f, 0x85, 0x86, 0x87, 'a', 's'}) kind[op] = 1;
    kind[static_cast<uint8_t>('J')] = 5;  // BININT
    kind[static_cast<uint8_t>('K')] = 2;  // BININT1
    kind[static_cast<uint8_t>('M')] = 3;  // BININT2
    kind[static_cast<uint8_t>('G')] = 9;  // BINFLOAT
    kind[static_cast<uint8_t>('h')] = 2;  // BINGET
    kind[static_cast<uint8_t>('j')] = 5;  // LONG_BINGET
    kind[0x80] = 2;                       // PROTO
    kind[0x8c] = kShortString;            // SHORT_BINUNICODE
    for (const int op : std::initializer_list<int>{0x8a, 'U', 'C'}) kind[op] = kShortOther;  // LONG1, SHORT_BIN*
    kind[0x94] = kMemoize;
    // MARK, STOP, FRAME, APPENDS, the other MARK closers (POP_MARK, TUPLE, LIST, DICT,
    // FROZENSET, SETITEMS, ADDITEMS) and the rest of the length-prefixed (LONG4, the strings
    // and bytes).
    for (const int op : std::initializer_list<int>{'(', '.', 0x95, 'e', '1', 't', 'l', 'd', 0x91, 'u', 0x90, 0x8b,
                             'X', 0x8d, 'T', 'B', 0x8e, 0x96})
      kind[op] = kSpecial;
    // Everything else (text opcodes, explicit memo indices, what the machine refuses, unknown
    // bytes) ends the scan.
    for (int op = 0; op < 256; ++op) {
      switch (kind[op]) {
        case 1: walk[op] = 0; break;
        case 2: walk[op] = 1; break;
        case 3: walk[op] = 2; break;
        case 5: walk[op] = 3; break;
        case 9: walk[op] = 4; break;
        case kShortString: walk[op] = 5; break;
        case kShortOther: walk[op] = 6; break;
        case kMemoize: walk[op] = 7; break;
        default: walk[op] = 8; break;  // the switch below, or the end
      }
    }
  }
};
constexpr OpcodeTable kOpcodes;
static_assert([] {
  for (int op = 0; op < 256; ++op)
    if (kOpcodes.kind[op] < kShortString && kOpcodes.walk[op] == 8) return false;
  return true;
}(), "every fixed length has a handler in the quick loop");

}  // namespace

LayoutScanner::LayoutScanner(std::string_view pickle, LayoutOptions options)
    : pickle_(pickle), options_(options) {
  // Each memoized value takes at least two bytes (an opcode and MEMOIZE); a pickle that
  // memoizes one value twice runs out of room and the scan stops there.
  memo_capacity_ = pickle.size() / 2 + 1;
  const uint64_t words = memo_capacity_ / 64 + 1;
  is_string_.reset(new uint64_t[words]);  // not zeroed: each word is written before it is read
  strings_before_.reset(new uint32_t[words]);
  string_offsets_.reset(new uint32_t[memo_capacity_]);
}

void LayoutScanner::note_memo(uint64_t index, uint64_t string_at) {
  if (index % 64 == 0) {
    if (index > 0) std::atomic_ref<uint64_t>(is_string_[index / 64 - 1]).store(word_, std::memory_order_relaxed);
    strings_before_[index / 64] = static_cast<uint32_t>(strings_);
    word_ = 0;
  }
  if (string_at != kNone) {
    word_ |= uint64_t{1} << (index % 64);
    string_offsets_[strings_++] = static_cast<uint32_t>(string_at);
  }
}

void LayoutScanner::publish_strings(uint64_t memo) {
  // The word of the last entry noted (`memo` entries so far), not yet stored whole.
  if (memo > 0) std::atomic_ref<uint64_t>(is_string_[(memo - 1) / 64]).store(word_, std::memory_order_relaxed);
}

uint32_t LayoutScanner::string_offset(uint64_t index) const {
  if (index >= memo_capacity_) return kNotAString;
  const uint64_t word = std::atomic_ref<uint64_t>(is_string_[index / 64]).load(std::memory_order_relaxed);
  const uint64_t below = word & ((uint64_t{1} << (index % 64)) - 1);
  if (((word >> (index % 64)) & 1) == 0) return kNotAString;
  return string_offsets_[strings_before_[index / 64] + static_cast<uint64_t>(__builtin_popcountll(below))];
}

bool LayoutScanner::scan(const std::function<bool(const PicklePart&)>& found,
                         const std::function<bool(uint64_t offset)>& progress) {
  if (pickle_.size() >= uint64_t{1} << 32) return false;  // offsets are kept in 32 bits
  const auto* bytes = reinterpret_cast<const uint8_t*>(pickle_.data());
  const uint64_t size = pickle_.size();
  std::vector<OpenMark> marks;
  uint64_t memo = 0;
  uint64_t pos = 0;
  uint64_t next_progress = kProgressBytes;
  uint64_t last_appends = kNone;  // offset of an APPENDS with only FRAMEs after it, if any
  uint64_t last_string = kNone;   // offset of a string opcode directly before this one
  std::optional<PicklePart> pending;  // a part that the next batch may still extend
  uint64_t published_end = 0;         // where the last part found ends
  bool stopped = false;

  auto publish = [&]() {
    // A part holding parts already found (a list of lists) is not one: they stand for it.
    if (pending && pending->bytes() >= options_.min_part_bytes && pending->mark >= published_end) {
      publish_strings(memo);
      if (!found(*pending)) stopped = true;
      published_end = pending->end;
    }
    pending.reset();
  };
  auto batch_done = [&](const OpenMark& mark, uint64_t appends_at) {
    const PicklePart part{mark.offset, appends_at, mark.memo, memo - mark.memo};
    if (pending && mark.after_appends == pending->end) {  // the next batch of the same list
      pending->end = appends_at;
      pending->memo_count = memo - pending->memo_base;
    } else if (part.bytes() >= options_.min_part_bytes) {
      if (pending && part.mark < pending->mark) pending.reset();  // it lay inside this one
      publish();
      pending = part;
    }
    if (pending && pending->bytes() >= options_.max_part_bytes) publish();
  };

  while (!stopped && pos < size) {
    // The common case, walked in a loop of its own: opcodes with a fixed argument or a
    // one-byte length, and MEMOIZE (a string memoized twice is still that string). Threaded:
    // each kind of opcode ends in a jump of its own, which the processor predicts from the
    // opcode before (PyTorch's trace repeats a few sequences), so the next opcode's address
    // is computed ahead instead of waiting on this one's table entry. (`kind` is loaded on
    // every jump though only the switch reads it: loaded at walk_end instead, the scan of
    // the demo pickle measured 12.0 ms against 7.8.)
    uint8_t op = bytes[pos];
    uint8_t kind = kOpcodes.kind[op];
    if (kind < kSpecial) {
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpedantic"
#if defined(__clang__)
#pragma GCC diagnostic ignored "-Wgnu-label-as-value"
#endif
      static const void* const kWalk[] = {&&walk_1, &&walk_2, &&walk_3, &&walk_5, &&walk_9,
                                          &&walk_short_string, &&walk_short_other, &&walk_memoize, &&walk_end};
#define MEMSNAP_WALK_NEXT()                      \
  do {                                           \
    if (pos >= size) goto walk_done;             \
    op = bytes[pos];                             \
    kind = kOpcodes.kind[op];                    \
    goto* kWalk[kOpcodes.walk[op]];              \
  } while (0)
      goto* kWalk[kOpcodes.walk[op]];
    walk_1: pos += 1; last_string = kNone; MEMSNAP_WALK_NEXT();
    walk_2: pos += 2; last_string = kNone; MEMSNAP_WALK_NEXT();
    walk_3: pos += 3; last_string = kNone; MEMSNAP_WALK_NEXT();
    walk_5: pos += 5; last_string = kNone; MEMSNAP_WALK_NEXT();
    walk_9: pos += 9; last_string = kNone; MEMSNAP_WALK_NEXT();
    walk_short_string:
      if (size - pos < 2) return false;
      last_string = pos;
      pos += 2 + uint64_t{bytes[pos + 1]};
      MEMSNAP_WALK_NEXT();
    walk_short_other:
      if (size - pos < 2) return false;
      last_string = kNone;
      pos += 2 + uint64_t{bytes[pos + 1]};
      MEMSNAP_WALK_NEXT();
    walk_memoize:
      if (memo >= memo_capacity_) return false;
      note_memo(memo++, last_string);
      pos += 1;
      MEMSNAP_WALK_NEXT();
#undef MEMSNAP_WALK_NEXT
#pragma GCC diagnostic pop
    walk_done:
      last_appends = kNone;
      continue;
    walk_end:  // an opcode for the switch below (or one that ends the scan)
      last_appends = kNone;
    }
    if (kind == kUnsupported) return false;
    const uint64_t at = pos;
    ++pos;
    uint64_t length = 0;  // bytes of a length prefix, whose value is then skipped too
    bool is_string = false;
    switch (op) {
      case 0x95:  // FRAME: groups opcodes, and keeps an APPENDS the last one
        pos += 8;
        continue;
      case '.':  // STOP
        publish();
        return !stopped;
      case '(':  // MARK
        if (marks.size() >= kMaxMarks) return false;
        marks.push_back({at, memo, last_appends});
        if (pos >= next_progress) {
          next_progress = pos + kProgressBytes;
          if (!progress(pos)) return false;
        }
        break;
      case 'e': {  // APPENDS
        if (marks.empty()) return false;
        const OpenMark mark = marks.back();
        marks.pop_back();
        batch_done(mark, at);
        last_appends = at;
        last_string = kNone;
        continue;
      }
      case 0x8b: length = 4; break;                    // LONG4 (a signed length)
      case 'X': length = 4; is_string = true; break;   // BINUNICODE
      case 0x8d: length = 8; is_string = true; break;  // BINUNICODE8
      case 'T': case 'B': length = 4; break;           // BINSTRING (signed), BINBYTES
      case 0x8e: case 0x96: length = 8; break;         // BINBYTES8, BYTEARRAY8
      default:  // the other MARK closers
        if (marks.empty()) return false;
        marks.pop_back();
        break;
    }
    if (length > 0) {
      if (size - pos < length) return false;
      const uint64_t n = little_endian(bytes + pos, static_cast<size_t>(length));
      if (length == 4 && (op == 0x8b || op == 'T') && n >= uint64_t{1} << 31) return false;  // negative
      pos += length;
      if (size - pos < n) return false;
      pos += n;
    }
    last_appends = kNone;
    last_string = is_string ? at : kNone;
  }
  // The input ended without STOP (or a fixed argument ran past it): what was found stands,
  // since each part is checked when it is decoded.
  if (!stopped && pos <= size) publish();
  return false;
}

std::optional<std::string_view> pickled_string_at(std::string_view pickle, uint64_t offset) {
  if (offset >= pickle.size()) return std::nullopt;
  const auto* bytes = reinterpret_cast<const uint8_t*>(pickle.data());
  size_t prefix = 0;
  switch (bytes[offset]) {
    case 0x8c: prefix = 1; break;
    case 'X': prefix = 4; break;
    case 0x8d: prefix = 8; break;
    default: return std::nullopt;
  }
  const uint64_t start = offset + 1 + prefix;
  if (start > pickle.size()) return std::nullopt;
  const uint64_t length = little_endian(bytes + offset + 1, prefix);
  if (length > pickle.size() - start) return std::nullopt;
  return pickle.substr(static_cast<size_t>(start), static_cast<size_t>(length));
}

}  // namespace memsnap::pickle
