// A small live allocator with history, and a snapshot of it, for the snapshot tests.
#pragma once

#include <memory>
#include <vector>

#include "allocator/caching_allocator.h"
#include "allocator/simulated_backend.h"
#include "history/history_recorder.h"
#include "snapshot/snapshot_builder.h"

namespace snapshot_test {

inline std::shared_ptr<memsnap::SimulatedBackend> small_device(size_t capacity = size_t{1} << 30,
                                                               int devices = 1) {
  memsnap::SimulatedBackend::Options options;
  options.capacity_bytes = capacity;
  options.device_count = devices;
  return std::make_shared<memsnap::SimulatedBackend>(options);
}

struct RecordedProgram {
  std::shared_ptr<memsnap::SimulatedBackend> backend = small_device();
  memsnap::CachingAllocator allocator{backend};
  memsnap::HistoryRecorder recorder{allocator};
  std::vector<void*> held;

  RecordedProgram() { recorder.configure({memsnap::HistoryLevel::kAll, 10000, true}); }
  ~RecordedProgram() {
    for (void* p : held) allocator.deallocate(p);
  }
};

// Allocates a mix of small and large blocks, frees some, inside an annotation.
__attribute__((noinline)) inline void run_training_step(RecordedProgram& program) {
  memsnap::ScopedAnnotation step(program.recorder, "step 1");
  for (size_t i = 0; i < 6; ++i) program.held.push_back(program.allocator.allocate((i + 1) * 100000));
  program.held.push_back(program.allocator.allocate(30u << 20));
  program.allocator.deallocate(program.held[1]);
  program.allocator.deallocate(program.held[3]);
  program.held.erase(program.held.begin() + 3);
  program.held.erase(program.held.begin() + 1);
  asm volatile("" ::: "memory");
}

}  // namespace snapshot_test
