#include "viewer/memory_roles.h"

#include <array>
#include <string>

namespace memsnap {
namespace {

bool mentions(std::string_view text, std::string_view part) { return text.find(part) != std::string_view::npos; }

// Checked in this order for each stack: the first role any frame of the stack shows wins, so
// an optimizer's step that calls a module is still optimizer state, a backward pass that runs
// a module's hooks still backward.
MemoryRole classify(const Snapshot& snapshot, const std::vector<uint32_t>& frames) {
  bool parameters = false, backward = false, forward = false;
  for (uint32_t index : frames) {
    const Frame& f = snapshot.frames[index];
    const std::string_view file = f.file, name = f.function;
    if (mentions(file, "torch/optim/") || mentions(name, "torch::optim::")) return MemoryRole::kOptimizerState;
    if ((mentions(file, "torch/nn/modules/module.py") && (name == "_apply" || name == "cuda" || name == "to")) ||
        mentions(file, "torch/nn/init.py") || name == "reset_parameters" || name == "load_state_dict" ||
        mentions(file, "torch/nn/parameter.py"))
      parameters = true;
    if (mentions(file, "torch/autograd/") || (mentions(file, "torch/_tensor.py") && name == "backward") ||
        mentions(name, "torch::autograd::Engine") || mentions(name, "AccumulateGrad") ||
        mentions(name, "torch::autograd::generated::") || mentions(name, "autograd::CopyBackwards"))
      backward = true;
    if (name == "forward" || (mentions(file, "torch/nn/modules/module.py") && name == "_call_impl")) forward = true;
  }
  if (backward) return MemoryRole::kBackward;
  if (parameters) return MemoryRole::kParameters;
  if (forward) return MemoryRole::kActivations;
  return MemoryRole::kOther;
}

}  // namespace

std::string_view memory_role_name(MemoryRole role) {
  static constexpr std::array<std::string_view, kMemoryRoles> kNames = {"parameters", "optimizer state", "backward",
                                                                       "activations", "other"};
  return kNames[static_cast<size_t>(role)];
}

MemoryRoles::MemoryRoles(const Snapshot& snapshot) {
  roles_.reserve(snapshot.stacks.size());
  bool python_frames = false;
  for (const std::vector<uint32_t>& frames : snapshot.stacks) {
    roles_.push_back(classify(snapshot, frames));
    empty_.push_back(frames.empty());
    for (uint32_t f : frames) {
      const std::string& file = snapshot.frames[f].file;
      python_frames = python_frames || (file.size() > 3 && file.compare(file.size() - 3, 3, ".py") == 0);
    }
  }
  if (snapshot.source == "pytorch" && python_frames) no_frames_ = MemoryRole::kBackward;
}

}  // namespace memsnap
