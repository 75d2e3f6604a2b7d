#include "snapshot/pickle_machine.h"

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <iterator>

namespace memsnap::pickle {
namespace {

// The opcodes this machine runs, by protocol (see Python's Lib/pickletools.py for the
// reference descriptions).
enum Op : uint8_t {
  kMark = '(', kStop = '.', kPop = '0', kPopMark = '1', kDup = '2',
  kFloat = 'F', kInt = 'I', kBinInt = 'J', kBinInt1 = 'K', kLong = 'L', kBinInt2 = 'M',
  kNone = 'N', kBinString = 'T', kShortBinString = 'U', kBinUnicode = 'X',
  kAppend = 'a', kDict = 'd', kEmptyDict = '}', kAppends = 'e', kGet = 'g', kBinGet = 'h',
  kLongBinGet = 'j', kList = 'l', kEmptyList = ']', kPut = 'p', kBinPut = 'q',
  kLongBinPut = 'r', kSetItem = 's', kTuple = 't', kEmptyTuple = ')', kSetItems = 'u',
  kBinFloat = 'G',
  // protocol 2
  kProto = 0x80, kTuple1 = 0x85, kTuple2 = 0x86, kTuple3 = 0x87, kNewTrue = 0x88,
  kNewFalse = 0x89, kLong1 = 0x8a, kLong4 = 0x8b,
  // protocol 3
  kBinBytes = 'B', kShortBinBytes = 'C',
  // protocol 4
  kShortBinUnicode = 0x8c, kBinUnicode8 = 0x8d, kBinBytes8 = 0x8e, kEmptySet = 0x8f,
  kAddItems = 0x90, kFrozenSet = 0x91, kMemoize = 0x94, kFrame = 0x95,
  // protocol 5
  kByteArray8 = 0x96,
};

// Opcodes that would import or call code, or need out-of-band data: refused by name.
const char* refused_opcode_name(uint8_t op) {
  switch (op) {
    case 'c': return "GLOBAL";
    case 0x93: return "STACK_GLOBAL";
    case 'R': return "REDUCE";
    case 'b': return "BUILD";
    case 'i': return "INST";
    case 'o': return "OBJ";
    case 0x81: return "NEWOBJ";
    case 0x92: return "NEWOBJ_EX";
    case 'P': return "PERSID";
    case 'Q': return "BINPERSID";
    case 0x82: case 0x83: case 0x84: return "EXT";
    case 0x97: return "NEXT_BUFFER";
    case 0x98: return "READONLY_BUFFER";
    case 'S': return "STRING";
    case 'V': return "UNICODE";
    default: return nullptr;
  }
}

constexpr size_t kReadPieceBytes = size_t{1} << 20;
// A memo entry at an index past the dense ones: its node and bucket in sparse_memo_.
constexpr uint64_t kSparseMemoEntry = 64;

}  // namespace

Machine::Machine(ByteSource& input, ValueStore& store, Lowering* lowering, MachineLimits limits)
    : input_(input), store_(store), lowering_(lowering), limits_(limits) {}

void Machine::expect_input_bytes(uint64_t bytes) {
  memo_.reserve(static_cast<size_t>(std::min<uint64_t>(bytes / 30, uint64_t{1} << 26)));
}

void Machine::fail(const std::string& what) const {
  throw PickleError("pickle byte " + std::to_string(opcode_offset_) + ": " + what);
}

void Machine::fail_stack_full() const { fail("too many values on the stack"); }

void Machine::grow_stack() {
  const size_t capacity = std::min(std::max<size_t>(64, stack_.capacity() * 2), limits_.max_stack);
  store_.charge(uint64_t{capacity - stack_.capacity()} * sizeof(Value));
  stack_.reserve(capacity);
}

void Machine::fail_truncated() const {
  fail(input_.hit_limit() ? "input larger than the limit" : "truncated");
}

uint8_t Machine::read_u8_slow() {
  uint8_t byte;
  if (!input_.read(&byte, 1)) fail_truncated();
  return byte;
}

uint64_t Machine::read_le_slow(size_t bytes) {
  uint8_t raw[8];
  if (!input_.read(raw, bytes)) fail_truncated();
  uint64_t v = 0;
  for (size_t i = bytes; i-- > 0;) v = (v << 8) | raw[i];
  return v;
}

std::string_view Machine::read_bytes(uint64_t length) {
  if (length <= kReadPieceBytes)
    if (const uint8_t* at = input_.take(static_cast<size_t>(length)))
      return {reinterpret_cast<const char*>(at), static_cast<size_t>(length)};
  // Grown as the bytes arrive, so a hostile length costs no more than the input behind it.
  scratch_.clear();
  while (length > 0) {
    const size_t piece = static_cast<size_t>(std::min<uint64_t>(length, kReadPieceBytes));
    const size_t old = scratch_.size();
    scratch_.resize(old + piece);
    if (!input_.read(scratch_.data() + old, piece))
      fail(input_.hit_limit() ? "input larger than the limit" : "truncated inside a string");
    length -= piece;
  }
  return scratch_;
}

std::string Machine::read_line() {
  std::string line;
  for (;;) {
    const uint8_t c = read_u8();
    if (c == '\n') return line;
    if (line.size() >= 256) fail("text argument too long");
    line.push_back(static_cast<char>(c));
  }
}

Value Machine::pop() {
  if (stack_.size() <= (marks_.empty() ? 0 : marks_.back())) fail("stack underflow");
  Value v = stack_.back();
  stack_.pop_back();
  return v;
}

Value& Machine::top() {
  if (stack_.size() <= (marks_.empty() ? 0 : marks_.back())) fail("stack underflow");
  return stack_.back();
}

size_t Machine::pop_mark() {
  if (marks_.empty()) fail("no MARK to close");
  const size_t first = marks_.back();
  marks_.pop_back();
  return first;
}

Value Machine::place(Value v) {
  if (!v.is(Tag::kObject) || lowering_ == nullptr) return v;
  const Object& o = store_.object(v);
  if (!o.lowered_as.is(Tag::kNone)) return o.lowered_as;
  if (o.shared) return v;
  const int64_t slot = o.memo_slot;
  const Value lowered = lowering_->lower(store_, v);
  if (lowered == v) return v;
  memo_lowered(slot, v, lowered);
  store_.release(v);
  return lowered;
}

void Machine::memo_lowered(int64_t slot, Value object, Value lowered) {
  if (slot < 0) return;
  if (static_cast<uint64_t>(slot) < memo_.size() && memo_[static_cast<size_t>(slot)] == object)
    memo_[static_cast<size_t>(slot)] = lowered;
  else if (auto it = sparse_memo_.find(static_cast<uint64_t>(slot)); it != sparse_memo_.end() && it->second == object)
    it->second = lowered;
}

void Machine::lower_finished(size_t at, size_t pairs) {
  // Python pickles a dict 1,000 pairs to a SETITEMS: a shorter batch is the dict's last, so
  // it is complete (a trace entry, a frame) and lowered now rather than when its list takes
  // it, and a batch of entries never holds a thousand dicts at once.
  constexpr size_t kPythonBatch = 1000;
  if (lowering_ == nullptr || pairs >= kPythonBatch || !stack_[at].is(Tag::kObject)) return;
  const Value v = stack_[at];
  const Object& o = store_.object(v);
  if (o.shared || !o.lowered_as.is(Tag::kNone)) return;
  const int64_t slot = o.memo_slot;
  const Value lowered = lowering_->lower(store_, v);
  if (lowered == v) return;
  memo_lowered(slot, v, lowered);
  stack_[at] = lowered;
  store_.release(v);
}

void Machine::memo_put(uint64_t index, Value v) {
  // Indices are kept from memo_base_ (0 unless decoding a part), and so are memo slots.
  if (index < memo_base_) fail("memo index " + std::to_string(index) + " belongs before this part");
  index -= memo_base_;
  if (v.is(Tag::kObject)) {
    Object& o = store_.object(v);
    if (o.memo_slot < 0) {
      o.memo_slot = static_cast<int64_t>(index);
      o.memoized_at = stack_.size() - 1;  // `v` is the top
    } else {
      o.shared = true;  // two memo slots: treat as referenced twice
    }
  }
  if (index == memo_.size()) {
    store_.charge(sizeof(Value));
    memo_.push_back(v);
  } else if (index < memo_.size()) {
    memo_[static_cast<size_t>(index)] = v;
  } else {
    auto [it, added] = sparse_memo_.try_emplace(index, v);
    if (added) store_.charge(kSparseMemoEntry);
    else it->second = v;
  }
}

Value Machine::sparse_memo_get(uint64_t index) {
  if (index < memo_base_) {
    const Value v = outer_->get(store_, index);
    outer_seen_[index % kOuterSlots] = {index, v};
    return v;
  }
  auto it = sparse_memo_.find(index - memo_base_);
  if (it == sparse_memo_.end()) fail("memo index " + std::to_string(index) + " was never stored");
  if (it->second.is(Tag::kObject)) return get_again(it->second);
  return it->second;
}

Value Machine::get_again(Value object) {
  Object& o = store_.object(object);
  if (!o.lowered_as.is(Tag::kNone)) return o.lowered_as;
  // Complete unless it is still on the stack: there it may be filled yet, under its MARK or
  // by a later APPEND or SETITEM (a hostile pickle can name a list from inside its own items).
  const bool on_stack = o.memoized_at < stack_.size() && stack_[o.memoized_at] == object;
  const bool complete = lowering_ != nullptr && !o.shared && !on_stack;
  if (complete) {
    // Frames that one stack names twice, stacks that several events share: lowered once,
    // here, so that whatever holds them can be lowered too. The object is kept (references
    // to it made before this one still lie on the stack) and stands for the record from now.
    const int64_t slot = o.memo_slot;
    const Value lowered = lowering_->lower(store_, object);
    if (!(lowered == object)) {
      store_.object(object).lowered_as = lowered;
      memo_lowered(slot, object, lowered);
      return lowered;
    }
  }
  store_.object(object).shared = true;
  return object;
}

Value Machine::read_long(uint64_t length) {
  if (length == 0) return store_.integer(0);
  if (length > 8) {
    std::string_view bytes = read_bytes(length);
    // A 9-byte encoding of a uint64 (top byte 0) still fits; anything wider is kept as "huge".
    bool fits = bytes.size() == 9 && static_cast<uint8_t>(bytes[8]) == 0;
    if (!fits) return Value::make(Tag::kHugeInt);
    uint64_t v = 0;
    for (size_t i = 8; i-- > 0;) v = (v << 8) | static_cast<uint8_t>(bytes[i]);
    return store_.unsigned_integer(v);
  }
  uint64_t raw = read_le(static_cast<size_t>(length));
  if (length < 8 && (raw >> (length * 8 - 1)) & 1) raw |= ~uint64_t{0} << (length * 8);  // sign
  return store_.integer(static_cast<int64_t>(raw));
}

Value Machine::make_sequence(ObjectKind kind, size_t first) {
  const Value object = store_.new_object(kind);
  std::vector<Value>& items = store_.object(object).items;
  const size_t capacity = items.capacity();
  items.reserve(stack_.size() - first);
  store_.items_grew(capacity, items.capacity());
  for (size_t i = first; i < stack_.size(); ++i) {
    const Value placed = place(stack_[i]);
    store_.object(object).items.push_back(placed);
  }
  stack_.resize(first);
  return object;
}

void Machine::add_items(Value container, size_t first) {
  if (!container.is(Tag::kObject)) fail("APPENDS/ADDITEMS to something that is not a list or set");
  const ObjectKind kind = store_.object(container).kind;
  if (kind != ObjectKind::kList && kind != ObjectKind::kSet)
    fail("APPENDS/ADDITEMS to something that is not a list or set");
  std::vector<Value>& items = store_.object(container).items;  // `place` creates no objects
  const size_t capacity = items.capacity();
  for (size_t i = first; i < stack_.size(); ++i) items.push_back(place(stack_[i]));
  store_.items_grew(capacity, items.capacity());
  stack_.resize(first);
}

void Machine::set_items(Value dict, size_t first) {
  if (!dict.is(Tag::kObject) || store_.object(dict).kind != ObjectKind::kDict)
    fail("SETITEMS to something that is not a dict");
  if ((stack_.size() - first) % 2 != 0) fail("SETITEMS with a key but no value");
  // `place` never creates objects, so the dict's storage stays where it is.
  std::vector<Value>& items = store_.object(dict).items;
  const size_t old = items.size();
  const size_t capacity = items.capacity();
  items.resize(old + (stack_.size() - first));
  store_.items_grew(capacity, items.capacity());
  Value* out = items.data() + old;
  for (size_t i = first; i < stack_.size(); i += 2) {
    *out++ = stack_[i];
    *out++ = place(stack_[i + 1]);
  }
  stack_.resize(first);
}

Value Machine::run() {
  if (splicer_ != nullptr) next_splice_ = splicer_->next_mark(input_.offset());
  return loop();
}

std::vector<Value> Machine::run_part(uint64_t memo_base, OuterMemo& outer) {
  outer_ = &outer;
  memo_base_ = memo_base;
  outer_seen_.assign(kOuterSlots, OuterSeen{});
  // The part's items go into a list of its own, as they would into the list they belong to.
  const Value list = store_.new_object(ObjectKind::kList);
  stack_.push_back(list);
  marks_.push_back(stack_.size());
  loop();
  if (marks_.size() != 1 || marks_.back() != 1 || !(stack_[0] == list))
    fail("a part that does not end where its list's items do");
  const size_t capacity = store_.object(list).items.capacity();
  for (size_t i = 1; i < stack_.size(); ++i) {
    const Value placed = place(stack_[i]);
    store_.object(list).items.push_back(placed);
  }
  store_.items_grew(capacity, store_.object(list).items.capacity());
  stack_.clear();
  marks_.clear();
  return std::move(store_.object(list).items);
}

void Machine::take_piece() {
  if (const std::optional<Splicer::Piece> piece = splicer_->piece(opcode_offset_, *this)) {
    for (const Value v : piece->items) push(v);
    store_.charge(uint64_t{piece->memo.size()} * sizeof(Value));
    memo_.insert(memo_.end(), piece->memo.begin(), piece->memo.end());
    const uint64_t at = input_.offset();
    if (piece->resume_at < at || !input_.skip(piece->resume_at - at)) fail("a part that ends past the input");
  }
  next_splice_ = splicer_->next_mark(input_.offset());
}

void Machine::next_batch() {
  // Between a part's APPENDS batches: FRAMEs, then the next batch's MARK (or the part's end).
  for (;;) {
    if (input_.peek() < 0) return;
    opcode_offset_ = input_.offset();
    const uint8_t op = read_u8();
    if (op == kMark) {
      marks_.push_back(stack_.size());
      return;
    }
    if (op != kFrame) fail("a part whose batches are not of one list");
    read_le(8);
  }
}

// Threaded dispatch: each opcode's code ends with its own fetch and jump to the next one's,
// so the processor predicts each jump from the opcode before it (PyTorch's snapshots repeat
// a few opcode sequences millions of times); one shared switch jump mispredicted often. A
// computed goto runs no destructors: no handler jumps from inside the scope of an object
// that has one (clang refuses such a jump; gcc would leak the object).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpedantic"
#if defined(__clang__)
#pragma GCC diagnostic ignored "-Wgnu-label-as-value"
#endif
Value Machine::loop() {
  const void* table[256];
  std::fill(std::begin(table), std::end(table), &&op_default);
  table[kProto] = &&op_kProto;
  table[kFrame] = &&op_kFrame;
  table[kStop] = &&op_kStop;
  table[kMark] = &&op_kMark;
  table[kPop] = &&op_kPop;
  table[kPopMark] = &&op_kPopMark;
  table[kDup] = &&op_kDup;
  table[kNone] = &&op_kNone;
  table[kNewTrue] = &&op_kNewTrue;
  table[kNewFalse] = &&op_kNewFalse;
  table[kBinInt] = &&op_kBinInt;
  table[kBinInt1] = &&op_kBinInt1;
  table[kBinInt2] = &&op_kBinInt2;
  table[kLong1] = &&op_kLong1;
  table[kLong4] = &&op_kLong4;
  table[kInt] = &&op_kInt;
  table[kLong] = &&op_kLong;
  table[kBinFloat] = &&op_kBinFloat;
  table[kFloat] = &&op_kFloat;
  table[kShortBinUnicode] = &&op_kShortBinUnicode;
  table[kBinUnicode] = &&op_kBinUnicode;
  table[kBinUnicode8] = &&op_kBinUnicode8;
  table[kShortBinString] = &&op_kShortBinString;
  table[kBinString] = &&op_kBinString;
  table[kShortBinBytes] = &&op_kShortBinBytes;
  table[kBinBytes] = &&op_kBinBytes;
  table[kBinBytes8] = &&op_kBinBytes8;
  table[kByteArray8] = &&op_kByteArray8;
  table[kEmptyList] = &&op_kEmptyList;
  table[kEmptyDict] = &&op_kEmptyDict;
  table[kEmptyTuple] = &&op_kEmptyTuple;
  table[kEmptySet] = &&op_kEmptySet;
  table[kTuple1] = &&op_kTuple1;
  table[kTuple2] = &&op_kTuple2;
  table[kTuple3] = &&op_kTuple3;
  table[kTuple] = &&op_kTuple;
  table[kList] = &&op_kList;
  table[kFrozenSet] = &&op_kFrozenSet;
  table[kDict] = &&op_kDict;
  table[kAppend] = &&op_kAppend;
  table[kAppends] = &&op_kAppends;
  table[kAddItems] = &&op_kAddItems;
  table[kSetItem] = &&op_kSetItem;
  table[kSetItems] = &&op_kSetItems;
  table[kMemoize] = &&op_kMemoize;
  table[kBinPut] = &&op_kBinPut;
  table[kLongBinPut] = &&op_kLongBinPut;
  table[kPut] = &&op_kPut;
  table[kGet] = &&op_kGet;
  table[kBinGet] = &&op_kBinGet;
  table[kLongBinGet] = &&op_kLongBinGet;
  uint8_t op;
#define MEMSNAP_NEXT_OP()                                                                  \
  do {                                                                                     \
    opcode_offset_ = input_.offset();                                                      \
    if (const uint8_t* at = input_.take(1)) op = *at;                                      \
    else if (outer_ != nullptr && input_.peek() < 0) return Value(); /* a part's end */    \
    else op = read_u8_slow();                                                              \
    goto *table[op];                                                                       \
  } while (false)
  MEMSNAP_NEXT_OP();
    op_kProto: {
      const uint8_t protocol = read_u8();
      if (protocol > 5) fail("pickle protocol " + std::to_string(protocol) + " is newer than 5");
      MEMSNAP_NEXT_OP();
    }
    op_kFrame: read_le(8); MEMSNAP_NEXT_OP();  // framing only groups opcodes; nothing to do
    op_kStop: {
      if (outer_ != nullptr) fail("STOP inside a part");
      const Value result = pop();
      if (!marks_.empty()) fail("STOP inside an unfinished MARK");
      return result;
    }
    op_kMark:
      if (marks_.size() >= limits_.max_marks) fail("nested deeper than " + std::to_string(limits_.max_marks));
      marks_.push_back(stack_.size());
      if (opcode_offset_ == next_splice_) [[unlikely]] take_piece();
      MEMSNAP_NEXT_OP();
    op_kPop: pop(); MEMSNAP_NEXT_OP();
    op_kPopMark: stack_.resize(pop_mark()); MEMSNAP_NEXT_OP();
    op_kDup: {
      const Value v = top();
      if (v.is(Tag::kObject)) store_.object(v).shared = true;
      push(v);
      MEMSNAP_NEXT_OP();
    }
    op_kNone: push(Value::make(Tag::kNone)); MEMSNAP_NEXT_OP();
    op_kNewTrue: push(Value::make(Tag::kTrue)); MEMSNAP_NEXT_OP();
    op_kNewFalse: push(Value::make(Tag::kFalse)); MEMSNAP_NEXT_OP();
    op_kBinInt: push(store_.integer(static_cast<int32_t>(read_le(4)))); MEMSNAP_NEXT_OP();
    op_kBinInt1: push(store_.integer(static_cast<int64_t>(read_le(1)))); MEMSNAP_NEXT_OP();
    op_kBinInt2: push(store_.integer(static_cast<int64_t>(read_le(2)))); MEMSNAP_NEXT_OP();
    op_kLong1: push(read_long(read_le(1))); MEMSNAP_NEXT_OP();
    op_kLong4: {
      const auto length = static_cast<int32_t>(read_le(4));
      if (length < 0) fail("negative LONG4 length");
      push(read_long(static_cast<uint64_t>(length)));
      MEMSNAP_NEXT_OP();
    }
    op_kInt:
    op_kLong: {
      {  // the text's scope ends before the jump: a computed goto runs no destructors
        std::string text = read_line();
        if (op == kInt && (text == "00" || text == "01")) {
          push(Value::make(text == "01" ? Tag::kTrue : Tag::kFalse));
        } else {
          if (op == kLong && !text.empty() && text.back() == 'L') text.pop_back();
          int64_t v = 0;
          auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
          if (ec == std::errc::result_out_of_range) {
            push(Value::make(Tag::kHugeInt));
          } else {
            if (ec != std::errc() || end != text.data() + text.size() || text.empty()) fail("bad integer text");
            push(store_.integer(v));
          }
        }
      }
      MEMSNAP_NEXT_OP();
    }
    op_kBinFloat: {
      const uint64_t be = read_le(8);
      const uint64_t bits = __builtin_bswap64(be);  // BINFLOAT is big-endian
      double d;
      std::memcpy(&d, &bits, sizeof d);
      push(store_.floating(d));
      MEMSNAP_NEXT_OP();
    }
    op_kFloat: {
      {
        const std::string text = read_line();
        char* end = nullptr;
        const double d = std::strtod(text.c_str(), &end);
        if (text.empty() || end != text.c_str() + text.size()) fail("bad float text");
        push(store_.floating(d));
      }
      MEMSNAP_NEXT_OP();
    }
    op_kShortBinUnicode: push(store_.string(read_bytes(read_le(1)))); MEMSNAP_NEXT_OP();
    op_kBinUnicode: push(store_.string(read_bytes(read_le(4)))); MEMSNAP_NEXT_OP();
    op_kBinUnicode8: push(store_.string(read_bytes(read_le(8)))); MEMSNAP_NEXT_OP();
    op_kShortBinString: push(store_.string(read_bytes(read_le(1)))); MEMSNAP_NEXT_OP();  // py2 str
    op_kBinString: {
      const auto length = static_cast<int32_t>(read_le(4));
      if (length < 0) fail("negative BINSTRING length");
      push(store_.string(read_bytes(static_cast<uint64_t>(length))));
      MEMSNAP_NEXT_OP();
    }
    op_kShortBinBytes: push(store_.string(read_bytes(read_le(1)), Tag::kBytes)); MEMSNAP_NEXT_OP();
    op_kBinBytes: push(store_.string(read_bytes(read_le(4)), Tag::kBytes)); MEMSNAP_NEXT_OP();
    op_kBinBytes8:
    op_kByteArray8: push(store_.string(read_bytes(read_le(8)), Tag::kBytes)); MEMSNAP_NEXT_OP();
    op_kEmptyList: push(store_.new_object(ObjectKind::kList)); MEMSNAP_NEXT_OP();
    op_kEmptyDict: push(store_.new_object(ObjectKind::kDict)); MEMSNAP_NEXT_OP();
    op_kEmptyTuple: push(store_.new_object(ObjectKind::kTuple)); MEMSNAP_NEXT_OP();
    op_kEmptySet: push(store_.new_object(ObjectKind::kSet)); MEMSNAP_NEXT_OP();
    op_kTuple1:
    op_kTuple2:
    op_kTuple3: {
      const size_t count = op - kTuple1 + 1u;
      const size_t floor = marks_.empty() ? 0 : marks_.back();
      if (stack_.size() < floor + count) fail("stack underflow");
      push(make_sequence(ObjectKind::kTuple, stack_.size() - count));
      MEMSNAP_NEXT_OP();
    }
    op_kTuple: push(make_sequence(ObjectKind::kTuple, pop_mark())); MEMSNAP_NEXT_OP();
    op_kList: push(make_sequence(ObjectKind::kList, pop_mark())); MEMSNAP_NEXT_OP();
    op_kFrozenSet: push(make_sequence(ObjectKind::kSet, pop_mark())); MEMSNAP_NEXT_OP();
    op_kDict: {
      const size_t first = pop_mark();
      const Value dict = store_.new_object(ObjectKind::kDict);
      const size_t pairs = (stack_.size() - first) / 2;
      set_items(dict, first);
      push(dict);
      lower_finished(stack_.size() - 1, pairs);
      MEMSNAP_NEXT_OP();
    }
    op_kAppend: {
      const Value item = pop();
      const Value list = top();
      if (!list.is(Tag::kObject) || store_.object(list).kind != ObjectKind::kList)
        fail("APPEND to something that is not a list");
      const Value placed = place(item);
      std::vector<Value>& items = store_.object(list).items;
      const size_t capacity = items.capacity();
      items.push_back(placed);
      store_.items_grew(capacity, items.capacity());
      MEMSNAP_NEXT_OP();
    }
    op_kAppends:
    op_kAddItems: {
      const size_t first = pop_mark();
      if (first == 0 || first - 1 < (marks_.empty() ? 0 : marks_.back()))
        fail("APPENDS with no list under its MARK");
      add_items(stack_[first - 1], first);
      if (outer_ != nullptr && marks_.empty()) next_batch();
      MEMSNAP_NEXT_OP();
    }
    op_kSetItem: {
      const size_t floor = marks_.empty() ? 0 : marks_.back();
      if (stack_.size() < floor + 3) fail("stack underflow");
      set_items(stack_[stack_.size() - 3], stack_.size() - 2);
      lower_finished(stack_.size() - 1, 1);
      MEMSNAP_NEXT_OP();
    }
    op_kSetItems: {
      const size_t first = pop_mark();
      if (first == 0 || first <= (marks_.empty() ? 0 : marks_.back()))
        fail("SETITEMS with no dict under its MARK");
      const size_t pairs = (stack_.size() - first) / 2;
      set_items(stack_[first - 1], first);
      lower_finished(first - 1, pairs);
      MEMSNAP_NEXT_OP();
    }
    op_kMemoize: memo_put(memo_base_ + memo_.size(), top()); MEMSNAP_NEXT_OP();
    op_kBinPut: memo_put(read_le(1), top()); MEMSNAP_NEXT_OP();
    op_kLongBinPut: memo_put(read_le(4), top()); MEMSNAP_NEXT_OP();
    op_kPut:
    op_kGet: {
      {
        const std::string text = read_line();
        uint64_t index = 0;
        auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), index);
        if (ec != std::errc() || end != text.data() + text.size() || text.empty()) fail("bad memo index text");
        if (op == kPut) memo_put(index, top());
        else push(memo_get(index));
      }
      MEMSNAP_NEXT_OP();
    }
    op_kBinGet: push(memo_get(read_le(1))); MEMSNAP_NEXT_OP();
    op_kLongBinGet: push(memo_get(read_le(4))); MEMSNAP_NEXT_OP();
    op_default: {
      if (const char* name = refused_opcode_name(op))
        fail(std::string("opcode ") + name + " is not supported (a snapshot holds only plain data)");
      char hex[8];
      std::snprintf(hex, sizeof hex, "0x%02x", op);
      fail(std::string("unknown opcode ") + hex + " (not a pickle, or damaged)");
    }

#undef MEMSNAP_NEXT_OP
}
#pragma GCC diagnostic pop

}  // namespace memsnap::pickle
