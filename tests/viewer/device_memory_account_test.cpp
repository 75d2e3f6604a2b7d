// The device memory account (viewer/device_memory_account.h) says only what the driver's figures
// support: memory outside the allocator as one figure, split into this process and others only
// when NVML lists this process, and nothing where the figures contradict each other.
#include "viewer/device_memory_account.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>

#include "allocator/caching_allocator.h"
#include "allocator/simulated_backend.h"
#include "snapshot/snapshot_builder.h"
#include "viewer/snapshot_stats.h"
#include "tests/test_snapshots.h"

namespace memsnap {
namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;

struct Device {
  std::shared_ptr<SimulatedBackend> backend;
  std::unique_ptr<CachingAllocator> allocator;
  Device() {
    SimulatedBackend::Options options;
    options.capacity_bytes = 1024 * kMiB;
    backend = std::make_shared<SimulatedBackend>(options);
    allocator = std::make_unique<CachingAllocator>(backend);
  }
};

TEST(DeviceMemoryAccount, MemoryOutsideTheAllocatorIsWhatTheDriverCountsBeyondItsSegments) {
  Device device;
  const auto outside = device.backend->reserve(0, 300 * kMiB);  // another library's cudaMalloc
  void* live = device.allocator->allocate(100 * kMiB);
  const Snapshot snapshot = take_snapshot(*device.allocator, nullptr);
  const auto accounts = account_device_memory(snapshot);
  ASSERT_EQ(accounts.size(), 1u);
  const DeviceMemoryAccount& a = accounts[0];
  EXPECT_EQ(a.total_bytes, 1024 * kMiB);
  EXPECT_EQ(a.reserved_bytes, 100 * kMiB);
  EXPECT_EQ(a.allocated_bytes, 100 * kMiB);
  EXPECT_EQ(a.free_bytes, 624 * kMiB);
  ASSERT_TRUE(a.outside_bytes.has_value());
  EXPECT_EQ(*a.outside_bytes, 300 * kMiB);
  EXPECT_FALSE(a.processes_listed);
  EXPECT_FALSE(a.this_process_bytes.has_value());  // no NVML: not split
  const std::string text = stats_to_text(compute_stats(snapshot), snapshot);
  EXPECT_NE(text.find("    outside the allocator                  300.00 MiB"), std::string::npos) << text;
  EXPECT_EQ(stats_to_json(compute_stats(snapshot), snapshot)["device_memory"][0]["outside_bytes"], 300 * kMiB);
  device.allocator->deallocate(live);
  device.backend->release(0, *outside, 300 * kMiB);
}

TEST(DeviceMemoryAccount, NvmlsListSplitsItWhenThisProcessIsInIt) {
  Device device;
  const auto outside = device.backend->reserve(0, 300 * kMiB);
  void* live = device.allocator->allocate(100 * kMiB);
  Snapshot snapshot = take_snapshot(*device.allocator, nullptr);
  // This process holds its 100 MiB of segments and 200 MiB more; another holds 100 MiB.
  snapshot.device_memory[0].processes = {{777, 100 * kMiB}, {snapshot.process.pid, 300 * kMiB}};
  DeviceMemoryAccount a = account_device_memory(snapshot).at(0);
  ASSERT_TRUE(a.this_process_outside_bytes.has_value());
  EXPECT_EQ(*a.this_process_outside_bytes, 200 * kMiB);
  EXPECT_EQ(a.other_processes_bytes, 100 * kMiB);
  ASSERT_EQ(a.other_processes.size(), 1u);
  EXPECT_EQ(a.other_processes[0].first, 777);
  const std::string text = device_memory_text({a});
  EXPECT_NE(text.find("    this process, outside the allocator    200.00 MiB"), std::string::npos) << text;
  EXPECT_NE(text.find("    other processes                        100.00 MiB  pid 777 100.00 MiB"), std::string::npos) << text;
  EXPECT_EQ(text.find("not listed by NVML"), std::string::npos) << text;  // 300 = 200 + 100

  // NVML's pids are the host's in a container: this process not among them, nothing is split.
  snapshot.device_memory[0].processes = {{777, 100 * kMiB}, {778, 300 * kMiB}};
  a = account_device_memory(snapshot).at(0);
  EXPECT_FALSE(a.this_process_outside_bytes.has_value());
  EXPECT_NE(a.note.find("which of them is this process, the figures cannot say"), std::string::npos) << a.note;
  EXPECT_NE(device_memory_text({a}).find("    outside the allocator"), std::string::npos);
  device.allocator->deallocate(live);
  device.backend->release(0, *outside, 300 * kMiB);
}

// With the calls outside the allocator recorded, this process's memory outside it splits into
// the libraries that asked for it and the remainder no recorded call made (the CUDA context).
TEST(DeviceMemoryAccount, RecordedCallsSplitThisProcesssOutsideMemoryIntoLibrariesAndTheContext) {
  Device device;
  const auto nccl = device.backend->reserve(0, 150 * kMiB);
  const auto cublas = device.backend->reserve(0, 30 * kMiB);
  void* live = device.allocator->allocate(100 * kMiB);
  Snapshot snapshot = take_snapshot(*device.allocator, nullptr);
  snapshot.device_memory[0].processes = {{777, 100 * kMiB}, {snapshot.process.pid, 300 * kMiB}};
  OutsideMemory outside;
  outside.live = {{0, *nccl, 100 * kMiB, OutsideKind::kDevice, "cudaMalloc", "libnccl.so.2", kNoStackIndex, 1},
                  {0, *nccl + 100 * kMiB, 50 * kMiB, OutsideKind::kDevice, "cuMemMap", "libnccl.so.2", kNoStackIndex, 2},
                  {0, *cublas, 30 * kMiB, OutsideKind::kDevice, "cudaMalloc", "libcublasLt.so.13", kNoStackIndex, 3},
                  {-1, 0x5000000, 8 * kMiB, OutsideKind::kPinnedHost, "cudaHostAlloc", "libtorch_cuda.so", kNoStackIndex, 4},
                  {0, 0x9000000, 64 * kMiB, OutsideKind::kManaged, "cudaMallocManaged", "", kNoStackIndex, 5}};
  snapshot.outside_memory = outside;
  const DeviceMemoryAccount a = account_device_memory(snapshot).at(0);
  ASSERT_TRUE(a.libraries_bytes.has_value());
  EXPECT_EQ(*a.libraries_bytes, 180 * kMiB);  // managed memory is not known to be on the device
  ASSERT_EQ(a.libraries.size(), 2u);
  EXPECT_EQ(a.libraries[0], (std::pair<std::string, uint64_t>{"libnccl.so.2", 150 * kMiB}));
  EXPECT_EQ(a.libraries[1], (std::pair<std::string, uint64_t>{"libcublasLt.so.13", 30 * kMiB}));
  ASSERT_TRUE(a.context_bytes.has_value());
  EXPECT_EQ(*a.context_bytes, 20 * kMiB);  // 200 MiB outside the allocator, 180 of it the libraries'
  const std::string text = stats_to_text(compute_stats(snapshot), snapshot);
  EXPECT_NE(text.find("    other libraries in this process        180.00 MiB  libnccl.so.2 150.00 MiB, libcublasLt.so.13 30.00 MiB"),
            std::string::npos) << text;
  EXPECT_NE(text.find("    CUDA context and unaccounted            20.00 MiB"), std::string::npos) << text;
  EXPECT_NE(text.find("  pinned host memory: 8.00 MiB\n    libtorch_cuda.so"), std::string::npos) << text;
  EXPECT_NE(text.find("managed memory (cudaMallocManaged): 64.00 MiB"), std::string::npos) << text;
  const nlohmann::json json = stats_to_json(compute_stats(snapshot), snapshot);
  EXPECT_EQ(json["device_memory"][0]["context_bytes"], 20 * kMiB);
  EXPECT_EQ(json["device_memory"][0]["libraries"][0]["library"], "libnccl.so.2");
  EXPECT_EQ(json["outside_memory"]["pinned_host_bytes"], 8 * kMiB);
  EXPECT_EQ(json["outside_memory"]["recorded"], true);

  // Calls not recorded: nothing is split, and the stats say why.
  snapshot.outside_memory = OutsideMemory{"another tool holds CUPTI's callbacks (a profiler)", {}, {}, 0};
  const DeviceMemoryAccount unrecorded = account_device_memory(snapshot).at(0);
  EXPECT_FALSE(unrecorded.libraries_bytes.has_value());
  EXPECT_FALSE(unrecorded.context_bytes.has_value());
  EXPECT_NE(stats_to_text(compute_stats(snapshot), snapshot)
                .find("  not recorded: another tool holds CUPTI's callbacks (a profiler)"),
            std::string::npos);

  // Libraries that hold more than NVML counts outside the allocator: figures of two moments.
  snapshot.outside_memory = outside;
  snapshot.outside_memory->live[0].size = 300 * kMiB;
  const DeviceMemoryAccount apart = account_device_memory(snapshot).at(0);
  EXPECT_FALSE(apart.context_bytes.has_value());
  EXPECT_NE(apart.note.find("the CUDA context's share cannot be told"), std::string::npos) << apart.note;
  device.allocator->deallocate(live);
  device.backend->release(0, *nccl, 150 * kMiB);
  device.backend->release(0, *cublas, 30 * kMiB);
}

TEST(DeviceMemoryAccount, FiguresThatContradictEachOtherGiveNoOutsideFigure) {
  Device device;
  void* live = device.allocator->allocate(100 * kMiB);
  Snapshot snapshot = take_snapshot(*device.allocator, nullptr);
  snapshot.device_memory[0].free_bytes = snapshot.device_memory[0].total_bytes - 10 * kMiB;  // sampled apart
  const DeviceMemoryAccount a = account_device_memory(snapshot).at(0);
  EXPECT_FALSE(a.outside_bytes.has_value());
  EXPECT_NE(a.note.find("cannot be told"), std::string::npos) << a.note;
  EXPECT_EQ(device_memory_text({a}).find("    outside the allocator"), std::string::npos);
  device.allocator->deallocate(live);
}

// A real snapshot from an H200 (tests/data/memsnap-h200/README.md): memsnap.torch with 1 GiB
// taken through CuPy's pool beside it. The account agrees with torch and nvidia-smi of the moment.
TEST(DeviceMemoryAccount, ARealProcessWithCuPyBesideTheAllocatorAddsUp) {
  const Snapshot snapshot = testing::load_test_snapshot("memsnap-h200/whole_device.msgpack");
  const auto accounts = account_device_memory(snapshot);
  ASSERT_EQ(accounts.size(), 1u);
  const DeviceMemoryAccount& a = accounts[0];
  EXPECT_EQ(a.total_bytes, 150109880320u);
  EXPECT_EQ(a.free_bytes, 146030067712u);
  EXPECT_EQ(a.reserved_bytes, 2382364672u);  // torch.cuda.memory_reserved()
  ASSERT_TRUE(a.this_process_bytes.has_value());
  EXPECT_EQ(*a.this_process_bytes, 3882 * kMiB);  // nvidia-smi's figure for the process
  ASSERT_TRUE(a.this_process_outside_bytes.has_value());
  // CuPy's 1 GiB and the CUDA context with the libraries' own memory; under 2 GiB in all.
  EXPECT_GE(*a.this_process_outside_bytes, 1024 * kMiB);
  EXPECT_LT(*a.this_process_outside_bytes, 2048 * kMiB);
  EXPECT_TRUE(a.other_processes.empty());
  ASSERT_TRUE(a.outside_bytes.has_value());
  EXPECT_LT(*a.outside_bytes - *a.this_process_outside_bytes, 64 * kMiB);  // what NVML does not list
}

TEST(DeviceMemoryAccount, ASnapshotWithoutDriverFiguresHasNoAccount) {
  Snapshot snapshot;
  EXPECT_TRUE(account_device_memory(snapshot).empty());
  EXPECT_EQ(device_memory_text({}), "");
}

// A real training step on an H200 (tests/data/memsnap-h200/README.md): memsnap.torch with a
// one-rank NCCL process group, cuDNN convolutions and a pinned DataLoader. The categories add up
// to what NVML said the process held, NCCL's buffers are named, and the remainder is the CUDA
// context: the same once the tensors, NCCL's communicator and the cache were gone.
TEST(DeviceMemoryAccount, ARealStepWithNcclCudnnAndAPinnedDataLoaderAddsUpToTheProcess) {
  const Snapshot step = testing::load_test_snapshot("memsnap-h200/nccl_cudnn_step.msgpack");
  const DeviceMemoryAccount a = account_device_memory(step).at(0);
  ASSERT_TRUE(a.this_process_bytes && a.libraries_bytes && a.context_bytes);
  EXPECT_EQ(*a.this_process_bytes, 1'732'247'552u);
  EXPECT_EQ(a.reserved_bytes, 335'544'320u);
  EXPECT_EQ(a.reserved_bytes + *a.libraries_bytes + *a.context_bytes, *a.this_process_bytes);
  ASSERT_GE(a.libraries.size(), 2u);
  EXPECT_EQ(a.libraries[0], (std::pair<std::string, uint64_t>{"libnccl.so.2", 406'847'488}));
  EXPECT_EQ(a.libraries[1], (std::pair<std::string, uint64_t>{"libcublas.so.13", 134'481'920}));
  const DeviceMemoryAccount bare =
      account_device_memory(testing::load_test_snapshot("memsnap-h200/nccl_cudnn_step_after_teardown.msgpack")).at(0);
  ASSERT_TRUE(bare.context_bytes);
  EXPECT_EQ(*bare.context_bytes, *a.context_bytes);  // 855,323,128 B both times
  EXPECT_TRUE(std::none_of(bare.libraries.begin(), bare.libraries.end(),
                           [](const auto& l) { return l.first == "libnccl.so.2"; }));  // destroyed with its group
  const OutsideMemoryAccount outside = account_outside_memory(step);
  EXPECT_GE(outside.pinned_host_bytes, 2u << 20);  // the DataLoader's pinned batches
  EXPECT_EQ(outside.host_libraries.at(0).library, "libtorch_cuda.so");
}

// `memsnap record` around a JAX program (XLA_PYTHON_CLIENT_PREALLOCATE=false) on an H200: its
// allocations are the segments, and the driver's figures give its CUDA context as the remainder.
TEST(DeviceMemoryAccount, AJaxProgramUnderMemsnapRecordShowsItsContext) {
  const Snapshot jax = testing::load_test_snapshot("memsnap-h200/jax_record.msgpack");
  const DeviceMemoryAccount a = account_device_memory(jax).at(0);
  EXPECT_EQ(a.reserved_bytes, a.allocated_bytes);  // each allocation a segment of its own
  EXPECT_GT(a.reserved_bytes, 2u << 30);           // the 8192x8192 operands and product
  ASSERT_TRUE(a.context_bytes);
  EXPECT_EQ(*a.libraries_bytes, 0u);  // (its device allocations are the segments)
  EXPECT_GT(*a.context_bytes, 256u << 20);
  EXPECT_LT(*a.context_bytes, 1u << 30);
  const OutsideMemoryAccount outside = account_outside_memory(jax);
  ASSERT_FALSE(outside.host_libraries.empty());
  EXPECT_EQ(outside.host_libraries[0].library, "jax_plugins/xla_cuda13/xla_cuda_plugin.so");
}

}  // namespace
}  // namespace memsnap
