// The allocator on a real GPU. Skips (with the reason) where memsnap was built without CUDA
// or no device is usable, as on CI; runs on the GPU machine.
#include <gtest/gtest.h>

#include "allocator/caching_allocator.h"
#include "allocator/default_backend.h"
#ifdef MEMSNAP_HAVE_CUDA
#include <cuda_runtime.h>

#include "allocator/cuda_backend.h"
#endif

namespace memsnap {
namespace {

#ifdef MEMSNAP_HAVE_CUDA
class CudaAllocator : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!CudaBackend::available()) GTEST_SKIP() << "no usable CUDA device on this machine";
    backend_ = std::make_shared<CudaBackend>();
  }
  std::shared_ptr<CudaBackend> backend_;
};

TEST_F(CudaAllocator, AllocatesUsableDeviceMemoryAndCachesIt) {
  CachingAllocator allocator(backend_);
  void* a = allocator.allocate(1 << 20);
  ASSERT_NE(a, nullptr);
  ASSERT_EQ(cudaMemset(a, 0x5a, 1 << 20), cudaSuccess);
  unsigned char byte = 0;
  ASSERT_EQ(cudaMemcpy(&byte, static_cast<char*>(a) + 12345, 1, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(byte, 0x5a);
  allocator.deallocate(a);
  void* b = allocator.allocate(1 << 20);
  EXPECT_EQ(a, b);  // served from the cache
  EXPECT_EQ(allocator.device_stats(0).num_device_alloc, 1);
  allocator.deallocate(b);
  EXPECT_TRUE(allocator.check_invariants().empty());
  allocator.empty_cache();
  EXPECT_EQ(allocator.device_stats(0).reserved_bytes[kAggregate].current, 0);
}

TEST_F(CudaAllocator, RecordStreamWaitsForTheOtherStream) {
  CachingAllocator allocator(backend_);
  cudaStream_t side = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking), cudaSuccess);
  void* a = allocator.allocate(4096);
  allocator.record_stream(a, reinterpret_cast<StreamId>(side));
  allocator.deallocate(a);
  ASSERT_EQ(cudaStreamSynchronize(side), cudaSuccess);
  // The event has completed: the next allocation on the default stream reuses the block.
  void* b = allocator.allocate(4096);
  EXPECT_EQ(a, b);
  allocator.deallocate(b);
  EXPECT_TRUE(allocator.check_invariants().empty());
  cudaStreamDestroy(side);
}

TEST_F(CudaAllocator, ImpossibleRequestRaisesOutOfMemoryWithDeviceFigures) {
  CachingAllocator allocator(backend_);
  const DeviceMemoryInfo info = backend_->memory_info(0);
  try {
    allocator.allocate(info.total_bytes * 2);
    FAIL() << "expected OutOfMemoryError";
  } catch (const OutOfMemoryError& error) {
    EXPECT_EQ(error.info().device_total_bytes, info.total_bytes);
    EXPECT_GT(error.info().device_free_bytes, 0u);
  }
  EXPECT_EQ(allocator.device_stats(0).num_ooms, 1);
  void* ok = allocator.allocate(1 << 20);  // the device is still usable
  allocator.deallocate(ok);
}

TEST_F(CudaAllocator, MemoryFractionCapsReservationsOnTheDevice) {
  CachingAllocator allocator(backend_);
  allocator.set_memory_fraction(0.01, 0);  // ~800 MB of an 80 GB card
  const size_t total = backend_->memory_info(0).total_bytes;
  EXPECT_THROW(allocator.allocate(total / 50), OutOfMemoryError);
  void* small = allocator.allocate(total / 200);
  allocator.deallocate(small);
}
#endif

TEST(DefaultBackend, FallsBackToTheSimulatedDeviceWithoutAGpu) {
  Result<std::shared_ptr<DeviceBackend>> backend = make_default_backend();
  ASSERT_TRUE(backend.ok()) << backend.error();
  if (cuda_device_available())
    EXPECT_EQ(backend.value()->name(), "cuda");
  else
    EXPECT_EQ(backend.value()->name(), "simulated");
}

}  // namespace
}  // namespace memsnap
