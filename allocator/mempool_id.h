// The name of a memory pool, as PyTorch names it (MempoolId_t): (n, 0) for a CUDA graph's own
// pool, (0, n) for a pool the user made (torch.cuda.MemPool, graph_pool_handle), (0, 0) for the
// global pools every other request uses.
#pragma once

#include <cstdint>
#include <string>

#include "memsnap/types.h"

namespace memsnap {

// MempoolId itself is public (memsnap/types.h).

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
