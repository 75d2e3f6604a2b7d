// What a trace's events were recorded under besides their own fields: the allocator's settings
// (when a program changes them while running), the user's metadata text (PyTorch's
// torch.cuda.memory._set_memory_metadata) and the compile context (the torch.compile region
// that was running). PyTorch writes the last two on every trace entry ("user_metadata",
// "compile_context"); memsnap keeps where each changed, so a run of events under one value
// costs nothing, and a replay applies each settings change at the event it came before.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace memsnap {

enum class TraceStateKind : uint8_t { kSettings, kUserMetadata, kCompileContext, kMemoryCap };
inline constexpr int kTraceStateKindCount = 4;

std::string_view trace_state_kind_name(TraceStateKind kind);  // "settings", "user_metadata", ...
std::optional<TraceStateKind> trace_state_kind_from_name(std::string_view name);

// From event `event_index` of its device's trace on (until the next change of the same kind),
// events were recorded under `value`: for kSettings a configuration string
// (allocator_config.h's grammar) of all the settings, for kMemoryCap the cap on reserved memory
// as memory_cap.h writes it ("none", or bytes, fraction and where it came from), else the text
// ("" for none).
struct TraceStateChange {
  uint64_t event_index = 0;
  TraceStateKind kind = TraceStateKind::kSettings;
  std::string value;
  // kSettings: the string the program passed (_set_allocator_settings), from which a replay
  // under other settings works out what the change does to them; "" when not known.
  std::string request;
  bool operator==(const TraceStateChange&) const = default;
};

}  // namespace memsnap
