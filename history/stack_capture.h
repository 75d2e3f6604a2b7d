// Captures the calling thread's stack as raw return addresses, cheaply: a walk by the
// binaries' DWARF unwind tables with a rule cache per address (cfi_unwinder.h), falling
// back to libunwind for frames beyond it; no symbol lookup. Names, files
// and lines come later, only for the stacks a snapshot needs (symbolizer.h).
#pragma once

#include <cstddef>
#include <cstdint>

namespace memsnap {

inline constexpr size_t kMaxStackDepth = 64;

// How stacks are walked.
//   kDwarf: from the unwind tables every binary has. Correct for any code; about 7 ns a
//     frame once the rules are cached, about 1 ns for the outer frames a recent walk shared
//     (libunwind, the fallback, takes about 8).
//   kFramePointers: follows the saved frame-pointer chain, about 1 ns a frame, but only
//     correct where the code was built with -fno-omit-frame-pointer (memsnap's own libraries
//     are). Elsewhere frames go missing; the walk never reads outside the thread's stack.
enum class StackUnwinder : uint8_t { kDwarf, kFramePointers };

// What a caller may remember about the frames a walk gave it, kept by the DWARF walker with
// its memory of that walk: when the same walk comes again, so does the note, and the caller
// can skip the work it did on those frames before (history keeps the stack's interned id
// here, so a repeated call path is not hashed and compared again). `owner` says whose note
// it is; 0 means none yet.
struct StackNote {
  uint64_t owner = 0;
  uint32_t value = 0;
};

// Code at which a walk ends: the frame whose return address lies inside it is the last one
// reported. An interpreter's evaluation loop, for a recorder that takes the frames above it
// from the interpreter: the C++ frames between its runs (the interpreter calling itself
// through its object protocol) are left unwalked. Empty: the walk goes on to the end.
struct StopCode {
  uintptr_t begin = 0;
  uintptr_t end = 0;
  // (A return address is just past its call, so a call at the very end returns to `end`.)
  bool holds_return_address(uintptr_t pc) const { return pc > begin && pc <= end; }
  bool operator==(const StopCode&) const = default;
};

// Frames up to and including the first whose return address lies in `stop`.
size_t end_at_stop(const uintptr_t* frames, size_t count, const StopCode& stop);

// What capture_stack returns instead of a count when the walk repeats one whose note belongs
// to `note_owner`: the frames were not written, since the note stands for them.
inline constexpr size_t kNotedStack = ~size_t{0} - 1;

// Writes up to `max_frames` return addresses, innermost first, leaving out `skip` frames
// above the caller (the caller's own frame is always left out), ending at `stop`. Returns
// how many it wrote. With `note`, sets *note to the note kept for exactly these frames, or to
// nullptr when the walk is not remembered (libunwind's fallback). The note stays valid until
// the calling thread's next capture. `path_key`, unless 0, is a value the caller expects to
// come with the same call path most times (a recorder with interpreter frames gives their
// innermost ones): the DWARF walker tries the walk it last made or found under that key from
// the same place first. A key is only a hint: the frames are the same whatever it is.
// `note_owner`, unless 0: when the walk is a remembered one whose note that owner set, the
// frames are left unwritten and kNotedStack returned (the caller reads *note instead).
size_t capture_stack(uintptr_t* frames, size_t max_frames, size_t skip = 0,
                     StackNote** note = nullptr, const StopCode& stop = {},
                     uint64_t path_key = 0, uint64_t note_owner = 0);
size_t capture_stack_frame_pointers(uintptr_t* frames, size_t max_frames, size_t skip = 0,
                                    const StopCode& stop = {});
// libunwind's walk alone: the fallback of capture_stack, and its reference in tests.
// libunwind is loaded at run time, privately (see stack_capture.cpp); without it the walk is
// libgcc's _Unwind_Backtrace.
size_t capture_stack_libunwind(uintptr_t* frames, size_t max_frames, size_t skip = 0);
// Loads the fallback walker; call outside any lock a dynamic loader might wait on (the
// recorder calls it when stacks are turned on). Later calls cost nothing.
void prepare_stack_capture();
// libgcc's walk, what the fallback uses where libunwind is missing.
size_t capture_stack_libgcc(uintptr_t* frames, size_t max_frames, size_t skip = 0);
bool stack_fallback_is_libunwind();

}  // namespace memsnap
