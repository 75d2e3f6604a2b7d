#include "snapshot/pickle_layout.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <initializer_list>
#include <system_error>
#include <thread>
#include <vector>

namespace memsnap::pickle {
namespace {

// About how often a scan tells the bytes it is done with: each release of them interrupts
// every core the process runs on.
constexpr uint64_t kProgressBytes = uint64_t{512} << 10;
constexpr size_t kMaxMarks = 512;  // as the machine allows
constexpr uint64_t kNoOffset = MemoStrings::kNone;

uint64_t little_endian(const uint8_t* at, size_t bytes) {
  uint64_t v = 0;
  for (size_t i = bytes; i-- > 0;) v = (v << 8) | at[i];
  return v;
}

struct OpenMark {
  uint64_t offset;
  uint64_t memo;            // memo entries made before it
  uint64_t after_appends;   // the APPENDS it directly follows (another batch), or kNoOffset
};

// What the scan does with each opcode. Below kShortString: the bytes the opcode and its
// fixed argument take, all the scan needs of most. Then what the quick loop walks too (a
// one-byte length, MEMOIZE), and what it leaves to the switch.
enum : uint8_t { kShortString = 0xF0, kShortOther, kMemoizeKind, kSpecial, kUnsupported = 0xFF };

struct OpcodeTable {
  uint8_t kind[256];
  uint8_t walk[256];  // the quick loop's handler (kWalk in Walk::run): by kind
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
    kind[0x94] = kMemoizeKind;
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
        case kMemoizeKind: walk[op] = 7; break;
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

// Where a scan has got to: all it needs to go on.
struct ScanState {
  uint64_t pos = 0;
  uint64_t memo = 0;  // memo entries made since the scan started
  std::vector<OpenMark> marks;
  size_t most_marks = 0;              // the most open at once
  uint64_t last_appends = kNoOffset;      // offset of an APPENDS with only FRAMEs after it, if any
  uint64_t last_string = kNoOffset;       // offset of a string opcode directly before this one
  std::optional<PicklePart> pending;  // a part that the next batch may still extend
  uint64_t published_end = 0;         // where the last part found ends
  uint64_t scanned_from = 0;          // bytes from here on not yet told done with
  uint64_t next_progress = 0;
  bool stopped = false;               // `found` or `scanned` said stop
};

enum class Halt {
  kReached,     // at `until` or past it (the opcode before it ran over it)
  kCannotGoOn,  // a scan ahead, at an opcode it cannot follow alone (pos there)
  kEnded,       // the first scan: over, whether it reached STOP in `result`
};

// One scan's walk over the opcodes. The first scan (from the start) stops at what it does
// not follow; a scan ahead (from a batch boundary further on) stops before it instead, and
// before what it cannot know alone (a MARK closer whose MARK came before its start, STOP,
// the limits), so that the scan before it, going on from there, does exactly that.
class Walk {
 public:
  Walk(std::string_view pickle, const LayoutOptions& options, MemoStrings& strings, bool ahead,
       const std::function<bool(const PicklePart&)>& found,
       const std::function<bool(uint64_t, uint64_t)>& scanned)
      : bytes_(reinterpret_cast<const uint8_t*>(pickle.data())), size_(pickle.size()), options_(options),
        strings_(strings), ahead_(ahead), found_(found), scanned_(scanned) {}

  Halt run(ScanState& state, uint64_t until, bool& result);
  void publish(ScanState& state);

 private:
  void batch_done(ScanState& state, const OpenMark& mark, uint64_t appends_at);
  Halt cannot_follow(ScanState& state, uint64_t at, bool& result) {
    if (ahead_) {
      state.pos = at;
      return Halt::kCannotGoOn;
    }
    result = false;
    return Halt::kEnded;
  }

  const uint8_t* bytes_;
  uint64_t size_;
  const LayoutOptions& options_;
  MemoStrings& strings_;
  const bool ahead_;
  const std::function<bool(const PicklePart&)>& found_;
  const std::function<bool(uint64_t, uint64_t)>& scanned_;
};

void Walk::publish(ScanState& state) {
  // A part holding parts already found (a list of lists) is not one: they stand for it.
  if (state.pending && state.pending->bytes() >= options_.min_part_bytes && state.pending->mark >= state.published_end) {
    strings_.publish(state.memo);
    if (!found_(*state.pending)) state.stopped = true;
    state.published_end = state.pending->end;
  }
  state.pending.reset();
}

void Walk::batch_done(ScanState& state, const OpenMark& mark, uint64_t appends_at) {
  const PicklePart part{mark.offset, appends_at, mark.memo, state.memo - mark.memo};
  if (state.pending && mark.after_appends == state.pending->end) {  // the next batch of the same list
    state.pending->end = appends_at;
    state.pending->memo_count = state.memo - state.pending->memo_base;
  } else if (part.bytes() >= options_.min_part_bytes) {
    if (state.pending && part.mark < state.pending->mark) state.pending.reset();  // it lay inside this one
    publish(state);
    state.pending = part;
  }
  if (state.pending && state.pending->bytes() >= options_.max_part_bytes) publish(state);
}

Halt Walk::run(ScanState& state, uint64_t until, bool& result) {
  const uint8_t* const bytes = bytes_;
  const uint64_t size = size_;
  while (!state.stopped && state.pos < until) {
    // The common case, walked in a loop of its own: opcodes with a fixed argument or a
    // one-byte length, and MEMOIZE (a string memoized twice is still that string). Threaded:
    // each kind of opcode ends in a jump of its own, which the processor predicts from the
    // opcode before (PyTorch's trace repeats a few sequences), so the next opcode's address
    // is computed ahead instead of waiting on this one's table entry. (`kind` is loaded on
    // every jump though only the switch reads it: loaded at walk_end instead, the scan of
    // the demo pickle measured 12.0 ms against 7.8.)
    uint64_t pos = state.pos;
    uint64_t memo = state.memo;
    uint64_t last_string = state.last_string;
    MemoStrings& strings = strings_;
    const uint64_t memo_capacity = strings.capacity();
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
    if (pos >= until) goto walk_done;            \
    op = bytes[pos];                             \
    kind = kOpcodes.kind[op];                    \
    goto* kWalk[kOpcodes.walk[op]];              \
  } while (0)
      goto* kWalk[kOpcodes.walk[op]];
    walk_1: pos += 1; last_string = kNoOffset; MEMSNAP_WALK_NEXT();
    walk_2: pos += 2; last_string = kNoOffset; MEMSNAP_WALK_NEXT();
    walk_3: pos += 3; last_string = kNoOffset; MEMSNAP_WALK_NEXT();
    walk_5: pos += 5; last_string = kNoOffset; MEMSNAP_WALK_NEXT();
    walk_9: pos += 9; last_string = kNoOffset; MEMSNAP_WALK_NEXT();
    walk_short_string:
      if (size - pos < 2) goto walk_cannot_follow;
      last_string = pos;
      pos += 2 + uint64_t{bytes[pos + 1]};
      MEMSNAP_WALK_NEXT();
    walk_short_other:
      if (size - pos < 2) goto walk_cannot_follow;
      last_string = kNoOffset;
      pos += 2 + uint64_t{bytes[pos + 1]};
      MEMSNAP_WALK_NEXT();
    walk_memoize:
      if (memo >= memo_capacity) goto walk_cannot_follow;
      strings.note(memo++, last_string);
      pos += 1;
      MEMSNAP_WALK_NEXT();
#undef MEMSNAP_WALK_NEXT
#pragma GCC diagnostic pop
    walk_cannot_follow:  // before the opcode at pos
      if (pos != state.pos) state.last_appends = kNoOffset;  // (opcodes were walked since)
      state.memo = memo;
      state.last_string = last_string;
      return cannot_follow(state, pos, result);
    walk_done:
      state.pos = pos;
      state.memo = memo;
      state.last_string = last_string;
      state.last_appends = kNoOffset;
      continue;
    walk_end:  // an opcode for the switch below (or one that ends the scan)
      state.pos = pos;
      state.memo = memo;
      state.last_string = last_string;
      state.last_appends = kNoOffset;
    }
    if (kind == kUnsupported) return cannot_follow(state, pos, result);
    const uint64_t at = pos;
    ++pos;
    uint64_t length = 0;  // bytes of a length prefix, whose value is then skipped too
    bool is_string = false;
    switch (op) {
      case 0x95:  // FRAME: groups opcodes, and keeps an APPENDS the last one
        state.pos = pos + 8;
        continue;
      case '.':  // STOP
        if (ahead_) return cannot_follow(state, at, result);
        publish(state);
        result = !state.stopped;
        return Halt::kEnded;
      case '(':  // MARK
        if (state.marks.size() >= kMaxMarks) return cannot_follow(state, at, result);
        state.marks.push_back({at, state.memo, state.last_appends});
        state.most_marks = std::max(state.most_marks, state.marks.size());
        if (pos >= state.next_progress) {
          state.next_progress = pos + kProgressBytes;
          if (!scanned_(state.scanned_from, pos)) {
            state.stopped = true;
            result = false;
            return ahead_ ? Halt::kCannotGoOn : Halt::kEnded;
          }
          state.scanned_from = pos;
        }
        break;
      case 'e': {  // APPENDS
        if (state.marks.empty()) return cannot_follow(state, at, result);
        const OpenMark mark = state.marks.back();
        state.marks.pop_back();
        batch_done(state, mark, at);
        state.pos = pos;
        state.last_appends = at;
        state.last_string = kNoOffset;
        continue;
      }
      case 0x8b: length = 4; break;                    // LONG4 (a signed length)
      case 'X': length = 4; is_string = true; break;   // BINUNICODE
      case 0x8d: length = 8; is_string = true; break;  // BINUNICODE8
      case 'T': case 'B': length = 4; break;           // BINSTRING (signed), BINBYTES
      case 0x8e: case 0x96: length = 8; break;         // BINBYTES8, BYTEARRAY8
      default:  // the other MARK closers
        if (state.marks.empty()) return cannot_follow(state, at, result);
        state.marks.pop_back();
        break;
    }
    if (length > 0) {
      if (size - pos < length) return cannot_follow(state, at, result);
      const uint64_t n = little_endian(bytes + pos, static_cast<size_t>(length));
      if (length == 4 && (op == 0x8b || op == 'T') && n >= uint64_t{1} << 31) return cannot_follow(state, at, result);  // negative
      pos += length;
      if (size - pos < n) return cannot_follow(state, at, result);
      pos += n;
    }
    state.pos = pos;
    state.last_appends = kNoOffset;
    state.last_string = is_string ? at : kNoOffset;
  }
  if (state.stopped) {
    result = false;
    return ahead_ ? Halt::kCannotGoOn : Halt::kEnded;
  }
  return Halt::kReached;
}

// Where a scan ahead may start, at or after `from`: a MARK directly after an APPENDS (the
// boundary between two batches of a list), or the end.
uint64_t batch_boundary(std::string_view pickle, uint64_t from) {
  for (uint64_t at = std::max<uint64_t>(from, 1); at < pickle.size(); ++at) {
    const void* found = std::memchr(pickle.data() + at, '(', pickle.size() - at);
    if (found == nullptr) break;
    at = static_cast<uint64_t>(static_cast<const char*>(found) - pickle.data());
    if (pickle[at - 1] == 'e') return at;
  }
  return pickle.size();
}

// A scan ahead: from a batch boundary to the next one's start (or the end), on a thread of
// its own, its memo entries counted from its start.
struct ScanAhead {
  ScanAhead(std::string_view pickle, uint64_t from) : start(from), strings((pickle.size() - start) / 2 + 1) {
    state.pos = start;
    state.scanned_from = start;
    state.next_progress = start + kProgressBytes;
  }
  const uint64_t start;
  ScanState state;  // its thread's alone until the thread is joined
  MemoStrings strings;
  std::vector<PicklePart> parts;  // found, in file order
  bool usable = false;            // ran to where it stopped without failing
  std::thread thread;
};

// Where the scan before has landed on a scan ahead's start: goes on from where that one
// stopped, its memo entries after the ones before, its parts after the one pending (which
// its first batch cannot extend), its open marks on top. False when `found` said stop.
bool take(ScanState& state, ScanAhead& scan, Walk& walk, MemoStrings& strings,
          const std::function<bool(const PicklePart&)>& found) {
  walk.publish(state);
  if (state.stopped) return false;
  const uint64_t base = state.memo;
  strings.append(scan.strings, base, scan.state.memo);
  strings.publish(base + scan.state.memo);
  ScanState& after = scan.state;
  after.published_end = state.published_end;
  for (PicklePart part : scan.parts) {
    part.memo_base += base;
    after.published_end = part.end;
    if (!found(part)) return state.stopped = true, false;
  }
  for (OpenMark& mark : after.marks) mark.memo += base;
  after.marks.insert(after.marks.begin(), state.marks.begin(), state.marks.end());
  if (after.pending) after.pending->memo_base += base;
  after.memo += base;
  state = std::move(after);
  return true;
}

}  // namespace

LayoutScanner::LayoutScanner(std::string_view pickle, LayoutOptions options)
    // Each memoized value takes at least two bytes (an opcode and MEMOIZE); a pickle that
    // memoizes one value twice runs out of room and the scan stops there.
    : pickle_(pickle), options_(options), strings_(pickle.size() / 2 + 1) {}

bool LayoutScanner::scan(const std::function<bool(const PicklePart&)>& found,
                         const std::function<bool(uint64_t begin, uint64_t end)>& scanned) {
  scans_ahead_kept_ = 0;
  if (pickle_.size() >= uint64_t{1} << 32) return false;  // offsets are kept in 32 bits
  const uint64_t size = pickle_.size();

  // The scans ahead, each from a batch boundary past the next k-th of the pickle.
  std::atomic<bool> cancelled{false};
  const std::function<bool(uint64_t, uint64_t)> scanned_ahead = [&](uint64_t begin, uint64_t end) {
    return !cancelled.load(std::memory_order_relaxed) && scanned(begin, end);
  };
  struct Ahead {
    std::atomic<bool>& cancelled;
    std::vector<std::unique_ptr<ScanAhead>> scans;
    ~Ahead() {  // also when a callback throws
      cancelled = true;
      for (auto& scan : scans)
        if (scan->thread.joinable()) scan->thread.join();
    }
  } ahead_scans{cancelled, {}};
  std::vector<std::unique_ptr<ScanAhead>>& ahead = ahead_scans.scans;
  const unsigned scanners = std::max(1u, options_.scanners);
  for (unsigned i = 1; i < scanners; ++i) {
    const uint64_t start = batch_boundary(pickle_, size / scanners * i);
    if (start >= size || (!ahead.empty() && start <= ahead.back()->start)) continue;
    ahead.push_back(std::make_unique<ScanAhead>(pickle_, start));
  }
  for (size_t i = 0; i < ahead.size(); ++i) {
    ScanAhead& scan = *ahead[i];
    const uint64_t until = i + 1 < ahead.size() ? ahead[i + 1]->start : size;
    try {
      scan.thread = std::thread([this, &scan, until, &scanned_ahead] {
        try {
          const std::function<bool(const PicklePart&)> keep = [&scan](const PicklePart& part) {
            return scan.parts.push_back(part), true;
          };
          bool unused = false;
          Walk walk(pickle_, options_, scan.strings, true, keep, scanned_ahead);
          const Halt halt = walk.run(scan.state, until, unused);
          scan.strings.publish(scan.state.memo);
          scan.usable = !scan.state.stopped && (halt == Halt::kReached || halt == Halt::kCannotGoOn);
        } catch (...) {
          scan.usable = false;  // out of memory: the scan before goes on alone
        }
      });
    } catch (const std::system_error&) {
      ahead.resize(i);  // no thread for it: the scans before go on alone
      break;
    }
  }

  ScanState state;
  state.next_progress = kProgressBytes;
  Walk walk(pickle_, options_, strings_, false, found, scanned);
  bool result = false;
  size_t next = 0;  // the first scan ahead not yet reached
  for (;;) {
    while (next < ahead.size() && ahead[next]->start < state.pos) ++next;  // gone over its start
    const uint64_t start = next < ahead.size() ? ahead[next]->start : size;
    const Halt halt = walk.run(state, start, result);
    if (halt == Halt::kEnded) break;
    if (state.pos >= size) {  // the input ended without STOP (or a fixed argument ran past it)
      // What was found stands, since each part is checked when it is decoded.
      if (state.pos <= size) walk.publish(state);
      result = false;
      break;
    }
    if (state.pos != start) continue;  // an opcode ran over the start: that scan is wasted
    ScanAhead& scan = *ahead[next++];
    scan.thread.join();
    if (!scan.usable || state.memo + scan.state.memo > strings_.capacity() ||
        state.marks.size() + scan.state.most_marks > kMaxMarks)
      continue;  // this scan walks it instead
    if (!take(state, scan, walk, strings_, found)) break;
    ++scans_ahead_kept_;
  }
  return result && !state.stopped;
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
