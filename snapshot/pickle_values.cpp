#include "snapshot/pickle_values.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <stdexcept>

namespace memsnap::pickle {
namespace {

constexpr size_t kStringChunkBytes = size_t{64} << 10;
constexpr uint64_t kMaxIds = uint64_t{1} << 40;
// What a distinct string costs besides its bytes: its view in strings_ and its node and
// bucket in string_ids_ (with a growing table's spare room).
constexpr uint64_t kStringOverhead = 80;
// A number in a table, with the table's spare room.
constexpr uint64_t kTableEntry = 2 * sizeof(int64_t);

}  // namespace

Value ValueStore::integer(int64_t v) {
  if (v >= Value::kMinSmallInt && v <= Value::kMaxSmallInt)
    return Value::make(Tag::kInt, static_cast<uint64_t>(v) & ((uint64_t{1} << 60) - 1));
  charge(kTableEntry);
  wide_ints_.push_back(v);
  return Value::make(Tag::kWideInt, wide_ints_.size() - 1);
}

Value ValueStore::unsigned_integer(uint64_t v) {
  if (v <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
    return integer(static_cast<int64_t>(v));
  charge(kTableEntry);
  wide_ints_.push_back(static_cast<int64_t>(v));
  return Value::make(Tag::kWideUInt, wide_ints_.size() - 1);
}

Value ValueStore::floating(double v) {
  charge(kTableEntry);
  floats_.push_back(v);
  return Value::make(Tag::kFloat, floats_.size() - 1);
}

namespace {

// Mixes a string's length and up to its first and last 8 bytes: cheap, and enough to tell
// apart the short strings a snapshot repeats.
size_t recent_slot(std::string_view text, size_t slots) {
  uint64_t head = 0, tail = 0;
  const size_t n = text.size();
  if (n == 0) return 0;
  std::memcpy(&head, text.data(), std::min<size_t>(n, 8));
  if (n > 8) std::memcpy(&tail, text.data() + n - std::min<size_t>(n - 8, 8), std::min<size_t>(n - 8, 8));
  const uint64_t mixed = (head ^ (tail * 0x9E3779B97F4A7C15ull) ^ n) * 0xBF58476D1CE4E5B9ull;
  return static_cast<size_t>(mixed >> 56) % slots;
}

}  // namespace

uint32_t ValueStore::intern(std::string_view text) {
  Recent& recent = recent_[recent_slot(text, kRecentSlots)];
  if (recent.text.size() == text.size() && recent.text.data() != nullptr &&
      (text.empty() || std::memcmp(recent.text.data(), text.data(), text.size()) == 0))
    return recent.id;
  if (auto it = string_ids_.find(text); it != string_ids_.end()) {
    recent = {it->first, it->second};
    return it->second;
  }
  if (strings_.size() >= std::numeric_limits<uint32_t>::max())
    throw std::length_error("too many distinct strings");
  charge(kStringOverhead);
  char* stored;
  if (text.size() > kStringChunkBytes / 4) {  // big strings get a chunk of their own
    charge(text.size());
    string_chunks_.push_back(std::make_unique<char[]>(text.size()));
    stored = string_chunks_.back().get();
  } else {
    if (chunk_left_ < text.size()) {
      charge(kStringChunkBytes);
      string_chunks_.push_back(std::make_unique<char[]>(kStringChunkBytes));
      chunk_next_ = string_chunks_.back().get();
      chunk_left_ = kStringChunkBytes;
    }
    stored = chunk_next_;
    chunk_next_ += text.size();
    chunk_left_ -= text.size();
  }
  if (!text.empty()) std::memcpy(stored, text.data(), text.size());
  const std::string_view kept(stored, text.size());
  const auto id = static_cast<uint32_t>(strings_.size());
  strings_.push_back(kept);
  string_ids_.emplace(kept, id);
  recent = {kept, id};
  return id;
}

Value ValueStore::string(std::string_view text, Tag tag) { return Value::make(tag, intern(text)); }

Value ValueStore::new_object(ObjectKind kind) {
  uint64_t id;
  if (!free_objects_.empty()) {
    id = free_objects_.back();
    free_objects_.pop_back();
  } else {
    if (objects_.size() >= kMaxIds) throw std::length_error("too many objects");
    id = objects_.size();
    const size_t capacity = objects_.capacity();
    objects_.emplace_back();
    if (objects_.capacity() != capacity) {
      // The table and the free list it may come to need: charged as they grow.
      charge(uint64_t{objects_.capacity() - capacity} * (sizeof(Object) + sizeof(uint64_t)));
    }
  }
  Object& o = objects_[id];
  o.kind = kind;
  o.shared = false;
  o.memo_slot = -1;
  o.memoized_at = SIZE_MAX;
  o.lowered_as = Value();
  o.items.clear();
  return Value::make(Tag::kObject, id);
}

void ValueStore::release(Value object) {
  Object& o = objects_[object.payload()];
  // Keep the capacity for the next object built here: a streamed snapshot builds and
  // releases one dict per trace entry, and reusing its storage keeps malloc out of the loop.
  // Only unusually large item lists are given back.
  if (o.items.capacity() > 4096) {
    const uint64_t bytes = uint64_t{o.items.capacity()} * sizeof(Value);
    if (budget_ != nullptr) {
      budget_->refund(bytes);
      items_bytes_ -= std::min(items_bytes_, bytes);
    }
    std::vector<Value>().swap(o.items);
  } else {
    o.items.clear();
  }
  free_objects_.push_back(object.payload());
}

void ValueStore::drop_objects() {
  if (budget_ != nullptr) {
    budget_->refund(uint64_t{objects_.capacity()} * (sizeof(Object) + sizeof(uint64_t)) + items_bytes_);
    items_bytes_ = 0;
  }
  std::vector<Object>().swap(objects_);
  std::vector<uint64_t>().swap(free_objects_);
}

bool ValueStore::is_integer(Value v) const {
  return v.is(Tag::kInt) || v.is(Tag::kWideInt) || v.is(Tag::kWideUInt) || v.is(Tag::kTrue) ||
         v.is(Tag::kFalse);
}

bool ValueStore::get_int64(Value v, int64_t& out) const {
  switch (v.tag()) {
    case Tag::kInt: out = v.small_int(); return true;
    case Tag::kWideInt: out = wide_ints_[v.payload()]; return true;
    case Tag::kTrue: out = 1; return true;
    case Tag::kFalse: out = 0; return true;
    default: return false;
  }
}

bool ValueStore::get_uint64(Value v, uint64_t& out) const {
  if (v.is(Tag::kWideUInt)) {
    out = static_cast<uint64_t>(wide_ints_[v.payload()]);
    return true;
  }
  int64_t signed_value;
  if (!get_int64(v, signed_value) || signed_value < 0) return false;
  out = static_cast<uint64_t>(signed_value);
  return true;
}

std::string ValueStore::repr(Value v, int depth) const {
  switch (v.tag()) {
    case Tag::kNone: return "None";
    case Tag::kFalse: return "False";
    case Tag::kTrue: return "True";
    case Tag::kInt:
    case Tag::kWideInt: {
      int64_t i = 0;
      get_int64(v, i);
      return std::to_string(i);
    }
    case Tag::kWideUInt: return std::to_string(static_cast<uint64_t>(wide_ints_[v.payload()]));
    case Tag::kHugeInt: return "<integer wider than 64 bits>";
    case Tag::kFloat: {
      char buffer[64];
      const double d = floats_[v.payload()];
      auto [end, ec] = std::to_chars(buffer, buffer + sizeof buffer, d);
      std::string s(buffer, end);
      if (s.find_first_of(".eEn") == std::string::npos) s += ".0";  // as Python prints 0.0
      return s;
    }
    case Tag::kString: return std::string(text(v));
    case Tag::kBytes: return "<" + std::to_string(text(v).size()) + " bytes>";
    case Tag::kEmptyList: return "[]";
    case Tag::kLowered: return "<record>";
    case Tag::kOuter: return "<memo " + std::to_string(v.payload()) + ">";
    case Tag::kObject: break;
  }
  if (depth > 8) return "...";
  const Object& o = object(v);
  auto item = [&](Value x) {
    return x.is(Tag::kString) ? "'" + std::string(text(x)) + "'" : repr(x, depth + 1);
  };
  std::string out;
  const char* open = o.kind == ObjectKind::kDict ? "{" : o.kind == ObjectKind::kTuple ? "(" : "[";
  const char* close = o.kind == ObjectKind::kDict ? "}" : o.kind == ObjectKind::kTuple ? ")" : "]";
  out += open;
  const size_t step = o.kind == ObjectKind::kDict ? 2 : 1;
  for (size_t i = 0; i + step <= o.items.size(); i += step) {
    if (i > 0) out += ", ";
    if (out.size() > 4096) {
      out += "...";
      break;
    }
    out += item(o.items[i]);
    if (step == 2) out += ": " + item(o.items[i + 1]);
  }
  return out + close;
}

namespace {

std::string json_quoted(std::string_view text) {
  std::string out = "\"";
  for (const char c : text) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char escaped[8];
          std::snprintf(escaped, sizeof escaped, "\\u%04x", static_cast<unsigned>(c));
          out += escaped;
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

}  // namespace

std::string ValueStore::json_text(Value v, int depth) const {
  switch (v.tag()) {
    case Tag::kNone: return "null";
    case Tag::kFalse: return "false";
    case Tag::kTrue: return "true";
    case Tag::kInt:
    case Tag::kWideInt:
    case Tag::kWideUInt: return repr(v);
    case Tag::kFloat: {
      const double d = floats_[v.payload()];
      return std::isfinite(d) ? repr(v) : json_quoted(repr(v));
    }
    case Tag::kString: return json_quoted(text(v));
    case Tag::kEmptyList: return "[]";
    case Tag::kHugeInt:
    case Tag::kBytes:
    case Tag::kLowered:
    case Tag::kOuter: return json_quoted(repr(v));
    case Tag::kObject: break;
  }
  if (depth > 8) return "null";
  const Object& o = object(v);
  std::string out;
  if (o.kind == ObjectKind::kDict) {
    out = "{";
    for (size_t i = 0; i + 2 <= o.items.size(); i += 2) {
      if (i > 0) out += ",";
      // JSON keys are strings: a non-string key is written as its Python form.
      out += o.items[i].is(Tag::kString) ? json_quoted(text(o.items[i])) : json_quoted(repr(o.items[i]));
      out += ":" + json_text(o.items[i + 1], depth + 1);
    }
    return out + "}";
  }
  out = "[";
  for (size_t i = 0; i < o.items.size(); ++i) out += (i > 0 ? "," : "") + json_text(o.items[i], depth + 1);
  return out + "]";
}

}  // namespace memsnap::pickle
