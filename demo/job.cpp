// A simulated distributed job (memsnap-demo --ranks N): N ranks train the demo's model on
// simulated devices, each writing its own snapshot with its place in the job, so `memsnap
// ranks` has a job to look at without a cluster. A few ranks behave differently on purpose:
// every 97th from rank 13 (and the last rank) keeps a tensor per step for metrics it never
// frees, and with --oom the middle rank gets a batch too long for its memory and runs out.
#include "job.h"

#include <algorithm>
#include <stdexcept>
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <mutex>
#include <thread>

#include "allocator/simulated_backend.h"
#include "snapshot/snapshot_file.h"
#include "training_loop.h"

namespace demo {
namespace {

bool keeps_metrics(int rank, int ranks) { return rank == ranks - 1 || rank % 97 == 13; }

// The outliers' extra: a small tensor per step, kept for the whole run.
__attribute__((noinline)) void keep_for_metrics(Loop& loop, std::vector<Tensor>& kept) {
  kept.push_back(loop.allocate(loop.hidden * loop.hidden, loop.compute_stream));
}

// A batch eight times the longest the other ranks see: its activations do not fit.
__attribute__((noinline)) void forward_with_a_long_batch(Loop& loop, Model& model) {
  Tensor batch = load_batch(loop, 8192);
  std::vector<Tensor> activations = forward(loop, model, batch);
  backward(loop, model, activations);
  loop.free(batch);
}

// One rank's run; "" or the reason its snapshot is missing.
std::string run_rank(const JobOptions& options, int rank) {
  memsnap::SimulatedBackend::Options device;
  device.capacity_bytes = size_t{80} << 30;
  auto backend = std::make_shared<memsnap::SimulatedBackend>(device);
  memsnap::CachingAllocator allocator(backend);
  memsnap::HistoryRecorder recorder(allocator);
  recorder.configure({memsnap::HistoryLevel::kAll, options.max_entries, /*cpp_stacks=*/true});
  Loop loop{allocator, recorder, 0, backend->create_stream(0)};
  memsnap::SnapshotOptions snapshot_options;
  snapshot_options.job.rank = rank;
  snapshot_options.job.local_rank = rank % 8;
  snapshot_options.job.world_size = options.ranks;
  const std::string path = (std::filesystem::path(options.folder) / ("rank" + std::to_string(rank) + ".msgpack")).string();
  const bool runs_out = options.oom && rank == options.ranks / 2;
  if (runs_out) {
    // Capped at 400 MiB, as if the rest of the device were taken: room for the run, not for
    // a batch of 8192 tokens.
    allocator.set_memory_fraction(double(size_t{400} << 20) / double(device.capacity_bytes), 0);
    if (auto problem = memsnap::dump_snapshot_on_oom(allocator, &recorder, path, snapshot_options))
      throw std::runtime_error(*problem);
  }

  // Ranks see batches of different lengths, as data-parallel ranks do.
  static const size_t kSequenceLengths[] = {128, 512, 256, 1024, 384, 768};
  Model model = build_model(loop);
  std::vector<Tensor> kept;
  for (int step = 0; step < options.steps; ++step) {
    memsnap::ScopedAnnotation phase(recorder, "step " + std::to_string(step));
    Tensor batch = load_batch(loop, kSequenceLengths[(step + rank) % 6]);
    std::vector<Tensor> activations = forward(loop, model, batch);
    backward(loop, model, activations);
    optimizer_step(loop, model);
    if (keeps_metrics(rank, options.ranks)) keep_for_metrics(loop, kept);
    loop.free(batch);
  }
  std::string error;
  if (runs_out) {
    try {
      forward_with_a_long_batch(loop, model);
      error = "expected to run out of memory, but did not";
    } catch (const memsnap::OutOfMemoryError&) {
    }
  } else if (auto failed = memsnap::dump_snapshot(allocator, &recorder, path, snapshot_options)) {
    error = *failed;
  }
  for (Tensor& tensor : kept) loop.free(tensor);
  release_model(loop, model);
  return error;
}

}  // namespace

int run_job(const JobOptions& options) {
  std::error_code error;
  std::filesystem::create_directories(options.folder, error);
  if (error) {
    std::fprintf(stderr, "memsnap-demo: error: cannot create %s (%s)\n", options.folder.c_str(), error.message().c_str());
    return 1;
  }
  std::atomic<int> next{0};
  std::atomic<int> failures{0};
  std::mutex print;
  auto work = [&] {
    for (int rank = next++; rank < options.ranks; rank = next++) {
      const std::string failed = run_rank(options, rank);
      if (failed.empty()) continue;
      ++failures;
      std::lock_guard<std::mutex> lock(print);
      std::fprintf(stderr, "memsnap-demo: error: rank %d: %s\n", rank, failed.c_str());
    }
  };
  const unsigned threads = std::max(1u, std::min<unsigned>(std::thread::hardware_concurrency(), options.ranks));
  std::vector<std::thread> pool;
  for (unsigned t = 1; t < threads; ++t) pool.emplace_back(work);
  work();
  for (std::thread& thread : pool) thread.join();
  if (failures > 0) return 1;
  std::printf("%d rank snapshots written to %s (ranks that keep extra memory: %d", options.ranks,
              options.folder.c_str(), options.ranks - 1);
  for (int rank = 13; rank < options.ranks - 1; rank += 97) std::printf(", %d", rank);
  std::printf(")%s\n", options.oom ? (", rank " + std::to_string(options.ranks / 2) + " ran out of memory").c_str() : "");
  return 0;
}

}  // namespace demo
