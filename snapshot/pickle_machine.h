// Runs a pickle (protocols 0-5, the data-only subset: None, bools, ints of every width,
// floats, str, bytes, lists, tuples, dicts, sets, memo and frames) into a ValueStore. It
// never imports or calls anything: a pickle that names a class or function is refused.
//
// Streaming: containers are handed to a Lowering as soon as they are placed into their
// parent (complete by then, since pickle writes children first), and the lowering may turn
// them into small records (a PyTorch trace entry, a frame) so the object and its items are
// released at once. A container that something else also refers to (memo get, DUP) is
// never lowered, so no reference ever dangles.
//
// Hostile input: every opcode and length is checked, nesting and the value stack are
// bounded, and lengths are believed only as far as the bytes behind them go; errors
// throw PickleError naming the byte offset.
#pragma once

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

struct MachineLimits {
  size_t max_stack = size_t{1} << 22;  // values on the stack at once
  size_t max_marks = 512;              // nesting of MARKs (containers being built)
};

class Machine {
 public:
  Machine(ByteSource& input, ValueStore& store, Lowering* lowering, MachineLimits limits = {});
  // The pickled value (what STOP returns). Throws PickleError.
  Value run();
  // Room for the memo entries an input of this size is likely to hold (PyTorch snapshots
  // memoize about one value per 30 bytes).
  void expect_input_bytes(uint64_t bytes);

 private:
  [[noreturn]] void fail(const std::string& what) const;
  [[noreturn]] void fail_truncated() const;
  uint8_t read_u8() {
    if (const uint8_t* at = input_.take(1)) return *at;
    return read_u8_slow();
  }
  uint64_t read_le(size_t bytes) {
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
    stack_.push_back(v);
  }
  [[noreturn, gnu::cold, gnu::noinline]] void fail_stack_full() const;
  Value pop();
  Value& top();
  size_t pop_mark();  // index in stack_ where the items after the last mark begin
  Value place(Value v);  // a value about to go into a container: lower it if possible
  void memo_put(uint64_t index, Value v);
  Value memo_get(uint64_t index) {
    if (index < memo_.size()) {
      const Value v = memo_[static_cast<size_t>(index)];
      if (v.is(Tag::kObject)) mark_shared(v);
      return v;
    }
    return sparse_memo_get(index);
  }
  Value sparse_memo_get(uint64_t index);
  void mark_shared(Value object);
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
};

}  // namespace memsnap::pickle
