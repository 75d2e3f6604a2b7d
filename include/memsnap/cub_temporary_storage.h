/// @file
/// CUB's device-wide algorithms on memsnap: they are called twice, first to ask how much
/// temporary storage they need, then with it. run_with_cub_storage() makes both calls, the
/// storage in between coming from memsnap (cached, counted, recorded with the caller's stack, in
/// snapshots) on the stream the algorithm runs on.
///
/// @code
/// memsnap::run_with_cub_storage(allocator, stream, [&](void* storage, size_t& bytes) {
///   return cub::DeviceRadixSort::SortKeys(storage, bytes, keys_in, keys_out, n, 0, 32, stream);
/// });
/// @endcode
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <string>

#include "memsnap/allocator.h"
#include "memsnap/errors.h"
#include "memsnap/thrust_allocator.h"

namespace memsnap {

/// Calls `algorithm(nullptr, bytes)` for the storage it needs, then `algorithm(storage, bytes)`
/// with that storage from `allocator` on `stream` (the thread's current device). The storage goes
/// back to the cache once the algorithm is queued: the allocator reuses it on that stream only,
/// in stream order, so the algorithm's kernels finish with it first. A call that returns an error
/// throws Error with its `cudaError_t`'s text.
template <typename Algorithm>
void run_with_cub_storage(Allocator& allocator, cudaStream_t stream, Algorithm&& algorithm) {
  std::size_t bytes = 0;
  if (const cudaError_t error = algorithm(nullptr, bytes); error != cudaSuccess)
    throw Error(std::string("memsnap: CUB's storage query failed: ") + cudaGetErrorString(error));
  void* storage = bytes > 0 ? allocator.allocate(bytes, current_cuda_device(), reinterpret_cast<StreamId>(stream)) : nullptr;
  const cudaError_t error = algorithm(storage, bytes);
  allocator.deallocate(storage);
  if (error != cudaSuccess) throw Error(std::string("memsnap: CUB's algorithm failed: ") + cudaGetErrorString(error));
}

}  // namespace memsnap
