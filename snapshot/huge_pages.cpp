#include "snapshot/huge_pages.h"

#include <sys/mman.h>

#include <cstdlib>

namespace memsnap {

void* allocate_huge_capable(size_t bytes) {
  if (bytes < kHugePageMinBytes) {
    if (void* data = std::malloc(bytes == 0 ? 1 : bytes)) return data;
    throw std::bad_alloc();
  }
  const size_t whole = (bytes + kHugePageMinBytes - 1) / kHugePageMinBytes * kHugePageMinBytes;
  if (whole < bytes) throw std::bad_alloc();
  void* data = std::aligned_alloc(kHugePageMinBytes, whole);
  if (data == nullptr) throw std::bad_alloc();
#ifdef MADV_HUGEPAGE
  ::madvise(data, whole, MADV_HUGEPAGE);
#endif
  return data;
}

void release_huge_capable(void* data) noexcept { std::free(data); }

}  // namespace memsnap
