// What memsnap::Allocator (include/memsnap/allocator.h) and a memsnap::Recording share: the
// caching allocator and whether a Recording watches it (the allocator takes one observer).
#pragma once

#include <atomic>
#include <exception>
#include <stdexcept>
#include <utility>

#include "allocator/caching_allocator.h"
#include "memsnap/allocator.h"
#include "memsnap/errors.h"

namespace memsnap {

struct Allocator::Shared {
  template <typename... Args>
  explicit Shared(Args&&... args) : allocator(std::forward<Args>(args)...) {}
  CachingAllocator allocator;
  std::atomic<bool> recorded{false};
};

// Runs `fn`, turning the internal layers' argument errors into the public API's memsnap::Error
// and a failed device call into memsnap::Error (its subclass OutOfMemoryError and memsnap::Error
// itself pass through).
template <typename Fn>
decltype(auto) as_public_error(Fn&& fn) {
  try {
    return std::forward<Fn>(fn)();
  } catch (const Error&) {
    throw;
  } catch (const std::logic_error& error) {  // invalid_argument, out_of_range, length_error
    throw Error(error.what());
  } catch (const DeviceError& error) {  // a CUDA call failed other than for memory
    throw Error(error.what());
  }
}

}  // namespace memsnap
