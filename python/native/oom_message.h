// The out-of-memory message a PyTorch user knows, from memsnap's figures, and memsnap's verdict
// on its cause on a line of its own: the one explain-oom prints for the same error
// (viewer/oom_cause.h decides it; nothing here decides anew).
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "allocator/caching_allocator.h"
#include "allocator/out_of_memory.h"
#include "snapshot/snapshot.h"

namespace memsnap::pytorch {

// "2.00 GiB", "512 bytes": PyTorch's format_size.
std::string torch_format_size(uint64_t bytes);

// "memsnap: <the cause's sentence>", from the allocator as the error left it (to be called from
// an OOM observer, before anything frees): its segments, caps and settings, the error itself,
// and what `complete` adds (memory other libraries hold); no history is read, so it costs what
// the segments hold. Where the state cannot be read, "memsnap: cannot judge the cause, because ...".
std::string oom_verdict_line(CachingAllocator& allocator, const OomInfo& info,
                             const std::function<void(Snapshot&)>& complete = {});

// PyTorch's message shape ("CUDA out of memory. Tried to allocate ... GPU 0 has a total
// capacity of ... of which ... is free. ..."), then `verdict_line` on a line of its own (none
// when empty).
std::string torch_oom_message(const OomInfo& info, const std::string& verdict_line);

}  // namespace memsnap::pytorch
