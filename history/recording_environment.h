// Recording turned on from the environment, without touching the program: the variables a
// memsnap host (the PyTorch package, memsnap::record_from_environment for C++ programs) reads
// when it starts.
//
//   MEMSNAP_HISTORY=off|state|alloc|all      what to record (unset: nothing)
//   MEMSNAP_STACKS=all|python|cpp|none       which frames (unset: the host's default)
//   MEMSNAP_MAX_ENTRIES=N                    trace entries kept per device (unset: 100,000)
//   MEMSNAP_OOM_SNAPSHOT=oom-{pid}-{n}.msgpack   a snapshot at every out-of-memory error
//   MEMSNAP_SNAPSHOT_AT_EXIT=run.msgpack     a snapshot when the program ends
//
// A bad value is one line naming the variable; nothing is half applied. MEMSNAP_STACKS or
// MEMSNAP_MAX_ENTRIES without MEMSNAP_HISTORY is one too (they would record nothing).
#pragma once

#include <cstddef>
#include <functional>
#include <optional>
#include <string>

#include "allocator/result.h"
#include "history/history_recorder.h"

namespace memsnap {

enum class StackChoice : uint8_t { kAll, kPython, kCpp, kNone };

struct RecordingEnvironment {
  HistoryLevel level = HistoryLevel::kOff;
  std::optional<StackChoice> stacks;  // unset: the host chooses
  size_t max_entries = 100000;
  std::string oom_snapshot;      // a dump pattern (snapshot_file.h's placeholders); "": none
  std::string snapshot_at_exit;  // a path; "": none
};

inline constexpr size_t kMaxEnvironmentEntries = 50000000;  // 2 GB of trace ring

// Reads the variables through `lookup` (getenv by default; nullptr: unset).
Result<RecordingEnvironment> recording_environment(
    const std::function<const char*(const char*)>& lookup = nullptr);

// For parsers of other variables: a value as an error shows it (bounded, control characters
// as '?'), and a whole number from 1 to `max` (nullopt for anything else).
std::string shown_environment_value(std::string_view value);
std::optional<size_t> positive_count(std::string_view text, size_t max);

std::string_view stack_choice_name(StackChoice choice);
std::optional<StackChoice> stack_choice_from_name(std::string_view name);

}  // namespace memsnap
