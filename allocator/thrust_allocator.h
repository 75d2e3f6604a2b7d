// Thrust on memsnap's caching allocator: an allocator for Thrust's containers and for the
// temporary storage of its algorithms, so their device memory is cached, counted, recorded
// (with the stacks of the code that asked for it) and in snapshots like the rest.
//
//   memsnap::ThrustAllocator<float> on_memsnap(allocator, stream);
//   thrust::device_vector<float, memsnap::ThrustAllocator<float>> v(n, on_memsnap);
//   thrust::sort(thrust::cuda::par(memsnap::ThrustAllocator<char>(allocator, stream)).on(stream),
//                v.begin(), v.end());
//
// Memory is taken on the calling thread's current device (cudaGetDevice, as PyTorch does) and
// on the stream given (0: the legacy default stream), where it is reused once freed; give the
// stream the algorithm runs on. Allocation failures throw memsnap::OutOfMemoryError, as
// CachingAllocator::allocate does. For CUDA C++ compiled by nvcc; needs the CUDA toolkit's
// Thrust (CCCL).
#pragma once

#include <cuda_runtime_api.h>
#include <thrust/device_ptr.h>
#include <thrust/device_reference.h>

#include <cstddef>
#include <limits>
#include <stdexcept>
#include <string>

#include "allocator/caching_allocator.h"

#if defined(__CUDACC__)
#define MEMSNAP_HOST_DEVICE __host__ __device__
#else
#define MEMSNAP_HOST_DEVICE
#endif

namespace memsnap {

// The device a caller's CUDA work goes to (the thread's current device).
inline int current_cuda_device() {
  int device = 0;
  if (const cudaError_t error = cudaGetDevice(&device); error != cudaSuccess)
    throw std::runtime_error(std::string("memsnap: cudaGetDevice: ") + cudaGetErrorString(error));
  return device;
}

template <typename T>
class ThrustAllocator {
 public:
  using value_type = T;
  using pointer = thrust::device_ptr<T>;
  using const_pointer = thrust::device_ptr<const T>;
  using reference = thrust::device_reference<T>;
  using const_reference = thrust::device_reference<const T>;
  using size_type = std::size_t;
  using difference_type = std::ptrdiff_t;
  template <typename U>
  struct rebind {
    using other = ThrustAllocator<U>;
  };

  MEMSNAP_HOST_DEVICE explicit ThrustAllocator(CachingAllocator& allocator, StreamId stream = 0)
      : allocator_(&allocator), stream_(stream) {}
  template <typename U>
  MEMSNAP_HOST_DEVICE ThrustAllocator(const ThrustAllocator<U>& other)  // NOLINT: rebinding is implicit
      : allocator_(other.caching_allocator()), stream_(other.stream()) {}

  pointer allocate(size_type count) {
    if (count > max_size()) throw std::length_error("memsnap::ThrustAllocator: too many elements");
    return pointer(static_cast<T*>(allocator_->allocate(count * sizeof(T), current_cuda_device(), stream_)));
  }
  void deallocate(pointer p, size_type) noexcept(false) { allocator_->deallocate(thrust::raw_pointer_cast(p)); }
  MEMSNAP_HOST_DEVICE size_type max_size() const { return static_cast<size_type>(-1) / sizeof(T); }

  MEMSNAP_HOST_DEVICE CachingAllocator* caching_allocator() const { return allocator_; }
  MEMSNAP_HOST_DEVICE StreamId stream() const { return stream_; }

  template <typename U>
  MEMSNAP_HOST_DEVICE bool operator==(const ThrustAllocator<U>& other) const {
    return allocator_ == other.caching_allocator() && stream_ == other.stream();
  }
  template <typename U>
  MEMSNAP_HOST_DEVICE bool operator!=(const ThrustAllocator<U>& other) const {
    return !(*this == other);
  }

 private:
  CachingAllocator* allocator_;
  StreamId stream_;
};

}  // namespace memsnap
