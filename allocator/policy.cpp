#include "allocator/policy.h"

#include <algorithm>
#include <bit>

namespace memsnap {

size_t roundup_power2_divisions_for(size_t size, const AllocatorConfig& config) {
  // Intervals start at 1 MiB (index 0 holds everything below 2 MiB) and end at 64 GiB
  // (the last index holds everything above).
  constexpr int kFirstIntervalLog2 = 20;
  const int log_size = std::bit_width(size) - 1;
  int index = log_size - kFirstIntervalLog2;
  index = std::clamp(index, 0, static_cast<int>(kRoundUpPowerOfTwoIntervals) - 1);
  return config.roundup_power2_divisions[static_cast<size_t>(index)];
}

size_t roundup_power2_next_division(size_t size, size_t divisions) {
  if (std::has_single_bit(size)) return size;
  const size_t power2_floor = std::bit_floor(size);
  const size_t step = power2_floor >> (std::bit_width(divisions) - 1);
  if (step == 0) return power2_floor << 1;
  const size_t floor_to_step = size & ~(step - 1);
  return floor_to_step == size ? size : floor_to_step + step;
}

size_t round_size(size_t size, const AllocatorConfig& config) {
  if (size < kMinBlockSize) return kMinBlockSize;
  const size_t divisions = roundup_power2_divisions_for(size, config);
  if (divisions > 1 && size > kMinBlockSize * divisions)
    return roundup_power2_next_division(size, divisions);
  return kMinBlockSize * ((size + kMinBlockSize - 1) / kMinBlockSize);
}

}  // namespace memsnap
