// The name of a memory pool, as PyTorch names it (MempoolId_t): (n, 0) for a CUDA graph's own
// pool, (0, n) for a pool the user made (torch.cuda.MemPool, graph_pool_handle), (0, 0) for the
// global pools every other request uses.
#pragma once

#include <compare>
#include <cstdint>
#include <string>

namespace memsnap {

struct MempoolId {
  uint64_t first = 0;   // a graph's own pool: the capture's id
  uint64_t second = 0;  // a pool the user made
  bool is_global() const { return first == 0 && second == 0; }
  friend auto operator<=>(const MempoolId&, const MempoolId&) = default;
};

// "(1,0)": how PyTorch prints a MempoolId_t.
inline std::string to_string(const MempoolId& id) {
  return "(" + std::to_string(id.first) + "," + std::to_string(id.second) + ")";
}

// For people: "global", "CUDA graph pool 1" (a graph's own pool), "MemPool (0,1)" (a pool the
// user made: torch.cuda.MemPool, or graph_pool_handle() shared by graphs).
inline std::string pool_display_name(const MempoolId& id) {
  if (id.is_global()) return "global";
  if (id.second == 0) return "CUDA graph pool " + std::to_string(id.first);
  return "MemPool " + to_string(id);
}

}  // namespace memsnap
