/// @file
/// How memsnap's public API fails: every failure is a memsnap::Error, a `std::runtime_error`
/// whose `what()` is one line saying what went wrong and, for bad input, which key, variable or
/// path. Running out of memory is its subclass memsnap::OutOfMemoryError, which carries the
/// figures. A call that throws changes nothing the program can see, except where its
/// documentation says so.
#pragma once

#include <cstddef>
#include <optional>
#include <stdexcept>
#include <string>

#include "memsnap/types.h"

namespace memsnap {

/// Any failure of memsnap's public API: bad settings or environment variables, a pointer the
/// allocator does not own, a device that does not exist, a snapshot that could not be written.
class Error : public std::runtime_error {
 public:
  /// An error with a one-line message.
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

/// The figures of a request that could not be served, as PyTorch's out-of-memory message gives
/// them.
struct OutOfMemoryInfo {
  int device = 0;                ///< the device asked for
  std::size_t requested_bytes = 0;   ///< what the caller asked for
  std::size_t rounded_bytes = 0;     ///< after the allocator's rounding
  std::size_t allocation_bytes = 0;  ///< the segment size it tried to reserve
  StreamId stream = 0;           ///< the stream of the request
  std::size_t device_total_bytes = 0;  ///< the device's memory
  std::size_t device_free_bytes = 0;   ///< free on the device (all processes) at the failure
  std::size_t allocated_bytes = 0;  ///< held by the program through this allocator
  std::size_t reserved_bytes = 0;   ///< held by this allocator in segments
  /// Free cached bytes inside private pools (CUDA graphs, MemPool): reserved, not allocated, and
  /// out of reach of requests outside those pools (PyTorch's message counts them as "allocated in
  /// private pools").
  std::size_t private_pool_free_bytes = 0;
  MempoolId pool;  ///< the pool the request was routed to; (0, 0) for the global pools
  /// The cap Allocator::set_memory_fraction set on the device, when one is set.
  std::optional<std::size_t> allowed_bytes;
  /// Reserved bytes cached free outside the private pools.
  std::size_t unallocated_bytes() const {
    const std::size_t held = allocated_bytes + private_pool_free_bytes;
    return reserved_bytes > held ? reserved_bytes - held : 0;
  }
};

/// Thrown by Allocator::allocate when a request cannot be served after PyTorch's recovery
/// sequence (free the cached blocks, retry). Its message follows PyTorch's ("Tried to allocate
/// ... of which ... is free ..."); info() has the figures. Nothing the program holds is lost and
/// it may go on (a smaller batch); what the retry released from the cache stays released.
class OutOfMemoryError : public Error {
 public:
  /// The error for `info`, with PyTorch's message.
  explicit OutOfMemoryError(const OutOfMemoryInfo& info);
  /// The figures of the failed request.
  const OutOfMemoryInfo& info() const { return info_; }

 private:
  OutOfMemoryInfo info_;
};

}  // namespace memsnap
