// memsnap-demo: runs a small training loop on memsnap's allocator with history recording
// and C++ stacks on, then writes a snapshot. With --oom it runs out of memory on purpose and
// the snapshot is the one written by the out-of-memory hook. Uses the GPU when there is one,
// the simulated device otherwise (MEMSNAP_BACKEND=cuda|simulated chooses).
#include <CLI/CLI.hpp>

#include <cstdio>
#include <filesystem>
#include <stdexcept>
#include <string>

#include "allocator/default_backend.h"
#include "job.h"
#include "snapshot/snapshot_file.h"
#include "training_loop.h"

namespace demo {
namespace {

// A request far beyond what the capped device holds: a batch of absurd sequence length.
__attribute__((noinline)) void forward_with_a_huge_batch(Loop& loop, Model& model) {
  Tensor batch = load_batch(loop, 1 << 20);
  std::vector<Tensor> activations = forward(loop, model, batch);
  backward(loop, model, activations);
  loop.free(batch);
}

int run(const std::string& out, bool run_out_of_memory, int steps, size_t max_entries) {
  auto backend = memsnap::make_default_backend();
  auto config = memsnap::allocator_config_from_environment();
  if (!backend || !config) {
    std::fprintf(stderr, "memsnap-demo: error: %s\n", (!backend ? backend.error() : config.error()).c_str());
    return 1;
  }
  memsnap::CachingAllocator allocator(backend.value(), config.value());
  memsnap::HistoryRecorder recorder(allocator);
  recorder.configure({memsnap::HistoryLevel::kAll, max_entries, /*cpp_stacks=*/true});
  Loop loop{allocator, recorder, 0, backend.value()->create_stream(0)};

  if (run_out_of_memory) {
    // Cap the allocator at 1 GiB of the device, whatever its size, so the failure comes fast
    // and the rest of the GPU stays untouched.
    const size_t total = backend.value()->memory_info(0).total_bytes;
    allocator.set_memory_fraction(std::min(1.0, double(size_t{1} << 30) / double(total)), 0);
    if (auto problem = memsnap::dump_snapshot_on_oom(allocator, &recorder, out)) throw std::runtime_error(*problem);
  }

  Model model = build_model(loop);
  train(loop, model, steps);
  int status = 0;
  if (run_out_of_memory) {
    try {
      forward_with_a_huge_batch(loop, model);
      std::fprintf(stderr, "memsnap-demo: error: expected to run out of memory, but did not\n");
      status = 1;
    } catch (const memsnap::OutOfMemoryError& error) {
      std::printf("ran out of memory on purpose: %s\n", error.what());
    }
  } else if (auto error = memsnap::dump_snapshot(allocator, &recorder, out)) {
    std::fprintf(stderr, "memsnap-demo: error: %s\n", error->c_str());
    status = 1;
  }
  const memsnap::DeviceStats stats = allocator.device_stats(0);
  std::printf("trained %d steps on the %s device: peak allocated %s, peak reserved %s, %zu trace events\n",
              steps, backend.value()->name().c_str(),
              memsnap::format_bytes(stats.allocated_bytes[memsnap::kAggregate].peak).c_str(),
              memsnap::format_bytes(stats.reserved_bytes[memsnap::kAggregate].peak).c_str(),
              recorder.trace(0).size());
  release_model(loop, model);
  if (status == 0 && std::filesystem::exists(out))
    std::printf("snapshot written to %s (%s)\n", out.c_str(),
                memsnap::format_bytes(static_cast<int64_t>(std::filesystem::file_size(out))).c_str());
  else if (status == 0)
    status = 1;
  return status;
}

}  // namespace
}  // namespace demo

int main(int argc, char** argv) {
  CLI::App app{"memsnap-demo: a training loop on memsnap's allocator that leaves a snapshot",
               "memsnap-demo"};
  std::string out = "memsnap-demo.msgpack";
  bool oom = false;
  int steps = 6;
  size_t max_entries = 100000;
  app.add_option("--out", out, "where to write the snapshot");
  app.add_flag("--oom", oom, "run out of memory on purpose; the snapshot is the OOM dump");
  int ranks = 0;
  app.add_option("--ranks", ranks,
                 "simulate a distributed job of this many ranks on simulated devices: --out is a folder "
                 "that gets one snapshot per rank (rank0.msgpack, ...); memsnap ranks compares them")
      ->check(CLI::Range(1, 100000));
  app.add_option("--steps", steps, "training steps")->check(CLI::Range(1, 100000));
  app.add_option("--max-entries", max_entries, "trace events kept (the ring buffer's size; default 100000)")
      ->check(CLI::Range(size_t{1}, size_t{10000000}));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& error) {
    if (error.get_exit_code() == 0) return app.exit(error);
    std::fprintf(stderr, "memsnap-demo: error: %s (see memsnap-demo --help)\n", error.what());
    return 2;
  }
  try {
    if (ranks > 0) return demo::run_job({out, ranks, steps, max_entries, oom});
    return demo::run(out, oom, steps, max_entries);
  } catch (const std::exception& error) {
    std::fprintf(stderr, "memsnap-demo: error: %s\n", error.what());
    return 1;
  }
}
