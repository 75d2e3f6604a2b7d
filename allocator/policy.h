// The caching policy's size rules, written to read like docs/DESIGN.md ("Allocator policy").
//
// These are pure functions of a request size and the configuration, kept apart from the
// allocator's bookkeeping so that each rule can be tested (and read) on its own. They match
// PyTorch's CUDA caching allocator under its default behaviour.
#pragma once

#include <algorithm>
#include <bit>
#include <cstddef>
#include <limits>

#include "allocator/allocator_config.h"

namespace memsnap {

inline constexpr size_t kMinBlockSize = 512;               // every block is a multiple of this
inline constexpr size_t kSmallSize = 1 << 20;              // largest "small" request (1 MiB)
inline constexpr size_t kSmallBuffer = 2 << 20;            // segment size for small requests
inline constexpr size_t kLargeBuffer = 20 << 20;           // segment size for 1-10 MiB requests
inline constexpr size_t kMinLargeAlloc = 10 << 20;         // from here segments fit the request
inline constexpr size_t kRoundLarge = 2 << 20;             // ...rounded up to this
inline constexpr size_t kNoMaxSplitSize = std::numeric_limits<size_t>::max();

// Largest request the allocator accepts; far above any device, and small enough that the
// rounding arithmetic below can never overflow.
inline constexpr size_t kMaxRequestSize = size_t{1} << 56;

// The step rounding on its own (exposed for tests): 1200 B with 4 divisions -> 1280 B.
inline size_t roundup_power2_next_division(size_t size, size_t divisions) {
  // (Not std::has_single_bit: built for x86-64 without POPCNT, that is a call into libgcc.)
  if ((size & (size - 1)) == 0) return size;
  const size_t power2_floor = std::bit_floor(size);
  const size_t step = power2_floor >> (std::bit_width(divisions) - 1);
  if (step == 0) return power2_floor << 1;
  const size_t floor_to_step = size & ~(step - 1);
  return floor_to_step == size ? size : floor_to_step + step;
}

// Number of divisions configured for the power-of-two interval that holds `size`.
inline size_t roundup_power2_divisions_for(size_t size, const AllocatorConfig& config) {
  // Intervals start at 1 MiB (index 0 holds everything below 2 MiB) and end at 64 GiB
  // (the last index holds everything above).
  constexpr int kFirstIntervalLog2 = 20;
  const int index = static_cast<int>(std::bit_width(size)) - 1 - kFirstIntervalLog2;
  return config.roundup_power2_divisions[static_cast<size_t>(
      std::clamp(index, 0, static_cast<int>(kRoundUpPowerOfTwoIntervals) - 1))];
}

// Request size -> block size: at least kMinBlockSize, then either a multiple of
// kMinBlockSize or, where roundup_power2_divisions applies, the next of N equal steps
// between the surrounding powers of two. (Inline: every allocation asks.)
inline size_t round_size(size_t size, const AllocatorConfig& config) {
  if (size < kMinBlockSize) return kMinBlockSize;
  const size_t divisions = roundup_power2_divisions_for(size, config);
  if (divisions > 1 && size > kMinBlockSize * divisions)
    return roundup_power2_next_division(size, divisions);
  return kMinBlockSize * ((size + kMinBlockSize - 1) / kMinBlockSize);
}

// Rounded size -> pool: small requests share 2 MiB segments, larger ones get their own.
inline bool is_small_request(size_t rounded_size) { return rounded_size <= kSmallSize; }

// Rounded size -> size of the segment reserved from the device when no cached block fits.
inline size_t segment_size_for(size_t rounded_size, const AllocatorConfig& config) {
  if (!config.caching) return rounded_size;  // each request is its own device allocation
  if (rounded_size <= kSmallSize) return kSmallBuffer;
  if (rounded_size < kMinLargeAlloc) return config.large_segment_size;
  return kRoundLarge * ((rounded_size + kRoundLarge - 1) / kRoundLarge);
}

// Whether a free block of `block_size` bytes taken for a request of `rounded_size` bytes
// is split, leaving the remainder free in the pool. `expandable_active`: expandable segments
// are on for the block's pool (the setting, except in a pool with its own segment source).
inline bool should_split(size_t block_size, size_t rounded_size, bool small_pool,
                         bool expandable_active, const AllocatorConfig& config) {
  const size_t remaining = block_size - rounded_size;
  if (small_pool || expandable_active) return remaining >= kMinBlockSize;
  return rounded_size < config.max_split_size && remaining > kSmallSize;
}
inline bool should_split(size_t block_size, size_t rounded_size, bool small_pool,
                         const AllocatorConfig& config) {
  return should_split(block_size, rounded_size, small_pool, config.expandable_segments, config);
}

// The max_split_size rules of best fit: a request below max_split_size never takes a block
// at or above it; a request at or above it only takes a block smaller than
// request + max_non_split_rounding_size.
inline bool block_fits_split_rules(size_t block_size, size_t rounded_size,
                                   const AllocatorConfig& config) {
  if (rounded_size < config.max_split_size && block_size >= config.max_split_size) return false;
  if (rounded_size >= config.max_split_size &&
      block_size >= rounded_size + config.max_non_split_rounding_size)
    return false;
  return true;
}

}  // namespace memsnap
