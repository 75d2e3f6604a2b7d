// What a trace entry records, with the names PyTorch's snapshots use for the same actions.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace memsnap {

enum class TraceAction : uint8_t {
  kAlloc,
  kFreeRequested,   // the program freed it; other streams may still use it
  kFreeCompleted,   // its bytes are reusable
  kSegmentAlloc,
  kSegmentFree,
  kSegmentMap,      // expandable segments: pages mapped
  kSegmentUnmap,
  kOom,
  kSnapshot,
};
inline constexpr int kTraceActionCount = 9;

std::string_view trace_action_name(TraceAction action);
std::optional<TraceAction> trace_action_from_name(std::string_view name);

}  // namespace memsnap
