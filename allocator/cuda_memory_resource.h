// memsnap's caching allocator as a CCCL memory resource (cuda::mr, CUDA 12.x/13's libcu++):
// code written against cuda::mr::resource_ref / async_resource_ref, CUB's and cuda::
// algorithms that take a memory resource, allocate through memsnap and are cached, counted,
// recorded with their stacks and in snapshots like the rest.
//
//   memsnap::CudaMemoryResource resource(allocator);
//   cuda::mr::async_resource_ref<cuda::mr::device_accessible> ref{resource};
//   void* p = ref.allocate_async(bytes, 256, cuda::stream_ref{stream});
//   ref.deallocate_async(p, bytes, 256, cuda::stream_ref{stream});
//
// cuda::mr is experimental in CCCL 3.0: this header turns it on
// (LIBCUDACXX_ENABLE_EXPERIMENTAL_MEMORY_RESOURCE) unless <cuda/memory_resource> was included
// without it first. Memory comes from the calling thread's current device; allocate() uses the
// legacy default stream, allocate_async() the stream given (where the block is reused once
// freed). Alignments up to 256 bytes are met (cudaMalloc's, and every block lies a multiple of
// 512 bytes into its segment); larger ones throw std::invalid_argument. Failures throw memsnap::OutOfMemoryError.
#pragma once

#ifndef LIBCUDACXX_ENABLE_EXPERIMENTAL_MEMORY_RESOURCE
#define LIBCUDACXX_ENABLE_EXPERIMENTAL_MEMORY_RESOURCE
#endif
#include <cuda/memory_resource>
#include <cuda/stream_ref>

#include <cstddef>
#include <stdexcept>
#include <string>

#include "allocator/caching_allocator.h"
#include "allocator/thrust_allocator.h"

namespace memsnap {

class CudaMemoryResource {
 public:
  static constexpr std::size_t kMaxAlignment = 256;

  explicit CudaMemoryResource(CachingAllocator& allocator) : allocator_(&allocator) {}

  void* allocate(std::size_t bytes, std::size_t alignment = alignof(std::max_align_t)) {
    return allocate_on(bytes, alignment, 0);
  }
  void deallocate(void* ptr, std::size_t, std::size_t = alignof(std::max_align_t)) { allocator_->deallocate(ptr); }
  void* allocate_async(std::size_t bytes, std::size_t alignment, ::cuda::stream_ref stream) {
    return allocate_on(bytes, alignment, reinterpret_cast<StreamId>(stream.get()));
  }
  // The block is reused on `stream` only after this, in stream order, as a caching allocator's
  // free is; freeing on another stream than it was allocated on is the caller's to order
  // (CachingAllocator::record_stream), as with PyTorch.
  void deallocate_async(void* ptr, std::size_t, std::size_t, ::cuda::stream_ref) { allocator_->deallocate(ptr); }

  bool operator==(const CudaMemoryResource& other) const { return allocator_ == other.allocator_; }
  bool operator!=(const CudaMemoryResource& other) const { return allocator_ != other.allocator_; }
  friend void get_property(const CudaMemoryResource&, ::cuda::mr::device_accessible) noexcept {}

  CachingAllocator& caching_allocator() const { return *allocator_; }

 private:
  void* allocate_on(std::size_t bytes, std::size_t alignment, StreamId stream) {
    if (alignment > kMaxAlignment || (alignment & (alignment - 1)) != 0)
      throw std::invalid_argument("memsnap::CudaMemoryResource: alignment " + std::to_string(alignment) +
                                  " (a power of two up to 256 is met)");
    return allocator_->allocate(bytes, current_cuda_device(), stream);
  }

  CachingAllocator* allocator_;
};

static_assert(::cuda::mr::resource_with<CudaMemoryResource, ::cuda::mr::device_accessible>);
static_assert(::cuda::mr::async_resource_with<CudaMemoryResource, ::cuda::mr::device_accessible>);

}  // namespace memsnap
