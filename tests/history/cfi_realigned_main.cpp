// GCC gives a main() with over-aligned locals a realigned stack (DRAP): its CFA is an
// expression, "the word at %rbp - N". Only main gets that frame shape from plain code, so
// this check is a program of its own: the CFI walk through this main must match libunwind's.
#include <cstdio>

#include "tests/history/cfi_test_frames.h"

int main() {
  alignas(64) volatile char aligned[64];
  aligned[0] = 1;
  const cfi_test_frames::TwoWalks walks = cfi_test_frames::walk_from_caller();
  if (walks.unsupported) {
    std::fprintf(stderr, "FAILED: the CFI walk gave up on a realigned main\n");
    return 1;
  }
  if (walks.cfi.size() != walks.libunwind.size() || walks.cfi.size() < 3) {
    std::fprintf(stderr, "FAILED: %zu frames by CFI, %zu by libunwind\n", walks.cfi.size(),
                 walks.libunwind.size());
    return 1;
  }
  for (size_t i = 1; i < walks.cfi.size(); ++i) {
    if (walks.cfi[i] != walks.libunwind[i]) {
      std::fprintf(stderr, "FAILED: frame %zu: %#zx by CFI, %#zx by libunwind\n", i,
                   static_cast<size_t>(walks.cfi[i]), static_cast<size_t>(walks.libunwind[i]));
      return 1;
    }
  }
  std::printf("%zu frames match (aligned local %d)\n", walks.cfi.size(), aligned[0]);
  return 0;
}
