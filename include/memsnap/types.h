/// @file
/// The plain types that name things across memsnap's public API: streams and memory pools.
#pragma once

#include <compare>
#include <cstdint>

namespace memsnap {

/// A CUDA stream, as a number: `reinterpret_cast<memsnap::StreamId>(cudaStream_t)`, and 0 for the
/// legacy default stream. A freed block is reused only on the stream it was allocated on (until
/// Allocator::record_stream says another stream used it), as in PyTorch.
using StreamId = std::uint64_t;

/// A private memory pool's id, as PyTorch's `MempoolId_t`: `first` is a CUDA graph capture's own
/// pool, `second` a pool the program made; (0, 0) names the allocator's global pools.
struct MempoolId {
  std::uint64_t first = 0;   ///< a CUDA graph capture's pool
  std::uint64_t second = 0;  ///< a pool the program made
  /// Whether this names the global pools rather than a private one.
  bool is_global() const { return first == 0 && second == 0; }
  /// Pools order by (first, second).
  friend auto operator<=>(const MempoolId&, const MempoolId&) = default;
};

}  // namespace memsnap
