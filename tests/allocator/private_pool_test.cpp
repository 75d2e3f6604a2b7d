// Private pools (CUDA graphs, MemPool) on the simulated device: the scenarios of the CUDA-graphs
// memory guide, scaled so that its "1 GB" is 64 MiB. The large-pool figures after each step are
// those PyTorch 2.11 gave on an H100 for the same program (tests/data/pytorch-2.11-pools, made by
// bench/make_pytorch_pool_snapshots.py), and the guide's tables.
#include <functional>

#include "allocator_harness.h"

namespace memsnap::testing {
namespace {

constexpr size_t G = 64 * kMiB;
constexpr StreamId kCaptureStream = 7;  // torch.cuda.graph's own capture stream
constexpr StreamId kSideStream = 9;

struct Figures {
  int64_t allocated, active, inactive_split, reserved;  // large pool, in units of G
  bool operator==(const Figures&) const = default;
};

std::ostream& operator<<(std::ostream& out, const Figures& f) {
  return out << "{allocated " << f.allocated << ", active " << f.active << ", inactive_split "
             << f.inactive_split << ", reserved " << f.reserved << "}";
}

struct Graphs : Harness {
  Graphs(const std::string& config = "", size_t capacity = size_t{80} << 30)
      : Harness(config, capacity, 1, /*events_complete_immediately=*/true) {}

  DeviceCachingAllocator& device() { return allocator.device(0); }

  Figures large() {
    const DeviceStats s = stats();
    auto units = [](const StatArray& a) { return a[kLargePool].current / static_cast<int64_t>(G); };
    return {units(s.allocated_bytes), units(s.active_bytes), units(s.inactive_split_bytes),
            units(s.reserved_bytes)};
  }

  // `with torch.cuda.graph(g, pool=...)`: empty_cache, then requests on the capture stream go to
  // the graph's pool until the capture ends.
  void capture(MempoolId pool, const std::function<void()>& body) {
    allocator.empty_cache();
    device().begin_allocate_to_pool(pool, [](StreamId s) { return s == kCaptureStream; });
    body();
    device().end_allocate_to_pool(pool);
  }
  // The graph is destroyed.
  void reset(MempoolId pool) { device().release_pool(pool); }

  int64_t reserved_in(MempoolId pool) {
    int64_t bytes = 0;
    for (const SegmentRecord& s : device().segment_records())
      if (s.pool_id == pool) bytes += static_cast<int64_t>(s.size);
    return bytes / static_cast<int64_t>(G);
  }
};

constexpr MempoolId kGraph1{1, 0};
constexpr MempoolId kGraph2{2, 0};
constexpr MempoolId kUserPool{0, 1};

TEST(PrivatePools, EachGraphKeepsItsOwnPoolUntilItIsDestroyed) {
  Graphs h;
  const uintptr_t x1 = h.alloc(4 * G), x2 = h.alloc(4 * G);
  EXPECT_EQ(h.large(), (Figures{8, 8, 0, 8}));
  uintptr_t o1 = 0, o2 = 0;
  h.capture(kGraph1, [&] {
    const uintptr_t i1 = h.alloc(4 * G, kCaptureStream);
    o1 = h.alloc(4 * G, kCaptureStream);
    h.free(i1);
  });
  EXPECT_EQ(h.large(), (Figures{12, 12, 0, 16}));
  h.capture(kGraph2, [&] {
    // graph 1's free 4G cannot serve graph 2
    const uintptr_t i2 = h.alloc(4 * G, kCaptureStream);
    o2 = h.alloc(4 * G, kCaptureStream);
    h.free(i2);
  });
  EXPECT_EQ(h.large(), (Figures{16, 16, 0, 24}));
  EXPECT_EQ(h.reserved_in(kGraph1), 8);
  EXPECT_EQ(h.reserved_in(kGraph2), 8);
  EXPECT_EQ(h.reserved_in(MempoolId{}), 8);
  EXPECT_CONSISTENT(h);

  h.reset(kGraph1);
  h.reset(kGraph2);
  h.free(o1);
  h.free(o2);
  EXPECT_EQ(h.large(), (Figures{8, 8, 0, 24}));
  h.allocator.empty_cache();
  EXPECT_EQ(h.large(), (Figures{8, 8, 0, 8}));
  EXPECT_EQ(h.device().pool_use_count(kGraph1), 0);
  EXPECT_CONSISTENT(h);
  h.free(x1);
  h.free(x2);
}

TEST(PrivatePools, GraphsSharingAPoolReuseEachOthersFreeBlocks) {
  Graphs h;
  h.alloc(4 * G);
  h.alloc(4 * G);
  h.capture(kGraph1, [&] {
    const uintptr_t i1 = h.alloc(4 * G, kCaptureStream);
    h.alloc(4 * G, kCaptureStream);
    h.free(i1);
  });
  h.capture(kGraph1, [&] {  // torch.cuda.graph(g2, pool=g1.pool())
    const uintptr_t i2 = h.alloc(4 * G, kCaptureStream);
    h.alloc(4 * G, kCaptureStream);
    h.free(i2);
  });
  EXPECT_EQ(h.large(), (Figures{16, 16, 0, 20}));
  EXPECT_EQ(h.reserved_in(kGraph1), 12);
  EXPECT_EQ(h.device().pool_use_count(kGraph1), 2);
  h.reset(kGraph1);
  h.allocator.empty_cache();  // graph 2 still uses the pool
  EXPECT_EQ(h.large().reserved, 20);
  EXPECT_CONSISTENT(h);
}

TEST(PrivatePools, AllocationsAfterCaptureCannotUseTheGraphsCachedMemory) {
  Graphs h;
  h.alloc(4 * G);  // x1
  h.free(h.alloc(4 * G));  // t1
  EXPECT_EQ(h.large(), (Figures{4, 4, 0, 8}));
  h.capture(kGraph1, [&] {
    EXPECT_EQ(h.large(), (Figures{4, 4, 0, 4}));  // entering the capture emptied the cache
    const uintptr_t t2 = h.alloc(4 * G, kCaptureStream);
    h.alloc(4 * G, kCaptureStream);  // out1
    h.free(t2);
  });
  EXPECT_EQ(h.large(), (Figures{8, 8, 0, 12}));
  h.free(h.alloc(4 * G));  // t3: the graph's free 4G is not for it
  EXPECT_EQ(h.large(), (Figures{8, 8, 0, 16}));
  EXPECT_CONSISTENT(h);
}

TEST(PrivatePools, FragmentsOfTheGlobalPoolCannotServeAGraph) {
  Graphs h;
  h.free(h.alloc(8 * G));  // temp
  EXPECT_EQ(h.large(), (Figures{0, 0, 0, 8}));
  h.alloc(1 * G);  // small
  const uintptr_t x = h.alloc(1 * G);
  EXPECT_EQ(h.large(), (Figures{2, 2, 6, 8}));
  h.capture(kGraph1, [&] {
    EXPECT_EQ(h.large(), (Figures{2, 2, 6, 8}));  // the split segment stays
    const uintptr_t intermediate = h.alloc(1 * G, kCaptureStream);
    h.alloc(1 * G, kCaptureStream);
    h.free(intermediate);
  });
  EXPECT_EQ(h.large(), (Figures{3, 3, 6, 10}));
  EXPECT_CONSISTENT(h);
  h.free(x);
}

TEST(PrivatePools, NothingGoesBackToTheDeviceDuringACapture) {
  Graphs h;
  const uintptr_t x1 = h.alloc(4 * G);
  h.capture(kGraph1, [&] {
    h.alloc(4 * G, kCaptureStream);  // x2
    EXPECT_EQ(h.large(), (Figures{8, 8, 0, 8}));
    h.free(x1);
    EXPECT_EQ(h.large(), (Figures{4, 4, 0, 8}));
    h.allocator.empty_cache();  // frees nothing while capturing
    EXPECT_EQ(h.large(), (Figures{4, 4, 0, 8}));
    h.alloc(4 * G, kCaptureStream);  // x3
    EXPECT_EQ(h.large(), (Figures{8, 8, 0, 12}));
  });
  EXPECT_EQ(h.stats().num_device_free, 0);
  EXPECT_CONSISTENT(h);
}

TEST(PrivatePools, FreesUsedOnOtherStreamsWaitUntilTheCaptureEnds) {
  Graphs h;
  h.capture(kGraph1, [&] {
    const uintptr_t x1 = h.alloc(4 * G, kCaptureStream);
    h.allocator.record_stream(reinterpret_cast<void*>(x1), kSideStream);
    h.free(x1);
    EXPECT_EQ(h.large(), (Figures{0, 4, 0, 4}));
    EXPECT_CONSISTENT(h);
    h.free(h.alloc(1, kCaptureStream));  // t1: no event may be queried during a capture
    EXPECT_EQ(h.large(), (Figures{0, 4, 0, 4}));
    h.alloc(4 * G, kCaptureStream);  // x2 cannot reuse x1
    EXPECT_EQ(h.large(), (Figures{4, 8, 0, 8}));
  });
  EXPECT_CONSISTENT(h);
  h.alloc(1);  // t2, after the capture: x1's events are recorded and complete
  EXPECT_EQ(h.large(), (Figures{4, 4, 0, 8}));
  EXPECT_CONSISTENT(h);
}

TEST(PrivatePools, MemPoolServesItsScopeAndGoesBackWhenReleased) {
  Graphs h;
  const uintptr_t x = h.alloc(4 * G);
  h.device().create_or_incref_pool(kUserPool);  // torch.cuda.MemPool()
  // use_mem_pool: this thread's requests, whatever the stream
  h.device().begin_allocate_to_pool(kUserPool, [](StreamId) { return true; });
  const uintptr_t y = h.alloc(4 * G);
  const uintptr_t z = h.alloc(1 * G);
  EXPECT_EQ(h.large(), (Figures{9, 9, 0, 9}));
  h.free(y);
  const uintptr_t w = h.alloc(2 * G);
  EXPECT_EQ(h.large(), (Figures{7, 7, 2, 9}));
  h.device().end_allocate_to_pool(kUserPool);
  h.device().release_pool(kUserPool);  // use_mem_pool's exit
  EXPECT_EQ(h.device().pool_use_count(kUserPool), 1);
  const uintptr_t v = h.alloc(4 * G);
  EXPECT_EQ(h.large(), (Figures{11, 11, 2, 13}));
  EXPECT_EQ(h.reserved_in(kUserPool), 5);
  h.free(z);
  h.free(w);
  EXPECT_EQ(h.large(), (Figures{8, 8, 0, 13}));
  // del pool: ~MemPool releases it and empties its cache
  h.device().release_pool(kUserPool);
  h.device().empty_cache(kUserPool);
  EXPECT_EQ(h.large(), (Figures{8, 8, 0, 8}));
  EXPECT_EQ(h.device().pool_use_count(kUserPool), 0);
  EXPECT_CONSISTENT(h);
  h.free(x);
  h.free(v);
}

TEST(PrivatePools, OutOfMemoryCountsWhatThePoolsHoldFree) {
  Graphs h;
  h.allocator.set_memory_fraction(28.0 * G / static_cast<double>(size_t{80} << 30), 0);
  h.alloc(4 * G);
  h.capture(kGraph1, [&] {
    const uintptr_t i = h.alloc(6 * G, kCaptureStream);
    h.alloc(2 * G, kCaptureStream);
    h.free(i);
  });
  h.capture(kGraph2, [&] {
    const uintptr_t i = h.alloc(6 * G, kCaptureStream);
    h.alloc(2 * G, kCaptureStream);
    h.free(i);
  });
  EXPECT_EQ(h.large(), (Figures{8, 8, 0, 20}));
  try {
    h.alloc(12 * G);  // the pools hold 12G free; the cap leaves 8G
    FAIL() << "expected an out-of-memory error";
  } catch (const OutOfMemoryError& e) {
    EXPECT_EQ(e.info().private_pool_free_bytes, 12 * G);
    EXPECT_EQ(e.info().unallocated_bytes(), 0u);
    EXPECT_TRUE(e.info().pool.is_global());
    EXPECT_NE(std::string(e.what()).find("cached in private pools"), std::string::npos) << e.what();
  }
  EXPECT_EQ(h.large(), (Figures{8, 8, 0, 20}));
  EXPECT_EQ(h.stats().num_alloc_retries, 1);
  EXPECT_CONSISTENT(h);
}

TEST(PrivatePools, NoRetryWhileCapturing) {
  Graphs h("", 10 * G);
  h.free(h.alloc(4 * G));  // cached in the global pool
  h.device().begin_allocate_to_pool(kGraph1, [](StreamId s) { return s == kCaptureStream; });
  EXPECT_THROW(h.alloc(8 * G, kCaptureStream), OutOfMemoryError);
  EXPECT_EQ(h.stats().num_alloc_retries, 0);
  EXPECT_EQ(h.large().reserved, 4);
  h.device().end_allocate_to_pool(kGraph1);
  EXPECT_CONSISTENT(h);
}

TEST(PrivatePools, ReleasedPoolsStillHoldingTensorsGoBackOnceTheyAreFree) {
  Graphs h;
  uintptr_t out = 0;
  h.capture(kGraph1, [&] { out = h.alloc(4 * G, kCaptureStream); });
  h.reset(kGraph1);
  h.allocator.empty_cache();
  EXPECT_EQ(h.large().reserved, 4);  // out is alive
  h.free(out);
  h.allocator.empty_cache();
  EXPECT_EQ(h.large().reserved, 0);
  EXPECT_CONSISTENT(h);
}

TEST(PrivatePools, UseOnOomPoolServesAGlobalRequestFromItsFreeBlocks) {
  Graphs h("", 10 * G);
  h.device().create_or_incref_pool(kUserPool);
  h.device().set_use_on_oom(kUserPool, true);
  h.device().begin_allocate_to_pool(kUserPool, [](StreamId) { return true; });
  h.free(h.alloc(6 * G));
  h.device().end_allocate_to_pool(kUserPool);
  h.device().release_pool(kUserPool);
  const uintptr_t a = h.alloc(5 * G);  // 4G of room left: the pool's free 6G serves it
  EXPECT_EQ(h.large().reserved, 6);
  EXPECT_EQ(h.reserved_in(kUserPool), 6);
  EXPECT_CONSISTENT(h);
  h.free(a);
}

TEST(PrivatePools, NoSplitPoolKeepsBlocksWhole) {
  Graphs h;
  h.device().create_or_incref_pool(kUserPool);
  h.device().set_no_split(kUserPool);
  h.device().begin_allocate_to_pool(kUserPool, [](StreamId) { return true; });
  h.free(h.alloc(4 * G));
  h.alloc(1 * G);
  h.device().end_allocate_to_pool(kUserPool);
  EXPECT_EQ(h.large(), (Figures{4, 4, 0, 4}));  // the whole 4G block, unsplit
  EXPECT_CONSISTENT(h);
}

TEST(PrivatePools, InnermostScopeWinsAndMistakesAreRefused) {
  Graphs h;
  DeviceCachingAllocator& d = h.device();
  d.begin_allocate_to_pool(kUserPool, [](StreamId) { return true; });
  d.begin_allocate_to_pool(kGraph1, [](StreamId s) { return s == kCaptureStream; });
  h.alloc(4 * G, kCaptureStream);
  h.alloc(4 * G, 0);
  EXPECT_EQ(h.reserved_in(kGraph1), 4);
  EXPECT_EQ(h.reserved_in(kUserPool), 4);
  EXPECT_THROW(d.begin_allocate_to_pool(kGraph1, [](StreamId) { return true; }),
               std::invalid_argument);
  EXPECT_THROW(d.begin_allocate_to_pool(MempoolId{}, [](StreamId) { return true; }),
               std::invalid_argument);
  d.end_allocate_to_pool(kGraph1);
  d.end_allocate_to_pool(kUserPool);
  EXPECT_FALSE(d.allocating_to_pool());
  EXPECT_THROW(d.end_allocate_to_pool(kUserPool), std::invalid_argument);
  EXPECT_THROW(d.release_pool(MempoolId{5, 0}), std::invalid_argument);
  d.release_pool(kUserPool);
  EXPECT_THROW(d.release_pool(kUserPool), std::invalid_argument);
  EXPECT_THROW(d.create_or_incref_pool(kUserPool), std::invalid_argument);  // released, holds memory
  EXPECT_CONSISTENT(h);
}

// CUDA graph trees: a pool's layout saved after recording one graph, put back before the next.
TEST(PoolCheckpoints, RestoringPutsBackTheLayoutAndTheLiveAllocations) {
  Graphs h;
  DeviceCachingAllocator& d = h.device();
  uintptr_t a = 0, b = 0, c = 0;
  h.capture(kGraph1, [&] {
    a = h.alloc(3 * G, kCaptureStream);
    b = h.alloc(1 * G, kCaptureStream);
    c = h.alloc(2 * G, kCaptureStream);
    h.free(b);
  });
  const PoolCheckpoint saved = d.checkpoint_pool(kGraph1);
  ASSERT_EQ(saved.segments.size(), 3u);
  const Figures before = h.large();
  // Another path runs in the pool: its outputs replace these.
  h.free(a);
  h.free(c);
  d.begin_allocate_to_pool(kGraph1, [](StreamId s) { return s == kCaptureStream; });
  const uintptr_t other = h.alloc(5 * G, kCaptureStream);
  d.end_allocate_to_pool(kGraph1);
  EXPECT_CONSISTENT(h);

  const PoolRestore restore = d.restore_pool(saved);
  EXPECT_EQ(restore.freed, std::vector<uintptr_t>{other});
  ASSERT_EQ(restore.allocated.size(), 2u);
  EXPECT_EQ(restore.allocated[0], (std::pair<uintptr_t, size_t>{a, 3 * G}));
  EXPECT_EQ(restore.allocated[1], (std::pair<uintptr_t, size_t>{c, 2 * G}));
  EXPECT_EQ(h.large().allocated, before.allocated);
  EXPECT_EQ(h.large().reserved, before.reserved + 5);  // other's segment stays, free, in the pool
  EXPECT_EQ(h.device().allocated_size(a), 3 * G);
  EXPECT_EQ(h.device().allocated_size(other), 0u);
  std::vector<SegmentRecord> now;
  for (const SegmentRecord& r : d.segment_records())
    if (r.pool_id == kGraph1 && r.address != other) now.push_back(r);
  ASSERT_EQ(now.size(), saved.segments.size());
  for (size_t i = 0; i < now.size(); ++i) {
    ASSERT_EQ(now[i].blocks.size(), saved.segments[i].blocks.size());
    for (size_t j = 0; j < now[i].blocks.size(); ++j) {
      EXPECT_EQ(now[i].blocks[j].address, saved.segments[i].blocks[j].address);
      EXPECT_EQ(now[i].blocks[j].state, saved.segments[i].blocks[j].state);
    }
  }
  EXPECT_CONSISTENT(h);
  h.free(a);
  h.free(c);
  EXPECT_CONSISTENT(h);
}

TEST(PoolCheckpoints, ASplitSegmentIsCutAgainExactly) {
  Graphs h;
  DeviceCachingAllocator& d = h.device();
  std::vector<uintptr_t> parts;
  h.capture(kGraph1, [&] {
    const uintptr_t big = h.alloc(8 * G, kCaptureStream);
    h.free(big);
    for (int i = 0; i < 4; ++i) parts.push_back(h.alloc(G + i * kMiB, kCaptureStream));  // one segment, cut
    h.free(parts[1]);
  });
  const PoolCheckpoint saved = d.checkpoint_pool(kGraph1);
  ASSERT_EQ(saved.segments.size(), 1u);
  ASSERT_EQ(saved.segments[0].blocks.size(), 5u);
  for (uintptr_t p : {parts[0], parts[2], parts[3]}) h.free(p);
  EXPECT_EQ(h.large().allocated, 0);
  const PoolRestore restore = d.restore_pool(saved);
  EXPECT_TRUE(restore.freed.empty());
  EXPECT_EQ(restore.allocated.size(), 3u);
  EXPECT_EQ(d.segment_records()[0].blocks.size(), 5u);
  EXPECT_EQ(h.stats().inactive_split[kAggregate].current, 2);  // parts[1]'s hole and the tail
  EXPECT_CONSISTENT(h);
}

TEST(PoolCheckpoints, ACheckpointThatNoLongerFitsIsRefusedAndChangesNothing) {
  Graphs h;
  DeviceCachingAllocator& d = h.device();
  uintptr_t a = 0;
  h.capture(kGraph1, [&] { a = h.alloc(4 * G, kCaptureStream); });
  PoolCheckpoint saved = d.checkpoint_pool(kGraph1);
  EXPECT_THROW(d.checkpoint_pool(kGraph2), std::invalid_argument);
  PoolCheckpoint wrong = saved;
  wrong.segments[0].address += 512;
  EXPECT_THROW(d.restore_pool(wrong), std::invalid_argument);
  wrong = saved;
  wrong.segments[0].blocks[0].size -= 512;
  EXPECT_THROW(d.restore_pool(wrong), std::invalid_argument);
  wrong = saved;
  wrong.pool = kGraph2;
  EXPECT_THROW(d.restore_pool(wrong), std::invalid_argument);
  EXPECT_EQ(h.device().allocated_size(a), 4 * G);  // still live, untouched
  h.reset(kGraph1);
  EXPECT_THROW(d.restore_pool(saved), std::invalid_argument);
  EXPECT_CONSISTENT(h);
}

}  // namespace
}  // namespace memsnap::testing
