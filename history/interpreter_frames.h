// Frames of an interpreter (CPython) that the C++ walk sees only as its evaluation loop.
//
// A source captures the calling thread's interpreter frames as tokens, cheaply and under an
// allocator lock (so without taking the interpreter's own lock); resolves a token to a
// function, file and line only when a snapshot asks; and names the C++ function its frames
// run in, so a snapshot can put them in call order among the C++ frames. A recorded stack is
// one array: C++ return addresses (up to the innermost run of the evaluation loop when the
// source knows where its code lies), then the interpreter's tokens, innermost first.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "history/stack_capture.h"
#include "history/symbolizer.h"

namespace memsnap {

// Tokens have the top bit set; C++ return addresses never do (user space ends far below).
inline constexpr uintptr_t kInterpreterTokenBit = uintptr_t{1} << 63;
// A frame token also has the next bit set; the rest is the source's own.
inline constexpr uintptr_t kInterpreterFrameBit = uintptr_t{1} << 62;
inline constexpr uintptr_t kInterpreterPayloadMask = kInterpreterFrameBit - 1;
// Follows the outermost frame of one run of the evaluation loop (one C++ frame of it).
inline constexpr uintptr_t kInterpreterRunEnd = kInterpreterTokenBit;
// The most tokens one stack keeps.
inline constexpr size_t kMaxInterpreterTokens = 192;

inline bool is_interpreter_token(uintptr_t word) { return (word & kInterpreterTokenBit) != 0; }
inline bool is_interpreter_frame(uintptr_t word) {
  return (word & (kInterpreterTokenBit | kInterpreterFrameBit)) ==
         (kInterpreterTokenBit | kInterpreterFrameBit);
}

class InterpreterFrames {
 public:
  virtual ~InterpreterFrames() = default;
  // Writes the calling thread's interpreter frames as tokens, innermost first, with
  // kInterpreterRunEnd after the outermost frame of each run of the evaluation loop; returns
  // how many it wrote (at most `max`). Runs with an allocator lock held: it must not block
  // or take a lock that a thread could hold while allocating.
  virtual size_t capture(uintptr_t* tokens, size_t max) = 0;
  // The frame a frame token stands for.
  virtual SourceFrame resolve(uintptr_t token) = 0;
  // Whether a C++ function, as symbolized, is the evaluation loop whose runs the
  // kInterpreterRunEnd tokens separate.
  virtual bool is_evaluation_loop(std::string_view function) const = 0;
  // Where that loop's code lies, for a C++ walk to end at (its frames above are the
  // interpreter's); empty when unknown, and the walk goes on.
  virtual StopCode evaluation_loop_code() const { return {}; }
};

}  // namespace memsnap
