// Call paths of different frame shapes for the CFI walker's tests. Compiled without frame
// pointers (see tests/CMakeLists.txt), as most library code is.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "history/stack_capture.h"

namespace cfi_test_frames {

// Both walks from the same innermost function; `first` is the libunwind one.
struct TwoWalks {
  std::vector<uintptr_t> libunwind;
  std::vector<uintptr_t> cfi;  // empty with `unsupported` set when the walker gave up
  bool unsupported = false;
};

TwoWalks through_recursion(int depth);        // frames addressed from %rsp
TwoWalks through_variable_length_array(int n);  // a frame addressed from %rbp
TwoWalks through_signal_handler();            // a signal frame on the way
// Callers that differ only above a shared function, in turn: what an earlier walk learned
// must not be reused where the stack above has changed.
TwoWalks through_one_of_several_callers(int which);
TwoWalks walk_from_caller();                  // whatever frame shape the caller has
// The CFI walk, given `path_key`, of one of kMiddles call paths (`side` 0 to kMiddles - 1)
// that share their five innermost frames, part for the three above, and meet again at one
// call site: they start from the same registers and reach the same registers at step 8.
inline constexpr int kMiddles = 6;
std::vector<uintptr_t> through_one_of_several_middles(int side, uint64_t path_key);
// A CFI walk (with its note) through a frame that saved %rbp holding `value` and addresses
// nothing from %rbp, as code without frame pointers does with %rbp used for data.
struct NotedWalk {
  std::vector<uintptr_t> cfi;
  memsnap::StackNote* note = nullptr;
};
NotedWalk through_rbp_holding(uintptr_t value);
// The CFI walks of the functions above end at `stop` from now on (libunwind's do not).
void end_cfi_walks_at(const memsnap::StopCode& stop);

}  // namespace cfi_test_frames
