// A private pool with its own source of segments (torch.cuda.MemPool(allocator=...)): its segments
// come from that source and go back to it, never expandable, and the pool keeps the source alive
// until its last segment is gone.
#include "allocator_harness.h"

#include <memory>
#include <vector>

namespace memsnap::testing {
namespace {

constexpr MempoolId kPool{0, 1};
constexpr StreamId kStream = 0;

// Hands out address ranges far from the simulated device's, counting what it was asked.
class CountingSource final : public SegmentSource {
 public:
  std::optional<uintptr_t> reserve(int, size_t size, StreamId) override {
    if (refuse) return std::nullopt;
    reserved.push_back(size);
    const uintptr_t address = next;
    next += size;
    return address;
  }
  void release(int, uintptr_t address, size_t size, StreamId) override { released.emplace_back(address, size); }
  bool refuse = false;
  uintptr_t next = uintptr_t{0x2000'0000'0000};
  std::vector<size_t> reserved;
  std::vector<std::pair<uintptr_t, size_t>> released;
};

// use_mem_pool's scope: begin_allocate_to_pool adds a use of the pool, its end gives it back.
struct Pooled : Harness {
  void close_scope() {
    device().end_allocate_to_pool(kPool);
    device().release_pool(kPool);
  }
  explicit Pooled(const std::string& config = "") : Harness(config, 200 * kMiB, 1, true) {}
  DeviceCachingAllocator& device() { return allocator.device(0); }
  uintptr_t alloc_in_pool(size_t bytes) {
    device().begin_allocate_to_pool(kPool, [](StreamId) { return true; });
    uintptr_t address = 0;
    try {
      address = alloc(bytes, kStream);
    } catch (...) {
      close_scope();
      throw;
    }
    close_scope();
    return address;
  }
};

TEST(PoolSegmentSource, SegmentsComeFromTheSourceAndGoBackToIt) {
  Pooled h("expandable_segments:True");  // the pool's segments stay fixed all the same
  auto source = std::make_shared<CountingSource>();
  h.device().create_or_incref_pool(kPool, source);
  const uintptr_t a = h.alloc_in_pool(1 * kMiB);
  const uintptr_t b = h.alloc_in_pool(512 * kKiB);
  ASSERT_EQ(source->reserved, std::vector<size_t>{2 * kMiB}) << "one 2 MiB small segment, split";
  EXPECT_EQ(a, source->next - 2 * kMiB);
  EXPECT_EQ(b, a + 1 * kMiB);
  for (const SegmentRecord& s : h.device().segment_records()) EXPECT_FALSE(s.expandable);
  const uintptr_t global = h.alloc(1 * kMiB);  // outside the pool: the device's (expandable) memory
  EXPECT_TRUE(global < uintptr_t{0x2000'0000'0000} || global >= source->next);
  h.free(a);
  h.free(b);
  h.device().release_pool(kPool);
  h.allocator.empty_cache();
  EXPECT_EQ(source->released.size(), 1u);
  EXPECT_EQ(h.device().pool_use_count(kPool), 0);
  h.free(global);
  EXPECT_CONSISTENT(h);
}

TEST(PoolSegmentSource, ThePoolKeepsItsSourceUntilItsLastSegmentIsGone) {
  Pooled h;
  auto source = std::make_shared<CountingSource>();
  std::weak_ptr<CountingSource> watch = source;
  h.device().create_or_incref_pool(kPool, std::move(source));
  const uintptr_t tensor = h.alloc_in_pool(4 * kMiB);
  h.device().release_pool(kPool);  // the MemPool object is gone, the tensor lives on
  h.allocator.empty_cache();
  EXPECT_FALSE(watch.expired());
  h.free(tensor);
  EXPECT_FALSE(watch.expired()) << "a freed block stays cached until the cache is emptied";
  h.allocator.empty_cache();
  EXPECT_TRUE(watch.expired());
  EXPECT_CONSISTENT(h);
}

TEST(PoolSegmentSource, ASourceWithNothingToGiveIsAnOutOfMemoryError) {
  Pooled h;
  auto source = std::make_shared<CountingSource>();
  source->refuse = true;
  h.device().create_or_incref_pool(kPool, source);
  EXPECT_THROW(h.alloc_in_pool(4 * kMiB), OutOfMemoryError);
  EXPECT_CONSISTENT(h);
}

TEST(PoolSegmentSource, OnlyANewPoolTakesASource) {
  Pooled h;
  h.device().create_or_incref_pool(kPool);
  EXPECT_THROW(h.device().create_or_incref_pool(kPool, std::make_shared<CountingSource>()),
               std::invalid_argument);
  EXPECT_EQ(h.device().pool_use_count(kPool), 1);
}

TEST(PoolSegmentSource, TheMemoryFractionCountsItsSegments) {
  Pooled h;
  h.allocator.set_memory_fraction(0.25, 0);  // 50 MiB of 200
  auto source = std::make_shared<CountingSource>();
  h.device().create_or_incref_pool(kPool, source);
  const uintptr_t a = h.alloc_in_pool(40 * kMiB);
  EXPECT_THROW(h.alloc_in_pool(40 * kMiB), OutOfMemoryError);
  EXPECT_EQ(source->reserved.size(), 1u);
  h.free(a);
  EXPECT_CONSISTENT(h);
}

}  // namespace
}  // namespace memsnap::testing
