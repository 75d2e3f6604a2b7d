// A cap on what the allocator may reserve on one device, and where it came from: the program
// (torch.cuda.set_per_process_memory_fraction, memsnap's set_memory_fraction) or the settings
// (the per_process_memory_fraction key, in a string the program passed or in an environment
// variable). History records each change (trace_state.h's kMemoryCap) and snapshots carry the
// cap, so an out-of-memory error under a cap is explained with the cap's size, and replays run
// under the cap the recording had.
//
// As text (the value of a kMemoryCap state change): "none", or "<bytes> <fraction> <source>",
// the source being the rest of the line.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace memsnap {

struct MemoryCap {
  uint64_t bytes = 0;     // what the allocator may reserve at most (0 refuses every segment)
  double fraction = 1.0;  // of the device's total memory, as it was set
  std::string source;     // "set_memory_fraction", "per_process_memory_fraction in PYTORCH_CUDA_ALLOC_CONF", ...
  bool operator==(const MemoryCap&) const = default;
};

inline constexpr std::string_view kCapFromCode = "set_memory_fraction";

// Where the per_process_memory_fraction key of settings read from `origin` came from: "the
// settings string" for settings the program passed, else the variable's name.
std::string cap_source_of_settings(std::string_view origin);

std::string memory_cap_text(const std::optional<MemoryCap>& cap);
// Unset for "none"; a one-line error (as std::nullopt in `error`) for text that is neither.
std::optional<MemoryCap> parse_memory_cap_text(std::string_view text, std::string* error = nullptr);

// "a memory cap of 1.00 GiB (0.0125 of the device, set by set_memory_fraction)" style words.
std::string memory_cap_words(const MemoryCap& cap);

}  // namespace memsnap
