#include "memsnap/allocator.h"

#include <memory>
#include <utility>

#include "allocator/allocator_config.h"
#include "allocator/default_backend.h"
#include "allocator/device_stats.h"
#include "allocator/simulated_backend.h"
#include "api/allocator_shared.h"
#include "snapshot/snapshot_file.h"

#ifdef MEMSNAP_HAVE_CUDA
#include "allocator/cuda_backend.h"
#endif

namespace memsnap {
namespace {

std::shared_ptr<DeviceBackend> make_backend(const AllocatorOptions& options) {
  switch (options.backend) {
    case Backend::kDefault: {
      auto made = make_default_backend();
      if (!made) throw Error(made.error());
      return made.value();
    }
    case Backend::kSimulated: {
      if (options.simulated_devices < 1 || options.simulated_devices > 1024)
        throw Error("AllocatorOptions::simulated_devices: expected 1 to 1024, not " +
                    std::to_string(options.simulated_devices));
      if (options.simulated_capacity_bytes == 0 || options.simulated_capacity_bytes > (size_t{1} << 50))
        throw Error("AllocatorOptions::simulated_capacity_bytes: expected 1 byte to 1 PiB, not " +
                    std::to_string(options.simulated_capacity_bytes));
      SimulatedBackend::Options simulated;
      simulated.device_count = options.simulated_devices;
      simulated.capacity_bytes = options.simulated_capacity_bytes;
      return std::make_shared<SimulatedBackend>(simulated);
    }
    case Backend::kCuda:
#ifdef MEMSNAP_HAVE_CUDA
      if (!cuda_device_available()) throw Error("memsnap: Backend::kCuda: no usable CUDA device");
      try {
        return std::make_shared<CudaBackend>();
      } catch (const DeviceError& error) {
        throw Error(error.what());
      }
#else
      throw Error("memsnap: Backend::kCuda: this memsnap was built without CUDA");
#endif
  }
  throw Error("memsnap: AllocatorOptions::backend: not a Backend");
}

AllocatorConfig make_config(const AllocatorOptions& options) {
  if (!options.settings) {
    auto config = allocator_config_from_environment();
    if (!config) throw Error(config.error());
    return config.value();
  }
  auto config = parse_allocator_config(*options.settings);
  if (!config) throw Error(config.error());
  return config.value();
}

}  // namespace

Allocator::Allocator(AllocatorOptions options) {
  std::shared_ptr<DeviceBackend> backend = make_backend(options);
  AllocatorConfig config = make_config(options);
  shared_ = as_public_error([&] { return std::make_shared<Shared>(std::move(backend), std::move(config)); });
}

Allocator::~Allocator() = default;
Allocator::Allocator(Allocator&&) noexcept = default;
Allocator& Allocator::operator=(Allocator&&) noexcept = default;

Allocator::Shared& Allocator::shared() const {
  if (!shared_) throw Error("memsnap::Allocator: used after it was moved from");
  return *shared_;
}

void* Allocator::allocate(size_t bytes, int device, StreamId stream) {
  CachingAllocator& allocator = shared().allocator;
  return as_public_error([&] { return allocator.allocate(bytes, device, stream); });
}

void Allocator::deallocate(void* ptr) {
  CachingAllocator& allocator = shared().allocator;
  as_public_error([&] { allocator.deallocate(ptr); });
}

void Allocator::record_stream(void* ptr, StreamId stream) {
  CachingAllocator& allocator = shared().allocator;
  as_public_error([&] { allocator.record_stream(ptr, stream); });
}

size_t Allocator::allocated_size(void* ptr) const {
  CachingAllocator& allocator = shared().allocator;
  return as_public_error([&] { return allocator.allocated_size(ptr); });
}

void Allocator::empty_cache() { shared().allocator.empty_cache(); }

void Allocator::set_memory_fraction(double fraction, int device) {
  CachingAllocator& allocator = shared().allocator;
  as_public_error([&] { allocator.set_memory_fraction(fraction, device); });
}

void Allocator::set_settings(const std::string& settings) {
  CachingAllocator& allocator = shared().allocator;
  auto config = update_allocator_config(allocator.config(), settings);
  if (!config) throw Error(config.error());
  as_public_error([&] { allocator.set_config(config.value(), settings); });
}

std::string Allocator::settings() const { return to_config_string(shared().allocator.config()); }

std::vector<std::pair<std::string, int64_t>> Allocator::memory_stats(int device) const {
  CachingAllocator& allocator = shared().allocator;
  return as_public_error([&] { return to_memory_stats(allocator.device_stats(device)); });
}

void Allocator::reset_peak_stats(int device) {
  CachingAllocator& allocator = shared().allocator;
  as_public_error([&] { allocator.reset_peak_stats(device); });
}

void Allocator::reset_accumulated_stats(int device) {
  CachingAllocator& allocator = shared().allocator;
  as_public_error([&] { allocator.reset_accumulated_stats(device); });
}

std::string Allocator::memory_summary(int device) const {
  CachingAllocator& allocator = shared().allocator;
  return as_public_error([&] { return allocator.memory_summary(device); });
}

void Allocator::on_out_of_memory(std::function<void(const OutOfMemoryInfo&)> observer) {
  if (!observer) throw Error("memsnap::Allocator::on_out_of_memory: an empty function");
  shared().allocator.add_oom_observer(std::move(observer));
}

void Allocator::begin_allocate_to_pool(MempoolId pool, std::function<bool(StreamId)> filter, int device) {
  if (pool.is_global()) throw Error("memsnap::Allocator::begin_allocate_to_pool: (0,0) names the global pools");
  if (!filter) throw Error("memsnap::Allocator::begin_allocate_to_pool: an empty filter");
  CachingAllocator& allocator = shared().allocator;
  as_public_error([&] { allocator.device(device).begin_allocate_to_pool(pool, std::move(filter)); });
}

void Allocator::end_allocate_to_pool(MempoolId pool, int device) {
  CachingAllocator& allocator = shared().allocator;
  as_public_error([&] { allocator.device(device).end_allocate_to_pool(pool); });
}

void Allocator::release_pool(MempoolId pool, int device) {
  CachingAllocator& allocator = shared().allocator;
  as_public_error([&] { allocator.device(device).release_pool(pool); });
}

void Allocator::write_snapshot(const std::string& path) const {
  if (auto error = dump_snapshot(shared().allocator, nullptr, path)) throw Error(*error);
}

int Allocator::device_count() const { return shared().allocator.device_count(); }

std::string Allocator::backend_name() const { return shared().allocator.backend().name(); }

std::vector<std::string> Allocator::check_invariants() const { return shared().allocator.check_invariants(); }

}  // namespace memsnap
