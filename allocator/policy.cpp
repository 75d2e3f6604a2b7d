#include "allocator/policy.h"

#include <bit>

namespace memsnap {

size_t roundup_power2_next_division(size_t size, size_t divisions) {
  if (std::has_single_bit(size)) return size;
  const size_t power2_floor = std::bit_floor(size);
  const size_t step = power2_floor >> (std::bit_width(divisions) - 1);
  if (step == 0) return power2_floor << 1;
  const size_t floor_to_step = size & ~(step - 1);
  return floor_to_step == size ? size : floor_to_step + step;
}

}  // namespace memsnap
