#include "snapshot/snapshot.h"

#include <array>

namespace memsnap {
namespace {

constexpr std::array<std::string_view, 3> kBlockStateNames = {
    "active_allocated", "active_pending_free", "inactive"};

}  // namespace

std::string_view block_state_name(BlockState state) {
  return kBlockStateNames[static_cast<size_t>(state)];
}

std::optional<BlockState> block_state_from_name(std::string_view name) {
  for (size_t i = 0; i < kBlockStateNames.size(); ++i)
    if (kBlockStateNames[i] == name) return static_cast<BlockState>(i);
  return std::nullopt;
}

}  // namespace memsnap
