/// @file
/// memsnap::Allocator: PyTorch's CUDA caching allocator for any C++ or CUDA program, making
/// exactly PyTorch's decisions (rounding, block splitting, segment sizes, the settings of
/// `PYTORCH_CUDA_ALLOC_CONF`), with PyTorch's statistics and out-of-memory message.
///
/// @code
/// memsnap::Allocator allocator;                         // CUDA where a GPU is usable
/// void* p = allocator.allocate(4 << 20, /*device=*/0, reinterpret_cast<memsnap::StreamId>(stream));
/// allocator.deallocate(p);
/// for (auto& [key, value] : allocator.memory_stats(0)) ...  // torch.cuda.memory_stats()'s keys
/// @endcode
///
/// Every call is thread-safe. Every failure is a memsnap::Error (memsnap/errors.h); running out
/// of memory is a memsnap::OutOfMemoryError.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "memsnap/errors.h"
#include "memsnap/types.h"

namespace memsnap {

/// Where an Allocator's memory comes from.
enum class Backend {
  /// `MEMSNAP_BACKEND` (`cuda` or `simulated`) when set; else a GPU where memsnap was built with
  /// CUDA and one is usable; else the simulated device.
  kDefault,
  /// The GPUs, through the CUDA runtime (`cudaMalloc`; the driver's virtual memory calls for
  /// `expandable_segments`).
  kCuda,
  /// A simulated device with no memory behind its addresses: for tests, replays and machines
  /// without a GPU. Never dereference what it hands out.
  kSimulated,
};

/// How to make an Allocator.
struct AllocatorOptions {
  /// Where memory comes from.
  Backend backend = Backend::kDefault;
  /// Settings in the grammar of PyTorch's `PYTORCH_CUDA_ALLOC_CONF`, e.g.
  /// `"max_split_size_mb:128,expandable_segments:True"`. When unset they are read from
  /// `MEMSNAP_ALLOC_CONF`, then `PYTORCH_ALLOC_CONF`, then `PYTORCH_CUDA_ALLOC_CONF`, and caching
  /// is off when `MEMSNAP_NO_CACHING` or `PYTORCH_NO_CUDA_MEMORY_CACHING` is 1.
  std::optional<std::string> settings;
  /// The simulated backend's number of devices.
  int simulated_devices = 1;
  /// The simulated backend's memory per device (80 GiB, as an 80 GB H100, unless set).
  std::size_t simulated_capacity_bytes = std::size_t{80} << 30;
};

/// A caching allocator over every device of its backend.
///
/// Memory is cached as PyTorch caches it: a freed block stays reserved for the next request on
/// its stream until empty_cache() or an out-of-memory retry gives it back. Destroying the
/// Allocator gives back all cached memory (once no Recording uses it any longer); blocks still
/// allocated then are given back with it.
class Allocator {
 public:
  /// Makes the allocator. Throws Error for settings or environment variables memsnap cannot
  /// honour (the message names the key or variable), or a backend that is not available.
  explicit Allocator(AllocatorOptions options = {});
  ~Allocator();
  Allocator(Allocator&&) noexcept;             ///< Moves the allocator; the source is empty.
  Allocator& operator=(Allocator&&) noexcept;  ///< Moves the allocator; the source is empty.
  Allocator(const Allocator&) = delete;
  Allocator& operator=(const Allocator&) = delete;

  /// Returns `bytes` of memory on `device`, for use on `stream`; nullptr for 0 bytes. Throws
  /// OutOfMemoryError when the device cannot serve it after the cache is emptied, and Error for a
  /// device that does not exist.
  void* allocate(std::size_t bytes, int device = 0, StreamId stream = 0);
  /// Frees a pointer from allocate(); nullptr is ignored. The block is cached for reuse on its
  /// stream (after the streams record_stream() named are done with it). Throws Error for a pointer
  /// this allocator does not own, including a second free of one pointer.
  void deallocate(void* ptr);
  /// Says that `stream` also uses the memory at `ptr`: once freed, it is not reused until the
  /// work queued on `stream` by then is done (PyTorch's `record_stream`).
  void record_stream(void* ptr, StreamId stream);
  /// The size of the block behind a live pointer (the request after rounding).
  std::size_t allocated_size(void* ptr) const;

  /// Gives every cached block that holds no allocation back to its device (PyTorch's
  /// `torch.cuda.empty_cache()`).
  void empty_cache();
  /// Caps what the allocator may reserve on `device` at `fraction` of its memory (PyTorch's
  /// `set_per_process_memory_fraction`); requests past the cap throw OutOfMemoryError.
  void set_memory_fraction(double fraction, int device = 0);
  /// Changes the settings while the program runs, from the next request on, as PyTorch 2.11's
  /// `torch.cuda.memory._set_allocator_settings` does: `max_split_size_mb`,
  /// `roundup_power2_divisions` and `garbage_collection_threshold` return to their defaults unless
  /// `settings` names them; every other setting keeps its value unless named. Throws Error,
  /// changing nothing, for a bad key or value.
  void set_settings(const std::string& settings);
  /// The settings in effect, in `PYTORCH_CUDA_ALLOC_CONF`'s grammar.
  std::string settings() const;

  /// The device's statistics under the names and in the order of PyTorch's
  /// `torch.cuda.memory_stats()` (`"allocated_bytes.all.current"`, ...).
  std::vector<std::pair<std::string, std::int64_t>> memory_stats(int device = 0) const;
  /// Starts the peak statistics of `device` again from the current values.
  void reset_peak_stats(int device = 0);
  /// Sets the counters of `device` (allocations, frees, retries) back to 0.
  void reset_accumulated_stats(int device = 0);
  /// A table of the device's statistics, as PyTorch's `torch.cuda.memory_summary()`.
  std::string memory_summary(int device = 0) const;

  /// Calls `observer` at each out-of-memory error, before it is thrown and without the
  /// allocator's lock (it may allocate, free or write a snapshot). An exception it throws is
  /// reported on stderr and the program gets the original error.
  void on_out_of_memory(std::function<void(const OutOfMemoryInfo&)> observer);

  /// From now until end_allocate_to_pool(), requests on `device` whose stream `filter` accepts
  /// are served from the private pool `pool`'s own segments (PyTorch's `beginAllocateToPool`,
  /// which CUDA graph capture and `torch.cuda.MemPool` use).
  void begin_allocate_to_pool(MempoolId pool, std::function<bool(StreamId)> filter, int device = 0);
  /// Ends begin_allocate_to_pool() for `pool`.
  void end_allocate_to_pool(MempoolId pool, int device = 0);
  /// Drops the program's use of `pool`: its segments go back at the next empty_cache() once
  /// their blocks are free (PyTorch's `releasePool`).
  void release_pool(MempoolId pool, int device = 0);

  /// Writes a snapshot of every device's segments and blocks now to `path`, as PyTorch's snapshot
  /// pickle when the path ends in `.pickle`, else as memsnap's msgpack: whole or not at all (a
  /// new temporary file beside it, then a rename). Without a Recording it holds no history.
  /// Throws Error when it cannot be written.
  void write_snapshot(const std::string& path) const;

  /// The number of devices.
  int device_count() const;
  /// `"cuda"` or `"simulated"`.
  std::string backend_name() const;
  /// Every broken invariant of the allocator's state, as readable lines (empty when all hold).
  /// For tests and debugging: it takes each device's lock in turn.
  std::vector<std::string> check_invariants() const;

 private:
  friend class Recording;
  struct Shared;  // the implementation, shared with a Recording
  Shared& shared() const;
  std::shared_ptr<Shared> shared_;
};

}  // namespace memsnap
