// Thrust, CUB and cuda::mr consumers running on memsnap's caching allocator on a real GPU
// (skipped without one): their memory is the allocator's, freed back to its cache, and their
// allocations are in a snapshot's trace under the stacks of the functions that made them.
#include <cub/device/device_radix_sort.cuh>
#include <gtest/gtest.h>
#include <thrust/device_vector.h>
#include <thrust/execution_policy.h>
#include <thrust/sequence.h>
#include <thrust/sort.h>

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "allocator/cuda_backend.h"
#include "memsnap/allocator.h"
#include "memsnap/cub_temporary_storage.h"
#include "memsnap/cuda_memory_resource.h"
#include "memsnap/errors.h"
#include "memsnap/recording.h"
#include "memsnap/thrust_allocator.h"
#include "snapshot/msgpack_reader.h"

namespace memsnap {
namespace {

constexpr size_t kCount = size_t{1} << 22;  // 16 MiB of floats or keys

// Through the public API alone (include/memsnap/), as a CUDA C++ program uses it; the snapshot
// it writes is read back with memsnap's reader.
struct OnGpu : ::testing::Test {
  void SetUp() override {
    if (!CudaBackend::available()) GTEST_SKIP() << "no usable CUDA device";
    AllocatorOptions options;
    options.backend = Backend::kCuda;
    allocator.emplace(options);
    recording.emplace(*allocator);
    ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  }
  void TearDown() override {
    if (stream != nullptr) cudaStreamDestroy(stream);
    recording.reset();
    allocator.reset();
  }
  int64_t stat(const std::string& key) const {
    for (const auto& [name, value] : allocator->memory_stats(0))
      if (name == key) return value;
    ADD_FAILURE() << "no statistic " << key;
    return -1;
  }
  // Whether an allocation of at least `bytes` was recorded under a stack naming `function`.
  bool allocated_under(const std::string& function, size_t bytes) {
    const std::string path = (std::filesystem::temp_directory_path() /
                              ("memsnap-cccl-" + std::to_string(getpid()) + ".msgpack")).string();
    recording->write_snapshot(path);
    auto read = read_msgpack_snapshot(path);
    std::remove(path.c_str());
    if (!read) {
      ADD_FAILURE() << read.error();
      return false;
    }
    const Snapshot& snapshot = read.value();
    for (const auto& trace : snapshot.device_traces)
      for (size_t i = 0; i < trace.size(); ++i) {
        const TraceEntry entry = trace[i];
        if (entry.action != TraceAction::kAlloc || entry.size < bytes || entry.stack < 0) continue;
        for (uint32_t frame : snapshot.stacks[static_cast<size_t>(entry.stack)])
          if (snapshot.frames[frame].function.find(function) != std::string::npos) return true;
      }
    return false;
  }
  std::optional<Allocator> allocator;
  std::optional<Recording> recording;
  cudaStream_t stream = nullptr;
};

__attribute__((noinline)) void fill_and_sort_with_thrust(Allocator& allocator, cudaStream_t stream) {
  const auto on = reinterpret_cast<StreamId>(stream);
  thrust::device_vector<float, ThrustAllocator<float>> values(kCount, ThrustAllocator<float>(allocator, on));
  thrust::sequence(thrust::cuda::par.on(stream), values.begin(), values.end(), float(kCount), -1.0f);
  // The sort's temporary storage comes from memsnap too.
  thrust::sort(thrust::cuda::par(ThrustAllocator<char>(allocator, on)).on(stream), values.begin(), values.end());
  std::vector<float> first(4);
  thrust::copy(values.begin(), values.begin() + 4, first.begin());
  EXPECT_EQ(first, (std::vector<float>{1.0f, 2.0f, 3.0f, 4.0f}));
}

TEST_F(OnGpu, ThrustContainersAndTemporaryStorageComeFromTheCachingAllocator) {
  fill_and_sort_with_thrust(*allocator, stream);
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  EXPECT_GE(stat("allocated_bytes.all.peak"), static_cast<int64_t>(kCount * sizeof(float)));
  EXPECT_EQ(stat("allocated_bytes.all.current"), 0);  // the vector and the temporaries went back
  EXPECT_GT(stat("reserved_bytes.all.current"), 0);   // to the cache
  EXPECT_TRUE(allocated_under("fill_and_sort_with_thrust", kCount * sizeof(float)));
  EXPECT_EQ(allocator->check_invariants(), std::vector<std::string>{});
}

__attribute__((noinline)) void radix_sort_with_cub(Allocator& allocator, cudaStream_t stream) {
  ThrustAllocator<unsigned> keys_on(allocator, reinterpret_cast<StreamId>(stream));
  thrust::device_vector<unsigned, ThrustAllocator<unsigned>> in(kCount, keys_on), out(kCount, keys_on);
  thrust::sequence(thrust::cuda::par.on(stream), in.rbegin(), in.rend());
  const unsigned* keys_in = thrust::raw_pointer_cast(in.data());
  unsigned* keys_out = thrust::raw_pointer_cast(out.data());
  run_with_cub_storage(allocator, stream, [&](void* storage, size_t& bytes) {
    return cub::DeviceRadixSort::SortKeys(storage, bytes, keys_in, keys_out, static_cast<int>(kCount), 0, 32, stream);
  });
  unsigned first = 1;
  cudaMemcpyAsync(&first, keys_out, sizeof first, cudaMemcpyDeviceToHost, stream);
  cudaStreamSynchronize(stream);
  EXPECT_EQ(first, 0u);
}

TEST_F(OnGpu, CubTemporaryStorageComesFromTheCachingAllocator) {
  radix_sort_with_cub(*allocator, stream);
  EXPECT_EQ(stat("allocated_bytes.all.current"), 0);
  EXPECT_TRUE(allocated_under("radix_sort_with_cub", 1));
  EXPECT_EQ(allocator->check_invariants(), std::vector<std::string>{});
}

// Not a tail call (README: -fno-optimize-sibling-calls), so its frame stays in the stack.
__attribute__((noinline)) void* allocate_through_resource_ref(cuda::mr::async_resource_ref<cuda::mr::device_accessible> ref,
                                                             cudaStream_t stream) {
  void* p = ref.allocate_async(64 << 20, 256, cuda::stream_ref{stream});
  if (p == nullptr) throw std::runtime_error("no memory");
  return p;
}

TEST_F(OnGpu, ACudaMrConsumerAllocatesThroughTheCachingAllocator) {
  CudaMemoryResource resource(*allocator);
  cuda::mr::async_resource_ref<cuda::mr::device_accessible> ref{resource};
  void* p = allocate_through_resource_ref(ref, stream);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 256, 0u);
  EXPECT_EQ(cudaMemsetAsync(p, 0, 64 << 20, stream), cudaSuccess);
  EXPECT_EQ(stat("allocated_bytes.all.current"), 64 << 20);
  ref.deallocate_async(p, 64 << 20, 256, cuda::stream_ref{stream});
  void* again = ref.allocate(64 << 20, 256);  // the synchronous side: the default stream
  ref.deallocate(again, 64 << 20, 256);
  EXPECT_THROW((void)resource.allocate(1024, 4096), Error);
  cudaStreamSynchronize(stream);
  EXPECT_EQ(stat("allocated_bytes.all.current"), 0);
  EXPECT_TRUE(allocated_under("allocate_through_resource_ref", 64 << 20));
  EXPECT_EQ(allocator->check_invariants(), std::vector<std::string>{});
}

}  // namespace
}  // namespace memsnap
