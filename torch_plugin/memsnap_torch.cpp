// libmemsnap_torch.so: one process-wide memsnap allocator with history, behind the C
// entry points of memsnap_torch.h.
#include "torch_plugin/memsnap_torch.h"

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>

#include "allocator/caching_allocator.h"
#include "allocator/default_backend.h"
#include "history/history_recorder.h"
#include "snapshot/environment_recording.h"
#include "snapshot/snapshot_file.h"

namespace {

struct Plugin {
  std::unique_ptr<memsnap::CachingAllocator> allocator;
  // Its recorder keeps the history; MEMSNAP_HISTORY and the other recording variables
  // (history/recording_environment.h) turn recording on from the start.
  std::unique_ptr<memsnap::EnvironmentRecording> recording;
  memsnap::HistoryRecorder& recorder() { return recording->recorder(); }
};

thread_local std::string last_error;
thread_local std::string summary_text;

Plugin* instance_for_exit();

// Built on first use; never destroyed: PyTorch frees tensors during interpreter shutdown,
// after static destructors of this library could have run.
Plugin& plugin() {
  static Plugin* instance = [] {
    const char* backend_choice = std::getenv("MEMSNAP_BACKEND");
    memsnap::Result<std::shared_ptr<memsnap::DeviceBackend>> backend =
        memsnap::make_default_backend();
    if (!backend) throw std::runtime_error("memsnap_torch: " + backend.error());
    const bool simulated_asked = backend_choice != nullptr && std::string(backend_choice) == "simulated";
    if (backend.value()->name() != "cuda" && !simulated_asked)
      throw std::runtime_error(
          "memsnap_torch: no usable CUDA device (PyTorch needs real device memory; "
          "MEMSNAP_BACKEND=simulated is for testing the entry points only)");
    memsnap::Result<memsnap::AllocatorConfig> config = memsnap::allocator_config_from_environment();
    if (!config) throw std::runtime_error("memsnap_torch: " + config.error());
    auto* p = new Plugin;
    p->allocator = std::make_unique<memsnap::CachingAllocator>(backend.value(), config.value());
    memsnap::Result<std::unique_ptr<memsnap::EnvironmentRecording>> recording =
        memsnap::record_from_environment(*p->allocator);
    if (!recording) throw std::runtime_error("memsnap_torch: " + recording.error());
    p->recording = std::move(recording).value();
    // The plugin is never destroyed (above), so MEMSNAP_SNAPSHOT_AT_EXIT is written at exit.
    std::atexit([] {
      if (const std::optional<std::string> error = instance_for_exit()->recording->write_at_exit())
        std::fprintf(stderr, "memsnap_torch: MEMSNAP_SNAPSHOT_AT_EXIT: %s\n", error->c_str());
    });
    return p;
  }();
  return *instance;
}

Plugin* instance_for_exit() { return &plugin(); }

// Runs `fn`, turning any exception into -1 and last_error.
template <typename Fn>
int guarded(Fn&& fn) {
  try {
    fn();
    return 0;
  } catch (const std::exception& error) {
    last_error = error.what();
  } catch (...) {
    last_error = "unknown error";
  }
  return -1;
}

void check_device(int device) {
  if (device < 0 || device >= plugin().allocator->device_count())
    throw std::out_of_range("no device " + std::to_string(device));
}

}  // namespace

extern "C" {

void* memsnap_torch_malloc(ssize_t size, int device, void* stream) {
  if (size < 0) throw std::invalid_argument("memsnap_torch_malloc: negative size");
  return plugin().allocator->allocate(static_cast<size_t>(size), device,
                                      reinterpret_cast<memsnap::StreamId>(stream));
}

void memsnap_torch_free(void* ptr, ssize_t, int, void*) { plugin().allocator->deallocate(ptr); }

int memsnap_torch_record_history(const char* level, size_t max_entries, int cpp_stacks) {
  return guarded([&] {
    if (level == nullptr) throw std::invalid_argument("level is null");
    const auto parsed = memsnap::history_level_from_name(level);
    if (!parsed)
      throw std::invalid_argument(std::string("unknown history level '") + level +
                                  "' (off, state, alloc or all)");
    memsnap::HistorySettings settings;
    settings.level = *parsed;
    settings.max_entries = max_entries;
    settings.cpp_stacks = cpp_stacks != 0;
    plugin().recorder().configure(settings);
  });
}

int memsnap_torch_dump_snapshot(const char* path) {
  return guarded([&] {
    if (path == nullptr) throw std::invalid_argument("path is null");
    Plugin& p = plugin();
    if (auto error = memsnap::dump_snapshot(*p.allocator, &p.recorder(), path))
      throw std::runtime_error(*error);
  });
}

int memsnap_torch_dump_snapshot_on_oom(const char* pattern) {
  return guarded([&] {
    if (pattern == nullptr) throw std::invalid_argument("pattern is null");
    Plugin& p = plugin();
    if (auto problem = memsnap::dump_snapshot_on_oom(*p.allocator, &p.recorder(), pattern))
      throw std::invalid_argument(*problem);
  });
}

int memsnap_torch_empty_cache(void) {
  return guarded([] { plugin().allocator->empty_cache(); });
}

int64_t memsnap_torch_stat(const char* key, int device) {
  int64_t value = -1;
  const int status = guarded([&] {
    if (key == nullptr) throw std::invalid_argument("key is null");
    check_device(device);
    for (const auto& [name, stat] : memsnap::to_memory_stats(plugin().allocator->device_stats(device)))
      if (name == key) {
        value = stat;
        return;
      }
    throw std::invalid_argument(std::string("unknown statistic '") + key + "'");
  });
  return status == 0 ? value : -1;
}

int memsnap_torch_reset_peak_stats(int device) {
  return guarded([&] {
    check_device(device);
    plugin().allocator->reset_peak_stats(device);
  });
}

const char* memsnap_torch_memory_summary(int device) {
  const int status = guarded([&] {
    check_device(device);
    summary_text = plugin().allocator->memory_summary(device);
  });
  return status == 0 ? summary_text.c_str() : "";
}

const char* memsnap_torch_last_error(void) { return last_error.c_str(); }

}  // extern "C"
