// Captures the calling thread's stack as raw return addresses, cheaply: libunwind's
// unw_backtrace walks frames with cached unwind tables and no symbol lookup. Names, files
// and lines come later, only for the stacks a snapshot needs (symbolizer.h).
#pragma once

#include <cstddef>
#include <cstdint>

namespace memsnap {

inline constexpr size_t kMaxStackDepth = 64;

// How stacks are walked.
//   kDwarf: libunwind, from the unwind tables every binary has. Correct for any code;
//     about 8 ns a frame.
//   kFramePointers: follows the saved frame-pointer chain, about 1 ns a frame, but only
//     correct where the code was built with -fno-omit-frame-pointer (memsnap's own libraries
//     are). Elsewhere frames go missing; the walk never reads outside the thread's stack.
enum class StackUnwinder : uint8_t { kDwarf, kFramePointers };

// Writes up to `max_frames` return addresses, innermost first, leaving out `skip` frames
// above the caller (the caller's own frame is always left out). Returns how many it wrote.
size_t capture_stack(uintptr_t* frames, size_t max_frames, size_t skip = 0);
size_t capture_stack_frame_pointers(uintptr_t* frames, size_t max_frames, size_t skip = 0);

}  // namespace memsnap
