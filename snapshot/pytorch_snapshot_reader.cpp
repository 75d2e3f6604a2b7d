#include "snapshot/pytorch_snapshot_reader.h"

#include <nlohmann/json.hpp>

#include <new>
#include <stdexcept>

#include "snapshot/pytorch_document.h"
#include "snapshot/pytorch_parallel_read.h"
#include "snapshot/read_budget.h"

namespace memsnap {
namespace {

constexpr int kMaxJsonDepth = 64;

// nlohmann's parser recurses once per nesting level: refuse deep documents before parsing.
bool nesting_within(std::string_view text, int limit) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') ++i;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      if (++depth > limit) return false;
    } else if (c == '}' || c == ']') {
      --depth;
    }
  }
  return true;
}

pickle::Value to_value(const nlohmann::json& j, pickle::ValueStore& store) {
  using pickle::Tag;
  switch (j.type()) {
    case nlohmann::json::value_t::null: return pickle::Value::make(Tag::kNone);
    case nlohmann::json::value_t::boolean: return pickle::Value::make(j.get<bool>() ? Tag::kTrue : Tag::kFalse);
    case nlohmann::json::value_t::number_integer: return store.integer(j.get<int64_t>());
    case nlohmann::json::value_t::number_unsigned: return store.unsigned_integer(j.get<uint64_t>());
    case nlohmann::json::value_t::number_float: return store.floating(j.get<double>());
    case nlohmann::json::value_t::string: return store.string(j.get_ref<const std::string&>());
    case nlohmann::json::value_t::array: {
      const pickle::Value list = store.new_object(pickle::ObjectKind::kList);
      for (const auto& item : j) {
        const pickle::Value v = to_value(item, store);
        store.object(list).items.push_back(v);
      }
      return list;
    }
    case nlohmann::json::value_t::object: {
      const pickle::Value dict = store.new_object(pickle::ObjectKind::kDict);
      for (const auto& [key, item] : j.items()) {
        const pickle::Value k = store.string(key);
        const pickle::Value v = to_value(item, store);
        store.object(dict).items.push_back(k);
        store.object(dict).items.push_back(v);
      }
      return dict;
    }
    default: throw std::runtime_error("unsupported JSON value");
  }
}

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

Result<Snapshot> snapshot_from_json(std::string_view text) {
  if (!nesting_within(text, kMaxJsonDepth))
    return Result<Snapshot>::failure("JSON nested deeper than " + std::to_string(kMaxJsonDepth));
  return guarded([&] {
    nlohmann::json parsed;
    try {
      parsed = nlohmann::json::parse(text);
    } catch (const nlohmann::json::parse_error& error) {
      // nlohmann's message starts with "[json.exception.parse_error.101] parse error at ...".
      std::string message = error.what();
      if (const size_t start = message.find("] "); start != std::string::npos) message.erase(0, start + 2);
      throw std::runtime_error("bad JSON: " + message);
    }
    pickle::ValueStore store;
    PyTorchDocument document(store);
    const pickle::Value root = to_value(parsed, store);
    parsed = nullptr;
    return document.convert(root);
  });
}

}  // namespace memsnap
