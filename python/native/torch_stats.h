// memsnap's statistics in PyTorch's DeviceStats: the same fields, names and meanings, so
// torch.cuda.memory_stats() and everything built on it read memsnap's allocator unchanged.
#pragma once

#include <c10/core/CachingDeviceAllocator.h>

#include "allocator/device_stats.h"

namespace memsnap::pytorch {

c10::CachingDeviceAllocator::DeviceStats to_torch_stats(const DeviceStats& stats);

}  // namespace memsnap::pytorch
