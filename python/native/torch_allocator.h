// memsnap's caching allocator as PyTorch's CUDA allocator: a native implementation of
// c10::cuda::CUDACachingAllocator::CUDAAllocator, the interface PyTorch's own allocator
// implements, so every torch.cuda memory call (memory_stats, empty_cache, memory fractions,
// record_stream, out-of-memory observers, ...) is answered by memsnap with PyTorch's
// meanings, and an out-of-memory raises torch.OutOfMemoryError.
//
// One instance per process, made by install() and never destroyed (PyTorch frees tensors
// during interpreter shutdown). memsnap's allocator behind it is created when PyTorch
// initializes CUDA (init), not before, so installing touches no GPU.
#pragma once

#include <c10/cuda/CUDACachingAllocator.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
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
  void enable(bool value) override { enabled_ = value; }
  bool isEnabled() const override { return enabled_; }
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
  std::string name() override { return "memsnap"; }

  // --- memsnap's own controls ---
  // memsnap's allocator and recorder; initializes CUDA's side first if PyTorch has not.
  CachingAllocator& allocator();
  HistoryRecorder& recorder();
  const AllocatorConfig& config() const { return config_; }
  // Where an out-of-memory snapshot goes ("" for none): written before the error is raised.
  void set_oom_snapshot_pattern(std::string pattern);
  // The process's place in a distributed job as torch.distributed knows it; what is unset comes
  // from the environment. Every snapshot, and the OOM snapshot's path, use it.
  void set_job_place(const JobPlace& place);
  SnapshotOptions snapshot_options();

 private:
  void* malloc(size_t size, c10::DeviceIndex device, cudaStream_t stream);
  void ensure_initialized();
  void check_device(c10::DeviceIndex device) const;
  DeviceCachingAllocator& device_allocator(c10::DeviceIndex device);
  void write_oom_snapshot(const OomInfo& info);

  const AllocatorConfig config_;
  std::atomic<bool> initialized_{false};
  std::mutex init_mutex_;
  std::unique_ptr<CachingAllocator> allocator_;
  std::unique_ptr<HistoryRecorder> recorder_;
  std::vector<double> fractions_;  // by device, as set (1.0 when never set)
  bool enabled_ = true;

  std::mutex controls_mutex_;  // the members below
  std::vector<torch_alloc::OutOfMemoryObserver> pending_observers_;  // attached before init
  std::string oom_pattern_;
  JobPlace job_place_;
  uint64_t oom_snapshots_written_ = 0;
  std::string user_metadata_;
};

// The instance install() made, or nullptr.
TorchAllocator* installed_allocator();

// Makes memsnap PyTorch's CUDA allocator. Throws std::invalid_argument for bad settings and
// std::runtime_error when PyTorch's own allocator already holds memory (or another
// allocator was installed).
TorchAllocator& install(const std::optional<std::string>& settings);

}  // namespace memsnap::pytorch
