// TorchAllocator's private pools: CUDA graph capture (torch.cuda.graph, make_graphed_callables)
// and torch.cuda.MemPool / use_mem_pool, answered by memsnap's pools (allocator/private_pool.h)
// with PyTorch's rules.
#include <cstdio>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>

#include "python/native/torch_allocator.h"
#ifdef MEMSNAP_OUTSIDE_MEMORY
#include "record/call_recorder.h"
#endif

namespace memsnap::pytorch {
namespace {

MempoolId to_pool(c10::MempoolId_t id) { return {id.first, id.second}; }

// What getCheckpointState hands PyTorch and setCheckpointPoolState gets back.
struct PoolState final : torch_alloc::AllocatorState {
  explicit PoolState(PoolCheckpoint saved) : checkpoint(std::move(saved)) {}
  PoolCheckpoint checkpoint;
};

// A MemPool's own allocator (torch.cuda.MemPool(allocator=...)) as the source of that pool's
// segments: PyTorch calls its raw_alloc and raw_delete. The pool keeps it alive.
class PoolAllocatorSource final : public SegmentSource {
 public:
  explicit PoolAllocatorSource(std::shared_ptr<torch_alloc::CUDAAllocator> allocator)
      : allocator_(std::move(allocator)) {}
  // (Its calls make the pool's segments, which snapshots show: not memory outside the allocator.)
  std::optional<uintptr_t> reserve(int, size_t size, StreamId) override {
#ifdef MEMSNAP_OUTSIDE_MEMORY
    CallsNotRecorded own;
#endif
    void* ptr = allocator_->raw_alloc(size);
    if (ptr == nullptr) return std::nullopt;
    return reinterpret_cast<uintptr_t>(ptr);
  }
  void release(int, uintptr_t address, size_t, StreamId) override {
#ifdef MEMSNAP_OUTSIDE_MEMORY
    CallsNotRecorded own;
#endif
    allocator_->raw_delete(reinterpret_cast<void*>(address));
  }

 private:
  std::shared_ptr<torch_alloc::CUDAAllocator> allocator_;
};

// A mistake in the pools' use (ending a scope never begun, a pool that does not exist) is a
// RuntimeError in Python, as PyTorch raises it.
template <typename Fn>
decltype(auto) checked(Fn&& fn) {
  try {
    return fn();
  } catch (const std::invalid_argument& error) {
    C10_THROW_ERROR(Error, std::string("memsnap: ") + error.what());
  }
}

}  // namespace

DeviceCachingAllocator& TorchAllocator::device_allocator(c10::DeviceIndex device) {
  ensure_initialized();
  check_device(device);
  return allocator_->device(device);
}

void TorchAllocator::emptyCache(c10::MempoolId_t mempool_id) {
  if (!initialized()) return;
  if (mempool_id.first == 0 && mempool_id.second == 0) {
    allocator_->empty_cache();
    return;
  }
  for (int device = 0; device < allocator_->device_count(); ++device)
    allocator_->device(device).empty_cache(to_pool(mempool_id));
}

// The filter runs under the device's lock on the allocating thread: PyTorch's ask the stream's
// capture state or the thread's id, neither of which calls back into the allocator.
void TorchAllocator::beginAllocateToPool(c10::DeviceIndex device, c10::MempoolId_t mempool_id,
                                         std::function<bool(cudaStream_t)> filter) {
  DeviceCachingAllocator& pools = device_allocator(device);
  checked([&] {
    pools.begin_allocate_to_pool(to_pool(mempool_id), [filter = std::move(filter)](StreamId stream) {
      return filter(reinterpret_cast<cudaStream_t>(stream));
    });
  });
}

void TorchAllocator::endAllocateToPool(c10::DeviceIndex device, c10::MempoolId_t mempool_id) {
  DeviceCachingAllocator& pools = device_allocator(device);
  checked([&] { pools.end_allocate_to_pool(to_pool(mempool_id)); });
}

// Called from CUDAGraph's destructor, where an exception would end the process: a mistake is
// reported on stderr instead.
void TorchAllocator::releasePool(c10::DeviceIndex device, c10::MempoolId_t mempool_id) {
  if (!initialized() || device < 0 || device >= allocator_->device_count()) return;
  try {
    allocator_->device(device).release_pool(to_pool(mempool_id));
  } catch (const std::exception& error) {
    std::fprintf(stderr, "memsnap: %s\n", error.what());
  }
}

int TorchAllocator::getPoolUseCount(c10::DeviceIndex device, c10::MempoolId_t mempool_id) {
  return device_allocator(device).pool_use_count(to_pool(mempool_id));
}

void TorchAllocator::createOrIncrefPool(c10::DeviceIndex device, c10::MempoolId_t mempool_id,
                                        std::shared_ptr<torch_alloc::CUDAAllocator> allocator) {
  DeviceCachingAllocator& pools = device_allocator(device);
  std::shared_ptr<SegmentSource> source;
  if (allocator != nullptr) source = std::make_shared<PoolAllocatorSource>(std::move(allocator));
  checked([&] { pools.create_or_incref_pool(to_pool(mempool_id), std::move(source)); });
}

// ~MemPool turns use_on_oom off before releasing the pool: that call must not throw.
void TorchAllocator::setUseOnOOM(c10::DeviceIndex device, c10::MempoolId_t mempool_id, bool use_on_oom) {
  DeviceCachingAllocator& pools = device_allocator(device);
  try {
    pools.set_use_on_oom(to_pool(mempool_id), use_on_oom);
  } catch (const std::invalid_argument& error) {
    TORCH_CHECK(!use_on_oom, "memsnap: ", error.what());
  }
}

void TorchAllocator::setNoSplit(c10::DeviceIndex device, c10::MempoolId_t mempool_id) {
  DeviceCachingAllocator& pools = device_allocator(device);
  checked([&] { pools.set_no_split(to_pool(mempool_id)); });
}

// CUDA graph trees' check that a pool holds exactly the tensors they believe alive.
bool TorchAllocator::checkPoolLiveAllocations(c10::DeviceIndex device, c10::MempoolId_t mempool_id,
                                              const std::unordered_set<void*>& expected_live_allocations) {
  const MempoolId pool = to_pool(mempool_id);
  size_t live = 0;
  for (const SegmentRecord& segment : device_allocator(device).segment_records()) {
    if (segment.pool_id != pool) continue;
    for (const BlockRecord& block : segment.blocks) {
      if (block.state != BlockState::kActiveAllocated) continue;
      if (!expected_live_allocations.count(reinterpret_cast<void*>(block.address))) return false;
      ++live;
    }
  }
  return live == expected_live_allocations.size();
}

// CUDA graph trees (torch.compile mode="reduce-overhead") save a pool's layout after recording a
// graph and put it back before running a graph of another path.
std::shared_ptr<torch_alloc::AllocatorState> TorchAllocator::getCheckpointState(c10::DeviceIndex device,
                                                                               c10::MempoolId_t mempool_id) {
  DeviceCachingAllocator& pools = device_allocator(device);
  return checked([&] { return std::make_shared<PoolState>(pools.checkpoint_pool(to_pool(mempool_id))); });
}

torch_alloc::CheckpointDelta TorchAllocator::setCheckpointPoolState(
    c10::DeviceIndex device, std::shared_ptr<torch_alloc::AllocatorState> pps) {
  const auto* state = dynamic_cast<const PoolState*>(pps.get());
  TORCH_CHECK(state != nullptr, "memsnap: setCheckpointPoolState was given a state memsnap did not make");
  DeviceCachingAllocator& pools = device_allocator(device);
  const PoolRestore restore = checked([&] { return pools.restore_pool(state->checkpoint); });
  torch_alloc::CheckpointDelta delta;
  for (uintptr_t address : restore.freed) delta.ptrs_freed.push_back(reinterpret_cast<void*>(address));
  for (const auto& [address, size] : restore.allocated) {
    void* ptr = reinterpret_cast<void*>(address);
    delta.dataptrs_allocd.emplace_back(ptr, ptr, raw_deleter(), c10::Device(c10::DeviceType::CUDA, device));
  }
  return delta;
}

}  // namespace memsnap::pytorch
