#include "history/stack_capture.h"

#include "history/cfi_unwinder.h"
#include "history/raw_stack_read.h"
#include "history/stack_bounds.h"

#define UNW_LOCAL_ONLY
#include <libunwind.h>

#include <algorithm>

namespace memsnap {

__attribute__((noinline)) size_t capture_stack(uintptr_t* frames, size_t max_frames,
                                               size_t skip, StackNote** note) {
  // +1: this function's own frame.
  const size_t count = capture_stack_cfi(frames, max_frames, skip + 1, note);
  if (count != kUnsupportedStack) return count;
  return capture_stack_libunwind(frames, max_frames, skip + 1);
}

__attribute__((noinline)) size_t capture_stack_libunwind(uintptr_t* frames, size_t max_frames,
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

__attribute__((noinline)) MEMSNAP_READS_RAW_STACK size_t
capture_stack_frame_pointers(uintptr_t* frames, size_t max_frames, size_t skip) {
  const StackBounds stack = thread_stack_bounds();
  // Each frame starts with the caller's frame pointer, then the return address into it.
  auto frame = reinterpret_cast<uintptr_t>(__builtin_frame_address(0));
  size_t count = 0;
  while (count < max_frames) {
    if (frame < stack.low || frame + 2 * sizeof(uintptr_t) > stack.high ||
        frame % alignof(uintptr_t) != 0)
      break;
    const uintptr_t caller_frame = reinterpret_cast<const volatile uintptr_t*>(frame)[0];
    const uintptr_t return_address = reinterpret_cast<const volatile uintptr_t*>(frame)[1];
    if (return_address == 0) break;
    if (skip > 0)
      --skip;
    else
      frames[count++] = return_address;
    if (caller_frame <= frame) break;  // the stack grows down: callers are higher
    frame = caller_frame;
  }
  return count;
}

}  // namespace memsnap
