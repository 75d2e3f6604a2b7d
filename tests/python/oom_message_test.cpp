// The out-of-memory message memsnap.torch raises: PyTorch's wording and figures, then memsnap's
// verdict on the cause, explain-oom's own.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "allocator/caching_allocator.h"
#include "allocator/simulated_backend.h"
#include "history/history_recorder.h"
#include "python/native/oom_message.h"
#include "snapshot/snapshot_builder.h"
#include "viewer/oom_explanation.h"

namespace oom_message_test {

constexpr uint64_t kMiB = uint64_t{1} << 20;
constexpr uint64_t kGiB = uint64_t{1} << 30;

memsnap::OomInfo h100(uint64_t requested, uint64_t allocated, uint64_t reserved, uint64_t free) {
  memsnap::OomInfo info;
  info.device = 0;
  info.requested_bytes = requested;
  info.rounded_bytes = requested;
  info.allocation_bytes = requested;
  info.device_total_bytes = 80 * kGiB;
  info.device_free_bytes = free;
  info.allocated_bytes = allocated;
  info.reserved_bytes = reserved;
  return info;
}

TEST(OomMessage, SizesReadAsPyTorchPrintsThem) {
  EXPECT_EQ(memsnap::pytorch::torch_format_size(512), "512 bytes");
  EXPECT_EQ(memsnap::pytorch::torch_format_size(1024), "1024 bytes");
  EXPECT_EQ(memsnap::pytorch::torch_format_size(1536), "1.50 KiB");
  EXPECT_EQ(memsnap::pytorch::torch_format_size(kMiB), "1024.00 KiB");
  EXPECT_EQ(memsnap::pytorch::torch_format_size(20 * kMiB), "20.00 MiB");
  EXPECT_EQ(memsnap::pytorch::torch_format_size(2048 * kGiB), "2048.00 GiB");
}

// PyTorch 2.11 on the H100 (bench/make_pytorch_pool_snapshots.py, pool_oom): two graphs' pools
// hold 768 MiB free, a 1 GiB request under a 2 GiB cap fails. PyTorch printed "Of the allocated
// memory 1.25 GiB is allocated by PyTorch, with 768.00 MiB allocated in private pools (e.g., CUDA
// Graphs), and 2.00 MiB is reserved by PyTorch but unallocated."
TEST(OomMessage, CountsFreeMemoryOfPrivatePoolsAsPyTorchDoes) {
  memsnap::OomInfo info = h100(kGiB, 512 * kMiB, 1282 * kMiB, 77 * kGiB);
  info.private_pool_free_bytes = 768 * kMiB;
  info.allowed_bytes = 2 * kGiB;
  const std::string message = memsnap::pytorch::torch_oom_message(info, "memsnap: the verdict");
  EXPECT_NE(message.find("2.00 GiB allowed; Of the allocated memory 1.25 GiB is allocated by "
                         "PyTorch, with 768.00 MiB allocated in private pools (e.g., CUDA Graphs), "
                         "and 2.00 MiB is reserved by PyTorch but unallocated."),
            std::string::npos)
      << message;
}

TEST(OomMessage, KeepsPyTorchsWordingAndFigures) {
  const std::string message =
      memsnap::pytorch::torch_oom_message(h100(2 * kGiB, 70 * kGiB, 77 * kGiB, 1 * kGiB), "memsnap: the verdict");
  EXPECT_EQ(message.rfind("CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total "
                          "capacity of 80.00 GiB of which 1024.00 MiB is free. Including non-PyTorch "
                          "memory, this process has 79.00 GiB memory in use. Of the allocated "
                          "memory 70.00 GiB is allocated by PyTorch, and 7.00 GiB is reserved by "
                          "PyTorch but unallocated.",
                          0),
            0u)
      << message;
  EXPECT_EQ(message.substr(message.rfind('\n')), "\nmemsnap: the verdict");  // on a line of its own
}

// The verdict line is explain-oom's verdict on the same error, word for word: memsnap.torch
// decides it in its first OOM observer from the allocator as the error left it, without history,
// and explain-oom reads it from the snapshot written with history at that moment.
struct AtTheError {
  std::shared_ptr<memsnap::SimulatedBackend> backend;
  std::unique_ptr<memsnap::CachingAllocator> allocator;
  std::unique_ptr<memsnap::HistoryRecorder> recorder;
  std::vector<void*> held;
  std::string line;             // what memsnap.torch's message ends with
  std::string explain_oom;      // explain-oom's verdict on the snapshot written then
  std::string explain_oom_cause;

  explicit AtTheError(uint64_t capacity) {
    memsnap::SimulatedBackend::Options options;
    options.capacity_bytes = capacity;
    options.events_complete_immediately = false;
    backend = std::make_shared<memsnap::SimulatedBackend>(options);
    allocator = std::make_unique<memsnap::CachingAllocator>(backend);
    recorder = std::make_unique<memsnap::HistoryRecorder>(*allocator);
    recorder->configure({memsnap::HistoryLevel::kAll, 100000, true});
    allocator->add_oom_observer([this](const memsnap::OomInfo& info) {
      line = memsnap::pytorch::oom_verdict_line(*allocator, info);
      memsnap::SnapshotOptions at_error;
      at_error.oom = info;
      const memsnap::Result<memsnap::OomExplanation> x =
          memsnap::explain_oom(memsnap::take_snapshot(*allocator, recorder.get(), at_error));
      explain_oom = x ? x.value().diagnosis.verdict.sentence : "explain-oom failed: " + x.error();
      explain_oom_cause = x ? std::string(memsnap::oom_cause_name(x.value().diagnosis.cause)) : "";
    });
  }
  ~AtTheError() {
    for (void* p : held) allocator->deallocate(p);
  }
  void fail_with(uint64_t bytes, memsnap::StreamId stream = 0) {
    EXPECT_THROW(allocator->allocate(bytes, 0, stream), memsnap::OutOfMemoryError);
    EXPECT_EQ(line, "memsnap: " + explain_oom);
  }
};

TEST(OomMessage, ARequestLargerThanTheDeviceSaysNoSettingHelps) {
  AtTheError program(kGiB);
  program.fail_with(2 * kGiB);
  EXPECT_EQ(program.explain_oom_cause, "request_too_large");
  EXPECT_EQ(program.line.rfind("memsnap: The request alone (2.00 GiB) is larger than the device's total memory "
                               "(1.00 GiB): nothing this program frees and no allocator setting can make it fit",
                               0),
            0u)
      << program.line;
}

// A cap set from Python (torch.cuda.set_per_process_memory_fraction), as a batch-size finder
// meets it: the live tensors and the request exceed the cap, not the device.
TEST(OomMessage, ACapThatTheLiveTensorsAndTheRequestExceedIsNamed) {
  AtTheError program(8 * kGiB);
  program.allocator->device(0).set_memory_fraction(double(64 * kMiB) / double(8 * kGiB),
                                                   "torch.cuda.set_per_process_memory_fraction");
  program.held.push_back(program.allocator->allocate(50 * kMiB));
  program.fail_with(30 * kMiB);
  EXPECT_EQ(program.explain_oom_cause, "exhaustion");
  EXPECT_NE(program.line.find("more than a memory cap of 64.00 MiB"), std::string::npos) << program.line;
  EXPECT_NE(program.line.find("torch.cuda.set_per_process_memory_fraction"), std::string::npos) << program.line;
  EXPECT_NE(program.line.find("needs less live memory"), std::string::npos) << program.line;
}

TEST(OomMessage, ARequestLargerThanTheCapSaysSoAndNothingElse) {
  AtTheError program(8 * kGiB);
  program.allocator->device(0).set_memory_fraction(0.125, "torch.cuda.set_per_process_memory_fraction");
  program.held.push_back(program.allocator->allocate(10 * kMiB));
  program.fail_with(4 * kGiB);
  EXPECT_EQ(program.explain_oom_cause, "request_too_large");
  EXPECT_NE(program.line.find("The request alone (4.00 GiB) is larger than a memory cap of 1.00 GiB"), std::string::npos)
      << program.line;
  EXPECT_EQ(program.line.find("fragmentation"), std::string::npos) << program.line;
}

// One 60 MiB segment cut into 10 MiB blocks, every other one freed: 30 MiB free in holes.
TEST(OomMessage, FreeMemoryInPiecesTooSmallIsFragmentation) {
  AtTheError program(64 * kMiB);
  program.allocator->deallocate(program.allocator->allocate(60 * kMiB));
  std::vector<void*> pieces;
  for (int i = 0; i < 6; ++i) pieces.push_back(program.allocator->allocate(10 * kMiB));
  for (int i = 0; i < 6; ++i) (i % 2 == 0 ? program.held.push_back(pieces[i]) : program.allocator->deallocate(pieces[i]));
  program.fail_with(20 * kMiB);
  EXPECT_EQ(program.explain_oom_cause, "fragmentation");
  EXPECT_NE(program.line.find("not too much live memory"), std::string::npos) << program.line;
}

// Free memory cached on another stream: the request fits beside the live tensors, so it is not
// "tensors in use hold the device", and not fragmentation of this stream's memory either.
TEST(OomMessage, FreeMemoryOnAnotherStreamIsNotTakenForExhaustion) {
  AtTheError program(400 * kMiB);
  const memsnap::StreamId side = program.backend->create_stream(0);
  std::vector<void*> filler;
  for (int i = 0; i < 20; ++i) {
    program.held.push_back(program.allocator->allocate(2 * kMiB, 0, side));
    filler.push_back(program.allocator->allocate(18 * kMiB, 0, side));
  }
  for (void* p : filler) program.allocator->deallocate(p);
  program.fail_with(24 * kMiB, 0);
  EXPECT_EQ(program.explain_oom_cause, "other_streams");
  EXPECT_NE(program.line.find("not too much live memory"), std::string::npos) << program.line;
  EXPECT_EQ(program.line.find("needs less live memory"), std::string::npos) << program.line;
}

// A MemPool's scope has ended, but the pool lives and keeps its 60 MiB cached: a global request
// would have fit had the pool given it back.
TEST(OomMessage, FreeMemoryIdleInAPrivatePoolIsNamed) {
  AtTheError program(100 * kMiB);
  constexpr memsnap::MempoolId kPool{0, 1};
  program.allocator->device(0).create_or_incref_pool(kPool);
  program.allocator->device(0).begin_allocate_to_pool(kPool, [](memsnap::StreamId) { return true; });
  void* in_pool = program.allocator->allocate(60 * kMiB);
  program.allocator->device(0).end_allocate_to_pool(kPool);
  program.allocator->device(0).release_pool(kPool);
  program.allocator->deallocate(in_pool);
  program.held.push_back(program.allocator->allocate(10 * kMiB));
  program.fail_with(60 * kMiB);
  EXPECT_EQ(program.explain_oom_cause, "private_pools");
  EXPECT_NE(program.line.find("60.00 MiB was cached free inside private pools"), std::string::npos) << program.line;
}

}  // namespace oom_message_test
