// Captures the calling thread's stack as raw return addresses, cheaply: libunwind's
// unw_backtrace walks frames with cached unwind tables and no symbol lookup. Names, files
// and lines come later, only for the stacks a snapshot needs (symbolizer.h).
#pragma once

#include <cstddef>
#include <cstdint>

namespace memsnap {

inline constexpr size_t kMaxStackDepth = 64;

// Writes up to `max_frames` return addresses, innermost first, leaving out `skip` frames
// above the caller (the caller's own frame is always left out). Returns how many it wrote.
size_t capture_stack(uintptr_t* frames, size_t max_frames, size_t skip = 0);

}  // namespace memsnap
