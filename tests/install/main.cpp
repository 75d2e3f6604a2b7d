// A program outside the memsnap tree, compiled against the installed headers and libraries only
// (tests/install/outside_project_test.sh): a caching allocator on the simulated device,
// history on, a few allocations, a msgpack snapshot written to the path given.
#include <cstdio>
#include <memory>

#include <memsnap/allocator/caching_allocator.h>
#include <memsnap/allocator/simulated_backend.h>
#include <memsnap/history/history_recorder.h>
#include <memsnap/snapshot/snapshot_file.h>

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s SNAPSHOT.msgpack\n", argv[0]);
    return 2;
  }
  memsnap::CachingAllocator allocator(std::make_shared<memsnap::SimulatedBackend>());
  memsnap::HistoryRecorder recorder(allocator);
  recorder.configure({memsnap::HistoryLevel::kAll, /*max_entries=*/1000, /*cpp_stacks=*/true});

  void* weights = allocator.allocate(3 << 20, /*device=*/0, /*stream=*/0);
  void* scratch = allocator.allocate(512 << 10, 0, 0);
  allocator.deallocate(scratch);
  {
    memsnap::ScopedAnnotation step(recorder, "step 1");
    void* activations = allocator.allocate(24 << 20, 0, 0);
    allocator.deallocate(activations);
  }
  if (auto error = memsnap::dump_snapshot(allocator, &recorder, argv[1])) {
    std::fprintf(stderr, "%s\n", error->c_str());
    return 1;
  }
  allocator.deallocate(weights);
  return 0;
}
