// The allocator example from README.md, compiled and run as a test so the README cannot
// drift from the API.
#include <cstdio>
#include <string>

#include "allocator/caching_allocator.h"
#include "allocator/default_backend.h"

int main() {
  auto backend = memsnap::make_default_backend();
  auto config = memsnap::allocator_config_from_environment();
  if (!backend || !config) {
    std::fprintf(stderr, "%s\n", (!backend ? backend.error() : config.error()).c_str());
    return 1;
  }
  memsnap::CachingAllocator allocator(backend.value(), config.value());
  void* p = allocator.allocate(4 << 20, /*device=*/0, /*stream=*/0);
  allocator.deallocate(p);
  auto stats = memsnap::to_memory_stats(allocator.device_stats(0));
  std::string table = allocator.memory_summary(0);
  for (const auto& [key, value] : stats) {
    if (key == "allocation.all.allocated" && value == 1 && !table.empty()) return 0;
  }
  std::fprintf(stderr, "unexpected statistics after one allocation\n");
  return 1;
}
