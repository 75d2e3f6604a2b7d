// explain-oom must name the right cause for each kind of out-of-memory error and find the
// settings that avoid it; the text for a recorded PyTorch OOM is compared with a golden file.
#include "viewer/oom_explanation.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "allocator/caching_allocator.h"
#include "allocator/simulated_backend.h"
#include "history/history_recorder.h"
#include "snapshot/snapshot_builder.h"
#include "snapshot/snapshot_loader.h"
#include "tests/test_snapshots.h"

namespace memsnap {
namespace {

constexpr size_t kMiB = 1 << 20;

// A program on a small simulated device whose last request fails; the snapshot is taken
// right after the error, as dump_snapshot_on_oom would.
struct OomProgram {
  std::shared_ptr<SimulatedBackend> backend;
  std::unique_ptr<CachingAllocator> allocator;
  std::unique_ptr<HistoryRecorder> recorder;
  std::vector<void*> held;

  explicit OomProgram(size_t capacity) {
    SimulatedBackend::Options options;
    options.capacity_bytes = capacity;
    options.events_complete_immediately = false;
    backend = std::make_shared<SimulatedBackend>(options);
    allocator = std::make_unique<CachingAllocator>(backend);
    recorder = std::make_unique<HistoryRecorder>(*allocator);
    recorder->configure({HistoryLevel::kAll, 100000, true});
  }
  ~OomProgram() {
    for (void* p : held) allocator->deallocate(p);
  }
  Snapshot fail_with(size_t bytes, StreamId stream = 0) {
    EXPECT_THROW(allocator->allocate(bytes, 0, stream), OutOfMemoryError);
    return take_snapshot(*allocator, recorder.get());
  }
};

// One 60 MiB segment cut into six 10 MiB blocks, every other one freed: 10 MiB holes between
// live blocks.
void cut_one_segment(OomProgram& program) {
  program.allocator->deallocate(program.allocator->allocate(60 * kMiB));
  std::vector<void*> pieces;
  for (int i = 0; i < 6; ++i) pieces.push_back(program.allocator->allocate(10 * kMiB));
  for (int i = 0; i < 6; ++i) {
    if (i % 2 == 0)
      program.held.push_back(pieces[i]);
    else
      program.allocator->deallocate(pieces[i]);
  }
}

OomExplanation explain(const Snapshot& snapshot) {
  Result<OomExplanation> x = explain_oom(snapshot);
  EXPECT_TRUE(x.ok()) << x.error();
  return x.ok() ? x.value() : OomExplanation{};
}

bool any_setting_avoids(const OomExplanation& x) {
  if (!x.advice) return false;
  for (const TunedSetting& s : x.advice->ranked)
    if (s.ok && !s.recorded) return true;
  return false;
}

// The settings advice's sentence: the one tune prints too.
std::string settings_conclusion(const OomExplanation& x) { return x.advice ? x.advice->verdict.sentence : ""; }

// The row of the recorded settings.
const TunedSetting* recorded_row(const OomExplanation& x) {
  return x.advice && x.advice->recorded ? &*x.advice->recorded : nullptr;
}

TEST(ExplainOom, LiveMemoryFillingTheDeviceIsExhaustion) {
  OomProgram program(100 * kMiB);
  program.held.push_back(program.allocator->allocate(40 * kMiB));
  program.held.push_back(program.allocator->allocate(40 * kMiB));
  const OomExplanation x = explain(program.fail_with(40 * kMiB));
  EXPECT_EQ(x.diagnosis.cause, OomCause::kExhaustion);
  EXPECT_EQ(x.requested_bytes, 40 * kMiB);
  EXPECT_EQ(x.allocated_bytes, 80 * kMiB);
  EXPECT_EQ(x.device_free_bytes.value_or(0), 20 * kMiB);
  ASSERT_FALSE(x.holders.empty());
  EXPECT_EQ(x.holders[0].bytes, 80 * kMiB);  // both from the same line
  ASSERT_NE(recorded_row(x), nullptr);
  EXPECT_FALSE(recorded_row(x)->ok);  // the replay reproduces it
  EXPECT_FALSE(any_setting_avoids(x));
  EXPECT_EQ(x.advice->answer, TuneVerdict::kNoSettingWorks);
  const std::string text = oom_explanation_to_text(x);
  EXPECT_NE(text.find("The live allocations (80.00 MiB) and the request (40.00 MiB) come to 120.00 MiB, more than the "
                      "100.00 MiB the allocator could have had (80.00 MiB reserved plus 20.00 MiB the device had "
                      "free): the program needs less live memory at this point"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("No setting can avoid the out-of-memory error: the live allocations"), std::string::npos) << text;
}

TEST(ExplainOom, ASnapshotTakenAtTheErrorWithoutHistoryStillExplainsIt) {
  // History off (the default): the snapshot the OOM hook takes carries the failed request.
  OomProgram program(100 * kMiB);
  program.recorder->configure({HistoryLevel::kOff, 100000, true});
  program.held.push_back(program.allocator->allocate(40 * kMiB));
  program.held.push_back(program.allocator->allocate(40 * kMiB));
  SnapshotOptions options;
  try {
    program.allocator->allocate(40 * kMiB);
    FAIL() << "expected an out-of-memory error";
  } catch (const OutOfMemoryError& error) {
    options.oom = error.info();
  }
  for (HistoryRecorder* recorder : {program.recorder.get(), static_cast<HistoryRecorder*>(nullptr)}) {
    const Snapshot snapshot = take_snapshot(*program.allocator, recorder, options);
    ASSERT_EQ(snapshot.device_traces.at(0).size(), 1u);
    const OomExplanation x = explain(snapshot);
    EXPECT_EQ(x.diagnosis.cause, OomCause::kExhaustion);
    EXPECT_EQ(x.requested_bytes, 40 * kMiB);
    EXPECT_EQ(x.device_free_bytes.value_or(0), 20 * kMiB);
    EXPECT_EQ(x.allocated_bytes, 80 * kMiB);
  }
  // With history at level "all" the recorded entry is the one: no second.
  OomProgram recorded(100 * kMiB);
  recorded.held.push_back(recorded.allocator->allocate(90 * kMiB));
  SnapshotOptions at_error;
  try {
    recorded.allocator->allocate(40 * kMiB);
  } catch (const OutOfMemoryError& error) {
    at_error.oom = error.info();
  }
  const Snapshot snapshot = take_snapshot(*recorded.allocator, recorded.recorder.get(), at_error);
  size_t ooms = 0;
  for (const TraceEntry& e : snapshot.device_traces.at(0)) ooms += e.action == TraceAction::kOom;
  EXPECT_EQ(ooms, 1u);
}

TEST(ExplainOom, FreeBytesInPiecesTooSmallIsFragmentationAndMaxSplitSizeAvoidsIt) {
  OomProgram program(64 * kMiB);
  cut_one_segment(program);
  const OomExplanation x = explain(program.fail_with(20 * kMiB));
  EXPECT_EQ(x.diagnosis.cause, OomCause::kFragmentation);
  EXPECT_EQ(x.usable_free_bytes, 30 * kMiB);
  EXPECT_EQ(x.usable_largest_free, 10 * kMiB);
  EXPECT_EQ(x.inactive_split_bytes, 30 * kMiB);
  ASSERT_NE(recorded_row(x), nullptr);
  EXPECT_FALSE(recorded_row(x)->ok);
  bool split_helps = false;
  for (const TunedSetting& s : x.advice->ranked) split_helps |= s.ok && s.config.rfind("max_split_size_mb:32", 0) == 0;
  EXPECT_TRUE(split_helps) << oom_explanation_to_text(x);
  EXPECT_EQ(x.advice->answer, TuneVerdict::kChange);
  EXPECT_NE(oom_explanation_to_text(x).find("Use PYTORCH_CUDA_ALLOC_CONF=" + x.advice->ranked.front().config),
            std::string::npos);
}

TEST(ExplainOom, FreeMemoryOnAnotherStreamIsNamed) {
  OomProgram program(60 * kMiB);
  const StreamId side = program.backend->create_stream(0);
  program.allocator->deallocate(program.allocator->allocate(40 * kMiB, 0, side));  // cached on `side`
  program.held.push_back(program.allocator->allocate(12 * kMiB, 0, side));        // keeps it split
  const OomExplanation x = explain(program.fail_with(24 * kMiB, 0));
  EXPECT_EQ(x.diagnosis.cause, OomCause::kOtherStreams);
  EXPECT_EQ(x.other_stream_free_bytes, 28 * kMiB);
  EXPECT_NE(oom_explanation_to_text(x).find("a block is reused only on the stream it was allocated on"), std::string::npos);
}

// A cap set by the program is in the snapshot with its size and who set it: the live memory and
// the request exceed it, not the device.
TEST(ExplainOom, AMemoryCapIsToldApartFromAFullDevice) {
  OomProgram program(size_t{8} << 30);
  program.allocator->set_memory_fraction(double(64 * kMiB) / double(size_t{8} << 30), 0);
  program.held.push_back(program.allocator->allocate(50 * kMiB));
  const OomExplanation x = explain(program.fail_with(30 * kMiB));
  EXPECT_EQ(x.diagnosis.cause, OomCause::kExhaustion);
  EXPECT_GT(x.device_free_bytes.value_or(0), size_t{7} << 30);
  ASSERT_TRUE(x.cap_known);
  ASSERT_TRUE(x.cap.has_value());
  EXPECT_EQ(x.cap->bytes, 64 * kMiB);
  EXPECT_EQ(x.cap->source, "set_memory_fraction");
  EXPECT_NE(x.diagnosis.verdict.sentence.find("more than a memory cap of 64.00 MiB"), std::string::npos)
      << x.diagnosis.verdict.sentence;
}

// "The program needs less live memory" is a claim about the program: said only when the live
// tensors and the request together exceed what the process could have had. When they fit and no
// setting serves the request, the cached memory's layout is to blame, and it says so.
TEST(ExplainOom, NeedsLessLiveMemoryOnlyWhenTheLiveTensorsAndTheRequestExceedTheDevice) {
  {
    OomProgram program(100 * kMiB);
    program.held.push_back(program.allocator->allocate(40 * kMiB));
    program.held.push_back(program.allocator->allocate(40 * kMiB));
    const OomExplanation x = explain(program.fail_with(40 * kMiB));
    ASSERT_FALSE(any_setting_avoids(x));
    EXPECT_NE(settings_conclusion(x).find("come to 120.00 MiB, more than the 100.00 MiB the allocator could have had "
                                          "(80.00 MiB reserved plus 20.00 MiB the device had free): the program "
                                          "needs less live memory"),
              std::string::npos)
        << settings_conclusion(x);
  }
  {
    // On a side stream, twenty 20 MiB segments of a 400 MiB device each keep a 2 MiB block live
    // and cache 18 MiB free. 24 MiB more on the default stream fits beside the 40 MiB live, but
    // no cached block serves another stream, no segment is wholly free to give back, and with
    // expandable segments every 20 MiB page holds a live block.
    OomProgram program(400 * kMiB);
    const StreamId side = program.backend->create_stream(0);
    std::vector<void*> filler;
    for (int i = 0; i < 20; ++i) {
      program.held.push_back(program.allocator->allocate(2 * kMiB, 0, side));
      filler.push_back(program.allocator->allocate(18 * kMiB, 0, side));
    }
    for (void* p : filler) program.allocator->deallocate(p);
    const OomExplanation x = explain(program.fail_with(24 * kMiB, 0));
    ASSERT_FALSE(any_setting_avoids(x)) << oom_explanation_to_text(x);
    EXPECT_EQ(settings_conclusion(x).find("needs less live memory"), std::string::npos) << settings_conclusion(x);
    EXPECT_NE(settings_conclusion(x).find("come to 64.00 MiB, which fits in the 400.00 MiB the allocator could have "
                                          "had (400.00 MiB reserved plus 0 B the device had free): not too much live "
                                          "memory"),
              std::string::npos)
        << settings_conclusion(x);
  }
}

// Memory the allocator never had: taken from the device outside it (another library's
// cudaMalloc, the CUDA context, another process). The live tensors and the request would fit in
// the device; the explanation says what was outside.
TEST(ExplainOom, MemoryHeldOutsideTheAllocatorIsCountedAndNamed) {
  OomProgram program(size_t{1} << 30);
  const std::optional<uintptr_t> elsewhere = program.backend->reserve(0, 600 * kMiB);  // not the allocator's
  ASSERT_TRUE(elsewhere.has_value());
  program.held.push_back(program.allocator->allocate(300 * kMiB));
  const OomExplanation x = explain(program.fail_with(200 * kMiB));
  EXPECT_EQ(x.diagnosis.cause, OomCause::kExhaustion);
  ASSERT_TRUE(x.outside_allocator_bytes.has_value());
  EXPECT_EQ(*x.outside_allocator_bytes, 600 * kMiB);
  const std::string text = oom_explanation_to_text(x);
  EXPECT_NE(text.find("The 500.00 MiB it needed would fit in the device's 1.00 GiB; 600.00 MiB of it was in use "
                      "outside the allocator"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("in use outside the allocator         600.00 MiB"), std::string::npos) << text;
  program.backend->release(0, *elsewhere, 600 * kMiB);
}

// With the calls outside the allocator recorded, the memory outside it is named by the library
// that held it at the error (with its stack); and whether the request could have fit without it.
TEST(ExplainOom, LibrariesHoldingMemoryOutsideTheAllocatorAtTheErrorAreNamed) {
  OomProgram program(size_t{1} << 30);
  const std::optional<uintptr_t> nccl = program.backend->reserve(0, 600 * kMiB);
  ASSERT_TRUE(nccl.has_value());
  program.held.push_back(program.allocator->allocate(300 * kMiB));
  Snapshot snapshot = program.fail_with(200 * kMiB);
  const DeviceTrace& trace = snapshot.device_traces.at(0);
  const auto oom = std::find_if(trace.begin(), trace.end(), [](const TraceEntry& e) { return e.action == TraceAction::kOom; });
  ASSERT_NE(oom, trace.end());
  const int64_t t = oom->time_us;
  snapshot.frames.push_back({"all_reduce", "train.py", 40});
  snapshot.stacks.push_back({static_cast<uint32_t>(snapshot.frames.size() - 1)});
  const auto stack = static_cast<StackIndex>(snapshot.stacks.size() - 1);
  const OutsideAllocation buffers{0, *nccl, 500 * kMiB, OutsideKind::kDevice, "cudaMalloc", "libnccl.so.2", stack, t - 10};
  // 100 MiB more, freed after the error: held at it.
  OutsideAllocation later_freed{0, *nccl + 500 * kMiB, 100 * kMiB, OutsideKind::kDevice, "cuMemMap", "libnccl.so.2", stack, t - 5};
  // Made after the error: not held at it.
  const OutsideAllocation after{0, 0x9000000000, 50 * kMiB, OutsideKind::kDevice, "cudaMalloc", "libcublasLt.so.13", kNoStackIndex, t + 5};
  OutsideMemory outside;
  outside.live = {buffers, after};
  OutsideAllocation freeing = later_freed;
  freeing.time_us = t + 7;
  outside.events = {{OutsideAction::kAlloc, buffers}, {OutsideAction::kAlloc, later_freed},
                    {OutsideAction::kAlloc, after}, {OutsideAction::kFree, freeing}};
  snapshot.outside_memory = outside;

  const OomExplanation x = explain(snapshot);
  ASSERT_TRUE(x.outside_libraries.has_value());
  ASSERT_EQ(x.outside_libraries->size(), 1u);
  EXPECT_EQ((*x.outside_libraries)[0].library, "libnccl.so.2");
  EXPECT_EQ((*x.outside_libraries)[0].bytes, 600 * kMiB);
  EXPECT_EQ((*x.outside_libraries)[0].allocations, 2u);
  const std::string text = oom_explanation_to_text(x);
  EXPECT_EQ(x.diagnosis.cause, OomCause::kOtherLibraries);
  EXPECT_NE(text.find("The live allocations with the request (500.00 MiB) need more than the 424.00 MiB the allocator "
                      "could have had (300.00 MiB reserved plus 124.00 MiB the device had free), because other "
                      "libraries of this process held 600.00 MiB of the device outside the allocator: libnccl.so.2 "
                      "600.00 MiB (all_reduce (train.py:40)). With that memory it would fit."),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("    of it, other libraries             600.00 MiB"), std::string::npos) << text;
  EXPECT_NE(text.find("      libnccl.so.2                     600.00 MiB  all_reduce (train.py:40)"), std::string::npos)
      << text;
  EXPECT_EQ(oom_explanation_to_json(x)["outside_libraries"][0]["library"], "libnccl.so.2");
  EXPECT_NE(settings_conclusion(x).find("No setting can avoid the out-of-memory error: the live allocations with the "
                                        "request (500.00 MiB) need more than"),
            std::string::npos)
      << settings_conclusion(x);

  // A record that no longer reaches back to the error says nothing of the libraries.
  snapshot.outside_memory->events.erase(snapshot.outside_memory->events.begin(), snapshot.outside_memory->events.begin() + 3);
  snapshot.outside_memory->dropped_events = 3;
  const OomExplanation cut = explain(snapshot);
  EXPECT_FALSE(cut.outside_libraries.has_value());
  EXPECT_NE(cut.outside_unknown_reason.find("no longer reach back to the error"), std::string::npos);
  EXPECT_NE(oom_explanation_to_text(cut).find("600.00 MiB of it was in use outside the allocator"), std::string::npos);
  program.backend->release(0, *nccl, 600 * kMiB);
}

// A real OOM on an H200 (tests/data/memsnap-h200/README.md): CuPy took 137 GiB with its own
// cudaMalloc, then torch asked for 4 GiB. Not "too large": it would fit without the library's
// memory, which the explanation names with the user's line that took it.
TEST(ExplainOom, ARealOomCausedByAnotherLibraryIsExplainedAsSuch) {
  const OomExplanation x = explain(testing::load_test_snapshot("memsnap-h200/library_oom.msgpack"));
  EXPECT_EQ(x.diagnosis.cause, OomCause::kOtherLibraries) << oom_explanation_to_text(x);
  ASSERT_TRUE(x.outside_libraries.has_value());
  ASSERT_EQ(x.outside_libraries->size(), 1u);
  const auto& cupy = (*x.outside_libraries)[0];
  EXPECT_EQ(cupy.library, "cupy_backends/cuda/api/runtime.cpython-312-x86_64-linux-gnu.so");
  EXPECT_EQ(cupy.bytes, uint64_t{137} << 30);
  EXPECT_EQ(cupy.allocations, 137u);
  ASSERT_FALSE(cupy.frames.empty());
  EXPECT_EQ(cupy.frames[0], "library_takes_the_device (greedy_library.py:3)");
  const std::string text = oom_explanation_to_text(x);
  EXPECT_NE(text.find("because other libraries of this process held 137.00 GiB of the device outside the allocator"),
            std::string::npos) << text;
  EXPECT_EQ(text.find("Nothing this program frees"), std::string::npos) << text;
  ASSERT_TRUE(x.advice.has_value());
  EXPECT_EQ(x.advice->answer, TuneVerdict::kNoSettingWorks);
  EXPECT_EQ(x.advice->ranked.size(), 1u) << "no other settings replayed: none can make room others hold";
}

TEST(ExplainOom, ASnapshotWithoutAnOomIsAClearError) {
  OomProgram program(64 * kMiB);
  program.held.push_back(program.allocator->allocate(kMiB));
  const Result<OomExplanation> x = explain_oom(take_snapshot(*program.allocator, program.recorder.get()));
  ASSERT_FALSE(x.ok());
  EXPECT_NE(x.error().find("no out-of-memory event"), std::string::npos);
}

// Recorded with PyTorch 2.11 on the H100 (tests/data/pytorch-2.11-h100/README.md).
TEST(ExplainOom, RecordedPyTorchOomsMatchTheirGoldenText) {
  const std::string dir = MEMSNAP_TEST_DATA_DIR "/pytorch-2.11-h100/";
  for (const std::string name : {"oom_all_stacks", "frag_oom"}) {
    Result<LoadedSnapshot> loaded = load_snapshot(dir + name + ".pickle");
    ASSERT_TRUE(loaded.ok()) << loaded.error();
    const OomExplanation x = explain(loaded->snapshot);
    std::ifstream golden_file(dir + name + ".explain.txt");
    std::stringstream golden;
    golden << golden_file.rdbuf();
    EXPECT_EQ(oom_explanation_to_text(x), golden.str())
        << "regenerate with: memsnap explain-oom " << dir << name << ".pickle -o " << dir << name
        << ".explain.txt (and check the difference is intended)";
  }
}

// Two CUDA graphs' private pools hold 768 MiB free; a 768 MiB global request under a 1.75 GiB
// cap fails (bench/make_pytorch_pool_snapshots.py pool_oom). PyTorch's own message said "768.00
// MiB allocated in private pools (e.g., CUDA Graphs)".
TEST(ExplainOom, AnOomCausedByPrivatePoolsSaysSoWithTheRemedies) {
  const std::string dir = MEMSNAP_TEST_DATA_DIR "/pytorch-2.11-pools/";
  Result<LoadedSnapshot> loaded = load_snapshot(dir + "pool_oom.pickle");
  ASSERT_TRUE(loaded.ok()) << loaded.error();
  const OomExplanation x = explain(loaded->snapshot);
  EXPECT_EQ(x.diagnosis.cause, OomCause::kPrivatePools);
  EXPECT_EQ(x.private_pool_free_bytes, 768 * kMiB);
  ASSERT_EQ(x.private_pools_free.size(), 2u);
  EXPECT_EQ(x.private_pools_free[0].second, 384 * kMiB);
  EXPECT_NE(x.diagnosis.reasons[0].find("pool=g1.pool()"), std::string::npos) << x.diagnosis.reasons[0];
  // No setting avoids it under the lowest cap the recording allows (what was reserved, 1.25
  // GiB; the real cap was 1.75 GiB), but the program does not need less live memory: the pools
  // sat on 768 MiB. With one shared pool the replay reserves 898 MiB before the request, and
  // 1.63 GiB with it: within the real cap, and said to be so if the cap was at least that.
  EXPECT_FALSE(any_setting_avoids(x));
  ASSERT_TRUE(x.cap_range.has_value());
  ASSERT_TRUE(x.advice.has_value());
  EXPECT_EQ(x.advice->capacity_bytes, x.cap_range->first);
  EXPECT_EQ(x.cap_range->second, x.cap_range->first + 768 * kMiB);
  ASSERT_TRUE(x.shared_graph_pool.has_value());
  EXPECT_EQ(x.shared_graph_pool->shared_reserved_bytes, 898 * kMiB);
  EXPECT_EQ(settings_conclusion(x).find("needs less"), std::string::npos) << settings_conclusion(x);
  EXPECT_EQ(x.advice->answer, TuneVerdict::kCannotJudge) << settings_conclusion(x);
  const nlohmann::json json = oom_explanation_to_json(x);
  EXPECT_NE(json["shared_graph_pool_conclusion"].get<std::string>().find(
                "sharing avoids the error if the cap was at least that"),
            std::string::npos)
      << json["shared_graph_pool_conclusion"];
  EXPECT_EQ(json["settings_conclusion"].get<std::string>(), settings_conclusion(x));
  std::ifstream golden_file(dir + "pool_oom.explain.txt");
  std::stringstream golden;
  golden << golden_file.rdbuf();
  EXPECT_EQ(oom_explanation_to_text(x), golden.str())
      << "regenerate with: memsnap explain-oom " << dir << "pool_oom.pickle -o " << dir
      << "pool_oom.explain.txt (and check the difference is intended)";
}

TEST(ExplainOom, TwoGraphPoolsUnderACapAreNotTakenForAProgramNeedingLessMemory) {
  // Recorded on an H200: a 1,400 MiB cap, two graphs with their own pools, a 700 MiB request.
  Result<LoadedSnapshot> loaded = load_snapshot(MEMSNAP_TEST_DATA_DIR "/pytorch-2.11-h200/graph_pool_oom.pickle");
  ASSERT_TRUE(loaded.ok()) << loaded.error();
  const OomExplanation x = explain(loaded->snapshot);
  EXPECT_GT(x.private_pool_free_bytes, 0u);
  EXPECT_EQ(settings_conclusion(x).find("needs less"), std::string::npos) << settings_conclusion(x);
  EXPECT_EQ(x.diagnosis.cause, OomCause::kPrivatePools) << x.diagnosis.verdict.sentence;
  ASSERT_TRUE(x.cap_range.has_value());
  // The true cap (1,400 MiB) lies in the range the conclusion gives.
  EXPECT_LE(x.cap_range->first, 1400 * kMiB);
  EXPECT_GT(x.cap_range->second, 1400 * kMiB);
}

TEST(ExplainOom, RecordedPyTorchOomsGetTheRightCauseAndAdvice) {
  const std::string dir = MEMSNAP_TEST_DATA_DIR "/pytorch-2.11-h100/";
  const OomExplanation capped = explain(load_snapshot(dir + "oom_all_stacks.pickle").value().snapshot);
  // Under set_per_process_memory_fraction(0.05), which PyTorch's pickle does not record: the
  // live tensors and the request (4.10 GiB) lie within what the cap can have been (3.94 to 4.12
  // GiB), so neither "needs less live memory" nor "no setting avoids it" can be said.
  EXPECT_EQ(capped.diagnosis.cause, OomCause::kCannotJudge) << capped.diagnosis.verdict.sentence;
  EXPECT_EQ(capped.requested_bytes, 200126976u);
  EXPECT_FALSE(any_setting_avoids(capped));
  ASSERT_TRUE(capped.advice.has_value());
  EXPECT_EQ(capped.advice->answer, TuneVerdict::kCannotJudge) << capped.advice->verdict.sentence;
  // 24 tensors of 40 MiB cut from one 960 MiB segment, every other one freed, then 100 MiB
  // under a 1 GiB cap: 480 MiB free, none of it in one piece. Keeping large blocks whole
  // (max_split_size_mb) lets the replay release the holes and succeed.
  const OomExplanation fragmented = explain(load_snapshot(dir + "frag_oom.pickle").value().snapshot);
  EXPECT_EQ(fragmented.diagnosis.cause, OomCause::kFragmentation);
  EXPECT_EQ(fragmented.usable_free_bytes, 480 * kMiB);
  EXPECT_EQ(fragmented.usable_largest_free, 40 * kMiB);
  ASSERT_NE(recorded_row(fragmented), nullptr);
  EXPECT_FALSE(recorded_row(fragmented)->ok);  // the replay reproduces the OOM
  EXPECT_EQ(fragmented.advice->answer, TuneVerdict::kChange);
  EXPECT_TRUE(fragmented.advice->ranked.front().ok);
  EXPECT_EQ(oom_explanation_to_json(fragmented)["cause"], "fragmentation");
}

// A request larger than everything the process could have had (PyTorch's pickles do not
// record the device's size: what was reserved plus what the device had free bounds it) is
// neither exhaustion nor anything a setting fixes.
TEST(ExplainOom, ARequestLargerThanTheDeviceSaysNoFreeingOrSettingHelps) {
  Snapshot s;
  s.source = "pytorch";
  s.segments.push_back({0, 0x7f0000000000, 4ull << 30, 4ull << 30, 4ull << 30, 4ull << 30, 0, "large", {}, false,
                        kNoStackIndex, {{0x7f0000000000, 4ull << 30, 4ull << 30, BlockState::kActiveAllocated, kNoStackIndex, {}}}});
  s.device_traces.resize(1);
  s.device_traces[0].push_back({TraceAction::kAlloc, 0x7f0000000000, 4ull << 30, 0, 1, kNoStackIndex});
  const uint64_t free_bytes = 74ull << 30;
  s.device_traces[0].push_back({TraceAction::kOom, free_bytes, 1ull << 40, 0, 2, kNoStackIndex});
  const OomExplanation x = explain(s);
  EXPECT_EQ(x.diagnosis.cause, OomCause::kTooLarge);
  ASSERT_FALSE(x.diagnosis.reasons.empty());
  EXPECT_NE(x.diagnosis.reasons[0].find("The request alone (1.00 TiB) is larger than the 78.00 GiB the allocator could "
                                        "have had (4.00 GiB reserved plus 74.00 GiB the device had free)"),
            std::string::npos) << x.diagnosis.reasons[0];
  // What the process may hold outside the allocator, a pickle does not show: not claimed.
  EXPECT_NE(x.diagnosis.reasons[0].find("nothing the program frees through the allocator and no allocator setting can "
                                        "make it fit (memory the process may hold outside the allocator, through other "
                                        "libraries, this snapshot does not show)"),
            std::string::npos) << x.diagnosis.reasons[0];
  ASSERT_TRUE(x.advice.has_value());
  EXPECT_EQ(x.advice->ranked.size(), 1u) << "no replays for settings that cannot help";
  EXPECT_EQ(x.advice->answer, TuneVerdict::kNoSettingWorks);
  // With the device's size known (memsnap's snapshots record it), the reason names it.
  s.devices.push_back({0, "H100", 80ull << 30});
  const OomExplanation with_size = explain(s);
  EXPECT_NE(with_size.diagnosis.reasons.at(0).find("larger than the device's total memory (80.00 GiB)"), std::string::npos)
      << with_size.diagnosis.reasons.at(0);
  EXPECT_NE(oom_explanation_to_text(with_size).find("Why (request_too_large)"), std::string::npos);
}

// Nothing is recommended from a replay that does not reproduce the recording: with an allocation
// lost from the trace (its free then names a block the trace never made), the replay under the
// recorded settings is not the recording, and the advice says it cannot judge.
TEST(ExplainOom, NoSettingIsRecommendedFromAReplayThatDoesNotReproduceTheRecording) {
  OomProgram program(64 * kMiB);
  cut_one_segment(program);
  Snapshot s = program.fail_with(20 * kMiB);
  const OomExplanation whole = explain(s);
  ASSERT_TRUE(whole.advice.has_value());
  ASSERT_EQ(whole.advice->answer, TuneVerdict::kChange) << whole.advice->verdict.sentence;
  DeviceTrace& trace = s.device_traces[0];
  DeviceTrace cut;
  bool dropped = false;
  for (const TraceEntry& e : trace) {
    if (!dropped && e.action == TraceAction::kAlloc && e.size == 10 * kMiB) {
      dropped = true;  // the first piece's allocation is lost; its free is kept
      continue;
    }
    cut.push_back(e);
  }
  trace = std::move(cut);
  for (TraceStateChange& c : s.trace_state_changes[0])
    if (c.event_index > 0) --c.event_index;
  const OomExplanation x = explain(s);
  ASSERT_TRUE(x.advice.has_value());
  EXPECT_FALSE(x.advice->reproduced);
  EXPECT_EQ(x.advice->answer, TuneVerdict::kCannotJudge) << x.advice->verdict.sentence;
  EXPECT_NE(x.advice->verdict.sentence.find("does not reproduce the recording"), std::string::npos)
      << x.advice->verdict.sentence;
  EXPECT_EQ(oom_explanation_to_text(x).find("Use PYTORCH_CUDA_ALLOC_CONF"), std::string::npos);
}

// A device with nothing free at the error: 0 is a figure, not "unknown". The limit is the
// reserved bytes, and the replays run on a device of that size, not a default 80 GiB.
TEST(ExplainOom, ADeviceWithNothingFreeIsFullNotUnknown) {
  OomProgram program(100 * kMiB);
  program.held.push_back(program.allocator->allocate(100 * kMiB));
  const OomExplanation x = explain(program.fail_with(20 * kMiB));
  ASSERT_TRUE(x.device_free_bytes.has_value());
  EXPECT_EQ(*x.device_free_bytes, 0u);
  EXPECT_EQ(x.diagnosis.cause, OomCause::kExhaustion) << x.diagnosis.verdict.sentence;
  EXPECT_EQ(x.limit.kind, OomLimit::Kind::kExact);
  EXPECT_EQ(x.limit.bytes, 100 * kMiB);
  ASSERT_TRUE(x.advice.has_value());
  EXPECT_EQ(x.advice->capacity_bytes, 100 * kMiB);
  EXPECT_EQ(x.advice->capacity_source, "reserved + device free at the recorded OOM");
}

// A memsnap program whose one request exceeds its device.
TEST(ExplainOom, AMemsnapRequestLargerThanItsDeviceIsTooLarge) {
  OomProgram program(100 * kMiB);
  program.held.push_back(program.allocator->allocate(10 * kMiB));
  const OomExplanation x = explain(program.fail_with(size_t{1} << 30));
  EXPECT_EQ(x.diagnosis.cause, OomCause::kTooLarge);
}

}  // namespace
}  // namespace memsnap
