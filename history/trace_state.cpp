#include "history/trace_state.h"

#include <array>

#include "history/trace_state_log.h"

namespace memsnap {
namespace {

constexpr std::array<std::string_view, kTraceStateKindCount> kKindNames = {"settings", "user_metadata",
                                                                           "compile_context", "memory_cap"};
// Changes kept before older ones are folded into the base state (a fold is a linear pass).
constexpr size_t kFoldAbove = 256;

}  // namespace

std::string_view trace_state_kind_name(TraceStateKind kind) {
  const auto index = static_cast<size_t>(kind);
  return index < kKindNames.size() ? kKindNames[index] : "unknown";
}

std::optional<TraceStateKind> trace_state_kind_from_name(std::string_view name) {
  for (size_t i = 0; i < kKindNames.size(); ++i)
    if (kKindNames[i] == name) return static_cast<TraceStateKind>(i);
  return std::nullopt;
}

void TraceStateLog::set(TraceStateKind kind, std::string value, uint64_t next_sequence,
                        uint64_t oldest_kept, std::string request) {
  const auto index = static_cast<size_t>(kind);
  if (current_[index] == value) return;
  current_[index] = value;
  // A change of the same kind with no event since is replaced, not kept (its request then
  // stands for both: they took effect together).
  for (auto it = changes_.rbegin(); it != changes_.rend() && it->sequence == next_sequence; ++it) {
    if (it->kind == kind) {
      it->value = std::move(value);
      it->request = it->request.empty() || request.empty() ? std::string() : it->request + "," + request;
      return;
    }
  }
  changes_.push_back({next_sequence, kind, std::move(value), std::move(request)});
  if (changes_.size() > kFoldAbove) fold_before(oldest_kept);
}

// Changes that no kept event follows any more become the base state.
void TraceStateLog::fold_before(uint64_t sequence) {
  size_t folded = 0;
  // A change at `sequence` or earlier holds for the oldest kept event; only the last of each
  // kind matters, and the base keeps it.
  while (folded < changes_.size() && changes_[folded].sequence <= sequence) {
    Change& change = changes_[folded];
    base_[static_cast<size_t>(change.kind)] = std::move(change.value);
    ++folded;
  }
  changes_.erase(changes_.begin(), changes_.begin() + static_cast<std::ptrdiff_t>(folded));
}

std::vector<TraceStateChange> TraceStateLog::changes_for(uint64_t first, uint64_t count) const {
  std::array<std::optional<std::string>, kTraceStateKindCount> at_first = base_;
  size_t i = 0;
  for (; i < changes_.size() && changes_[i].sequence <= first; ++i)
    at_first[static_cast<size_t>(changes_[i].kind)] = changes_[i].value;
  // The state at the first event is where the trace starts, not a change the program made
  // there: it carries no request.
  std::vector<TraceStateChange> out;
  for (size_t kind = 0; kind < at_first.size(); ++kind)
    if (at_first[kind]) out.push_back({0, static_cast<TraceStateKind>(kind), *at_first[kind], {}});
  for (; i < changes_.size() && changes_[i].sequence < first + count; ++i)
    out.push_back({changes_[i].sequence - first, changes_[i].kind, changes_[i].value, changes_[i].request});
  return out;
}

}  // namespace memsnap
