#include "viewer/call_sites.h"

#include "viewer/frame_labels.h"

namespace memsnap {

uint32_t CallSites::of(StackIndex stack) {
  // A stack index outside the table (a damaged file) is a stack of no frames, as for the labels.
  const size_t slot = stack < 0 || static_cast<size_t>(stack) >= snapshot_.stacks.size() ? 0 : static_cast<size_t>(stack) + 1;
  if (by_stack_.empty()) by_stack_.assign(snapshot_.stacks.size() + 1, kUnknown);
  if (by_stack_[slot] != kUnknown) return by_stack_[slot];
  std::string label = slot == 0 ? std::string() : site_label(snapshot_, stack);
  const auto [it, made] = by_label_.try_emplace(std::move(label), static_cast<uint32_t>(labels_.size()));
  if (made) labels_.push_back(it->first);
  return by_stack_[slot] = it->second;
}

}  // namespace memsnap
