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
  // Every test starts on device 0 whatever the one before left current (the two-device test
  // switches), as the tests' own CUDA calls on device 0 memory assume.
  void TearDown() override {
    if (backend_) cudaSetDevice(0);
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

TEST_F(CudaAllocator, TwoDevicesInOneProcessKeepTheirOwnMemoryAndStatistics) {
  if (backend_->device_count() < 2) GTEST_SKIP() << "needs two GPUs, this machine has " << backend_->device_count();
  CachingAllocator allocator(backend_);
  constexpr size_t kBytes = 8 << 20;
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  void* on0 = allocator.allocate(kBytes, 0);
  void* on1 = allocator.allocate(3 * kBytes, 1);
  int current = -1;
  ASSERT_EQ(cudaGetDevice(&current), cudaSuccess);
  EXPECT_EQ(current, 0) << "allocating on device 1 leaves the caller's current device as it was";
  ASSERT_EQ(cudaMemset(on0, 0x2a, kBytes), cudaSuccess);
  ASSERT_EQ(cudaMemcpyPeer(on1, 1, on0, 0, kBytes), cudaSuccess);  // through the host when there is no peer access
  unsigned char byte = 0;
  ASSERT_EQ(cudaSetDevice(1), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(&byte, static_cast<char*>(on1) + kBytes - 1, 1, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(byte, 0x2a);
  EXPECT_EQ(allocator.device_stats(0).allocated_bytes[kAggregate].current, static_cast<int64_t>(kBytes));
  EXPECT_EQ(allocator.device_stats(1).allocated_bytes[kAggregate].current, static_cast<int64_t>(3 * kBytes));
  cudaPointerAttributes attributes{};
  ASSERT_EQ(cudaPointerGetAttributes(&attributes, on1), cudaSuccess);
  EXPECT_EQ(attributes.device, 1);
  allocator.deallocate(on1);  // a pointer finds its own device
  allocator.deallocate(on0);
  EXPECT_EQ(allocator.device_stats(1).allocated_bytes[kAggregate].current, 0);
  EXPECT_TRUE(allocator.check_invariants().empty());
  allocator.empty_cache();
  EXPECT_EQ(allocator.device_stats(0).reserved_bytes[kAggregate].current, 0);
  EXPECT_EQ(allocator.device_stats(1).reserved_bytes[kAggregate].current, 0);
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

// expandable_segments:True through the driver's virtual memory API: the pages mapped hold
// real memory, a segment grows in place, and emptying the cache gives the pages back.
TEST_F(CudaAllocator, ExpandableSegmentsGrowInPlaceAndGiveWholePagesBack) {
  if (!backend_->supports_expandable_segments(0))
    GTEST_SKIP() << "this device or driver cannot map memory into reserved address space";
  constexpr size_t kMiB = 1 << 20;
  CachingAllocator allocator(backend_, parse_allocator_config("expandable_segments:True").value());
  auto* a = static_cast<char*>(allocator.allocate(3 * kMiB));
  auto* b = static_cast<char*>(allocator.allocate(30 * kMiB));
  auto* c = static_cast<char*>(allocator.allocate(300 * kMiB));
  EXPECT_EQ(b, a + 3 * kMiB);  // the same range grows: PyTorch's layout
  EXPECT_EQ(c, a + 33 * kMiB);
  ASSERT_EQ(cudaMemset(a, 0x11, 333 * kMiB), cudaSuccess);  // across every mapped page
  unsigned char byte = 0;
  ASSERT_EQ(cudaMemcpy(&byte, c + 300 * kMiB - 1, 1, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(byte, 0x11);
  DeviceStats stats = allocator.device_stats(0);
  EXPECT_EQ(stats.reserved_bytes[kAggregate].current, static_cast<int64_t>(340 * kMiB));
  EXPECT_EQ(stats.num_device_alloc, 3);
  EXPECT_TRUE(allocator.check_invariants().empty());

  const size_t free_before = backend_->memory_info(0).free_bytes;
  allocator.deallocate(b);
  allocator.deallocate(c);
  allocator.empty_cache();  // pages [20, 340) MiB lie wholly in the free bytes
  EXPECT_EQ(allocator.device_stats(0).reserved_bytes[kAggregate].current,
            static_cast<int64_t>(20 * kMiB));
  EXPECT_GE(backend_->memory_info(0).free_bytes, free_before + 300 * kMiB);  // really returned
  auto* d = static_cast<char*>(allocator.allocate(100 * kMiB));
  EXPECT_EQ(d, a + 3 * kMiB);  // grows over the free bytes and remaps pages after them
  ASSERT_EQ(cudaMemset(d, 0x22, 100 * kMiB), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  allocator.deallocate(d);
  allocator.deallocate(a);
  EXPECT_TRUE(allocator.check_invariants().empty());
  allocator.empty_cache();
  EXPECT_EQ(allocator.device_stats(0).reserved_bytes[kAggregate].current, 0);
}

TEST_F(CudaAllocator, ExpandableSegmentsRunOutOfMemoryCleanly) {
  if (!backend_->supports_expandable_segments(0))
    GTEST_SKIP() << "this device or driver cannot map memory into reserved address space";
  CachingAllocator allocator(backend_, parse_allocator_config("expandable_segments:True").value());
  const size_t total = backend_->memory_info(0).total_bytes;
  const size_t free_before = backend_->memory_info(0).free_bytes;
  EXPECT_THROW(allocator.allocate(total + total / 16), OutOfMemoryError);
  EXPECT_EQ(allocator.device_stats(0).num_ooms, 1);
  EXPECT_EQ(allocator.device_stats(0).reserved_bytes[kAggregate].current, 0);
  // Pages created before the device ran out were released again.
  EXPECT_GE(backend_->memory_info(0).free_bytes + (64 << 20), free_before);
  void* ok = allocator.allocate(1 << 20);
  ASSERT_EQ(cudaMemset(ok, 0, 1 << 20), cudaSuccess);
  allocator.deallocate(ok);
  EXPECT_TRUE(allocator.check_invariants().empty());
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
