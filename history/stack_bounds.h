// The calling thread's stack, [low, high): stack walkers read nothing outside it.
#pragma once

#include <cstdint>

namespace memsnap {

struct StackBounds {
  uintptr_t low = 0;
  uintptr_t high = 0;  // 0 when the bounds could not be found
};

// Asked of pthreads once per thread, then remembered.
StackBounds thread_stack_bounds();

}  // namespace memsnap
