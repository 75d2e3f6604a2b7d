// Turns recorded stacks into a snapshot's stacks: return addresses symbolized (once per
// address), and an interpreter's frame tokens put in call order among the C++ frames: each run
// of the interpreter's evaluation loop takes the place of the C++ frame of that loop (the i-th
// such frame, innermost first, holds the i-th run); runs the C++ walk did not reach follow,
// outermost last. memsnap's own frames, innermost, are left out: a stack starts at the call
// into memsnap.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "history/interpreter_frames.h"
#include "snapshot/snapshot.h"
#include "snapshot/snapshot_stacks.h"

namespace memsnap {

class RecordedStackSymbolizer {
 public:
  // Adds to `snapshot`'s tables; `interpreter` resolves frame tokens (nullptr: tokens dropped).
  RecordedStackSymbolizer(Snapshot& snapshot, InterpreterFrames* interpreter)
      : tables_(snapshot), interpreter_(interpreter) {}

  // The snapshot's stack for recorded words (C++ return addresses, then interpreter tokens).
  StackIndex stack_of(const std::vector<uintptr_t>& words) { return tables_.intern_stack(symbolize(words)); }
  std::vector<uint32_t> symbolize(const std::vector<uintptr_t>& words);

 private:
  // A frame a return address gave, with what symbolize() asks of its function's name. It
  // enters the snapshot's frame table when a stack first holds it.
  struct AddressFrame {
    static constexpr uint32_t kNotInTable = ~uint32_t{0};
    SourceFrame frame;
    uint32_t index = kNotInTable;
    bool in_memsnap = false;       // the allocator's and recorder's own frames, innermost
    bool evaluation_loop = false;  // the interpreter's loop, in whose place its frames go
  };
  std::vector<AddressFrame>& frames_at(uintptr_t address);
  uint32_t interpreter_frame(uintptr_t token);

  SnapshotStackTables tables_;
  InterpreterFrames* interpreter_;
  std::unordered_map<uintptr_t, std::vector<AddressFrame>> address_frames_;
  std::unordered_map<uintptr_t, uint32_t> token_frames_;
};

}  // namespace memsnap
