// How frames read in views: `function (file:line)` with the file's base name, and which
// frames are left out by default: the capture machinery and interpreter internals that
// PyTorch's own viewer hides (unwind::unwind, CapturedTraceback::gather, PyEval_*, the
// dispatcher's Register*/boxing files, ...), so stacks start at code users wrote.
#pragma once

#include <string>
#include <vector>

#include "snapshot/snapshot.h"

namespace memsnap {

struct FrameFilter {
  bool keep_all = false;  // --all-frames
};

std::string frame_label(const Frame& frame);
bool frame_is_noise(const Frame& frame);

// The stack's frames as labels, outermost first (the order of a flamegraph path).
std::vector<uint32_t> visible_frames_outermost_first(const Snapshot& snapshot, StackIndex stack,
                                                      const FrameFilter& filter);

}  // namespace memsnap
