// How frames read in views, so a stack starts at code its reader wrote.
//
// By default:
//  - the capture machinery, CPython's interpreter internals, and the frames that start the
//    process or a thread (C library, loader, C++ and autograd thread plumbing) are left out
//    (unwind::unwind, CapturedTraceback::gather, PyEval_*, _Py*, _start, __clone,
//    Engine::thread_main, unsymbolized libc.so.6+0x... or python3.12+0x... frames, ...);
//  - PyTorch's dispatcher and autograd plumbing (wrap_kernel_functor_unboxed_,
//    at::_ops::X::call/redispatch, boxing adaptors, VariableType, the generated Register*.cpp
//    wrappers, ...) folds into one frame per run, labelled with the operator it dispatched:
//    "empty_memory_format [dispatcher]";
//  - C++ functions read as their qualified name without parameters, template arguments,
//    clone suffixes or offsets ("at::detail::empty_cuda"; the full text stays in
//    Frame::function for hovers);
//  - labels are `function (file:line)` with the file's base name.
// With FrameFilter::keep_all (--all-frames, the web's toggle) every frame shows, unfolded and
// with its full signature.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "snapshot/snapshot.h"

namespace memsnap {

struct FrameFilter {
  bool keep_all = false;  // --all-frames
};

// The label of a frame: short names and dispatcher folding by default, everything with keep_all.
std::string frame_label(const Frame& frame, const FrameFilter& filter = {});
// "ns::Class::method" from a demangled C++ signature; other names come back unchanged.
std::string short_function_name(std::string_view function);

bool frame_is_noise(const Frame& frame);
bool frame_is_dispatcher(const Frame& frame);
bool frame_is_python(const Frame& frame);  // a Python source frame (a .py file)

// The stack's frames as shown, outermost first (the order of a flamegraph path): noise left
// out and each run of dispatcher frames folded into one (its outermost at::_ops frame when it
// has one), unless the filter keeps all.
std::vector<uint32_t> visible_frames_outermost_first(const Snapshot& snapshot, StackIndex stack,
                                                      const FrameFilter& filter);

// The frame a one-line view names for a stack: the innermost Python frame when the stack has
// one (the user's line), otherwise the innermost visible frame; none for an empty stack.
std::optional<uint32_t> headline_frame(const Snapshot& snapshot, StackIndex stack,
                                       const FrameFilter& filter);

// The headline frame's label, "backward of ..." when the stack is a backward allocation's
// joined to its forward call (the headline is then that call); "" for a stack with none.
std::string headline_label(const Snapshot& snapshot, StackIndex stack, const FrameFilter& filter = {});

// The call site views colour and name an allocation by: the headline label when the stack has
// a Python frame; for a C++ stack, its innermost visible frame and that frame's caller
// ("demo::Loop::allocate (model.cpp:7) <- demo::forward (model.cpp:30)"), since C++ programs
// allocate through helpers that every site shares. "" for a stack with no visible frame.
std::string site_label(const Snapshot& snapshot, StackIndex stack, const FrameFilter& filter = {});

// A call site in one line: the headline frame and the frame that called it, since sites often
// share their innermost frame (a helper that allocates for every caller); "backward of ..." when
// the headline is the forward call of a backward allocation. "<no stack recorded>" for
// kNoStackIndex.
std::string call_site_label(const Snapshot& snapshot, StackIndex stack);

}  // namespace memsnap
