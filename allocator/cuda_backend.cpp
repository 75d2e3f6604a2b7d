#include "allocator/cuda_backend.h"

#include "allocator/nvml_processes.h"

#include <cuda_runtime.h>

#include <string>

namespace memsnap {
namespace {

void check(cudaError_t status, const char* what) {
  if (status != cudaSuccess)
    throw DeviceError(std::string("CUDA ") + what + " failed: " + cudaGetErrorString(status));
}

// Makes `device` current for a scope and restores the caller's device afterwards.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    check(cudaGetDevice(&previous_), "cudaGetDevice");
    if (previous_ != device) check(cudaSetDevice(device), "cudaSetDevice");
    changed_ = previous_ != device;
  }
  ~DeviceGuard() {
    if (changed_) cudaSetDevice(previous_);
  }

 private:
  int previous_ = 0;
  bool changed_ = false;
};

}  // namespace

struct CudaBackend::PooledEvent {
  cudaEvent_t event = nullptr;
  int device = 0;
};

bool CudaBackend::available() {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no device" error
    return false;
  }
  return count > 0;
}

CudaBackend::CudaBackend() {
  check(cudaGetDeviceCount(&device_count_), "cudaGetDeviceCount");
  if (device_count_ <= 0) throw DeviceError("CUDA: no device found");
  free_events_.resize(static_cast<size_t>(device_count_));
  vmm_ = std::make_unique<CudaVirtualMemory>(device_count_);
}

CudaBackend::~CudaBackend() {
  for (auto& pooled : all_events_) cudaEventDestroy(pooled->event);
  for (uintptr_t stream : streams_) cudaStreamDestroy(reinterpret_cast<cudaStream_t>(stream));
}

DeviceBackend::CaptureState CudaBackend::capture_state(int, StreamId stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  unsigned long long id = 0;
  cudaGraph_t graph = nullptr;
  const cudaGraphNode_t* terminals = nullptr;
  size_t count = 0;
  check(cudaStreamGetCaptureInfo(reinterpret_cast<cudaStream_t>(stream), &status, &id, &graph, &terminals,
                                 nullptr, &count),
        "cudaStreamGetCaptureInfo");
  if (status == cudaStreamCaptureStatusInvalidated) throw DeviceError("CUDA: a stream's graph capture was invalidated");
  CaptureState state;
  if (status != cudaStreamCaptureStatusActive) return state;
  state.capturing = true;
  state.capture_id = id;
  for (size_t i = 0; i < count; ++i) state.terminals.push_back(reinterpret_cast<uintptr_t>(terminals[i]));
  return state;
}

std::vector<uintptr_t> CudaBackend::node_dependencies(int, uintptr_t node) {
  const auto graph_node = reinterpret_cast<cudaGraphNode_t>(node);
  size_t count = 0;
  check(cudaGraphNodeGetDependencies(graph_node, nullptr, nullptr, &count), "cudaGraphNodeGetDependencies");
  std::vector<cudaGraphNode_t> nodes(count);
  std::vector<cudaGraphEdgeData> edges(count);
  if (count > 0)
    check(cudaGraphNodeGetDependencies(graph_node, nodes.data(), edges.data(), &count),
          "cudaGraphNodeGetDependencies");
  std::vector<uintptr_t> out;
  for (size_t i = 0; i < count; ++i) out.push_back(reinterpret_cast<uintptr_t>(nodes[i]));
  return out;
}

std::optional<uintptr_t> CudaBackend::reserve(int device, size_t bytes) {
  DeviceGuard guard(device);
  void* ptr = nullptr;
  // A graph's private pool grows while the graph captures, and cudaMalloc is refused in the
  // global capture mode: as PyTorch does, the thread switches to relaxed mode for the call.
  cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  cudaThreadExchangeStreamCaptureMode(&mode);
  const cudaError_t status = cudaMalloc(&ptr, bytes);
  cudaThreadExchangeStreamCaptureMode(&mode);
  if (status == cudaErrorMemoryAllocation) {
    cudaGetLastError();  // an out-of-memory error is not sticky; clear it
    return std::nullopt;
  }
  check(status, "cudaMalloc");
  return reinterpret_cast<uintptr_t>(ptr);
}

void CudaBackend::release(int device, uintptr_t address, size_t /*bytes*/) {
  DeviceGuard guard(device);
  check(cudaFree(reinterpret_cast<void*>(address)), "cudaFree");
}

DeviceMemoryInfo CudaBackend::memory_info(int device) {
  DeviceGuard guard(device);
  DeviceMemoryInfo info;
  check(cudaMemGetInfo(&info.free_bytes, &info.total_bytes), "cudaMemGetInfo");
  return info;
}

std::vector<DeviceProcess> CudaBackend::device_processes(int device) {
  DeviceGuard guard(device);
  char bus_id[64] = {};
  if (cudaDeviceGetPCIBusId(bus_id, sizeof bus_id, device) != cudaSuccess) {
    cudaGetLastError();
    return {};
  }
  size_t free = 0, total = 0;
  if (cudaMemGetInfo(&free, &total) != cudaSuccess) {  // (a bound for NVML's figures)
    cudaGetLastError();
    total = SIZE_MAX;
  }
  return nvml_processes_at_bus_id(bus_id, total);
}

std::string CudaBackend::device_name(int device) const {
  cudaDeviceProp properties{};
  if (cudaGetDeviceProperties(&properties, device) != cudaSuccess) {
    cudaGetLastError();
    return "CUDA device " + std::to_string(device);
  }
  return properties.name;
}

EventHandle CudaBackend::record_event(int device, StreamId stream) {
  DeviceGuard guard(device);
  PooledEvent* pooled = nullptr;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto& spare = free_events_.at(static_cast<size_t>(device));
    if (!spare.empty()) {
      pooled = spare.back();
      spare.pop_back();
    }
  }
  if (pooled == nullptr) {
    auto fresh = std::make_unique<PooledEvent>();
    fresh->device = device;
    check(cudaEventCreateWithFlags(&fresh->event, cudaEventDisableTiming), "cudaEventCreate");
    pooled = fresh.get();
    std::lock_guard<std::mutex> lock(mutex_);
    all_events_.push_back(std::move(fresh));
  }
  check(cudaEventRecord(pooled->event, reinterpret_cast<cudaStream_t>(stream)), "cudaEventRecord");
  return reinterpret_cast<EventHandle>(pooled);
}

bool CudaBackend::event_completed(EventHandle event) {
  const cudaError_t status = cudaEventQuery(reinterpret_cast<PooledEvent*>(event)->event);
  if (status == cudaErrorNotReady) {
    cudaGetLastError();
    return false;
  }
  check(status, "cudaEventQuery");
  return true;
}

void CudaBackend::synchronize_event(EventHandle event) {
  check(cudaEventSynchronize(reinterpret_cast<PooledEvent*>(event)->event), "cudaEventSynchronize");
}

void CudaBackend::release_event(EventHandle event) {
  auto* pooled = reinterpret_cast<PooledEvent*>(event);
  std::lock_guard<std::mutex> lock(mutex_);
  free_events_.at(static_cast<size_t>(pooled->device)).push_back(pooled);
}

StreamId CudaBackend::create_stream(int device) {
  DeviceGuard guard(device);
  cudaStream_t stream = nullptr;
  check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  std::lock_guard<std::mutex> lock(mutex_);
  streams_.push_back(reinterpret_cast<uintptr_t>(stream));
  return reinterpret_cast<StreamId>(stream);
}

}  // namespace memsnap
