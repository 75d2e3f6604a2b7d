#include "python/native/oom_message.h"

#include <algorithm>
#include <cstdio>

namespace memsnap::pytorch {

std::string torch_format_size(uint64_t bytes) {
  char text[64];
  const auto value = static_cast<double>(bytes);
  if (bytes <= 1024)
    std::snprintf(text, sizeof text, "%llu bytes", static_cast<unsigned long long>(bytes));
  else if (bytes <= (uint64_t{1} << 20))
    std::snprintf(text, sizeof text, "%.2f KiB", value / 1024.0);
  else if (bytes <= (uint64_t{1} << 30))
    std::snprintf(text, sizeof text, "%.2f MiB", value / 1048576.0);
  else
    std::snprintf(text, sizeof text, "%.2f GiB", value / 1073741824.0);
  return text;
}

std::string oom_reason(const OomInfo& info) {
  const auto size = torch_format_size;
  const uint64_t need = info.allocation_bytes;
  const uint64_t cached_free = info.unallocated_bytes();
  if (info.rounded_bytes > info.device_total_bytes)
    return "memsnap: the request alone (" + size(info.requested_bytes) +
           ") is larger than the device's total memory (" + size(info.device_total_bytes) +
           "): no freeing and no allocator setting can make it fit; the stack that asked is "
           "the place to look.";
  // Room for a new segment: the device's free memory, within the cap when one is set.
  uint64_t headroom = info.device_free_bytes;
  if (info.allowed_bytes)
    headroom = std::min<uint64_t>(
        headroom, *info.allowed_bytes > info.reserved_bytes ? *info.allowed_bytes - info.reserved_bytes : 0);
  if (info.private_pool_free_bytes > 0 && headroom + cached_free < need &&
      headroom + cached_free + info.private_pool_free_bytes >= need)
    return "memsnap: private pools: " + size(info.private_pool_free_bytes) +
           " is cached free inside private pools (CUDA graphs, MemPool), which serve only their "
           "own graphs or pool; it would have fit otherwise. Share one pool between graphs that "
           "run in sequence (torch.cuda.graph(g2, pool=g1.pool())), allocate before capture, or "
           "capture fewer graphs.";
  if (info.allowed_bytes && info.reserved_bytes + need > *info.allowed_bytes &&
      info.device_free_bytes >= need)
    return "memsnap: the memory fraction cap refused it (" + size(*info.allowed_bytes) +
           " allowed, " + size(info.reserved_bytes) + " reserved); the device itself had " +
           size(info.device_free_bytes) + " free.";
  if (cached_free >= info.rounded_bytes)
    return "memsnap: fragmentation: " + size(cached_free) +
           " is reserved but free, yet no free block holds " + size(info.rounded_bytes) +
           "; expandable_segments:True (or max_split_size_mb) lets freed memory serve larger "
           "requests.";
  return "memsnap: exhaustion: tensors in use hold " + size(info.allocated_bytes) + " of the " +
         "device's " + size(info.device_total_bytes) + " (" + size(info.device_free_bytes) +
         " free, " + size(cached_free) + " cached); free or shrink what holds the memory "
         "(memsnap explain-oom on an OOM snapshot names the largest holders).";
}

std::string torch_oom_message(const OomInfo& info) {
  const auto size = torch_format_size;
  const uint64_t used = info.device_total_bytes >= info.device_free_bytes
                            ? info.device_total_bytes - info.device_free_bytes
                            : 0;
  std::string message = "CUDA out of memory. Tried to allocate " + size(info.allocation_bytes) +
                        ". GPU " + std::to_string(info.device) + " has a total capacity of " +
                        size(info.device_total_bytes) + " of which " + size(info.device_free_bytes) +
                        " is free. Including non-PyTorch memory, this process has " + size(used) +
                        " memory in use. ";
  if (info.allowed_bytes) message += size(*info.allowed_bytes) + " allowed; ";
  message += "Of the allocated memory " + size(info.allocated_bytes + info.private_pool_free_bytes) +
             " is allocated by PyTorch, ";
  if (info.private_pool_free_bytes > 0)
    message += "with " + size(info.private_pool_free_bytes) +
               " allocated in private pools (e.g., CUDA Graphs), ";
  message += "and " + size(info.unallocated_bytes()) +
             " is reserved by PyTorch but unallocated. If reserved but unallocated memory is "
             "large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid "
             "fragmentation.  See documentation for Memory Management  "
             "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)\n";
  message += oom_reason(info);
  return message;
}

}  // namespace memsnap::pytorch
