// CUB's device-wide algorithms on memsnap's caching allocator: they are called twice, first to
// ask how much temporary storage they need, then with it. run_with_cub_storage makes both
// calls, the storage in between coming from memsnap (cached, counted, recorded with the
// caller's stack, in snapshots) on the stream the algorithm runs on:
//
//   memsnap::run_with_cub_storage(allocator, stream, [&](void* storage, size_t& bytes) {
//     return cub::DeviceRadixSort::SortKeys(storage, bytes, keys_in, keys_out, n, 0, 32, stream);
//   });
//
// The storage goes back to the cache when the algorithm has been queued: the caching
// allocator reuses it on that stream only, in stream order, so the algorithm's kernels finish
// with it first. A failed call's cudaError_t is thrown as std::runtime_error.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <stdexcept>
#include <string>

#include "allocator/caching_allocator.h"
#include "allocator/thrust_allocator.h"

namespace memsnap {

template <typename Algorithm>
void run_with_cub_storage(CachingAllocator& allocator, cudaStream_t stream, Algorithm&& algorithm) {
  std::size_t bytes = 0;
  if (const cudaError_t error = algorithm(nullptr, bytes); error != cudaSuccess)
    throw std::runtime_error(std::string("memsnap: CUB's storage query failed: ") + cudaGetErrorString(error));
  void* storage = bytes > 0 ? allocator.allocate(bytes, current_cuda_device(), reinterpret_cast<StreamId>(stream)) : nullptr;
  const cudaError_t error = algorithm(storage, bytes);
  allocator.deallocate(storage);
  if (error != cudaSuccess) throw std::runtime_error(std::string("memsnap: CUB's algorithm failed: ") + cudaGetErrorString(error));
}

}  // namespace memsnap
