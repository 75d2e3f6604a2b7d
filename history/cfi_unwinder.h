// A stack walker driven by the DWARF call-frame information (.eh_frame) that every x86-64
// binary carries, with a rule cache per code address: after the first walk through a
// function, stepping over it is one cache probe and two loads from the stack.
//
// For each frame the walk needs only where the caller's stack pointer (the CFA) is, where
// the return address sits, and where %rbp was saved; the CFA program of the function's
// FDE is run once to find them and the answer is kept per return address. Functions whose
// rules say more than that (CFA from an expression, %rbp in another register, signal
// frames) make the walk answer kUnsupportedStack, and the caller walks with libunwind
// instead. Every load is checked against the thread's stack bounds, so a stale rule (code
// unloaded and other code loaded at its address) yields a wrong stack, never a crash.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>

#include "history/stack_capture.h"

namespace memsnap {


inline constexpr size_t kUnsupportedStack = std::numeric_limits<size_t>::max();

// As capture_stack (stack_capture.h): return addresses innermost first, the first being
// inside the caller, after leaving out `skip` more. kUnsupportedStack when a frame on the
// way needs a full unwinder. `note`, `stop`, `path_key` and `note_owner` as for
// capture_stack (kNotedStack too).
size_t capture_stack_cfi(uintptr_t* frames, size_t max_frames, size_t skip = 0,
                         StackNote** note = nullptr, const StopCode& stop = {},
                         uint64_t path_key = 0, uint64_t note_owner = 0);

// What the calling thread's walker has done so far, for tests and benchmarks: walks made,
// steps walked (the rest were taken over from remembered walks), and walks remembered (each
// walk not found remembered whole).
struct CfiWalkCounts {
  uint64_t walks = 0;
  uint64_t steps_walked = 0;
  uint64_t remembered = 0;
};
CfiWalkCounts cfi_walk_counts();

}  // namespace memsnap
