// Checks everything the allocator promises about its state, from the blocks up:
//   - each segment is tiled exactly by its blocks (contiguous, linked both ways, same
//     stream, device and pool, sizes multiples of 512 B), and no two free blocks touch;
//   - the pools hold exactly the free blocks, each in the pool of its kind;
//   - every pending-free block has as many queued events as its event count;
//   - the live-allocation map holds exactly the allocated blocks, each at its address;
//   - every statistic's `current` equals what the blocks say, per pool and in total.
// Used after every step of the randomized tests; cheap enough for debugging sessions too.
#pragma once

#include <string>
#include <vector>

namespace memsnap {

class DeviceCachingAllocator;

struct InvariantReport {
  std::vector<std::string> problems;
  size_t allocated_blocks = 0;
};

class InvariantChecker {
 public:
  // Locks the device's allocator for the duration of the check.
  static InvariantReport check(const DeviceCachingAllocator& allocator);
};

}  // namespace memsnap
