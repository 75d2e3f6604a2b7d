#include "history/trace_action.h"

#include <array>

namespace memsnap {
namespace {

constexpr std::array<std::string_view, kTraceActionCount> kActionNames = {
    "alloc",       "free_requested", "free_completed", "segment_alloc", "segment_free",
    "segment_map", "segment_unmap",  "oom",            "snapshot"};

}  // namespace

std::string_view trace_action_name(TraceAction action) {
  const auto index = static_cast<size_t>(action);
  return index < kActionNames.size() ? kActionNames[index] : "unknown";
}

std::optional<TraceAction> trace_action_from_name(std::string_view name) {
  for (size_t i = 0; i < kActionNames.size(); ++i)
    if (kActionNames[i] == name) return static_cast<TraceAction>(i);
  return std::nullopt;
}

}  // namespace memsnap
