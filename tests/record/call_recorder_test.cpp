// The recorder driven by CUPTI callbacks made up here, as CUPTI makes them: an entry and an
// exit per call, parameters and result in CUPTI's generated structs.
#define __CUDA_API_VERSION_INTERNAL 1  // the driver's parameter structs name versioned types

#include "record/call_recorder.h"

#include <cuda.h>
#include <cuda_runtime_api.h>
#include <cupti_driver_cbid.h>
#include <cupti_runtime_cbid.h>
#include <generated_cuda_meta.h>
#include <generated_cuda_runtime_api_meta.h>
#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "history/interpreter_frames.h"
#include "record/cuda_calls.h"

namespace memsnap {
namespace {

constexpr size_t kMiB = size_t{1} << 20;
constexpr CUpti_CallbackDomain kRuntime = CUPTI_CB_DOMAIN_RUNTIME_API;
constexpr CUpti_CallbackDomain kDriver = CUPTI_CB_DOMAIN_DRIVER_API;

// One call, delivered as CUPTI delivers it; `during` runs between its entry and its exit (the
// call's own work: a nested driver call, say).
template <typename Params, typename Result>
void call(CallRecorder& recorder, CUpti_CallbackDomain domain, CUpti_CallbackId id, Params& params,
          Result result, const std::function<void()>& during = {}) {
  CUpti_CallbackData data{};
  data.functionParams = &params;
  data.callbackSite = CUPTI_API_ENTER;
  recorder.on_callback(domain, id, data);
  if (during) during();
  data.callbackSite = CUPTI_API_EXIT;
  data.functionReturnValue = &result;
  recorder.on_callback(domain, id, data);
}

struct CallRecorderTest : ::testing::Test {
  AllocationLedger ledger;
  std::vector<int> oom_devices;
  CallRecorder recorder{ledger,
                        CallRecorderHooks{[](CUcontext) { return 0; }, {}, [] { return size_t{3} * kMiB; },
                                          [this](int device) { oom_devices.push_back(device); }},
                        /*capture_stacks=*/false};

  void* cuda_malloc(size_t size, void* returned, cudaError_t result = cudaSuccess) {
    void* out = nullptr;
    cudaMalloc_v3020_params params{&out, size};
    call(recorder, kRuntime, CUPTI_RUNTIME_TRACE_CBID_cudaMalloc_v3020, params, result, [&] { out = returned; });
    return out;
  }
  void cuda_free(void* pointer) {
    cudaFree_v3020_params params{pointer};
    call(recorder, kRuntime, CUPTI_RUNTIME_TRACE_CBID_cudaFree_v3020, params, cudaSuccess);
  }
};

void* at(uintptr_t address) { return reinterpret_cast<void*>(address); }

TEST_F(CallRecorderTest, ARuntimeAllocationAndItsFreeAreRecorded) {
  cuda_malloc(4 * kMiB, at(0x7000000));
  EXPECT_EQ(ledger.counts().allocations, 1u);
  cuda_free(at(0x7000000));
  EXPECT_EQ(ledger.counts().frees, 1u);
  EXPECT_EQ(ledger.snapshot().device_traces.at(0).size(), 5u);
}

TEST_F(CallRecorderTest, TheDriverCallUnderARuntimeCallCountsOnce) {
  void* out = nullptr;
  cudaMalloc_v3020_params params{&out, kMiB};
  call(recorder, kRuntime, CUPTI_RUNTIME_TRACE_CBID_cudaMalloc_v3020, params, cudaSuccess, [&] {
    CUdeviceptr inner = 0;
    cuMemAlloc_v2_params driver{&inner, kMiB};
    call(recorder, kDriver, CUPTI_DRIVER_TRACE_CBID_cuMemAlloc_v2, driver, CUDA_SUCCESS,
         [&] { inner = 0x9000000; });
    out = at(0x9000000);
  });
  EXPECT_EQ(ledger.counts().allocations, 1u);
}

TEST_F(CallRecorderTest, ADriverCallOnItsOwnIsRecorded) {
  CUdeviceptr out = 0;
  cuMemAlloc_v2_params params{&out, 3 * kMiB};
  call(recorder, kDriver, CUPTI_DRIVER_TRACE_CBID_cuMemAlloc_v2, params, CUDA_SUCCESS, [&] { out = 0x5000000; });
  cuMemFree_v2_params free_params{0x5000000};
  call(recorder, kDriver, CUPTI_DRIVER_TRACE_CBID_cuMemFree_v2, free_params, CUDA_SUCCESS);
  EXPECT_EQ(ledger.counts().allocations, 1u);
  EXPECT_EQ(ledger.counts().frees, 1u);
}

TEST_F(CallRecorderTest, ARuntimeCallWhoseEntryCameBeforeRecordingIsLeftToItsDriverCall) {
  // The program's first cudaMalloc initializes CUDA, which starts the recorder: only the
  // runtime call's exit is seen, after the driver call it made was recorded.
  CUdeviceptr inner = 0;
  cuMemAlloc_v2_params driver{&inner, kMiB};
  call(recorder, kDriver, CUPTI_DRIVER_TRACE_CBID_cuMemAlloc_v2, driver, CUDA_SUCCESS, [&] { inner = 0x9000000; });
  void* out = at(0x9000000);
  cudaMalloc_v3020_params params{&out, kMiB};
  CUpti_CallbackData data{};
  data.functionParams = &params;
  cudaError_t result = cudaSuccess;
  data.functionReturnValue = &result;
  data.callbackSite = CUPTI_API_EXIT;
  recorder.on_callback(kRuntime, CUPTI_RUNTIME_TRACE_CBID_cudaMalloc_v3020, data);
  EXPECT_EQ(ledger.counts().allocations, 1u);
}

TEST_F(CallRecorderTest, AFailedCallIsNotRecordedAndAnOutOfMemoryOneIs) {
  cuda_malloc(kMiB, at(0x1000), cudaErrorInvalidValue);
  EXPECT_EQ(ledger.counts().allocations, 0u);
  EXPECT_TRUE(oom_devices.empty());
  cuda_malloc(80 * kMiB * 1024, nullptr, cudaErrorMemoryAllocation);
  EXPECT_EQ(ledger.counts().allocations, 0u);
  EXPECT_EQ(ledger.counts().out_of_memory, 1u);
  ASSERT_EQ(oom_devices, std::vector<int>{0});
  const Snapshot snapshot = ledger.snapshot();
  ASSERT_EQ(snapshot.device_traces.at(0).size(), 1u);
  EXPECT_EQ(snapshot.device_traces[0][0].size, 80 * kMiB * 1024);
  EXPECT_EQ(snapshot.device_traces[0][0].address, 3 * kMiB);  // the hook's free bytes
}

TEST_F(CallRecorderTest, AFreeOfNullIsNothing) {
  cuda_free(nullptr);
  EXPECT_EQ(ledger.counts().unknown_frees, 0u);
}

TEST_F(CallRecorderTest, StreamOrderedCallsKeepTheirStream) {
  void* out = nullptr;
  auto* stream = reinterpret_cast<cudaStream_t>(uintptr_t{0xabc0});
  cudaMallocAsync_v11020_params params{&out, 2 * kMiB, stream};
  call(recorder, kRuntime, CUPTI_RUNTIME_TRACE_CBID_cudaMallocAsync_v11020, params, cudaSuccess,
       [&] { out = at(0x4000000); });
  cudaFreeAsync_v11020_params free_params{at(0x4000000), stream};
  call(recorder, kRuntime, CUPTI_RUNTIME_TRACE_CBID_cudaFreeAsync_v11020, free_params, cudaSuccess);
  const Snapshot snapshot = ledger.snapshot();
  ASSERT_EQ(snapshot.device_traces.at(0).size(), 5u);
  for (const TraceEntry& entry : snapshot.device_traces[0]) EXPECT_EQ(entry.stream, 0xabc0u);
}

TEST_F(CallRecorderTest, PitchedAllocationsHoldPitchTimesRows) {
  void* out = nullptr;
  size_t pitch = 0;
  cudaMallocPitch_v3020_params params{&out, &pitch, 1000, 30};
  call(recorder, kRuntime, CUPTI_RUNTIME_TRACE_CBID_cudaMallocPitch_v3020, params, cudaSuccess, [&] {
    out = at(0x6000000);
    pitch = 1024;
  });
  const Snapshot snapshot = ledger.snapshot();
  ASSERT_EQ(snapshot.segments.size(), 1u);
  EXPECT_EQ(snapshot.segments[0].total_size, 1024u * 30);
}

TEST_F(CallRecorderTest, MappedPagesAreAllocationsAndAnUnmapFreesThem) {
  for (CUdeviceptr page = 0; page < 3; ++page) {
    cuMemMap_params params{0x20000000 + page * 2 * kMiB, 2 * kMiB, 0, 1, 0};
    call(recorder, kDriver, CUPTI_DRIVER_TRACE_CBID_cuMemMap, params, CUDA_SUCCESS);
  }
  cuMemUnmap_params unmap{0x20000000, 6 * kMiB};
  call(recorder, kDriver, CUPTI_DRIVER_TRACE_CBID_cuMemUnmap, unmap, CUDA_SUCCESS);
  EXPECT_EQ(ledger.counts().allocations, 3u);
  EXPECT_EQ(ledger.counts().frees, 3u);
}

TEST_F(CallRecorderTest, PhysicalMemoryCountsWhenMappedAndItsOutOfMemoryErrorsAreRecorded) {
  CUmemGenericAllocationHandle handle = 0;
  cuMemCreate_params created{&handle, 20 * kMiB, nullptr, 0};
  call(recorder, kDriver, CUPTI_DRIVER_TRACE_CBID_cuMemCreate, created, CUDA_SUCCESS);
  EXPECT_EQ(ledger.counts().allocations, 0u);
  cuMemCreate_params refused{&handle, 200 * kMiB * 1024, nullptr, 0};
  call(recorder, kDriver, CUPTI_DRIVER_TRACE_CBID_cuMemCreate, refused, CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(ledger.counts().out_of_memory, 1u);
  EXPECT_EQ(oom_devices, std::vector<int>{0});
}

TEST_F(CallRecorderTest, CallsNotRecordedAreIgnored) {
  int params = 0;
  call(recorder, kRuntime, CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy_v3020, params, cudaSuccess);
  EXPECT_EQ(ledger.counts().allocations, 0u);
}

TEST_F(CallRecorderTest, AStoppedRecorderRecordsNothing) {
  recorder.stop();
  cuda_malloc(kMiB, at(0x7000000));
  EXPECT_EQ(ledger.counts().allocations, 0u);
}

TEST_F(CallRecorderTest, ThreadsNestingCallsAtOnceCountEachCallOnce) {
  std::vector<std::thread> threads;
  for (uintptr_t t = 0; t < 4; ++t)
    threads.emplace_back([this, t] {
      for (uintptr_t i = 0; i < 500; ++i) {
        const uintptr_t address = ((t + 1) << 36) + i * 4096;
        void* out = nullptr;
        cudaMalloc_v3020_params params{&out, 4096};
        call(recorder, kRuntime, CUPTI_RUNTIME_TRACE_CBID_cudaMalloc_v3020, params, cudaSuccess, [&] {
          CUdeviceptr inner = 0;
          cuMemAlloc_v2_params driver{&inner, 4096};
          call(recorder, kDriver, CUPTI_DRIVER_TRACE_CBID_cuMemAlloc_v2, driver, CUDA_SUCCESS,
               [&] { inner = address; });
          out = at(address);
        });
        cuda_free(at(address));
      }
    });
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(ledger.counts().allocations, 2000u);
  EXPECT_EQ(ledger.counts().frees, 2000u);
  EXPECT_EQ(ledger.counts().unknown_frees, 0u);
}

TEST_F(CallRecorderTest, EveryRecordedCallIsFoundByItsDomainAndId) {
  for (const RecordedApi& api : recorded_apis()) {
    EXPECT_EQ(find_recorded_api(api.domain, api.id), &api) << api.name;
  }
  EXPECT_EQ(find_recorded_api(kRuntime, CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy_v3020), nullptr);
}

TEST(DecodeCall, WithoutAResultACallReadsAsFailed) {
  void* out = at(0x1000);
  cudaMalloc_v3020_params params{&out, 64};
  const DecodedCall call = decode_call(*find_recorded_api(kRuntime, CUPTI_RUNTIME_TRACE_CBID_cudaMalloc_v3020),
                                       &params, nullptr);
  EXPECT_FALSE(call.succeeded);
  EXPECT_FALSE(call.out_of_memory);
}

TEST(CallRecorderStacks, TheCallersFramesAreCaptured) {
  AllocationLedger ledger;
  CallRecorder recorder(ledger, CallRecorderHooks{}, /*capture_stacks=*/true);
  void* out = nullptr;
  cudaMalloc_v3020_params params{&out, 64};
  call(recorder, kRuntime, CUPTI_RUNTIME_TRACE_CBID_cudaMalloc_v3020, params, cudaSuccess, [&] { out = at(0x3000); });
  const Snapshot snapshot = ledger.snapshot();
  ASSERT_EQ(snapshot.segments.size(), 1u);
  const StackIndex stack = snapshot.segments[0].stack;
  ASSERT_NE(stack, kNoStackIndex);
  const std::vector<uint32_t>& frames = snapshot.stacks.at(static_cast<size_t>(stack));
  bool test_frame = false;
  for (uint32_t frame : frames) test_frame = test_frame || snapshot.frames[frame].function.find("TestBody") != std::string::npos;
  EXPECT_TRUE(test_frame);
}

// Where the interpreter's loop lies is asked once, when the recorder is made: the answer comes
// from the dynamic loader (symbol scans under its lock, several µs: on an H200, 90% of what a
// recorded call cost when it was asked on every call), which a CUDA call's callback must not
// wait for.
TEST(CallRecorderStacks, TheInterpretersLoopIsLookedUpOnceNotOnEveryCall) {
  struct CountingInterpreter final : InterpreterFrames {
    size_t capture(uintptr_t*, size_t) override { return 0; }
    SourceFrame resolve(uintptr_t) override { return {}; }
    bool is_evaluation_loop(std::string_view) const override { return false; }
    StopCode evaluation_loop_code() const override {
      ++lookups;
      return {};
    }
    mutable int lookups = 0;
  } interpreter;
  AllocationLedger ledger;
  CallRecorder recorder(ledger, CallRecorderHooks{}, /*capture_stacks=*/true, {}, &interpreter);
  EXPECT_EQ(interpreter.lookups, 1);
  for (uintptr_t i = 1; i <= 3; ++i) {
    void* out = nullptr;
    cudaMalloc_v3020_params params{&out, 64};
    call(recorder, kRuntime, CUPTI_RUNTIME_TRACE_CBID_cudaMalloc_v3020, params, cudaSuccess, [&] { out = at(i << 20); });
  }
  EXPECT_EQ(ledger.counts().allocations, 3u);
  EXPECT_EQ(interpreter.lookups, 1);
}

// Pinned host memory is no device's: a host allocation outside any allocator, not a segment, and
// its free ends it.
TEST_F(CallRecorderTest, PinnedHostMemoryIsKeptAsHostMemoryOutsideTheDevices) {
  void* host = nullptr;
  cudaHostAlloc_v3020_params params{&host, 2 * kMiB, 0};
  call(recorder, kRuntime, CUPTI_RUNTIME_TRACE_CBID_cudaHostAlloc_v3020, params, cudaSuccess,
       [&] { host = at(0x5000000); });
  void* registered = at(0x6000000);
  cudaHostRegister_v4000_params registering{registered, 3 * kMiB, 0};
  call(recorder, kRuntime, CUPTI_RUNTIME_TRACE_CBID_cudaHostRegister_v4000, registering, cudaSuccess);
  cuda_malloc(4 * kMiB, at(0x7000000));
  Snapshot snapshot = ledger.snapshot();
  ASSERT_EQ(snapshot.segments.size(), 1u);  // only the device allocation
  EXPECT_EQ(snapshot.segments[0].address, 0x7000000u);
  ASSERT_TRUE(snapshot.outside_memory);
  EXPECT_TRUE(snapshot.outside_memory->unrecorded_reason.empty());
  ASSERT_EQ(snapshot.outside_memory->live.size(), 2u);
  const OutsideAllocation& pinned = snapshot.outside_memory->live[0];
  EXPECT_EQ(pinned.device, -1);
  EXPECT_EQ(pinned.address, 0x5000000u);
  EXPECT_EQ(pinned.size, 2 * kMiB);
  EXPECT_EQ(pinned.kind, OutsideKind::kPinnedHost);
  EXPECT_EQ(pinned.api, "cudaHostAlloc");
  EXPECT_EQ(snapshot.outside_memory->live[1].kind, OutsideKind::kRegisteredHost);
  EXPECT_EQ(snapshot.outside_memory->live[1].size, 3 * kMiB);

  cudaFreeHost_v3020_params freeing{host};
  call(recorder, kRuntime, CUPTI_RUNTIME_TRACE_CBID_cudaFreeHost_v3020, freeing, cudaSuccess);
  snapshot = ledger.snapshot();
  ASSERT_EQ(snapshot.outside_memory->live.size(), 1u);
  const std::vector<OutsideEvent>& events = snapshot.outside_memory->events;
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[2].action, OutsideAction::kFree);
  EXPECT_EQ(events[2].allocation.address, 0x5000000u);
  EXPECT_EQ(events[2].allocation.size, 2 * kMiB);
  EXPECT_EQ(events[2].allocation.api, "cudaHostAlloc");  // the allocation it ended
  // The device's own statistics never saw the host memory.
  EXPECT_EQ(snapshot.device_traces.at(0).size(), 2u);  // segment_alloc, alloc
}

TEST_F(CallRecorderTest, CallsMadeUnderCallsNotRecordedAreLeftOut) {
  {
    CallsNotRecorded own_calls;
    cuda_malloc(4 * kMiB, at(0x7000000));
    cuda_free(at(0x7000000));
  }
  EXPECT_EQ(ledger.counts().allocations, 0u);
  EXPECT_EQ(ledger.counts().frees, 0u);
  cuda_malloc(kMiB, at(0x8000000));
  EXPECT_EQ(ledger.counts().allocations, 1u);
}

// In a process whose caching allocator's segments a snapshot already shows, the other
// libraries' device memory is kept outside it: no segments, no device trace, and the
// allocations with their API, library and stack added to that allocator's snapshot.
TEST(CallRecorderOutside, DeviceAllocationsAreAddedToAnotherSnapshotAsMemoryOutsideIt) {
  AllocationLedger ledger(LedgerSettings{100, size_t{1} << 20, /*device_memory_as_segments=*/false});
  CallRecorder recorder(ledger, CallRecorderHooks{[](CUcontext) { return 1; }, {}, {}, {}}, /*capture_stacks=*/true);
  void* out = nullptr;
  cudaMalloc_v3020_params params{&out, 64 * kMiB};
  call(recorder, kRuntime, CUPTI_RUNTIME_TRACE_CBID_cudaMalloc_v3020, params, cudaSuccess, [&] { out = at(0x3000000); });
  CUdeviceptr failed = 0;
  cuMemAlloc_v2_params too_big{&failed, size_t{80} << 30};
  call(recorder, kDriver, CUPTI_DRIVER_TRACE_CBID_cuMemAlloc_v2, too_big, CUDA_ERROR_OUT_OF_MEMORY);

  const Snapshot own = ledger.snapshot();
  EXPECT_TRUE(own.segments.empty());
  ASSERT_TRUE(own.outside_memory);
  EXPECT_EQ(own.outside_memory->live.size(), 1u);

  Snapshot allocators;  // another snapshot, with tables of its own
  allocators.frames = {{"train_step", "train.py", 12}};
  allocators.stacks = {{0}};
  ledger.add_outside_memory(allocators);
  ASSERT_TRUE(allocators.outside_memory);
  ASSERT_EQ(allocators.outside_memory->live.size(), 1u);
  const OutsideAllocation& a = allocators.outside_memory->live[0];
  EXPECT_EQ(a.device, 1);
  EXPECT_EQ(a.address, 0x3000000u);
  EXPECT_EQ(a.size, 64 * kMiB);
  EXPECT_EQ(a.kind, OutsideKind::kDevice);
  EXPECT_EQ(a.api, "cudaMalloc");
  EXPECT_EQ(a.library, "memsnap_record_tests");  // the program that called (no CUDA library between)
  ASSERT_NE(a.stack, kNoStackIndex);
  EXPECT_GT(a.stack, 0);  // added after the snapshot's own
  EXPECT_EQ(allocators.stacks[0], std::vector<uint32_t>{0});
  const std::vector<OutsideEvent>& events = allocators.outside_memory->events;
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[1].action, OutsideAction::kOom);
  EXPECT_EQ(events[1].allocation.size, size_t{80} << 30);
  EXPECT_EQ(events[1].allocation.api, "cuMemAlloc");
  EXPECT_LE(events[0].allocation.time_us, events[1].allocation.time_us);
}

}  // namespace
}  // namespace memsnap
