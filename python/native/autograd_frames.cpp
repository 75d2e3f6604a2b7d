#include "python/native/autograd_frames.h"

#include <ATen/SequenceNumber.h>
#include <ATen/record_function.h>
#include <torch/csrc/autograd/function.h>

#include <mutex>
#include <string>
#include <vector>

#include "history/stack_table.h"
#include "snapshot/snapshot.h"

namespace memsnap::pytorch {
namespace {

// The token of the joining frame: a frame token no code object's can equal (PythonFrames'
// code ids stop far below its payload).
constexpr uintptr_t kBackwardToken = kInterpreterTokenBit | kInterpreterFrameBit | kInterpreterPayloadMask;
// Nodes remembered at once (the newest win a slot): a forward pass of this many operations
// still finds every node's frames in its backward pass. 24 bytes each.
constexpr size_t kSlots = size_t{1} << 18;
// Tokens of the distinct forward stacks kept (8 bytes each); past this, new nodes are not linked.
constexpr size_t kMaxStackTokens = size_t{1} << 22;

struct Slot {
  uint64_t thread = 0;
  uint64_t node = ~uint64_t{0};
  StackId stack = kNoStack;
};

size_t slot_of(uint64_t thread, uint64_t node) {
  return static_cast<size_t>((node + thread * 0x9E3779B97F4A7C15ull) & (kSlots - 1));
}

}  // namespace

struct AutogradFrames::Links {
  std::mutex mutex;
  std::vector<Slot> slots;  // sized at the first forward allocation
  StackTable stacks{kMaxStackTokens};
};

AutogradFrames::AutogradFrames(python::PythonFrames& python)
    : python_(python), links_(std::make_unique<Links>()) {}
AutogradFrames::~AutogradFrames() = default;

size_t AutogradFrames::capture(uintptr_t* tokens, size_t max) {
  const size_t count = python_.capture(tokens, max);
  if (count > 0) {
    remember(tokens, count);
    return count;
  }
  if (max < 2) return 0;
  const auto node = torch::autograd::get_current_node();
  if (!node) return 0;
  return recall(node->thread_id(), node->sequence_nr(), tokens, max);
}

void AutogradFrames::remember(const uintptr_t* tokens, size_t count) {
  const uint64_t next = at::sequence_number::peek();
  if (next == 0) return;  // this thread has created no node yet
  const uint64_t node = next - 1;
  const uint64_t thread = at::RecordFunction::currentThreadId();
  Links& links = *links_;
  std::lock_guard<std::mutex> lock(links.mutex);
  if (links.slots.empty()) links.slots.resize(kSlots);
  Slot& slot = links.slots[slot_of(thread, node)];
  if (slot.node == node && slot.thread == thread) return;  // the node's first allocation won
  const StackId id = links.stacks.intern(tokens, count);
  if (id != kNoStack) slot = {thread, node, id};
}

size_t AutogradFrames::recall(uint64_t thread, uint64_t node, uintptr_t* tokens, size_t max) {
  Links& links = *links_;
  std::lock_guard<std::mutex> lock(links.mutex);
  if (links.slots.empty()) return 0;
  const Slot& slot = links.slots[slot_of(thread, node)];
  if (slot.node != node || slot.thread != thread || slot.stack == kNoStack) return 0;
  tokens[0] = kBackwardToken;
  return links.stacks.copy_frames(slot.stack, tokens + 1, max - 1) + 1;
}

SourceFrame AutogradFrames::resolve(uintptr_t token) {
  if (token == kBackwardToken) return {std::string(kBackwardOfForwardFunction), "", 0};
  return python_.resolve(token);
}

bool AutogradFrames::is_evaluation_loop(std::string_view function) const {
  return python_.is_evaluation_loop(function);
}

StopCode AutogradFrames::evaluation_loop_code() const { return python_.evaluation_loop_code(); }

AutogradFrames& process_autograd_frames() {
  static AutogradFrames* frames = new AutogradFrames(python::process_python_frames());
  return *frames;
}

}  // namespace memsnap::pytorch
