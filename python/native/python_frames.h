// CPython's frames for memsnap's history, read without the interpreter's lock.
//
// An allocation reaches memsnap from C++ code that PyTorch called with the GIL released, and
// the recorder captures stacks with the allocator's lock held: taking the GIL there could
// deadlock and would cost microseconds. The calling thread's own frames cannot change while
// it is inside that call, so they are read directly from its thread state (CPython's
// _PyInterpreterFrame chain, 3.11 and 3.12): a frame becomes a token holding an interned
// code id and the instruction's offset. A code object is interned the first time it is seen
// by copying what a frame needs later (name, file, first line, line table), so tokens resolve
// to lines at snapshot time without the interpreter, and after the code object is gone.
// Address reuse (a code object freed, another made at its address) is caught by watching
// code objects die (CPython 3.12's code watchers, see watch_code_objects): a frame whose
// code was seen before then costs no read of the code object at all, where the code objects
// of a deep stack's outer frames are far from the processor's caches. Without a watcher
// (3.11, or no watcher slot free) a fingerprint of the code object's fields catches it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "history/interpreter_frames.h"

namespace memsnap::python {

// Whether frames can be read on this interpreter (the one this file was compiled against),
// and if not, why.
bool frames_supported();
std::string frames_unsupported_reason();

// Starts watching code objects die, for every PythonFrames; call with the GIL held. False
// where the interpreter has no code watchers (before 3.12) or none free: then frames are
// told apart by fingerprint.
bool watch_code_objects();

class PythonFrames final : public InterpreterFrames {
 public:
  PythonFrames();
  ~PythonFrames() override;
  PythonFrames(const PythonFrames&) = delete;
  PythonFrames& operator=(const PythonFrames&) = delete;

  size_t capture(uintptr_t* tokens, size_t max) override;
  SourceFrame resolve(uintptr_t token) override;
  bool is_evaluation_loop(std::string_view function) const override;
  StopCode evaluation_loop_code() const override;

  size_t code_count() const;  // distinct code objects interned

 private:
  struct Table;
  std::unique_ptr<Table> table_;
  const uint64_t serial_;  // tells this instance's entries in a thread's cache from others'
};

// The process's source, never destroyed (allocations are freed during interpreter shutdown).
PythonFrames& process_python_frames();

}  // namespace memsnap::python
