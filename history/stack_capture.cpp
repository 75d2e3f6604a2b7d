#include "history/stack_capture.h"

#define UNW_LOCAL_ONLY
#include <libunwind.h>

#include <algorithm>

namespace memsnap {

__attribute__((noinline)) size_t capture_stack(uintptr_t* frames, size_t max_frames,
                                               size_t skip) {
  // +1: this function's own frame, which unw_backtrace reports first.
  void* raw[kMaxStackDepth + 16];
  const size_t wanted = std::min(max_frames, kMaxStackDepth) + std::min<size_t>(skip, 15) + 1;
  const int captured = unw_backtrace(raw, static_cast<int>(wanted));
  const size_t first = std::min<size_t>(skip, 15) + 1;
  if (captured <= static_cast<int>(first)) return 0;
  const size_t count = std::min(static_cast<size_t>(captured) - first, max_frames);
  for (size_t i = 0; i < count; ++i) frames[i] = reinterpret_cast<uintptr_t>(raw[first + i]);
  return count;
}

}  // namespace memsnap
