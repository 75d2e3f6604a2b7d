#include "snapshot/pytorch_snapshot_reader.h"

#include <nlohmann/json.hpp>

#include <iterator>
#include <new>
#include <stdexcept>

#include "snapshot/printable.h"
#include "snapshot/pytorch_document.h"
#include "snapshot/pytorch_parallel_read.h"
#include "snapshot/read_budget.h"

namespace memsnap {
namespace {

constexpr size_t kMaxJsonDepth = 64;

// The bytes of a ByteSource as an input iterator, for nlohmann's parser: the document is
// parsed as it is read (and inflated), never held whole. nlohmann's lexer keeps every
// character of the token it reads, whitespace before it included, so: a run of whitespace
// between tokens reaches it as one character (4 GiB of spaces would otherwise be held), and
// a token (a string, a number) longer than kMaxJsonToken is refused. Positions in errors are
// then this reader's, not nlohmann's.
class SourceIterator {
 public:
  using iterator_category = std::input_iterator_tag;
  using value_type = char;
  using difference_type = std::ptrdiff_t;
  using pointer = const char*;
  using reference = char;
  static constexpr size_t kMaxJsonToken = size_t{1} << 20;

  SourceIterator() = default;  // the end
  explicit SourceIterator(ByteSource& source) : source_(&source) {}
  char operator*() const { return static_cast<char>(source_->peek()); }
  SourceIterator& operator++() {
    const int c = source_->peek();
    source_->skip(1);
    if (in_string_) {
      if (escaped_) escaped_ = false;
      else if (c == '\\') escaped_ = true;
      else if (c == '"') in_string_ = false;
      count_token_byte();
    } else if (c == '"') {
      in_string_ = true;
      token_ = 0;
    } else if (is_space(c)) {
      token_ = 0;
      while (is_space(source_->peek())) source_->skip(1);
    } else if (c == '{' || c == '}' || c == '[' || c == ']' || c == ',' || c == ':') {
      token_ = 0;
    } else {
      count_token_byte();
    }
    return *this;
  }
  void operator++(int) { ++*this; }
  // Only ever compared with the end.
  bool operator==(const SourceIterator& other) const { return at_end() == other.at_end(); }
  bool operator!=(const SourceIterator& other) const { return !(*this == other); }

 private:
  static bool is_space(int c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
  void count_token_byte() {
    if (++token_ > kMaxJsonToken)
      throw std::runtime_error("bad JSON: a string or number longer than " + std::to_string(kMaxJsonToken >> 20) +
                               " MiB at byte " + std::to_string(source_->offset() - token_));
  }
  bool at_end() const { return source_ == nullptr || source_->peek() < 0; }
  ByteSource* source_ = nullptr;
  bool in_string_ = false;
  bool escaped_ = false;
  size_t token_ = 0;  // bytes of the token being read
};

// Builds a JSON document's values as nlohmann's parser reports them (its SAX interface) into
// the store a pickle would fill, each object and array handed to the document's lowering as
// it closes (a trace entry, a frame and a stack become records at once), so no tree of the
// whole document is ever held; the store charges its budget for what is built. Nesting is
// bounded as it opens, and each element of the snapshot's segments is checked as it closes:
// a list of millions of empty objects fails at the first.
class JsonValues {
 public:
  using number_integer_t = nlohmann::json::number_integer_t;
  using number_unsigned_t = nlohmann::json::number_unsigned_t;
  using number_float_t = nlohmann::json::number_float_t;
  using string_t = nlohmann::json::string_t;
  using binary_t = nlohmann::json::binary_t;

  JsonValues(pickle::ValueStore& store, PyTorchDocument& document, const ByteSource& input)
      : store_(store), document_(document), input_(input), segments_key_(store.intern("segments")) {}

  pickle::Value root() const { return root_; }

  bool null() { return add(pickle::Value::make(pickle::Tag::kNone)); }
  bool boolean(bool value) { return add(pickle::Value::make(value ? pickle::Tag::kTrue : pickle::Tag::kFalse)); }
  bool number_integer(number_integer_t value) { return add(store_.integer(value)); }
  bool number_unsigned(number_unsigned_t value) { return add(store_.unsigned_integer(value)); }
  bool number_float(number_float_t value, const string_t&) { return add(store_.floating(value)); }
  bool string(string_t& value) { return add(store_.string(value)); }
  bool binary(binary_t&) { throw std::runtime_error("bad JSON: binary values are not JSON"); }
  bool key(string_t& value) {
    const pickle::Value key = store_.string(value);
    open_.back().key = static_cast<uint32_t>(key.payload());
    return add(key);
  }
  bool start_object(size_t) { return open(pickle::ObjectKind::kDict); }
  bool start_array(size_t) { return open(pickle::ObjectKind::kList); }
  bool end_object() { return close(); }
  bool end_array() { return close(); }
  bool parse_error(size_t, const std::string& token, const nlohmann::detail::exception& error) {
    // The byte the parser stopped at (its own count skips collapsed whitespace).
    const std::string at = "at byte " + std::to_string(input_.offset() > 0 ? input_.offset() - 1 : 0);
    if (error.id == 406)  // a number too large for a double
      throw std::runtime_error("bad JSON: a number out of range ('" + printable(token) + "') " + at);
    // nlohmann's messages read "[json.exception.parse_error.101] parse error at line 1,
    // column 5: syntax error while parsing value - invalid literal; last read: 'x'".
    std::string message = error.what();
    if (const size_t colon = message.find(": "); colon != std::string::npos) message.erase(0, colon + 2);
    throw std::runtime_error("bad JSON " + at + ": " + message);
  }

 private:
  struct Open {
    pickle::Value object;
    uint32_t key = UINT32_MAX;  // a dict's latest key (a string id)
    size_t items = 0;           // a list's elements so far
  };

  bool open(pickle::ObjectKind kind) {
    if (open_.size() >= kMaxJsonDepth)
      throw std::runtime_error("JSON nested deeper than " + std::to_string(kMaxJsonDepth));
    open_.push_back({store_.new_object(kind)});
    return true;
  }

  bool close() {
    const Open closed = open_.back();
    open_.pop_back();
    pickle::Value v = closed.object;
    if (open_.empty()) {
      root_ = v;
      return true;
    }
    // An element of the snapshot's segments: {"segments": [...]} or a bare list of them.
    const bool segment = (open_.size() == 1 && store_.object(open_[0].object).kind == pickle::ObjectKind::kList) ||
                         (open_.size() == 2 && open_[0].key == segments_key_ &&
                          store_.object(open_[0].object).kind == pickle::ObjectKind::kDict);
    if (segment) document_.check_segment(v, open_.back().items);
    const pickle::Value lowered = document_.lower(store_, v);
    if (!(lowered == v)) {
      store_.release(v);
      v = lowered;
    }
    return add(v);
  }

  bool add(pickle::Value v) {
    if (open_.empty()) {
      root_ = v;
      return true;
    }
    Open& parent = open_.back();
    std::vector<pickle::Value>& items = store_.object(parent.object).items;
    const size_t capacity = items.capacity();
    items.push_back(v);
    store_.items_grew(capacity, items.capacity());
    ++parent.items;
    return true;
  }

  pickle::ValueStore& store_;
  PyTorchDocument& document_;
  const ByteSource& input_;
  const uint32_t segments_key_;
  std::vector<Open> open_;
  pickle::Value root_;
};

template <typename Read>
Result<Snapshot> guarded(Read read) {
  try {
    return read();
  } catch (const std::bad_alloc&) {
    return Result<Snapshot>::failure(kNotEnoughMemoryToRead);
  } catch (const std::exception& error) {
    return Result<Snapshot>::failure(error.what());
  }
}

}  // namespace

Result<Snapshot> snapshot_from_pickle(ByteSource& input, const PickleReadOptions& options) {
  return guarded([&] {
    const std::optional<std::string_view> whole =
        reads_in_parallel(input.size_hint(), options) ? input.whole() : std::nullopt;
    auto bytes = whole ? ByteSource::over_memory(*whole, UINT64_MAX) : nullptr;
    ByteSource& read = whole ? *bytes : input;
    ReadBudget budget([&] { return read.offset(); });
    pickle::ValueStore store;
    store.set_budget(&budget);
    PyTorchDocument document(store);
    document.expect_input_bytes(input.size_hint());
    if (!whole) {
      pickle::Machine machine(input, store, &document);
      machine.expect_input_bytes(input.size_hint());
      return document.convert(machine.run());
    }
    pickle::Machine machine(*bytes, store, &document);
    machine.expect_input_bytes(whole->size());
    const auto release = [&](uint64_t begin, uint64_t end) { input.release_whole(begin, end); };
    pickle::Value root;
    try {
      root = run_with_parts(*whole, machine, document, options, release);
    } catch (const std::exception&) {
      if (input.changed_while_read()) throw std::runtime_error(ByteSource::kChangedWhileRead);
      throw;
    }
    if (input.changed_while_read()) throw std::runtime_error(ByteSource::kChangedWhileRead);
    return document.convert(root);
  });
}

Result<Snapshot> snapshot_from_json(ByteSource& input) {
  return guarded([&] {
    ReadBudget budget([&] { return input.offset(); });
    pickle::ValueStore store;
    store.set_budget(&budget);
    PyTorchDocument document(store);
    JsonValues values(store, document, input);
    nlohmann::json::sax_parse(SourceIterator(input), SourceIterator(), &values);
    if (input.hit_limit()) throw std::runtime_error("input larger than the limit");
    return document.convert(values.root());
  });
}

Result<Snapshot> snapshot_from_json(std::string_view text) {
  auto input = ByteSource::over_memory(text, UINT64_MAX);
  return snapshot_from_json(*input);
}

}  // namespace memsnap
