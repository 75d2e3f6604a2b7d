// The device memory account (viewer/device_memory_account.h) says only what the driver's figures
// support: memory outside the allocator as one figure, split into this process and others only
// when NVML lists this process, and nothing where the figures contradict each other.
#include "viewer/device_memory_account.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <memory>

#include "allocator/caching_allocator.h"
#include "allocator/simulated_backend.h"
#include "snapshot/msgpack_writer.h"
#include "snapshot/pytorch_pickle_writer.h"
#include "snapshot/snapshot_builder.h"
#include "snapshot/snapshot_loader.h"
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
  snapshot.outside_memory = OutsideMemory{"another tool holds CUPTI's callbacks (a profiler)", {}, {}, 0, {}};
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

// What NVML listed for this process just before the allocator's first segment (its CUDA context
// as created) is said beside the remainder, and goes through every file the snapshot is written to.
TEST(DeviceMemoryAccount, WhatThisProcessHeldBeforeTheAllocatorsFirstSegmentIsSaid) {
  Device device;
  device.backend->set_device_processes(0, {{777, 100 * kMiB}, {getpid(), 500 * kMiB}});
  void* live = device.allocator->allocate(100 * kMiB);
  device.backend->set_device_processes(0, {{777, 100 * kMiB}, {getpid(), 800 * kMiB}});
  Snapshot snapshot = take_snapshot(*device.allocator, nullptr);
  ASSERT_EQ(snapshot.process.pid, getpid());
  ASSERT_EQ(snapshot.device_memory_before_first_segment.size(), 1u);
  snapshot.outside_memory = OutsideMemory{};  // the calls recorded: none outside the allocator
  const DeviceMemoryAccount a = account_device_memory(snapshot).at(0);
  ASSERT_TRUE(a.before_first_segment_bytes && a.context_bytes);
  EXPECT_EQ(*a.before_first_segment_bytes, 500 * kMiB);
  EXPECT_EQ(*a.context_bytes, 700 * kMiB);  // 800 MiB, 100 of them the allocator's
  const std::string text = stats_to_text(compute_stats(snapshot), snapshot);
  EXPECT_NE(text.find("    CUDA context and unaccounted           700.00 MiB"), std::string::npos) << text;
  EXPECT_NE(text.find("    before the allocator's first segment   500.00 MiB  this process then: its CUDA context as created"),
            std::string::npos) << text;
  EXPECT_EQ(stats_to_json(compute_stats(snapshot), snapshot)["device_memory"][0]["before_first_segment_bytes"],
            500 * kMiB);
  // Through msgpack, and through PyTorch's layout (its 'memsnap' key).
  for (const bool pickle : {false, true}) {
    const auto read = load_snapshot_from_memory(pickle ? to_pytorch_pickle(snapshot) : to_msgpack(snapshot));
    ASSERT_TRUE(read) << read.error();
    std::vector<DeviceMemorySample> expected = snapshot.device_memory_before_first_segment;
    if (pickle) expected[0].time_us += snapshot.process.clock_offset_us;  // the pickle's times are Unix time
    EXPECT_EQ(read.value().snapshot.device_memory_before_first_segment, expected);
    EXPECT_EQ(account_device_memory(read.value().snapshot).at(0).before_first_segment_bytes, 500 * kMiB);
  }
  // Other libraries' memory then, by the calls recorded: 256 MiB made before the first segment
  // and still held, 64 MiB made after it.
  const int64_t first = snapshot.device_memory_before_first_segment[0].time_us;
  snapshot.outside_memory->live = {
      {0, 0x7f0000000000, 256 * kMiB, OutsideKind::kDevice, "cudaMalloc", "cupy", kNoStackIndex, first - 10},
      {0, 0x7f1000000000, 64 * kMiB, OutsideKind::kDevice, "cudaMalloc", "cupy", kNoStackIndex, first + 10}};
  for (const OutsideAllocation& made : snapshot.outside_memory->live)
    snapshot.outside_memory->events.push_back({OutsideAction::kAlloc, made});
  snapshot.outside_memory->recorded_since_us = first - 100;
  snapshot.device_memory[0].processes = {{777, 100 * kMiB}, {getpid(), 1120 * kMiB}};
  const DeviceMemoryAccount split = account_device_memory(snapshot).at(0);
  ASSERT_TRUE(split.before_first_segment_libraries_bytes);
  EXPECT_EQ(*split.before_first_segment_libraries_bytes, 256 * kMiB);
  EXPECT_NE(stats_to_text(compute_stats(snapshot), snapshot)
                .find("before the allocator's first segment   500.00 MiB  this process then: 256.00 MiB of it other "
                      "libraries' (recorded calls), the rest its CUDA context as created"),
            std::string::npos) << stats_to_text(compute_stats(snapshot), snapshot);
  // Recorded only from after the first segment: what the libraries held then is not known.
  snapshot.outside_memory->recorded_since_us = first + 5;
  snapshot.outside_memory->live[0].time_us = first + 6;
  snapshot.outside_memory->events[0].allocation.time_us = first + 6;
  EXPECT_FALSE(account_device_memory(snapshot).at(0).before_first_segment_libraries_bytes);
  EXPECT_NE(stats_to_text(compute_stats(snapshot), snapshot)
                .find("this process then: its CUDA context as created, with whatever it had allocated before"),
            std::string::npos);
  // This process not in NVML's list then: nothing said.
  snapshot.device_memory_before_first_segment[0].processes = {{777, 100 * kMiB}};
  EXPECT_FALSE(account_device_memory(snapshot).at(0).before_first_segment_bytes);
  EXPECT_EQ(stats_to_text(compute_stats(snapshot), snapshot).find("before the allocator's first segment"), std::string::npos);
  device.allocator->deallocate(live);
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

// The same step's process after its teardown, in a later run that took the figures before the
// allocator's first segment: the context as created, 285.7 MiB less than the remainder now.
TEST(DeviceMemoryAccount, ARealProcessSaysWhatItHeldBeforeTheAllocatorsFirstSegment) {
  const Snapshot after = testing::load_test_snapshot("memsnap-h200/nccl_cudnn_teardown_first_segment.msgpack");
  const DeviceMemoryAccount a = account_device_memory(after).at(0);
  ASSERT_TRUE(a.before_first_segment_bytes && a.context_bytes);
  EXPECT_EQ(*a.before_first_segment_bytes, 555'745'280u);
  EXPECT_EQ(*a.context_bytes, 855'323'128u);
  EXPECT_EQ(a.before_first_segment_libraries_bytes, 0u);  // recorded from before it: none held memory
  EXPECT_NE(stats_to_text(compute_stats(after), after)
                .find("    before the allocator's first segment   530.00 MiB  this process then: its CUDA context as created"),
            std::string::npos);
}

// CuPy's 256 MiB array made before the allocator's first segment (test_outside_memory.py's CuPy
// test, on an H200): the process then held it and its context as created, the same 555,745,280 B
// as the context of the step's process above, and as this process's remainder at its snapshot.
TEST(DeviceMemoryAccount, ALibrarysMemoryMadeBeforeTheFirstSegmentIsToldApartFromTheContext) {
  const Snapshot cupy = testing::load_test_snapshot("memsnap-h200/cupy_before_first_segment.msgpack");
  const DeviceMemoryAccount a = account_device_memory(cupy).at(0);
  ASSERT_TRUE(a.before_first_segment_bytes && a.before_first_segment_libraries_bytes && a.context_bytes);
  EXPECT_EQ(*a.before_first_segment_bytes, 824'180'736u);
  EXPECT_EQ(*a.before_first_segment_libraries_bytes, 268'435'456u);
  EXPECT_EQ(*a.before_first_segment_bytes - *a.before_first_segment_libraries_bytes, 555'745'280u);
  EXPECT_EQ(*a.context_bytes, 555'745'280u);
  EXPECT_NE(stats_to_text(compute_stats(cupy), cupy)
                .find("786.00 MiB  this process then: 256.00 MiB of it other libraries' (recorded calls), the rest its "
                      "CUDA context as created"),
            std::string::npos);
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
