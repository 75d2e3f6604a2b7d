#include "record/record_settings.h"

#include <array>
#include <csignal>
#include <cstdlib>
#include <utility>

#include "history/recording_environment.h"

namespace memsnap {
namespace {

constexpr std::array<std::pair<std::string_view, int>, 6> kSignals = {{
    {"USR1", SIGUSR1},
    {"USR2", SIGUSR2},
    {"HUP", SIGHUP},
    {"INT", SIGINT},
    {"QUIT", SIGQUIT},
    {"TERM", SIGTERM},
}};

constexpr size_t kMaxPathLength = 4096;

std::string upper(std::string_view text) {
  std::string out(text);
  for (char& c : out)
    if (c >= 'a' && c <= 'z') c = static_cast<char>(c - 'a' + 'A');
  return out;
}

}  // namespace

std::optional<int> record_signal_from_name(std::string_view name) {
  std::string wanted = upper(name);
  if (std::string_view(wanted).starts_with("SIG")) wanted.erase(0, 3);
  for (const auto& [known, number] : kSignals)
    if (wanted == known) return number;
  return std::nullopt;
}

std::string_view record_signal_name(int signal) {
  for (const auto& [name, number] : kSignals)
    if (number == signal) return name;
  return "?";
}

bool record_signal_ends_program(int signal) { return signal != SIGUSR1 && signal != SIGUSR2; }

Result<RecordSettings> record_settings(const std::function<const char*(const char*)>& lookup) {
  using Failure = Result<RecordSettings>;
  const auto get = [&](const char* name) -> std::optional<std::string_view> {
    const char* value = lookup ? lookup(name) : std::getenv(name);
    if (value == nullptr) return std::nullopt;
    return std::string_view(value);
  };
  RecordSettings out;
  // A pattern or path: "off" (where allowed) turns it off; empty or overlong is an error.
  const auto path = [&](const char* name, std::string& field, bool may_be_off) -> std::optional<std::string> {
    const auto text = get(name);
    if (!text) return std::nullopt;
    if (may_be_off && *text == "off") {
      field.clear();
      return std::nullopt;
    }
    if (text->empty()) return std::string(name) + " is empty: expected a path" + (may_be_off ? " or off" : "");
    if (text->size() > kMaxPathLength)
      return std::string(name) + "=" + shown_environment_value(*text) + ": longer than 4096 characters";
    field = std::string(*text);
    return std::nullopt;
  };
  if (auto error = path("MEMSNAP_RECORD_OUTPUT", out.output, true)) return Failure::failure(*error);
  if (auto error = path("MEMSNAP_RECORD_OOM", out.oom_output, true)) return Failure::failure(*error);
  if (auto error = path("MEMSNAP_RECORD_CUPTI", out.cupti_library, false)) return Failure::failure(*error);
  if (auto error = path("MEMSNAP_RECORD_REPORT", out.report, false)) return Failure::failure(*error);
  if (const auto text = get("MEMSNAP_RECORD_STACKS")) {
    if (*text != "cpp" && *text != "none")
      return Failure::failure("MEMSNAP_RECORD_STACKS=" + shown_environment_value(*text) +
                              ": expected cpp or none");
    out.stacks = *text == "cpp";
  }
  if (const auto text = get("MEMSNAP_RECORD_MAX_ENTRIES")) {
    const std::optional<size_t> count = positive_count(*text, kMaxEnvironmentEntries);
    if (!count)
      return Failure::failure("MEMSNAP_RECORD_MAX_ENTRIES=" + shown_environment_value(*text) +
                              ": expected a whole number from 1 to 50000000");
    out.max_entries = *count;
  }
  if (const auto text = get("MEMSNAP_RECORD_OOM_LIMIT")) {
    const std::optional<size_t> count = positive_count(*text, 1000000);
    if (!count)
      return Failure::failure("MEMSNAP_RECORD_OOM_LIMIT=" + shown_environment_value(*text) +
                              ": expected a whole number from 1 to 1000000");
    out.oom_limit = *count;
  }
  if (const auto text = get("MEMSNAP_RECORD_SIGNAL")) {
    const std::optional<int> signal = record_signal_from_name(*text);
    if (!signal)
      return Failure::failure("MEMSNAP_RECORD_SIGNAL=" + shown_environment_value(*text) +
                              ": expected USR1, USR2, HUP, INT, QUIT or TERM");
    out.signal = *signal;
    if (out.output.empty())
      return Failure::failure("MEMSNAP_RECORD_SIGNAL needs a snapshot to write: MEMSNAP_RECORD_OUTPUT is off");
  }
  return out;
}

}  // namespace memsnap
