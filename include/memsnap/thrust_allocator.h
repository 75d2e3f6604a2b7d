/// @file
/// Thrust on memsnap: an allocator for Thrust's containers and for the temporary storage of its
/// algorithms, so their device memory is cached, counted, recorded (with the stacks of the code
/// that asked for it) and in snapshots like the rest.
///
/// @code
/// memsnap::ThrustAllocator<float> on_memsnap(allocator, reinterpret_cast<memsnap::StreamId>(stream));
/// thrust::device_vector<float, memsnap::ThrustAllocator<float>> v(n, on_memsnap);
/// thrust::sort(thrust::cuda::par(memsnap::ThrustAllocator<char>(on_memsnap)).on(stream), v.begin(), v.end());
/// @endcode
///
/// Memory is taken on the calling thread's current device (`cudaGetDevice`, as PyTorch does) and
/// on the stream given (0: the legacy default stream), where it is reused once freed; give the
/// stream the algorithm runs on. Failures throw memsnap::OutOfMemoryError or memsnap::Error. For
/// CUDA C++ compiled by nvcc; needs the CUDA toolkit's Thrust (CCCL).
#pragma once

#include <cuda_runtime_api.h>
#include <thrust/device_ptr.h>
#include <thrust/device_reference.h>

#include <cstddef>
#include <limits>
#include <string>

#include "memsnap/allocator.h"
#include "memsnap/errors.h"

#if defined(__CUDACC__)
#define MEMSNAP_HOST_DEVICE __host__ __device__
#else
#define MEMSNAP_HOST_DEVICE
#endif

namespace memsnap {

/// The device a caller's CUDA work goes to: the thread's current device. Throws Error when
/// `cudaGetDevice` fails.
inline int current_cuda_device() {
  int device = 0;
  if (const cudaError_t error = cudaGetDevice(&device); error != cudaSuccess)
    throw Error(std::string("memsnap: cudaGetDevice: ") + cudaGetErrorString(error));
  return device;
}

/// A Thrust allocator of `T` on an Allocator and a stream.
template <typename T>
class ThrustAllocator {
 public:
  using value_type = T;                                           ///< Thrust's allocator type
  using pointer = thrust::device_ptr<T>;                          ///< Thrust's allocator type
  using const_pointer = thrust::device_ptr<const T>;              ///< Thrust's allocator type
  using reference = thrust::device_reference<T>;                  ///< Thrust's allocator type
  using const_reference = thrust::device_reference<const T>;      ///< Thrust's allocator type
  using size_type = std::size_t;                                  ///< Thrust's allocator type
  using difference_type = std::ptrdiff_t;                         ///< Thrust's allocator type
  /// The same allocator for another type.
  template <typename U>
  struct rebind {
    using other = ThrustAllocator<U>;  ///< the allocator of `U`
  };

  /// Allocates from `allocator` for work on `stream`.
  MEMSNAP_HOST_DEVICE explicit ThrustAllocator(Allocator& allocator, StreamId stream = 0)
      : allocator_(&allocator), stream_(stream) {}
  /// The same allocator and stream for another type.
  template <typename U>
  MEMSNAP_HOST_DEVICE ThrustAllocator(const ThrustAllocator<U>& other)  // NOLINT: rebinding is implicit
      : allocator_(other.allocator()), stream_(other.stream()) {}

  /// Memory for `count` values of `T`.
  pointer allocate(size_type count) {
    if (count > max_size()) throw Error("memsnap::ThrustAllocator: " + std::to_string(count) + " elements are too many");
    return pointer(static_cast<T*>(allocator_->allocate(count * sizeof(T), current_cuda_device(), stream_)));
  }
  /// Gives memory from allocate() back to the cache.
  void deallocate(pointer p, size_type) noexcept(false) { allocator_->deallocate(thrust::raw_pointer_cast(p)); }
  /// The most values one allocation may hold.
  MEMSNAP_HOST_DEVICE size_type max_size() const { return static_cast<size_type>(-1) / sizeof(T); }

  /// The Allocator it takes memory from.
  MEMSNAP_HOST_DEVICE Allocator* allocator() const { return allocator_; }
  /// The stream its memory is for.
  MEMSNAP_HOST_DEVICE StreamId stream() const { return stream_; }

  /// Equal when they take memory from the same Allocator for the same stream.
  template <typename U>
  MEMSNAP_HOST_DEVICE bool operator==(const ThrustAllocator<U>& other) const {
    return allocator_ == other.allocator() && stream_ == other.stream();
  }
  /// Not operator==.
  template <typename U>
  MEMSNAP_HOST_DEVICE bool operator!=(const ThrustAllocator<U>& other) const {
    return !(*this == other);
  }

 private:
  Allocator* allocator_;
  StreamId stream_;
};

}  // namespace memsnap
