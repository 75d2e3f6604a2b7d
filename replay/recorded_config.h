// The allocator settings a snapshot was recorded under, as an AllocatorConfig: what
// `memsnap replay` uses unless told otherwise.
//
// memsnap files carry the parsed values and the config string; PyTorch's pickles carry the
// PYTORCH_CUDA_ALLOC_CONF string plus the effective values under their own names
// (max_split_size in bytes or -1, roundup_power2_divisions as a Python dict keyed by MiB).
// The explicit values win over the string, since they are what the allocator used.
#pragma once

#include "allocator/allocator_config.h"
#include "allocator/result.h"
#include "snapshot/snapshot.h"

namespace memsnap {

Result<AllocatorConfig> recorded_allocator_config(const Snapshot& snapshot);

}  // namespace memsnap
