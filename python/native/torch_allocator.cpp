#include "python/native/torch_allocator.h"

#include <c10/core/Allocator.h>
#include <c10/core/AllocatorConfig.h>
#include <c10/core/impl/GPUTrace.h>
#include <c10/cuda/CUDAAllocatorConfig.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/util/Exception.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <optional>
#include <string>

#include "allocator/cuda_backend.h"
#include "history/trace_labels.h"
#include "python/native/autograd_frames.h"
#include "python/native/oom_message.h"
#include "python/native/outside_memory.h"
#include "python/native/python_frames.h"
#include "python/native/torch_stats.h"
#include "snapshot/snapshot_file.h"
#ifdef MEMSNAP_OUTSIDE_MEMORY
#include "record/unrecorded_backend.h"
#endif

namespace memsnap::pytorch {
namespace {

// The verdict on the out-of-memory error this thread ran into, decided by the first OOM
// observer (the error's figures identify it) and read where the error is raised.
struct VerdictAtError {
  int device = 0;
  size_t requested_bytes = 0;
  StreamId stream = 0;
  std::string line;
};
thread_local std::optional<VerdictAtError> verdict_at_error;

std::atomic<TorchAllocator*> the_allocator{nullptr};

// The trace entries kept per device when PyTorch asks for its unbounded default (40 bytes
// each); memsnap.torch warns when it holds a request to this.
constexpr size_t kPyTorchDefaultEntryLimit = 2'000'000;

// PyTorch's limit, checked before anything else: no device holds an exabyte.
constexpr size_t kOneExabyte = size_t{1} << 60;

// The deleter of memory from memsnap's cache (the DataPtr keeps it, whatever is enabled later).
void delete_allocation(void* ptr) {
  if (ptr != nullptr) the_allocator.load(std::memory_order_acquire)->free_cached(ptr);
}

// With caching turned off by torch.cuda.caching_allocator_enable(False), memory comes straight
// from the device and goes straight back, unseen by statistics and history, as in PyTorch.
void* uncached_allocate(size_t size) {
  void* ptr = nullptr;
  C10_CUDA_CHECK(cudaMalloc(&ptr, size));
  if (const c10::impl::PyInterpreter* trace = c10::impl::GPUTrace::get_trace())
    (*trace)->trace_gpu_memory_allocation(c10::kCUDA, reinterpret_cast<uintptr_t>(ptr));
  return ptr;
}

void uncached_delete(void* ptr) {
  if (const c10::impl::PyInterpreter* trace = c10::impl::GPUTrace::get_trace())
    (*trace)->trace_gpu_memory_deallocation(c10::kCUDA, reinterpret_cast<uintptr_t>(ptr));
  C10_CUDA_CHECK(cudaFree(ptr));
}


[[noreturn]] void unsupported(const char* what) {
  TORCH_CHECK(false, "memsnap: ", what,
              " is not supported by memsnap's allocator yet. Run this program on PyTorch's own "
              "allocator (without memsnap.torch.install()) for it.");
}

// PyTorch's trace actions by their names (skip_actions).
uint32_t skipped_action_bits(const std::vector<std::string>& names) {
  uint32_t bits = 0;
  for (const std::string& name : names) {
    const std::optional<TraceAction> action = trace_action_from_name(name);
    TORCH_CHECK(action.has_value(), "memsnap: unknown action '", name, "' in skip_actions");
    bits |= 1u << static_cast<unsigned>(*action);
  }
  return bits;
}

}  // namespace

TorchAllocator* installed_allocator() { return the_allocator.load(std::memory_order_acquire); }

TorchAllocator::TorchAllocator(AllocatorConfig config)
    : config_(std::move(config)), expandable_segments_(config_.expandable_segments) {}

std::shared_ptr<c10::GatheredContext> TorchAllocator::gather_context() {
  torch_alloc::CreateContextFn recorder;
  {
    std::lock_guard<std::mutex> lock(contexts_mutex_);
    recorder = context_recorder_;
  }
  return recorder != nullptr ? recorder() : nullptr;
}

void TorchAllocator::keep_context(void* ptr, std::shared_ptr<c10::GatheredContext> context) {
  std::lock_guard<std::mutex> lock(contexts_mutex_);
  contexts_[ptr] = std::move(context);
  contexts_kept_.store(contexts_.size(), std::memory_order_relaxed);
}

void TorchAllocator::drop_context(void* ptr) {
  std::shared_ptr<c10::GatheredContext> dropped;  // released after the lock (it may take the GIL)
  std::lock_guard<std::mutex> lock(contexts_mutex_);
  if (auto it = contexts_.find(ptr); it != contexts_.end()) {
    dropped = std::move(it->second);
    contexts_.erase(it);
  }
  contexts_kept_.store(contexts_.size(), std::memory_order_relaxed);
}

void TorchAllocator::forget_context_recorder() {
  std::lock_guard<std::mutex> lock(contexts_mutex_);
  keeps_contexts_.store(false, std::memory_order_relaxed);
  context_recorder_ = nullptr;
}

AllocatorConfig TorchAllocator::config() {
  std::lock_guard<std::mutex> lock(init_mutex_);
  return allocator_ ? allocator_->config() : config_;
}

// PyTorch parses the string itself (torch._C._accelerator_setAllocatorSettings: its keys, its
// resets of max_split_size, roundup_power2_divisions and garbage_collection_threshold at every
// call, its errors) into its configuration singletons; memsnap takes the result from there, so
// a run's settings are exactly PyTorch's. The pinned_* keys stay with PyTorch's host allocator.
void TorchAllocator::apply_settings(const std::string& request) {
  using c10::CachingAllocator::AcceleratorAllocatorConfig;
  using c10::cuda::CUDACachingAllocator::CUDAAllocatorConfig;
  std::lock_guard<std::mutex> lock(init_mutex_);
  AllocatorConfig updated = allocator_ ? allocator_->config() : config_;
  updated.max_split_size = AcceleratorAllocatorConfig::max_split_size();
  updated.max_non_split_rounding_size = AcceleratorAllocatorConfig::max_non_split_rounding_size();
  updated.large_segment_size = AcceleratorAllocatorConfig::large_segment_size();
  updated.garbage_collection_threshold = AcceleratorAllocatorConfig::garbage_collection_threshold();
  const std::vector<size_t>& divisions = AcceleratorAllocatorConfig::roundup_power2_divisions();
  updated.roundup_power2_divisions.fill(0);
  std::copy_n(divisions.begin(), std::min(divisions.size(), updated.roundup_power2_divisions.size()),
              updated.roundup_power2_divisions.begin());
  updated.expandable_segments = AcceleratorAllocatorConfig::use_expandable_segments();
  updated.release_lock_on_cudamalloc = CUDAAllocatorConfig::release_lock_on_cudamalloc();
  updated.graph_capture_record_stream_reuse = CUDAAllocatorConfig::graph_capture_record_stream_reuse();
  updated.source = to_config_string(updated);
  updated.notices.clear();
  try {
    if (allocator_) allocator_->set_config(updated, request);
  } catch (const std::exception& error) {
    TORCH_CHECK(false, "memsnap: ", error.what());
  }
  expandable_segments_.store(updated.expandable_segments, std::memory_order_relaxed);
  config_ = std::move(updated);
}

void TorchAllocator::init(int device_count) {
  std::lock_guard<std::mutex> lock(init_mutex_);
  if (initialized()) return;
  std::shared_ptr<DeviceBackend> backend;
  try {
    backend = std::make_shared<CudaBackend>();
#ifdef MEMSNAP_OUTSIDE_MEMORY
    // The allocator's own cudaMalloc and cudaFree are not memory outside it (outside_memory.h).
    backend = std::make_shared<UnrecordedBackend>(std::move(backend));
#endif
  } catch (const std::exception& error) {
    TORCH_CHECK(false, "memsnap: ", error.what());
  }
  allocator_ = std::make_unique<CachingAllocator>(backend, config_);
  recorder_ = std::make_unique<HistoryRecorder>(*allocator_);
  if (python::frames_supported()) recorder_->set_interpreter_frames(&process_autograd_frames());
  fractions_.assign(static_cast<size_t>(std::max(device_count, allocator_->device_count())),
                    config_.per_process_memory_fraction);
  // The verdict first, before any observer (PyTorch's may free memory) changes the state.
  allocator_->add_oom_observer([this](const OomInfo& info) {
    verdict_at_error = VerdictAtError{info.device, info.requested_bytes, info.stream, oom_verdict_now(info)};
  });
  allocator_->add_oom_observer([this](const OomInfo& info) { write_oom_snapshot(info); });
  {
    std::lock_guard<std::mutex> controls(controls_mutex_);
    for (auto& observer : pending_observers_) {
      allocator_->add_oom_observer([observer](const OomInfo& info) {
        observer(info.device, static_cast<size_t>(info.allocation_bytes),
                 static_cast<size_t>(info.allowed_bytes.value_or(info.device_total_bytes)),
                 static_cast<size_t>(info.device_free_bytes));
      });
    }
    pending_observers_.clear();
  }
  initialized_.store(true, std::memory_order_release);
}

void TorchAllocator::ensure_initialized() {
  if (!initialized()) init(static_cast<int>(c10::cuda::device_count()));
}

CachingAllocator& TorchAllocator::allocator() {
  ensure_initialized();
  return *allocator_;
}

HistoryRecorder& TorchAllocator::recorder() {
  ensure_initialized();
  return *recorder_;
}

void TorchAllocator::check_device(c10::DeviceIndex device) const {
  TORCH_CHECK(device >= 0 && device < allocator_->device_count(), "memsnap: invalid device ",
              static_cast<int>(device), " (", allocator_->device_count(), " CUDA devices)");
}

// As PyTorch's allocator: the profiler (torch.profiler with profile_memory) is told of every
// allocation and free with the device's totals right after it, the CUDA sanitizer's trace
// (torch.cuda._sanitizer) of every pointer, and the contexts PyTorch's C++ snapshot API reads
// are kept.
void* TorchAllocator::malloc(size_t size, c10::DeviceIndex device, cudaStream_t stream) {
  ensure_initialized();
  check_device(device);
  std::shared_ptr<c10::GatheredContext> context;
  if (C10_UNLIKELY(keeps_contexts())) context = gather_context();  // (outside every lock)
  void* ptr = nullptr;
  const auto on_stream = reinterpret_cast<StreamId>(stream);
  try {
    if (C10_UNLIKELY(c10::memoryProfilingEnabled())) {
      MemoryReport report;
      ptr = allocator_->allocate_reporting(size, device, on_stream, report);
      c10::reportMemoryUsageToProfiler(ptr, static_cast<int64_t>(report.block_bytes),
                                       static_cast<size_t>(report.allocated_bytes),
                                       static_cast<size_t>(report.reserved_bytes),
                                       c10::Device(c10::DeviceType::CUDA, device));
    } else {
      ptr = allocator_->allocate(size, device, on_stream);
    }
  } catch (const OutOfMemoryError& error) {
    const OomInfo& info = error.info();
    if (c10::memoryProfilingEnabled())
      c10::reportOutOfMemoryToProfiler(static_cast<int64_t>(info.rounded_bytes), info.allocated_bytes,
                                       info.reserved_bytes, c10::Device(c10::DeviceType::CUDA, device));
    std::string verdict;
    if (verdict_at_error && verdict_at_error->device == info.device &&
        verdict_at_error->requested_bytes == info.requested_bytes && verdict_at_error->stream == info.stream)
      verdict = std::move(verdict_at_error->line);
    else  // (an error inside an observer, which runs none)
      verdict = oom_verdict_now(info);
    verdict_at_error.reset();
    TORCH_CHECK_WITH(OutOfMemoryError, false, torch_oom_message(info, verdict));
  } catch (const c10::Error&) {
    throw;  // (a MemPool's own allocator failed: its error as it raised it)
  } catch (const std::exception& error) {
    TORCH_CHECK(false, "memsnap: ", error.what());
  }
  if (const c10::impl::PyInterpreter* trace = c10::impl::GPUTrace::get_trace())
    (*trace)->trace_gpu_memory_allocation(c10::kCUDA, reinterpret_cast<uintptr_t>(ptr));
  if (context) keep_context(ptr, std::move(context));
  return ptr;
}

void TorchAllocator::free_cached(void* ptr) {
  if (ptr == nullptr) return;
  if (const c10::impl::PyInterpreter* trace = c10::impl::GPUTrace::get_trace())
    (*trace)->trace_gpu_memory_deallocation(c10::kCUDA, reinterpret_cast<uintptr_t>(ptr));
  if (C10_UNLIKELY(contexts_kept_.load(std::memory_order_relaxed) != 0)) drop_context(ptr);
  try {
    if (C10_UNLIKELY(c10::memoryProfilingEnabled())) {
      MemoryReport report;
      const int device = allocator_->deallocate_reporting(ptr, report);
      c10::reportMemoryUsageToProfiler(ptr, -static_cast<int64_t>(report.block_bytes),
                                       static_cast<size_t>(report.allocated_bytes),
                                       static_cast<size_t>(report.reserved_bytes),
                                       c10::Device(c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(device)));
    } else {
      allocator_->deallocate(ptr);
    }
  } catch (const std::exception& error) {
    TORCH_CHECK(false, "memsnap: ", error.what());
  }
}

c10::DataPtr TorchAllocator::allocate(size_t size) {
  TORCH_CHECK_WITH(OutOfMemoryError, size < kOneExabyte,
                   "CUDA out of memory. Tried to allocate more than 1EB memory.");
  c10::DeviceIndex device = 0;
  C10_CUDA_CHECK(c10::cuda::GetDevice(&device));
  if (C10_UNLIKELY(!isEnabled())) {
    void* ptr = uncached_allocate(size);
    return {ptr, ptr, &uncached_delete, c10::Device(c10::DeviceType::CUDA, device)};
  }
  void* ptr = nullptr;
  if (size != 0) ptr = malloc(size, device, c10::cuda::getCurrentCUDAStream(device).stream());
  return {ptr, ptr, &delete_allocation, c10::Device(c10::DeviceType::CUDA, device)};
}

c10::DeleterFnPtr TorchAllocator::raw_deleter() const {
  return isEnabled() ? &delete_allocation : &uncached_delete;
}

void TorchAllocator::copy_data(void* dest, const void* src, std::size_t count) const {
  C10_CUDA_CHECK(cudaMemcpy(dest, src, count, cudaMemcpyDeviceToDevice));
}

void* TorchAllocator::raw_alloc(size_t nbytes) {
  if (nbytes == 0) return nullptr;
  if (!isEnabled()) return uncached_allocate(nbytes);
  c10::DeviceIndex device = 0;
  C10_CUDA_CHECK(c10::cuda::GetDevice(&device));
  return malloc(nbytes, device, c10::cuda::getCurrentCUDAStream(device).stream());
}

void* TorchAllocator::raw_alloc_with_stream(size_t nbytes, cudaStream_t stream) {
  if (nbytes == 0) return nullptr;
  if (!isEnabled()) return uncached_allocate(nbytes);
  c10::DeviceIndex device = 0;
  C10_CUDA_CHECK(c10::cuda::GetDevice(&device));
  return malloc(nbytes, device, stream);
}

// As PyTorch, whether caching is enabled is asked when the pointer is freed: memory taken
// while it was off must be given back while it is off.
void TorchAllocator::raw_delete(void* ptr) {
  if (ptr == nullptr) return;
  if (!isEnabled()) {
    uncached_delete(ptr);
    return;
  }
  free_cached(ptr);
}

void TorchAllocator::recordStream(const c10::DataPtr& ptr, c10::cuda::CUDAStream stream) {
  // Storage with no memory, or memory from elsewhere (shared from another process): nothing
  // of this allocator's to keep.
  if (ptr.get() == nullptr || ptr.get_deleter() != &delete_allocation) return;
  try {
    allocator_->record_stream(ptr.get(), reinterpret_cast<StreamId>(stream.stream()));
  } catch (const std::exception& error) {
    TORCH_CHECK(false, "memsnap: ", error.what());
  }
}

torch_alloc::DeviceStats TorchAllocator::getDeviceStats(c10::DeviceIndex device) {
  ensure_initialized();
  check_device(device);
  return to_torch_stats(allocator_->device_stats(device));
}

void TorchAllocator::resetAccumulatedStats(c10::DeviceIndex device) {
  ensure_initialized();
  check_device(device);
  allocator_->reset_accumulated_stats(device);
}

void TorchAllocator::resetPeakStats(c10::DeviceIndex device) {
  ensure_initialized();
  check_device(device);
  allocator_->reset_peak_stats(device);
}

double TorchAllocator::getMemoryFraction(c10::DeviceIndex device) {
  ensure_initialized();
  check_device(device);
  return fractions_[static_cast<size_t>(device)];
}

void TorchAllocator::setMemoryFraction(double fraction, c10::DeviceIndex device) {
  ensure_initialized();
  check_device(device);
  TORCH_CHECK(fraction >= 0 && fraction <= 1, "memsnap: invalid fraction ", fraction,
              ", it must be between 0 and 1");
  allocator_->set_memory_fraction(fraction, device, "torch.cuda.set_per_process_memory_fraction");
  fractions_[static_cast<size_t>(device)] = fraction;
}

std::vector<torch_alloc::StreamSegmentSize> TorchAllocator::getExpandableSegmentSizes(
    c10::DeviceIndex device) {
  ensure_initialized();
  check_device(device);
  std::vector<torch_alloc::StreamSegmentSize> sizes;
  for (const SegmentRecord& segment : allocator_->device(device).segment_records())
    if (segment.expandable)
      sizes.emplace_back(reinterpret_cast<cudaStream_t>(segment.stream), segment.small_pool,
                         segment.size);
  return sizes;
}

void TorchAllocator::cacheInfo(c10::DeviceIndex device, size_t* largest_block) {
  ensure_initialized();
  check_device(device);
  // As PyTorch: a zero guess starts from the device's free memory.
  if (*largest_block == 0) {
    c10::cuda::CUDAGuard guard(device);
    size_t total = 0;
    C10_CUDA_CHECK(cudaMemGetInfo(largest_block, &total));
  }
  for (const SegmentRecord& segment : allocator_->device(device).segment_records())
    for (const BlockRecord& block : segment.blocks)
      if (block.state == BlockState::kInactive) *largest_block = std::max(*largest_block, block.size);
}

void* TorchAllocator::getBaseAllocation(void* ptr, size_t* size) {
  ensure_initialized();
  const auto address = reinterpret_cast<uintptr_t>(ptr);
  for (int device = 0; device < allocator_->device_count(); ++device)
    for (const SegmentRecord& segment : allocator_->device(device).segment_records())
      if (address >= segment.address && address < segment.address + segment.size) {
        if (size != nullptr) *size = segment.size;
        return reinterpret_cast<void*>(segment.address);
      }
  TORCH_CHECK(false, "memsnap: ", ptr, " is not memory of memsnap's allocator");
}

torch_alloc::SnapshotInfo TorchAllocator::snapshot(c10::MempoolId_t mempool_id, bool include_traces) {
  // A pool's id asks for that pool's segments alone (MemPool.snapshot()).
  const MempoolId only{mempool_id.first, mempool_id.second};
  torch_alloc::SnapshotInfo info;
  if (!initialized()) return info;
  // The contexts PyTorch's recorder gathered, copied out (their owners may be freed meanwhile).
  struct KeptContexts {
    std::unordered_map<void*, std::shared_ptr<c10::GatheredContext>> by_address;
    bool on_allocations = false;
    std::shared_ptr<c10::GatheredContext> context_of(uintptr_t address) const {
      auto it = by_address.find(reinterpret_cast<void*>(address));
      return it == by_address.end() ? nullptr : it->second;
    }
  } contexts;
  {
    std::lock_guard<std::mutex> lock(contexts_mutex_);
    contexts.by_address = contexts_;
    contexts.on_allocations = record_context_ >= torch_alloc::RecordContext::ALLOC;
  }
  // Segments, blocks and the trace without frames: frames travel through
  // torch.cuda.memory._snapshot(), which memsnap.torch answers with its own.
  for (int device = 0; device < allocator_->device_count(); ++device) {
    for (const SegmentRecord& record : allocator_->device(device).segment_records()) {
      if (!only.is_global() && record.pool_id != only) continue;
      c10::CachingDeviceAllocator::SegmentInfo segment;
      segment.device = static_cast<c10::DeviceIndex>(device);
      segment.address = record.address;
      segment.total_size = record.size;
      segment.stream = reinterpret_cast<void*>(record.stream);
      segment.is_large = !record.small_pool;
      segment.is_expandable = record.expandable;
      segment.owner_private_pool_id = {record.pool_id.first, record.pool_id.second};
      for (const BlockRecord& b : record.blocks) {
        c10::CachingDeviceAllocator::BlockInfo block;
        block.size = b.size;
        block.requested_size = b.requested_size;
        block.allocated = b.state == BlockState::kActiveAllocated;
        block.active = b.state != BlockState::kInactive;
        if (block.active) block.context_when_allocated = contexts.context_of(b.address);
        if (block.allocated) segment.allocated_size += b.size;
        if (block.active) segment.active_size += b.size;
        segment.requested_size += b.requested_size;
        segment.blocks.push_back(std::move(block));
      }
      info.segments.push_back(std::move(segment));
    }
    info.device_traces.emplace_back();
    if (!include_traces) continue;
    for (const HistoryEvent& event : recorder_->trace(device)) {
      auto action = static_cast<c10::CachingDeviceAllocator::TraceEntry::Action>(
          static_cast<int>(event.action));
      // An allocation still live carries the context its recorder gathered, when it asked for
      // contexts on allocations (context "alloc" or "all"); others carry none.
      std::shared_ptr<c10::GatheredContext> context;
      if (event.action == TraceAction::kAlloc && contexts.on_allocations)
        context = contexts.context_of(event.address);
      const TraceLabel label = trace_labels::resolve(event.label);
      info.device_traces.back().emplace_back(
          action, static_cast<c10::DeviceIndex>(device), event.address, event.size,
          reinterpret_cast<void*>(event.stream), c10::MempoolId_t{0, 0}, event.time_us, std::move(context),
          label.compile_context.empty() ? std::string("N/A") : label.compile_context, label.user_metadata);
    }
  }
  const AllocatorConfig current = allocator_->config();
  info.config_metadata.garbage_collection_threshold = current.garbage_collection_threshold;
  info.config_metadata.max_split_size = current.max_split_size;
  info.config_metadata.expandable_segments = current.expandable_segments;
  info.config_metadata.release_lock_on_malloc = current.release_lock_on_cudamalloc;
  info.config_metadata.graph_capture_record_stream_reuse = current.graph_capture_record_stream_reuse;
  info.config_metadata.pinned_num_register_threads =
      c10::cuda::CUDACachingAllocator::CUDAAllocatorConfig::pinned_num_register_threads();
  info.config_metadata.pinned_use_host_register =
      c10::cuda::CUDACachingAllocator::CUDAAllocatorConfig::pinned_use_cuda_host_register();
  info.config_metadata.last_allocator_settings = current.source;
  info.config_metadata.roundup_power2_divisions.assign(current.roundup_power2_divisions.begin(),
                                                       current.roundup_power2_divisions.end());
  return info;
}

torch_alloc::ShareableHandle TorchAllocator::shareIpcHandle(void*) {
  unsupported("sharing CUDA tensors between processes (CUDA IPC)");
}

std::shared_ptr<void> TorchAllocator::getIpcDevPtr(std::string) {
  unsupported("opening a CUDA tensor shared by another process (CUDA IPC)");
}

bool TorchAllocator::isHistoryEnabled() {
  if (!initialized()) return false;
  return recorder_->settings(0).level != HistoryLevel::kOff;
}

// PyTorch's C++ entry (torch::cuda::_record_memory_history calls it, and through it Python's
// torch.cuda.memory._record_memory_history, which memsnap.torch then configures exactly). Here
// a context recorder means Python and C++ frames; PyTorch's recorder itself is kept too, for
// PyTorch's C++ snapshot API (torch::cuda::_memory_snapshot_pickled), which reads the contexts
// it gathered: memsnap.torch drops it again when it takes over.
void TorchAllocator::recordHistory(bool enabled, torch_alloc::CreateContextFn context_recorder,
                                   size_t alloc_trace_max_entries, torch_alloc::RecordContext when,
                                   bool clear_history, const std::vector<std::string>& skip_actions) {
  HistorySettings settings;
  settings.level = !enabled ? HistoryLevel::kOff
                   : when == torch_alloc::RecordContext::ALL || alloc_trace_max_entries > 1
                       ? HistoryLevel::kAll
                       : HistoryLevel::kState;
  // PyTorch's default is an unbounded trace; memsnap's ring is allocated up front.
  settings.max_entries = std::clamp<size_t>(alloc_trace_max_entries, 1, kPyTorchDefaultEntryLimit);
  settings.cpp_stacks = context_recorder != nullptr && when != torch_alloc::RecordContext::NEVER;
  settings.interpreter_stacks = settings.cpp_stacks && python::frames_supported();
  settings.stack_context = when == torch_alloc::RecordContext::ALL     ? StackContext::kAll
                           : when == torch_alloc::RecordContext::ALLOC ? StackContext::kAlloc
                                                                       : StackContext::kState;
  settings.skipped_actions = skipped_action_bits(skip_actions);
  HistoryRecorder& history = recorder();
  if (clear_history) history.clear();
  history.configure(settings);
  std::lock_guard<std::mutex> lock(contexts_mutex_);
  const bool keep = enabled && context_recorder != nullptr && when != torch_alloc::RecordContext::NEVER;
  context_recorder_ = keep ? std::move(context_recorder) : nullptr;
  record_context_ = keep ? when : torch_alloc::RecordContext::NEVER;
  keeps_contexts_.store(keep, std::memory_order_relaxed);
}

// Compiled regions (torch.compile) name the trace entries of the calling thread while history
// records, as in PyTorch; so does the thread's metadata text, whether or not it records.
void TorchAllocator::pushCompileContext(std::string& md) {
  if (isHistoryEnabled()) trace_labels::push_compile_context(md);
}

void TorchAllocator::popCompileContext() {
  if (isHistoryEnabled()) trace_labels::pop_compile_context();
}

void TorchAllocator::recordAnnotation(const std::vector<std::pair<std::string, std::string>>& md) {
  if (!initialized()) return;
  std::string name, stage;
  for (const auto& [key, value] : md) {
    if (key == "name") name = value;
    if (key == "stage") stage = value;
  }
  if (!name.empty()) recorder_->annotate(name, stage != "END");
}

void TorchAllocator::setUserMetadata(const std::string& metadata) { trace_labels::set_user_metadata(metadata); }

std::string TorchAllocator::getUserMetadata() { return trace_labels::user_metadata(); }

void TorchAllocator::attachOutOfMemoryObserver(torch_alloc::OutOfMemoryObserver observer) {
  std::lock_guard<std::mutex> init(init_mutex_);
  if (!initialized()) {
    std::lock_guard<std::mutex> lock(controls_mutex_);
    pending_observers_.push_back(std::move(observer));
    return;
  }
  // PyTorch's observers take (device, bytes it tried to allocate, the memory the device
  // allows, free bytes); they run without the allocator's lock, so they may take the GIL.
  allocator_->add_oom_observer([observer = std::move(observer)](const OomInfo& info) {
    observer(info.device, static_cast<size_t>(info.allocation_bytes),
             static_cast<size_t>(info.allowed_bytes.value_or(info.device_total_bytes)),
             static_cast<size_t>(info.device_free_bytes));
  });
}

void TorchAllocator::attachAllocatorTraceTracker(torch_alloc::AllocatorTraceTracker) {
  unsupported("attachAllocatorTraceTracker (PyTorch's internal trace callbacks)");
}

void TorchAllocator::enablePeerAccess(c10::DeviceIndex dev, c10::DeviceIndex dev_to_access) {
  c10::cuda::CUDAGuard guard(dev);
  const cudaError_t status = cudaDeviceEnablePeerAccess(dev_to_access, 0);
  if (status == cudaErrorPeerAccessAlreadyEnabled) {
    (void)cudaGetLastError();  // already enabled: not an error
    return;
  }
  C10_CUDA_CHECK(status);
}

cudaError_t TorchAllocator::memcpyAsync(void* dst, int dst_device, const void* src, int src_device,
                                        size_t count, cudaStream_t stream, bool p2p_enabled) {
  // Memory mapped through the driver's virtual memory API (expandable segments) is copied
  // between devices only by the peer copy unless peer access maps it in both.
  if (p2p_enabled || src_device == dst_device || !expandable_segments_.load(std::memory_order_relaxed))
    return cudaMemcpyAsync(dst, src, count, cudaMemcpyDeviceToDevice, stream);
  return cudaMemcpyPeerAsync(dst, dst_device, src, src_device, count, stream);
}

void TorchAllocator::set_oom_snapshot_pattern(std::string pattern) {
  std::lock_guard<std::mutex> lock(controls_mutex_);
  oom_pattern_ = std::move(pattern);
}

void TorchAllocator::set_job_place(const JobPlace& place) {
  std::lock_guard<std::mutex> lock(controls_mutex_);
  job_place_ = place;
}

SnapshotOptions TorchAllocator::snapshot_options() {
  std::lock_guard<std::mutex> lock(controls_mutex_);
  SnapshotOptions options;
  options.job = job_place_;
  options.complete = add_outside_memory;
  return options;
}

bool TorchAllocator::remember_oom_snapshot(const std::string& path) {
  std::lock_guard<std::mutex> lock(controls_mutex_);
  return oom_snapshot_paths_.insert(path).second;
}

// An OOM observer: runs without the allocator's lock, before the error is raised.
std::string TorchAllocator::oom_verdict_now(const OomInfo& info) {
  return oom_verdict_line(*allocator_, info, add_outside_memory);
}

void TorchAllocator::write_oom_snapshot(const OomInfo& info) {
  std::string path;
  SnapshotOptions options;
  {
    std::lock_guard<std::mutex> lock(controls_mutex_);
    if (oom_pattern_.empty()) return;
    options.job = job_place_;
    path = expand_dump_path(oom_pattern_, info.device, ++oom_snapshots_written_, options);
  }
  options.oom = info;
  options.complete = add_outside_memory;
  if (std::optional<std::string> error = dump_snapshot(*allocator_, recorder_.get(), path, options))
    std::fprintf(stderr, "memsnap: out of memory; snapshot not written: %s\n", error->c_str());
  else
    std::fprintf(stderr, "%s\n", oom_dump_written_line(path, !remember_oom_snapshot(path)).c_str());
}

TorchAllocator& install(const std::optional<std::string>& settings) {
  Result<AllocatorConfig> config =
      settings ? parse_allocator_config(*settings) : allocator_config_from_environment();
  if (!config) throw std::invalid_argument("memsnap.torch.install(): " + config.error());
  if (settings) {  // caching off comes from the environment whatever the settings
    const Result<bool> caching = caching_from_environment();
    if (!caching) throw std::invalid_argument("memsnap.torch.install(): " + caching.error());
    config.value().caching = caching.value();
  }
  static std::mutex install_mutex;
  std::lock_guard<std::mutex> lock(install_mutex);
  const auto push_to_pytorch = [&] {
    // PyTorch's own parser holds the settings too: settings changed later
    // (_set_allocator_settings) start from these, and their pinned_* keys reach PyTorch's host
    // allocator.
    if (config.value().source.empty()) return;
    try {
      c10::CachingAllocator::setAllocatorSettings(config.value().source);
    } catch (const c10::Error& error) {
      throw std::invalid_argument("memsnap.torch.install(): PyTorch refuses the settings '" +
                                  config.value().source + "': " + error.what_without_backtrace());
    }
  };
  torch_alloc::CUDAAllocator* current = torch_alloc::get();
  if (TorchAllocator* mine = installed_allocator()) {
    if (current == mine) {
      if (settings && !(mine->config() == config.value()))
        throw std::runtime_error("memsnap.torch.install(): already installed with settings '" +
                                 mine->config().source + "'; settings are fixed for the process");
      return *mine;
    }
    throw std::runtime_error("memsnap.torch.install(): another allocator (" + current->name() +
                             ") replaced memsnap's");
  }
  // Another backend chosen by the user (backend:cudaMallocAsync, a pluggable allocator) stays.
  if (current != nullptr && current->name() != "native")
    throw std::runtime_error("memsnap.torch.install(): PyTorch's CUDA allocator is '" + current->name() +
                             "'; memsnap replaces only PyTorch's native allocator, so it is not installed");
  int devices_to_init = -1;
  if (current != nullptr && current->initialized()) {
    // PyTorch has started CUDA. Taking over is safe only while its allocator holds nothing.
    const int count = c10::cuda::device_count();
    for (int device = 0; device < count; ++device) {
      const auto stats = current->getDeviceStats(static_cast<c10::DeviceIndex>(device));
      const int64_t reserved = stats.reserved_bytes[0].current;
      if (reserved > 0)
        throw std::runtime_error(
            "memsnap.torch.install() must run before PyTorch allocates CUDA memory: PyTorch's " +
            current->name() + " allocator already holds " + torch_format_size(static_cast<uint64_t>(reserved)) +
            " on cuda:" + std::to_string(device) +
            ". Call it at the start of the program, before any tensor or model is moved to the GPU.");
    }
    devices_to_init = count;
  }
  push_to_pytorch();
  auto* mine = new TorchAllocator(config.value());  // lives as long as the process
  if (devices_to_init >= 0) mine->init(devices_to_init);
  the_allocator.store(mine, std::memory_order_release);
  torch_alloc::allocator.store(mine);
  c10::SetAllocator(c10::DeviceType::CUDA, mine, /*priority=*/UINT8_MAX);
  return *mine;
}

}  // namespace memsnap::pytorch
