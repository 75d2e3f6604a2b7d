// The values a pickle (or a JSON document read the same way) is made of, stored compactly:
// each value is one 64-bit word (a tag and a payload), strings are interned once, and
// containers live in a table of objects that are recycled once a reader has turned them
// into something smaller. A 300,000-event PyTorch snapshot then needs a few bytes per
// event while it loads, not a tree of heap objects.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "snapshot/read_budget.h"

namespace memsnap::pickle {

enum class Tag : uint8_t {
  kNone,
  kFalse,
  kTrue,
  kInt,       // payload: a signed 60-bit integer
  kWideInt,   // payload: index of an int64 in the wide-int table
  kWideUInt,  // payload: index of a uint64 above INT64_MAX in the wide-int table (as bits)
  kHugeInt,   // an integer wider than 64 bits: its value is not kept
  kFloat,     // payload: index into the float table
  kString,    // payload: interned string id
  kBytes,     // payload: interned string id (raw bytes)
  kObject,    // payload: object id (list, dict, tuple or set)
  kEmptyList, // an empty list placed in its parent and released
  kLowered,   // payload: (kind << 40) | index, meaning defined by the reader that lowered it
  kOuter,     // payload: a memo index made before the part of a pickle being decoded alone
              // (pickle_machine.h's run_part), whose value that decoding could not know
};

class Value {
 public:
  constexpr Value() = default;
  static constexpr Value make(Tag tag, uint64_t payload = 0) {
    return Value((payload << 4) | static_cast<uint64_t>(tag));
  }
  static constexpr Value lowered(uint32_t kind, uint64_t index) {
    return make(Tag::kLowered, (uint64_t{kind} << 40) | index);
  }
  static constexpr int64_t kMaxSmallInt = (int64_t{1} << 59) - 1;
  static constexpr int64_t kMinSmallInt = -(int64_t{1} << 59);

  constexpr Tag tag() const { return static_cast<Tag>(bits_ & 0xF); }
  constexpr uint64_t payload() const { return bits_ >> 4; }
  constexpr int64_t small_int() const { return static_cast<int64_t>(bits_) >> 4; }
  constexpr uint32_t lowered_kind() const { return static_cast<uint32_t>(payload() >> 40); }
  constexpr uint64_t lowered_index() const { return payload() & ((uint64_t{1} << 40) - 1); }
  constexpr bool is(Tag t) const { return tag() == t; }
  constexpr bool operator==(const Value&) const = default;

 private:
  constexpr explicit Value(uint64_t bits) : bits_(bits) {}
  uint64_t bits_ = 0;  // kNone
};

enum class ObjectKind : uint8_t { kList, kDict, kTuple, kSet };

struct Object {
  ObjectKind kind = ObjectKind::kList;
  // Referred to from more than one place (a memo get or DUP): never lowered or released.
  bool shared = false;
  int64_t memo_slot = -1;     // where the memo keeps it, updated when it is lowered
  // Its place on the stack when memoized (memoizing takes the top). An object never moves on
  // the stack, and a second push of it (a memo get, DUP) makes it shared, so it is still on
  // the stack exactly when that place holds it.
  size_t memoized_at = SIZE_MAX;
  // Lowered when the memo handed it out again (it stays, for the references made before).
  Value lowered_as;           // kNone when not
  std::vector<Value> items;   // a dict's keys and values alternate
};

class ValueStore {
 public:
  // What the store builds is charged to `budget` (read_budget.h) from now on, when given: its
  // objects, items, strings and numbers. Those who fill an object's items themselves (the pickle
  // machine, the JSON reader) report the growth through items_grew.
  void set_budget(ReadBudget* budget) { budget_ = budget; }
  ReadBudget* budget() const { return budget_; }
  void charge(uint64_t bytes) {
    if (budget_ != nullptr) budget_->charge(bytes);
  }
  bool has_room(uint64_t bytes) const { return budget_ == nullptr || budget_->has_room(bytes); }
  // An object's items went from `before` to `after` Values of capacity.
  void items_grew(size_t before, size_t after) {
    if (after > before && budget_ != nullptr) {
      const uint64_t bytes = uint64_t{after - before} * sizeof(Value);
      items_bytes_ += bytes;
      budget_->charge(bytes);
    }
  }

  // --- building ---
  Value integer(int64_t v);
  Value unsigned_integer(uint64_t v);
  Value floating(double v);
  Value string(std::string_view text, Tag tag = Tag::kString);
  uint32_t intern(std::string_view text);  // the id a string gets (used to look keys up fast)
  Value new_object(ObjectKind kind);
  void release(Value object);  // its id may be reused; the caller drops every reference
  // Frees every object at once, keeping the scalars and strings: once a reader has turned
  // what it needs into records, the containers' storage need not be held.
  void drop_objects();

  // --- reading ---
  const Object& object(Value v) const { return objects_[v.payload()]; }
  Object& object(Value v) { return objects_[v.payload()]; }
  std::string_view text(Value v) const { return strings_[v.payload()]; }
  std::string_view text(uint32_t id) const { return strings_[id]; }
  size_t string_count() const { return strings_.size(); }
  bool is_integer(Value v) const;
  // The integer a value holds, if it fits the type asked for.
  bool get_int64(Value v, int64_t& out) const;
  bool get_uint64(Value v, uint64_t& out) const;
  double floating_value(Value v) const { return floats_[v.payload()]; }
  // A Python-like rendering (for error messages).
  std::string repr(Value v, int depth = 0) const;
  // The value as compact JSON (allocator settings keep their types: booleans, numbers,
  // tables); what JSON cannot hold (bytes, huge integers, NaN) becomes a string.
  std::string json_text(Value v, int depth = 0) const;
  size_t live_objects() const { return objects_.size() - free_objects_.size(); }

 private:
  std::vector<Object> objects_;
  std::vector<uint64_t> free_objects_;
  std::vector<int64_t> wide_ints_;
  std::vector<double> floats_;
  // Interned strings: stored once in chunks (stable addresses), found by content.
  std::vector<std::string_view> strings_;
  std::unordered_map<std::string_view, uint32_t> string_ids_;
  // The strings met last, by a cheap hash of their bytes: a snapshot repeats a few dozen
  // (actions, keys) hundreds of thousands of times, each a new string object in the pickle.
  struct Recent {
    std::string_view text;
    uint32_t id = 0;
  };
  static constexpr size_t kRecentSlots = 256;
  Recent recent_[kRecentSlots];
  std::vector<std::unique_ptr<char[]>> string_chunks_;
  size_t chunk_left_ = 0;
  char* chunk_next_ = nullptr;
  ReadBudget* budget_ = nullptr;
  uint64_t items_bytes_ = 0;  // the items' capacity charged (given back with the objects)
};

}  // namespace memsnap::pickle
