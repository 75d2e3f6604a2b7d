// Runs a pickle (protocols 0-5, the data-only subset: None, bools, ints of every width,
// floats, str, bytes, lists, tuples, dicts, sets, memo and frames) into a ValueStore. It
// never imports or calls anything: a pickle that names a class or function is refused.
//
// Streaming: containers are handed to a Lowering as soon as they are complete (a dict at
// its last SETITEMS batch, anything else when placed into its parent, since pickle writes
// children first), and the lowering may turn them into small records (a PyTorch trace
// entry, a frame) so the object and its items are released at once. A complete container
// that the memo hands out again is lowered then and kept, standing for its record from
// there on; one still being built when referred to again (memo get, DUP) is never lowered,
// so no reference ever dangles.
//
// Parts: run_part decodes a run of a list's items on its own, with the memo entries made
// before it supplied by an OuterMemo, and a Splicer lets run() step over such parts decoded
// by other threads (pytorch_parallel_read.h).
//
// Hostile input: every opcode and length is checked, nesting and the value stack are
// bounded, and lengths are believed only as far as the bytes behind them go; errors
// throw PickleError naming the byte offset.
#pragma once

#include <bit>
#include <cstring>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

#include "snapshot/byte_source.h"
#include "snapshot/pickle_values.h"

namespace memsnap::pickle {

struct PickleError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class Lowering {
 public:
  virtual ~Lowering() = default;
  // `object` is complete and referred to only by its parent-to-be (and the memo). Return a
  // replacement value (then the machine releases the object), or `object` to keep it.
  // It must not create objects (the machine holds references into the object table).
  virtual Value lower(ValueStore& store, Value object) = 0;
};

// What a part decoded alone (Machine::run_part) knows of the memo entries made before it.
class OuterMemo {
 public:
  virtual ~OuterMemo() = default;
  // The value of memo entry `index` (below the part's first): a string when it can tell,
  // else Value::make(Tag::kOuter, index), for whoever joins the part to the whole.
  virtual Value get(ValueStore& store, uint64_t index) = 0;
};

class Machine;

// Hands a machine reading a whole pickle the parts that were decoded elsewhere
// (pickle_layout.h), so it can step over them.
class Splicer {
 public:
  virtual ~Splicer() = default;
  struct Piece {
    std::span<const Value> items;  // what the part leaves above its MARK
    std::span<const Value> memo;   // its memo entries, in order
    uint64_t resume_at = 0;        // the offset after the part
  };
  // The offset of the next part's MARK at or after `offset`, or UINT64_MAX.
  virtual uint64_t next_mark(uint64_t offset) = 0;
  // The machine has run the MARK at `offset` that next_mark named: the part after it, made
  // this machine's values, or nothing (the machine then reads the part itself). The piece's
  // values stay valid until the next call.
  virtual std::optional<Piece> piece(uint64_t offset, const Machine& machine) = 0;
};

struct MachineLimits {
  size_t max_stack = size_t{1} << 22;  // values on the stack at once
  size_t max_marks = 512;              // nesting of MARKs (containers being built)
};

class Machine {
 public:
  Machine(ByteSource& input, ValueStore& store, Lowering* lowering, MachineLimits limits = {});
  // The pickled value (what STOP returns). Throws PickleError.
  Value run();
  // With a splicer, run() steps over the parts it hands out.
  void set_splicer(Splicer* splicer) { splicer_ = splicer; }
  // Decodes a part of a larger pickle on its own: the input is a sequence of whole items of
  // one list (in one or more APPENDS batches), whose memo entries are numbered from
  // `memo_base`. Returns the items, each lowered as in the list; the part's memo entries are
  // then memo(). Throws PickleError.
  std::vector<Value> run_part(uint64_t memo_base, OuterMemo& outer);
  // The memo entries made so far (from memo_base in a part), densely numbered.
  const std::vector<Value>& memo() const { return memo_; }
  bool memo_is_dense() const { return sparse_memo_.empty(); }
  // Room for the memo entries an input of this size is likely to hold (PyTorch snapshots
  // memoize about one value per 30 bytes).
  void expect_input_bytes(uint64_t bytes);
  // Room for `entries` memo entries (a part's, as the layout scan counted them).
  void expect_memo_entries(uint64_t entries) { memo_.reserve(static_cast<size_t>(entries)); }

 private:
  [[noreturn]] void fail(const std::string& what) const;
  [[noreturn]] void fail_truncated() const;
  uint8_t read_u8() {
    if (const uint8_t* at = input_.take(1)) return *at;
    return read_u8_slow();
  }
  uint64_t read_le(size_t bytes) {
    if constexpr (std::endian::native == std::endian::little) {
      // One load where 8 bytes lie in the buffer (lengths, memo indices, integers), masked.
      if (bytes <= 8 && input_.buffered() >= 8) {
        uint64_t v;
        std::memcpy(&v, input_.take(bytes), sizeof v);
        return bytes == 8 ? v : v & ((uint64_t{1} << (bytes * 8)) - 1);
      }
    }
    if (const uint8_t* at = input_.take(bytes)) {
      uint64_t v = 0;
      for (size_t i = bytes; i-- > 0;) v = (v << 8) | at[i];
      return v;
    }
    return read_le_slow(bytes);
  }
  uint8_t read_u8_slow();
  uint64_t read_le_slow(size_t bytes);
  std::string_view read_bytes(uint64_t length);
  std::string read_line();
  // Every opcode pushes: kept inline, the failure out of line.
  [[gnu::always_inline]] void push(Value v) {
    if (stack_.size() >= limits_.max_stack) [[unlikely]]
      fail_stack_full();
    if (stack_.size() == stack_.capacity()) [[unlikely]]
      grow_stack();
    stack_.push_back(v);
  }
  [[noreturn, gnu::cold, gnu::noinline]] void fail_stack_full() const;
  [[gnu::cold, gnu::noinline]] void grow_stack();  // charged to the store's budget
  Value pop();
  Value& top();
  size_t pop_mark();  // index in stack_ where the items after the last mark begin
  Value place(Value v);  // a value about to go into a container: lower it if possible
  void memo_put(uint64_t index, Value v);
  Value memo_get(uint64_t index) {
    if (index - memo_base_ < memo_.size()) {
      const Value v = memo_[static_cast<size_t>(index - memo_base_)];
      if (v.is(Tag::kObject)) return get_again(v);
      return v;
    }
    if (index < memo_base_) {  // a part reads the same few outer entries over and over
      const OuterSeen& seen = outer_seen_[index % kOuterSlots];
      if (seen.index == index) return seen.value;
    }
    return sparse_memo_get(index);
  }
  Value sparse_memo_get(uint64_t index);
  Value loop();  // the opcodes, until STOP (or the end of a part's input)
  void take_piece();
  void next_batch();
  // An object the memo hands out a second time: lowered then if it is complete (not being
  // built under an open MARK), else marked as shared and never lowered.
  Value get_again(Value object);
  // The memo slot of an object just lowered holds the lowered value from now on.
  void memo_lowered(int64_t slot, Value object, Value lowered);
  // The dict at stack_[at] just got `pairs` items from SETITEM(S) or DICT.
  void lower_finished(size_t at, size_t pairs);
  Value read_long(uint64_t length);
  Value make_sequence(ObjectKind kind, size_t first);
  void add_items(Value container, size_t first);
  void set_items(Value dict, size_t first);

  ByteSource& input_;
  ValueStore& store_;
  Lowering* lowering_;
  MachineLimits limits_;
  std::vector<Value> stack_;
  std::vector<size_t> marks_;
  std::vector<Value> memo_;                      // the common case: dense indices
  std::unordered_map<uint64_t, Value> sparse_memo_;  // indices beyond the dense end
  std::string scratch_;
  uint64_t opcode_offset_ = 0;
  // Decoding a part: memo indices start at memo_base_ and those below come from outer_.
  OuterMemo* outer_ = nullptr;
  uint64_t memo_base_ = 0;
  struct OuterSeen {
    uint64_t index = UINT64_MAX;
    Value value;
  };
  static constexpr size_t kOuterSlots = 1024;
  std::vector<OuterSeen> outer_seen_;  // what outer_ said, direct-mapped by index
  Splicer* splicer_ = nullptr;
  uint64_t next_splice_ = UINT64_MAX;  // offset of the next part's MARK
};

}  // namespace memsnap::pickle
