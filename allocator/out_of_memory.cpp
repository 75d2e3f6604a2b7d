#include "allocator/out_of_memory.h"

#include "allocator/device_stats.h"

namespace memsnap {
namespace {

std::string describe(const OomInfo& info) {
  const auto size = [](size_t bytes) { return format_bytes(static_cast<int64_t>(bytes)); };
  std::string message = "out of device memory. Tried to allocate " + size(info.allocation_bytes) +
                        " (request of " + size(info.requested_bytes) + "). Device " +
                        std::to_string(info.device) + " has a total capacity of " +
                        size(info.device_total_bytes) + " of which " +
                        size(info.device_free_bytes) + " is free. ";
  // PyTorch names this process's usage through NVML; the device-wide figure needs nothing
  // beyond cudaMemGetInfo and still shows memory held outside the allocator.
  if (info.device_total_bytes >= info.device_free_bytes)
    message += "Including memory outside memsnap, " +
               size(info.device_total_bytes - info.device_free_bytes) +
               " is in use on the device (all processes). ";
  if (info.allowed_bytes) message += size(*info.allowed_bytes) + " allowed; ";
  const size_t unallocated = info.unallocated_bytes();
  message += "Of the allocated memory " + size(info.allocated_bytes + info.private_pool_free_bytes) +
             " is allocated by memsnap, ";
  if (info.private_pool_free_bytes > 0)
    message += "with " + size(info.private_pool_free_bytes) +
               " cached in private pools (CUDA graphs, MemPool) that this request could not use, ";
  message += "and " + size(unallocated) + " is reserved by memsnap but unallocated.";
  // A hint, not a verdict: the free memory may be in pieces, on other streams or waiting for
  // them; explain-oom on a snapshot of the error decides which (viewer/oom_cause.h).
  if (unallocated > info.allocation_bytes)
    message += " Reserved but unallocated memory this large may be fragmentation (setting max_split_size_mb "
               "or expandable_segments:True in MEMSNAP_ALLOC_CONF may help) or memory held for other streams; "
               "memsnap explain-oom on a snapshot of this error says which.";
  return message;
}

}  // namespace

OutOfMemoryError::OutOfMemoryError(const OutOfMemoryInfo& info) : Error(describe(info)), info_(info) {}

}  // namespace memsnap
