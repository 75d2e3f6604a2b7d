/// @file
/// memsnap as a CCCL memory resource (`cuda::mr`, CUDA 12.x/13's libcu++): code written against
/// `cuda::mr::resource_ref` / `async_resource_ref`, and CUB's and `cuda::` algorithms that take a
/// memory resource, allocate through memsnap and are cached, counted, recorded with their stacks
/// and in snapshots like the rest. RAPIDS RMM 24.04 and later take such a resource as their
/// `rmm::device_async_resource_ref`.
///
/// @code
/// memsnap::CudaMemoryResource resource(allocator);
/// cuda::mr::async_resource_ref<cuda::mr::device_accessible> ref{resource};
/// void* p = ref.allocate_async(bytes, 256, cuda::stream_ref{stream});
/// ref.deallocate_async(p, bytes, 256, cuda::stream_ref{stream});
/// @endcode
///
/// `cuda::mr` is experimental in CCCL 3.0: this header turns it on
/// (`LIBCUDACXX_ENABLE_EXPERIMENTAL_MEMORY_RESOURCE`) unless `<cuda/memory_resource>` was included
/// without it first.
#pragma once

#ifndef LIBCUDACXX_ENABLE_EXPERIMENTAL_MEMORY_RESOURCE
#define LIBCUDACXX_ENABLE_EXPERIMENTAL_MEMORY_RESOURCE
#endif
#include <cuda/memory_resource>
#include <cuda/stream_ref>

#include <cstddef>
#include <string>

#include "memsnap/allocator.h"
#include "memsnap/errors.h"
#include "memsnap/thrust_allocator.h"

namespace memsnap {

/// An Allocator as a `cuda::mr` resource, device-accessible, synchronous and stream-ordered.
///
/// Memory comes from the calling thread's current device; allocate() uses the legacy default
/// stream, allocate_async() the stream given (where the block is reused once freed). Alignments
/// up to 256 bytes are met (`cudaMalloc`'s: every block lies a multiple of 512 bytes into its
/// segment); a larger one or one that is not a power of two throws Error. Running out of memory
/// throws OutOfMemoryError.
class CudaMemoryResource {
 public:
  static constexpr std::size_t kMaxAlignment = 256;  ///< the largest alignment met

  /// A resource taking memory from `allocator`.
  explicit CudaMemoryResource(Allocator& allocator) : allocator_(&allocator) {}

  /// `bytes` on the legacy default stream.
  void* allocate(std::size_t bytes, std::size_t alignment = alignof(std::max_align_t)) {
    return allocate_on(bytes, alignment, 0);
  }
  /// Gives memory from allocate() back to the cache.
  void deallocate(void* ptr, std::size_t, std::size_t = alignof(std::max_align_t)) { allocator_->deallocate(ptr); }
  /// `bytes` for work on `stream`.
  void* allocate_async(std::size_t bytes, std::size_t alignment, ::cuda::stream_ref stream) {
    return allocate_on(bytes, alignment, reinterpret_cast<StreamId>(stream.get()));
  }
  /// Gives memory from allocate_async() back to the cache: it is reused on its stream only after
  /// this, in stream order, as a caching allocator's free is. Freeing on another stream than it
  /// was allocated on is the caller's to order (Allocator::record_stream), as with PyTorch.
  void deallocate_async(void* ptr, std::size_t, std::size_t, ::cuda::stream_ref) { allocator_->deallocate(ptr); }

  /// Equal when they take memory from the same Allocator.
  bool operator==(const CudaMemoryResource& other) const { return allocator_ == other.allocator_; }
  /// Not operator==.
  bool operator!=(const CudaMemoryResource& other) const { return allocator_ != other.allocator_; }
  /// Its memory is device-accessible.
  friend void get_property(const CudaMemoryResource&, ::cuda::mr::device_accessible) noexcept {}

  /// The Allocator it takes memory from.
  Allocator& allocator() const { return *allocator_; }

 private:
  void* allocate_on(std::size_t bytes, std::size_t alignment, StreamId stream) {
    if (alignment > kMaxAlignment || (alignment & (alignment - 1)) != 0)
      throw Error("memsnap::CudaMemoryResource: alignment " + std::to_string(alignment) +
                  " (a power of two up to 256 is met)");
    return allocator_->allocate(bytes, current_cuda_device(), stream);
  }

  Allocator* allocator_;
};

static_assert(::cuda::mr::resource_with<CudaMemoryResource, ::cuda::mr::device_accessible>);
static_assert(::cuda::mr::async_resource_with<CudaMemoryResource, ::cuda::mr::device_accessible>);

}  // namespace memsnap
