// The out-of-memory message a PyTorch user knows, from memsnap's figures, and memsnap's own
// one-line reason: whether the request could never fit, a cap refused it, freed memory was
// there but in pieces (fragmentation), or live tensors held the device (exhaustion).
#pragma once

#include <cstdint>
#include <string>

#include "allocator/out_of_memory.h"

namespace memsnap::pytorch {

// "2.00 GiB", "512 bytes": PyTorch's format_size.
std::string torch_format_size(uint64_t bytes);

// memsnap's reason, one line starting "memsnap: ".
std::string oom_reason(const OomInfo& info);

// PyTorch's message shape ("CUDA out of memory. Tried to allocate ... GPU 0 has a total
// capacity of ... of which ... is free. ..."), then the reason on a line of its own.
std::string torch_oom_message(const OomInfo& info);

}  // namespace memsnap::pytorch
