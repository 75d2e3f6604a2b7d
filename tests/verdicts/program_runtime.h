// A scripted program on memsnap's allocator, recorded as memsnap.torch records a PyTorch
// program: the caching allocator on the simulated device, history at a chosen level, and each
// allocation's stack the "Python" lines the script names (a site and its callers), so snapshots
// read as a training script's would. The same script run again under other settings or another
// device size is the truth a verdict about those settings is checked against: what really
// happens, not a replay.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "allocator/caching_allocator.h"
#include "allocator/simulated_backend.h"
#include "history/history_recorder.h"
#include "history/interpreter_frames.h"
#include "snapshot/snapshot.h"

namespace memsnap::truth {

// A line of the script that allocates: the function it is in, and the lines that called it.
struct Site {
  std::string function;
  int line = 0;
  std::string caller = "train_step";
  int caller_line = 0;
};

// The script's frames for the recorder: the site allocating now and its callers.
class ScriptedFrames final : public InterpreterFrames {
 public:
  size_t capture(uintptr_t* tokens, size_t max) override;
  SourceFrame resolve(uintptr_t token) override;
  bool is_evaluation_loop(std::string_view) const override { return false; }
  void enter(const Site& site);
  void leave() { current_ = -1; }

 private:
  std::vector<Site> sites_;
  std::map<std::string, size_t> ids_;
  int64_t current_ = -1;
};

struct RunOptions {
  AllocatorConfig config;
  size_t capacity_bytes = size_t{16} << 30;
  HistoryLevel level = HistoryLevel::kAll;
  size_t max_entries = 100000;
  bool record = true;  // false: run only (a truth run), no history
  int rank = -1;       // written into the snapshot's process, when >= 0
  int world_size = 0;
};

// What a run came to: whether a request failed, and the allocator's peaks.
struct Outcome {
  bool ran_out_of_memory = false;
  uint64_t peak_reserved_bytes = 0;
  uint64_t peak_allocated_bytes = 0;
};

class Runtime {
 public:
  explicit Runtime(const RunOptions& options);
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  // An allocation at `site`; nullptr when it runs out of memory (recorded as the program's
  // error: a later snapshot is the OOM dump).
  void* alloc(const Site& site, size_t bytes, StreamId stream = 0);
  void free(void* p);
  void record_stream(void* p, StreamId stream);
  StreamId new_stream();
  void complete(StreamId stream);  // the stream's work so far is done
  // Phases, as record_function and memsnap.torch.annotate mark them. Each start and end lies
  // in a microsecond of its own, so the trace's clock can place it among the events.
  void start(const std::string& name);
  void end(const std::string& name);
  void set_memory_fraction(double fraction);
  // Memory another library of the process takes from the device (NCCL's buffers, CuPy), outside
  // the allocator; the snapshot records the calls when `recorded`.
  uintptr_t outside_alloc(size_t bytes, const std::string& library, bool recorded);
  // Routes requests to a private pool (a CUDA graph's) until end_pool.
  void begin_pool(MempoolId pool);
  void end_pool(MempoolId pool);

  // Frees every allocation the program still holds (it caught its error and went on).
  void release_all();
  bool ran_out_of_memory() const { return out_of_memory_; }
  Outcome outcome() const;
  Snapshot snapshot();
  CachingAllocator& allocator() { return *allocator_; }

 private:
  void tick();
  RunOptions options_;
  std::shared_ptr<SimulatedBackend> backend_;
  std::unique_ptr<CachingAllocator> allocator_;
  std::unique_ptr<HistoryRecorder> recorder_;
  ScriptedFrames frames_;
  std::vector<void*> live_;
  bool out_of_memory_ = false;
  std::vector<OutsideAllocation> outside_live_;
  std::vector<OutsideEvent> outside_events_;
  bool outside_recorded_ = false;
  int64_t started_us_ = 0;
};

}  // namespace memsnap::truth
