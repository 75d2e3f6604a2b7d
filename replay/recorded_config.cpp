#include "replay/recorded_config.h"

#include <array>
#include <bit>
#include <charconv>
#include <cmath>
#include <string>
#include <string_view>
#include <vector>

#include "allocator/policy.h"
#include "snapshot/printable.h"

namespace memsnap {
namespace {

const std::string* setting(const Snapshot& snapshot, std::string_view key) {
  for (const auto& [name, value] : snapshot.allocator_settings)
    if (name == key) return &value;
  return nullptr;
}

// Python's str() of a string value may keep its quotes.
std::string_view unquoted(std::string_view text) {
  if (text.size() >= 2 && (text.front() == '\'' || text.front() == '"') &&
      text.back() == text.front())
    return text.substr(1, text.size() - 2);
  return text;
}

std::optional<bool> as_bool(std::string_view text) {
  text = unquoted(text);
  if (text == "True" || text == "true" || text == "1") return true;
  if (text == "False" || text == "false" || text == "0") return false;
  return std::nullopt;
}

std::optional<int64_t> as_int(std::string_view text) {
  text = unquoted(text);
  int64_t value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return value;
}

// Every run of digits in order: reads both "1,2,4" and "{'1': 0, '2': 4}".
std::vector<uint64_t> numbers_in(std::string_view text) {
  std::vector<uint64_t> out;
  for (size_t i = 0; i < text.size() && out.size() < 256;) {
    if (text[i] < '0' || text[i] > '9') {
      ++i;
      continue;
    }
    uint64_t value = 0;
    const auto [end, error] = std::from_chars(text.data() + i, text.data() + text.size(), value);
    if (error != std::errc()) return {};
    out.push_back(value);
    i = static_cast<size_t>(end - text.data());
  }
  return out;
}

Result<AllocatorConfig> fail(std::string_view key, std::string_view value) {
  return Result<AllocatorConfig>::failure("allocator_settings: cannot read " + std::string(key) +
                                          " = '" + printable(value, 80) + "'");
}

}  // namespace

Result<AllocatorConfig> recorded_allocator_config(const Snapshot& snapshot) {
  AllocatorConfig config;
  for (const char* key : {"config", "PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF"}) {
    const std::string* text = setting(snapshot, key);
    if (text == nullptr || unquoted(*text).empty()) continue;
    Result<AllocatorConfig> parsed = parse_allocator_config(unquoted(*text));
    if (!parsed)
      return Result<AllocatorConfig>::failure("allocator_settings: " + std::string(key) + ": " +
                                              parsed.error());
    config = parsed.value();
    break;
  }
  if (const std::string* v = setting(snapshot, "max_split_size")) {
    const std::optional<int64_t> bytes = as_int(*v);
    if (!bytes || *bytes < -1 || *bytes == 0) return fail("max_split_size", *v);
    config.max_split_size = *bytes == -1 ? kNoMaxSplitSize : static_cast<size_t>(*bytes);
  }
  if (const std::string* v = setting(snapshot, "max_non_split_rounding_size")) {
    const std::optional<int64_t> bytes = as_int(*v);
    if (!bytes || *bytes < 0) return fail("max_non_split_rounding_size", *v);
    config.max_non_split_rounding_size = static_cast<size_t>(*bytes);
  }
  if (const std::string* v = setting(snapshot, "garbage_collection_threshold")) {
    const std::string text(unquoted(*v));
    char* end = nullptr;
    const double threshold = std::strtod(text.c_str(), &end);
    if (text.empty() || end != text.c_str() + text.size() || !std::isfinite(threshold) ||
        threshold < 0.0 || threshold >= 1.0)
      return fail("garbage_collection_threshold", *v);
    config.garbage_collection_threshold = threshold;
  }
  if (const std::string* v = setting(snapshot, "expandable_segments")) {
    const std::optional<bool> on = as_bool(*v);
    if (!on) return fail("expandable_segments", *v);
    config.expandable_segments = *on;
  }
  if (const std::string* v = setting(snapshot, "release_lock_on_cudamalloc")) {
    const std::optional<bool> on = as_bool(*v);
    if (!on) return fail("release_lock_on_cudamalloc", *v);
    config.release_lock_on_cudamalloc = *on;
  }
  if (const std::string* v = setting(snapshot, "caching")) {  // memsnap's; off = MEMSNAP_NO_CACHING
    const std::optional<bool> on = as_bool(*v);
    if (!on) return fail("caching", *v);
    config.caching = *on;
  }
  if (const std::string* v = setting(snapshot, "roundup_power2_divisions")) {
    const std::vector<uint64_t> numbers = numbers_in(*v);
    std::array<size_t, kRoundUpPowerOfTwoIntervals> divisions{};
    if (snapshot.source == "pytorch") {
      // {'1': d, '2': d, '4': d, ...}: interval start in MiB, then its divisions.
      if (numbers.size() % 2 != 0) return fail("roundup_power2_divisions", *v);
      for (size_t i = 0; i < numbers.size(); i += 2) {
        const uint64_t mib = numbers[i];
        if (mib == 0 || (mib & (mib - 1)) != 0) return fail("roundup_power2_divisions", *v);
        const auto index = static_cast<size_t>(std::countr_zero(mib));
        if (index >= divisions.size() || numbers[i + 1] > 1024)
          return fail("roundup_power2_divisions", *v);
        divisions[index] = static_cast<size_t>(numbers[i + 1]);
      }
    } else {
      if (!numbers.empty() && numbers.size() != divisions.size())
        return fail("roundup_power2_divisions", *v);
      for (size_t i = 0; i < numbers.size(); ++i) {
        if (numbers[i] > 1024) return fail("roundup_power2_divisions", *v);
        divisions[i] = static_cast<size_t>(numbers[i]);
      }
    }
    config.roundup_power2_divisions = divisions;
  }
  return config;
}

}  // namespace memsnap
