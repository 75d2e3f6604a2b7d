// Python frames for the allocations of autograd's backward pass.
//
// Autograd runs each node's backward on a thread of its own, where no Python code runs: an
// allocation there has no Python frames. PyTorch shows the forward call's stack there
// ("forward_frames") only when the forward pass ran under anomaly mode, which formats a
// traceback for every autograd node it creates. memsnap links the two passes without it.
// Each thread numbers the autograd nodes it creates (at::sequence_number), so an allocation
// made in the forward pass knows the node created just before it; the first allocation after
// a node's creation is that operation's own output (unless the operation allocates nothing,
// when it is the next one's), and its Python frames are kept for the node. When the backward
// thread allocates while it runs a node (torch::autograd::get_current_node()), its stack gets
// the joining frame (snapshot.h's kBackwardOfForwardFunction) followed by those frames.
#pragma once

#include <memory>

#include "history/interpreter_frames.h"
#include "python/native/python_frames.h"

namespace memsnap::pytorch {

class AutogradFrames final : public InterpreterFrames {
 public:
  explicit AutogradFrames(python::PythonFrames& python);
  ~AutogradFrames() override;
  AutogradFrames(const AutogradFrames&) = delete;
  AutogradFrames& operator=(const AutogradFrames&) = delete;

  size_t capture(uintptr_t* tokens, size_t max) override;
  SourceFrame resolve(uintptr_t token) override;
  bool is_evaluation_loop(std::string_view function) const override;
  StopCode evaluation_loop_code() const override;

 private:
  struct Links;
  void remember(const uintptr_t* tokens, size_t count);
  size_t recall(uint64_t thread, uint64_t node, uintptr_t* tokens, size_t max);

  python::PythonFrames& python_;
  std::unique_ptr<Links> links_;
};

// The process's source, never destroyed (allocations are freed during interpreter shutdown).
AutogradFrames& process_autograd_frames();

}  // namespace memsnap::pytorch
