// A program outside the memsnap tree, compiled against the installed public API only
// (tests/install/outside_project_test.sh): a caching allocator on a simulated 1 GiB device with
// history on, a few allocations, a msgpack snapshot written to the path given; then memory capped
// at half the device, an out-of-memory error caught, and the snapshot written at it
// (PATH-oom-1.msgpack).
#include <memsnap/allocator.h>
#include <memsnap/errors.h>
#include <memsnap/recording.h>

#include <cstdio>
#include <string>

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s SNAPSHOT.msgpack\n", argv[0]);
    return 2;
  }
  const std::string path = argv[1];
  try {
    memsnap::AllocatorOptions options;
    options.backend = memsnap::Backend::kSimulated;
    options.simulated_capacity_bytes = size_t{1} << 30;
    memsnap::Allocator allocator(options);
    memsnap::Recording recording(allocator);

    void* weights = allocator.allocate(3 << 20, /*device=*/0, /*stream=*/0);
    void* scratch = allocator.allocate(512 << 10, 0, 0);
    allocator.deallocate(scratch);
    {
      memsnap::Recording::Phase step(recording, "step 1");
      void* activations = allocator.allocate(24 << 20, 0, 0);
      allocator.deallocate(activations);
    }
    recording.write_snapshot(path);

    recording.write_snapshot_on_out_of_memory(path + "-oom-{n}.msgpack");
    allocator.set_memory_fraction(0.5, 0);
    try {
      allocator.allocate(size_t{600} << 20, 0, 0);
      std::fprintf(stderr, "no out-of-memory error above the cap\n");
      return 1;
    } catch (const memsnap::OutOfMemoryError& error) {
      std::printf("caught: %s\n", error.what());
    }
    allocator.deallocate(weights);
  } catch (const memsnap::Error& error) {
    std::fprintf(stderr, "%s\n", error.what());
    return 1;
  }
  return 0;
}
