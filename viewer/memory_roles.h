// What memory is for, inferred from the stack that allocated it, as torch.profiler's memory
// timeline showed (from a snapshot alone): parameters (moved or initialized by a module),
// optimizer state (allocated inside torch.optim), backward (gradients and autograd's
// temporaries), activations (allocated in a module's forward), and everything else.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>
#include <vector>

#include "snapshot/snapshot.h"

namespace memsnap {

enum class MemoryRole : uint8_t { kParameters, kOptimizerState, kBackward, kActivations, kOther };
inline constexpr size_t kMemoryRoles = 5;
std::string_view memory_role_name(MemoryRole role);  // "parameters", "optimizer state", ...

// The role of each stack of a snapshot (kOther for stacks that say nothing).
class MemoryRoles {
 public:
  explicit MemoryRoles(const Snapshot& snapshot);
  MemoryRole of(StackIndex stack) const {
    if (stack >= 0 && static_cast<size_t>(stack) < roles_.size() && !empty_[static_cast<size_t>(stack)])
      return roles_[static_cast<size_t>(stack)];
    return no_frames_;
  }

 private:
  std::vector<MemoryRole> roles_;
  std::vector<bool> empty_;
  // PyTorch records Python frames only on threads that run Python: in a snapshot whose other
  // stacks have them, an allocation with none was made by autograd's backward threads.
  MemoryRole no_frames_ = MemoryRole::kOther;
};

using RoleBytes = std::array<uint64_t, kMemoryRoles>;

}  // namespace memsnap
