#include "history/recording_environment.h"

#include <array>
#include <cstdlib>
#include <utility>

namespace memsnap {
namespace {

constexpr std::array<std::pair<std::string_view, StackChoice>, 4> kStackChoices = {{
    {"all", StackChoice::kAll},
    {"python", StackChoice::kPython},
    {"cpp", StackChoice::kCpp},
    {"none", StackChoice::kNone},
}};

}  // namespace

std::string shown_environment_value(std::string_view value) {
  constexpr size_t kShown = 60;
  std::string out;
  for (const char c : value.substr(0, kShown)) out += (c >= 0x20 && c < 0x7f) ? c : '?';
  if (value.size() > kShown) out += "...";
  return out;
}

std::optional<size_t> positive_count(std::string_view text, size_t max) {
  if (text.empty() || text.size() > 12) return std::nullopt;
  size_t value = 0;
  for (const char c : text) {
    if (c < '0' || c > '9') return std::nullopt;
    value = value * 10 + static_cast<size_t>(c - '0');
  }
  if (value == 0 || value > max) return std::nullopt;
  return value;
}

std::string_view stack_choice_name(StackChoice choice) {
  for (const auto& [name, value] : kStackChoices)
    if (value == choice) return name;
  return "?";
}

std::optional<StackChoice> stack_choice_from_name(std::string_view name) {
  for (const auto& [known, value] : kStackChoices)
    if (name == known) return value;
  return std::nullopt;
}

Result<RecordingEnvironment> recording_environment(const std::function<const char*(const char*)>& lookup) {
  const auto get = [&](const char* name) -> std::optional<std::string_view> {
    const char* value = lookup ? lookup(name) : std::getenv(name);
    if (value == nullptr) return std::nullopt;
    return std::string_view(value);
  };
  RecordingEnvironment out;
  const std::optional<std::string_view> history = get("MEMSNAP_HISTORY");
  if (history) {
    const std::optional<HistoryLevel> level = history_level_from_name(*history);
    if (!level)
      return Result<RecordingEnvironment>::failure("MEMSNAP_HISTORY=" + shown_environment_value(*history) +
                                                   ": expected off, state, alloc or all");
    out.level = *level;
  }
  if (const auto text = get("MEMSNAP_STACKS")) {
    out.stacks = stack_choice_from_name(*text);
    if (!out.stacks)
      return Result<RecordingEnvironment>::failure("MEMSNAP_STACKS=" + shown_environment_value(*text) +
                                                   ": expected all, python, cpp or none");
  }
  const std::optional<std::string_view> entries = get("MEMSNAP_MAX_ENTRIES");
  if (entries) {
    const std::optional<size_t> count = positive_count(*entries, kMaxEnvironmentEntries);
    if (!count)
      return Result<RecordingEnvironment>::failure("MEMSNAP_MAX_ENTRIES=" + shown_environment_value(*entries) +
                                                   ": expected a whole number from 1 to 50000000");
    out.max_entries = *count;
  }
  if (const auto text = get("MEMSNAP_OOM_SNAPSHOT")) out.oom_snapshot = std::string(*text);
  if (const auto text = get("MEMSNAP_SNAPSHOT_AT_EXIT")) out.snapshot_at_exit = std::string(*text);
  // Stacks and entries say how to record: without MEMSNAP_HISTORY they would do nothing.
  if (!history && (out.stacks || entries))
    return Result<RecordingEnvironment>::failure(
        "MEMSNAP_STACKS and MEMSNAP_MAX_ENTRIES need MEMSNAP_HISTORY (state, alloc or all) to record anything");
  return out;
}

}  // namespace memsnap
