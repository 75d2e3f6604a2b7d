#include "viewer/call_sites.h"

#include "viewer/frame_labels.h"

namespace memsnap {

uint32_t CallSites::of(StackIndex stack) {
  if (const auto it = by_stack_.find(stack); it != by_stack_.end()) return it->second;
  std::string label = stack == kNoStackIndex ? std::string() : site_label(snapshot_, stack);
  const auto [it, made] = by_label_.try_emplace(std::move(label), static_cast<uint32_t>(labels_.size()));
  if (made) labels_.push_back(it->first);
  by_stack_.emplace(stack, it->second);
  return it->second;
}

}  // namespace memsnap
