// Allocator settings and the parser for PyTorch's configuration grammar.
//
// `MEMSNAP_ALLOC_CONF` (falling back to `PYTORCH_ALLOC_CONF`, then
// `PYTORCH_CUDA_ALLOC_CONF`) holds comma-separated `key:value` pairs, lists in brackets:
//   max_split_size_mb:128,roundup_power2_divisions:[256:1,512:2,>:8],expandable_segments:True
// Every key PyTorch 2.11 accepts for its device allocator is understood; its host-allocator
// keys (`pinned_*`) are accepted with a notice that they configure PyTorch's host allocator,
// not this one. Anything else is an error that names the key and what was expected: a typo
// must never be ignored.
#pragma once

#include <array>
#include <cstddef>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "allocator/result.h"

namespace memsnap {

inline constexpr size_t kRoundUpPowerOfTwoIntervals = 16;  // 1 MiB .. 64 GiB

struct AllocatorConfig {
  size_t max_split_size = std::numeric_limits<size_t>::max();  // "no limit"
  size_t max_non_split_rounding_size = 20u << 20;
  size_t large_segment_size = 20u << 20;
  double garbage_collection_threshold = 0.0;  // 0 = off
  // Divisions per power-of-two interval: index 0 is [.., 2 MiB), index i is
  // [2^(20+i), 2^(21+i)); 0 or 1 means plain 512-byte rounding.
  std::array<size_t, kRoundUpPowerOfTwoIntervals> roundup_power2_divisions{};
  bool expandable_segments = false;
  bool release_lock_on_cudamalloc = false;
  // The cap on each device's reserved memory as a fraction of its total, from the start
  // (PyTorch 2.11's per_process_memory_fraction key; 1 = no cap). set_memory_fraction
  // changes it later.
  double per_process_memory_fraction = 1.0;
  // During a CUDA graph capture, a block freed while other streams used it may serve the same
  // capture again once the capture's graph orders every later node after its last uses
  // (PyTorch 2.11's graph_capture_record_stream_reuse); off, it waits for the capture's end.
  bool graph_capture_record_stream_reuse = false;
  // Caching off (MEMSNAP_NO_CACHING=1 or PyTorch's PYTORCH_NO_CUDA_MEMORY_CACHING=1, what users
  // set to run compute-sanitizer): every request is a device allocation of its rounded size and
  // every free gives it back, with statistics and history kept as usual. Not part of the
  // configuration string's grammar; overrides expandable_segments.
  bool caching = true;

  std::string source;                // the string these settings were parsed from
  // Where that string came from: "" when the program gave it, else the environment variable
  // (allocator_config_from_environment); says where a per_process_memory_fraction cap came from.
  std::string origin;
  std::vector<std::string> notices;  // accepted keys that have no effect in memsnap

  bool operator==(const AllocatorConfig& other) const {
    return max_split_size == other.max_split_size &&
           max_non_split_rounding_size == other.max_non_split_rounding_size &&
           large_segment_size == other.large_segment_size &&
           garbage_collection_threshold == other.garbage_collection_threshold &&
           roundup_power2_divisions == other.roundup_power2_divisions &&
           expandable_segments == other.expandable_segments &&
           release_lock_on_cudamalloc == other.release_lock_on_cudamalloc &&
           per_process_memory_fraction == other.per_process_memory_fraction &&
           graph_capture_record_stream_reuse == other.graph_capture_record_stream_reuse &&
           caching == other.caching;
  }
};

// Parses a configuration string; an empty string gives the defaults.
Result<AllocatorConfig> parse_allocator_config(std::string_view text);

// The settings after a program running with `base` changes them with `text`, as PyTorch 2.11's
// torch.cuda.memory._set_allocator_settings does: max_split_size, roundup_power2_divisions and
// garbage_collection_threshold return to their defaults unless `text` sets them,
// max_non_split_rounding to the large segment size unless it sets it; every other setting keeps
// its value unless `text` sets it. (`source` becomes to_config_string of the result.)
Result<AllocatorConfig> update_allocator_config(const AllocatorConfig& base, std::string_view text);

// Reads the first of MEMSNAP_ALLOC_CONF, PYTORCH_ALLOC_CONF, PYTORCH_CUDA_ALLOC_CONF that is
// set and parses it, then turns caching off when MEMSNAP_NO_CACHING or
// PYTORCH_NO_CUDA_MEMORY_CACHING says so (1/true/yes; 0/false/no or empty leave it on); the error
// names the variable as well as the key or value.
Result<AllocatorConfig> allocator_config_from_environment();
// False when MEMSNAP_NO_CACHING or PYTORCH_NO_CUDA_MEMORY_CACHING turns caching off.
Result<bool> caching_from_environment();

// The settings as a configuration string that parses back to the same settings.
std::string to_config_string(const AllocatorConfig& config);

}  // namespace memsnap
