// memsnap.torch's record of the memory the process holds outside its caching allocator: the
// device memory other libraries ask CUDA for (NCCL, cuBLAS, cuDNN, CuPy, Triton, an extension)
// and pinned host memory (PyTorch's host allocator, a DataLoader's pin_memory), each allocation
// with its Python and C++ stack and the library that asked. It subscribes to CUPTI's callbacks
// for the allocation calls in this process (record/'s recorder, as `memsnap record` uses) while
// history is recorded; the allocator's own calls are made under CallsNotRecorded
// (UnrecordedBackend) and left out.
//
// CUPTI takes one subscriber per process: where another tool holds it (a profiler that started
// first, Nsight), nothing is recorded and the snapshots say why. When torch.profiler is about to
// trace the GPU, memsnap.torch gives CUPTI up to it (the profiler would otherwise trace no
// kernel) and the snapshots say so from then on. Turned off with history (or by
// MEMSNAP_OUTSIDE_MEMORY=0), it unsubscribes too.
#pragma once

#include <string>

#include "history/interpreter_frames.h"
#include "snapshot/snapshot.h"

namespace memsnap::pytorch {

// Starts recording (once started, again a no-op); "" when it records, else the one-line reason.
std::string start_outside_memory(InterpreterFrames* interpreter, size_t max_entries);
// Stops recording; with a reason, the snapshots say it (a profiler took CUPTI's callbacks),
// without one they say nothing more of memory outside the allocator (history was turned off).
void stop_outside_memory(const std::string& reason = "");
// Whether it records now, and why not when it does not ("" when it never started).
bool outside_memory_recording();
std::string outside_memory_unrecorded_reason();
// Sets snapshot.outside_memory: what was recorded, or why nothing was; left unset when
// recording never started.
void add_outside_memory(Snapshot& snapshot);
// Whether MEMSNAP_OUTSIDE_MEMORY lets history recording start it (unset or 1: yes; 0: no);
// another value is a one-line error.
bool outside_memory_wanted();

}  // namespace memsnap::pytorch
