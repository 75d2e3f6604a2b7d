#include "python/native/oom_message.h"

#include <cstdio>

#include "snapshot/snapshot_builder.h"
#include "viewer/oom_state.h"

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

std::string oom_verdict_line(CachingAllocator& allocator, const OomInfo& info,
                             const std::function<void(Snapshot&)>& complete) {
  try {
    SnapshotOptions options;  // the segments and the error, nothing of the history
    options.include_traces = false;
    options.mark_in_trace = false;
    options.oom = info;
    options.complete = complete;
    const Result<OomState> state = oom_state(take_snapshot(allocator, nullptr, options), info.device);
    if (!state) return "memsnap: cannot judge the cause, because " + state.error();
    return "memsnap: " + state.value().diagnosis.verdict.sentence;
  } catch (const std::exception& error) {
    return std::string("memsnap: cannot judge the cause, because the allocator's state could not be read: ") +
           error.what();
  }
}

std::string torch_oom_message(const OomInfo& info, const std::string& verdict_line) {
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
  message += verdict_line;
  return message;
}

}  // namespace memsnap::pytorch
