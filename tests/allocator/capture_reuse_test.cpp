// Blocks freed during a CUDA graph capture while other streams used them: with
// graph_capture_record_stream_reuse they serve the capture again once its graph orders all
// later work after their uses; otherwise they wait for the capture's end. The scenarios are
// PyTorch 2.11's test_graph_capture_reclaim_2_streams and _4_streams, on the simulated
// device's modelled capture.
#include "allocator_harness.h"

namespace memsnap::testing {
namespace {

constexpr MempoolId kGraph{1, 0};
constexpr StreamId kS1 = 11, kS2 = 12, kS3 = 13, kS4 = 14;

struct Capture : Harness {
  explicit Capture(const std::string& config) : Harness(config, size_t{80} << 30, 1, true) {}
  DeviceCachingAllocator& device() { return allocator.device(0); }
  void begin() {
    backend->capture_begin(kS1);
    device().begin_allocate_to_pool(kGraph, [this](StreamId s) { return backend->capture_state(0, s).capturing; });
  }
  void end() {
    device().end_allocate_to_pool(kGraph);
    backend->capture_end(kS1);
  }
  void record_stream(uintptr_t address, StreamId stream) {
    allocator.record_stream(reinterpret_cast<void*>(address), stream);
  }
};

TEST(CaptureReuse, ABlockServesTheCaptureAgainOnceItsUsesAreJoined) {
  Capture h("graph_capture_record_stream_reuse:True");
  h.begin();
  const uintptr_t sink = h.alloc(32, kS1);
  const uintptr_t data1 = h.alloc(32, kS1);
  h.backend->capture_wait(kS2, kS1);
  const uintptr_t buf2 = h.alloc(32, kS2);
  h.backend->capture_work(kS2);  // reads data1 on s2
  h.record_stream(data1, kS2);
  h.free(data1);
  const uintptr_t data2 = h.alloc(32, kS1);  // s2 not joined yet
  EXPECT_NE(data2, data1);
  h.backend->capture_wait(kS1, kS2);
  h.backend->capture_work(kS1);  // sink.fill_ after the join
  const uintptr_t data3 = h.alloc(32, kS1);
  EXPECT_EQ(data3, data1);
  EXPECT_CONSISTENT(h);
  h.end();
  for (uintptr_t a : {sink, buf2, data2, data3}) h.free(a);
  EXPECT_CONSISTENT(h);
}

TEST(CaptureReuse, PartialJoinsAreNotEnough) {
  Capture h("graph_capture_record_stream_reuse:True");
  h.begin();
  const uintptr_t data1 = h.alloc(32, kS1);
  h.backend->capture_work(kS1);  // ones_ writes data1
  const uintptr_t sink1 = h.alloc(32, kS1);
  const uintptr_t sink3 = h.alloc(32, kS1);
  std::vector<uintptr_t> buffers;
  for (StreamId s : {kS2, kS3, kS4}) {
    h.backend->capture_wait(s, kS1);
    buffers.push_back(h.alloc(32, s));
    h.backend->capture_work(s);
    h.record_stream(data1, s);
  }
  h.free(data1);
  h.backend->capture_wait(kS1, kS2);
  h.backend->capture_work(kS1);
  h.backend->capture_wait(kS3, kS4);
  h.backend->capture_work(kS3);
  const uintptr_t data2 = h.alloc(32, kS1);  // s1 and s3 not joined
  EXPECT_NE(data2, data1);
  h.backend->capture_wait(kS1, kS3);
  h.backend->capture_work(kS1);
  const uintptr_t data3 = h.alloc(32, kS1);
  EXPECT_EQ(data3, data1);
  h.end();
  for (uintptr_t a : buffers) h.free(a);
  for (uintptr_t a : {sink1, sink3, data2, data3}) h.free(a);
  EXPECT_CONSISTENT(h);
}

TEST(CaptureReuse, WithoutTheSettingABlockWaitsForTheCapturesEnd) {
  Capture h("");
  h.begin();
  const uintptr_t data1 = h.alloc(32, kS1);
  h.backend->capture_wait(kS2, kS1);
  h.backend->capture_work(kS2);
  h.record_stream(data1, kS2);
  h.free(data1);
  h.backend->capture_wait(kS1, kS2);
  h.backend->capture_work(kS1);
  const uintptr_t data3 = h.alloc(32, kS1);
  EXPECT_NE(data3, data1);
  EXPECT_CONSISTENT(h);
  h.end();
  // After the capture, the use recorded during it is over: the block is free at once.
  const uintptr_t after = h.alloc(32, kS1);
  EXPECT_EQ(h.stats().active[kAggregate].current, 2) << "data1's block was freed at the capture's end";
  h.free(after);
  h.free(data3);
  EXPECT_CONSISTENT(h);
}

}  // namespace
}  // namespace memsnap::testing
