// memsnap's caching allocator as PyTorch's CUDA allocator: a native implementation of
// c10::cuda::CUDACachingAllocator::CUDAAllocator, the interface PyTorch's own allocator
// implements, so every torch.cuda memory call (memory_stats, empty_cache, memory fractions,
// record_stream, out-of-memory observers, ...) is answered by memsnap with PyTorch's
// meanings, and an out-of-memory raises torch.OutOfMemoryError.
//
// One instance per process, made by install() and never destroyed (PyTorch frees tensors
// during interpreter shutdown). memsnap's allocator behind it is created when PyTorch
// initializes CUDA (init), not before, so installing touches no GPU.
//
// What PyTorch's allocator does beside its caching policy, this one does too: settings changed
// while running (apply_settings, after PyTorch's own parser took them), caching turned off by
// torch.cuda.caching_allocator_enable(False) (plain cudaMalloc/cudaFree, no statistics, as
// PyTorch), every allocation and free reported to torch.profiler, a MemPool's own allocator
// for that pool's segments, and the contexts PyTorch's C++ API gathers for its snapshots.
#pragma once

#include <c10/cuda/CUDACachingAllocator.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "allocator/allocator_config.h"
#include "allocator/caching_allocator.h"
#include "history/history_recorder.h"
#include "snapshot/snapshot_builder.h"

namespace memsnap::pytorch {

namespace torch_alloc = c10::cuda::CUDACachingAllocator;

class TorchAllocator final : public torch_alloc::CUDAAllocator {
 public:
  explicit TorchAllocator(AllocatorConfig config);

  // --- c10::Allocator ---
  c10::DataPtr allocate(size_t size) override;
  c10::DeleterFnPtr raw_deleter() const override;
  void copy_data(void* dest, const void* src, std::size_t count) const override;

  // --- c10::DeviceAllocator ---
  bool initialized() override { return initialized_.load(std::memory_order_acquire); }
  void emptyCache(c10::MempoolId_t mempool_id) override;
  void recordStream(const c10::DataPtr& ptr, c10::cuda::CUDAStream stream) override;
  torch_alloc::DeviceStats getDeviceStats(c10::DeviceIndex device) override;
  void resetAccumulatedStats(c10::DeviceIndex device) override;
  void resetPeakStats(c10::DeviceIndex device) override;

  // --- CUDAAllocator ---
  void* raw_alloc(size_t nbytes) override;
  void* raw_alloc_with_stream(size_t nbytes, cudaStream_t stream) override;
  void raw_delete(void* ptr) override;
  void init(int device_count) override;
  double getMemoryFraction(c10::DeviceIndex device) override;
  void setMemoryFraction(double fraction, c10::DeviceIndex device) override;
  std::vector<torch_alloc::StreamSegmentSize> getExpandableSegmentSizes(c10::DeviceIndex device) override;
  void enable(bool value) override { enabled_.store(value, std::memory_order_relaxed); }
  bool isEnabled() const override { return enabled_.load(std::memory_order_relaxed); }
  void cacheInfo(c10::DeviceIndex device, size_t* largest_block) override;
  void* getBaseAllocation(void* ptr, size_t* size) override;
  torch_alloc::SnapshotInfo snapshot(c10::MempoolId_t mempool_id, bool include_traces) override;
  void beginAllocateToPool(c10::DeviceIndex device, c10::MempoolId_t mempool_id,
                           std::function<bool(cudaStream_t)> filter) override;
  void endAllocateToPool(c10::DeviceIndex device, c10::MempoolId_t mempool_id) override;
  void releasePool(c10::DeviceIndex device, c10::MempoolId_t mempool_id) override;
  int getPoolUseCount(c10::DeviceIndex device, c10::MempoolId_t mempool_id) override;
  void createOrIncrefPool(c10::DeviceIndex device, c10::MempoolId_t mempool_id,
                          std::shared_ptr<torch_alloc::CUDAAllocator> allocator) override;
  void setUseOnOOM(c10::DeviceIndex device, c10::MempoolId_t mempool_id, bool use_on_oom) override;
  void setNoSplit(c10::DeviceIndex device, c10::MempoolId_t mempool_id) override;
  bool checkPoolLiveAllocations(c10::DeviceIndex device, c10::MempoolId_t mempool_id,
                                const std::unordered_set<void*>& expected_live_allocations) override;
  torch_alloc::ShareableHandle shareIpcHandle(void* ptr) override;
  std::shared_ptr<void> getIpcDevPtr(std::string handle) override;
  bool isHistoryEnabled() override;
  void recordHistory(bool enabled, torch_alloc::CreateContextFn context_recorder,
                     size_t alloc_trace_max_entries, torch_alloc::RecordContext when,
                     bool clear_history, const std::vector<std::string>& skip_actions) override;
  void recordAnnotation(const std::vector<std::pair<std::string, std::string>>& md) override;
  void pushCompileContext(std::string& md) override;
  void popCompileContext() override;
  void setUserMetadata(const std::string& metadata) override;
  std::string getUserMetadata() override;
  void attachOutOfMemoryObserver(torch_alloc::OutOfMemoryObserver observer) override;
  void attachAllocatorTraceTracker(torch_alloc::AllocatorTraceTracker tracker) override;
  void enablePeerAccess(c10::DeviceIndex dev, c10::DeviceIndex dev_to_access) override;
  cudaError_t memcpyAsync(void* dst, int dst_device, const void* src, int src_device, size_t count,
                          cudaStream_t stream, bool p2p_enabled) override;
  std::shared_ptr<torch_alloc::AllocatorState> getCheckpointState(c10::DeviceIndex device,
                                                                  c10::MempoolId_t id) override;
  torch_alloc::CheckpointDelta setCheckpointPoolState(
      c10::DeviceIndex device, std::shared_ptr<torch_alloc::AllocatorState> pps) override;
  // "native": memsnap makes the native allocator's decisions, so code that asks
  // torch.cuda.get_allocator_backend() == "native" before relying on them (512-byte rounding,
  // caching, expandable segments, snapshots) is right to (python/README.md, "Backend").
  std::string name() override { return "native"; }

  // Frees memory from memsnap's cache (the deleter of its DataPtrs; raw_delete while enabled).
  void free_cached(void* ptr);

  // --- memsnap's own controls ---
  // memsnap's allocator and recorder; initializes CUDA's side first if PyTorch has not.
  CachingAllocator& allocator();
  HistoryRecorder& recorder();
  AllocatorConfig config();  // the settings in effect
  // Takes the settings PyTorch's parser now holds (after torch._C._accelerator_setAllocatorSettings
  // parsed a string: its keys, its defaults, its validation), as the running allocator's.
  void apply_settings(const std::string& request);
  // memsnap's own history recording answers torch.cuda.memory's snapshots: PyTorch's context
  // recorder, kept for its C++ snapshot API, is dropped.
  void forget_context_recorder();
  // Where an out-of-memory snapshot goes ("" for none): written before the error is raised.
  void set_oom_snapshot_pattern(std::string pattern);
  // The process's place in a distributed job as torch.distributed knows it; what is unset comes
  // from the environment. Every snapshot, and the OOM snapshot's path, use it.
  void set_job_place(const JobPlace& place);
  SnapshotOptions snapshot_options();

 private:
  void* malloc(size_t size, c10::DeviceIndex device, cudaStream_t stream);
  // PyTorch's C++ snapshot API reads the contexts its recorder gathered (CapturedTraceback):
  // kept per live allocation while recordHistory was given a recorder by PyTorch's C++
  // _record_memory_history and memsnap.torch did not take over.
  bool keeps_contexts() const { return keeps_contexts_.load(std::memory_order_relaxed); }
  std::shared_ptr<c10::GatheredContext> gather_context();
  void keep_context(void* ptr, std::shared_ptr<c10::GatheredContext> context);
  void drop_context(void* ptr);
  void ensure_initialized();
  void check_device(c10::DeviceIndex device) const;
  DeviceCachingAllocator& device_allocator(c10::DeviceIndex device);
  void write_oom_snapshot(const OomInfo& info);
  // memsnap's verdict on an out-of-memory error's cause (oom_message.h), from the allocator as
  // the error left it.
  std::string oom_verdict_now(const OomInfo& info);
  // Whether no earlier out-of-memory snapshot went to `path` (a pattern without {n} reuses it).
  bool remember_oom_snapshot(const std::string& path);

  AllocatorConfig config_;  // under init_mutex_; the allocator's own once it exists
  std::atomic<bool> initialized_{false};
  std::mutex init_mutex_;
  std::unique_ptr<CachingAllocator> allocator_;
  std::unique_ptr<HistoryRecorder> recorder_;
  std::vector<double> fractions_;  // by device, as set (1.0 when never set)
  std::atomic<bool> enabled_{true};
  std::atomic<bool> expandable_segments_{false};  // config_'s, for memcpyAsync

  std::mutex contexts_mutex_;  // the members below
  std::atomic<bool> keeps_contexts_{false};
  std::atomic<size_t> contexts_kept_{0};  // contexts_.size(), read without the lock
  torch_alloc::CreateContextFn context_recorder_;
  torch_alloc::RecordContext record_context_ = torch_alloc::RecordContext::NEVER;
  std::unordered_map<void*, std::shared_ptr<c10::GatheredContext>> contexts_;

  std::mutex controls_mutex_;  // the members below
  std::vector<torch_alloc::OutOfMemoryObserver> pending_observers_;  // attached before init
  std::string oom_pattern_;
  JobPlace job_place_;
  uint64_t oom_snapshots_written_ = 0;
  std::unordered_set<std::string> oom_snapshot_paths_;  // one per error at most
};

// The instance install() made, or nullptr.
TorchAllocator* installed_allocator();

// Makes memsnap PyTorch's CUDA allocator. Throws std::invalid_argument for bad settings and
// std::runtime_error when PyTorch's own allocator already holds memory (or another
// allocator was installed).
TorchAllocator& install(const std::optional<std::string>& settings);

}  // namespace memsnap::pytorch
