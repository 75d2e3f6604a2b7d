// Large buffers backed by transparent huge pages. A 300,000-event snapshot touches tens of
// megabytes once; with 4 KiB pages each page costs a fault (about 2 µs on a virtual machine,
// where the fault is most of the cost of touching fresh memory), with 2 MiB pages that cost
// all but disappears. Harmless where THP is off or unsupported.
#pragma once

#include <cstddef>
#include <new>

namespace memsnap {

// Storage of at least kHugePageMinBytes is 2 MiB-aligned, whole 2 MiB pages, marked for huge
// pages before anything touches it; smaller storage is plain. Either is given back with
// release_huge_capable.
inline constexpr size_t kHugePageMinBytes = size_t{2} << 20;
void* allocate_huge_capable(size_t bytes);
void release_huge_capable(void* data) noexcept;

// An allocator for containers that may grow large (a pickle's memo, its longest list, the
// rows of a trace): equal to std::allocator below kHugePageMinBytes.
template <typename T>
struct HugePageAllocator {
  using value_type = T;
  HugePageAllocator() = default;
  template <typename U>
  HugePageAllocator(const HugePageAllocator<U>&) noexcept {}
  T* allocate(size_t n) {
    if (n > static_cast<size_t>(-1) / sizeof(T)) throw std::bad_array_new_length();
    return static_cast<T*>(allocate_huge_capable(n * sizeof(T)));
  }
  void deallocate(T* data, size_t) noexcept { release_huge_capable(data); }
  template <typename U>
  bool operator==(const HugePageAllocator<U>&) const noexcept { return true; }
};

}  // namespace memsnap
