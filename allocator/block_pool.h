// A pool of free blocks in PyTorch's order: by stream, then size, then address.
//
// Best fit is "the first block at or after (stream, size, 0)": the smallest block on that
// stream that is large enough, ties going to the lower address. PyTorch keeps a red-black
// tree for this; inserting and erasing in one measured about 60 ns per pair even with a
// few dozen blocks. Here each stream's blocks sit in size bins (size_bins.h), each bin a
// short list sorted by (size, address) (up to two blocks inline, more in a vector), with a
// bitmap of the non-empty bins: insert and erase touch one short list, and best fit looks in
// the request's bin and then jumps to the next non-empty one. The order, and so every
// decision, is the same as the tree's.
//
// A stream's bins cost up to 128 KiB (a bin for every size range up to its largest block), so
// only the streams that use the pool get them: the first kStreamsBinnedOnSight to hold a block,
// and any other once it holds more than kFewBlocks. The blocks of every other stream sit in
// one ordered set of (stream, size, address), PyTorch's tree itself. Streams are found through
// an ordered map, and streams whose bins emptied are dropped whenever the binned streams have
// doubled in number since the last such sweep. So a trace that puts each event on a stream of
// its own (issue 53) costs a logarithm an operation and memory in proportion to its blocks,
// while a program with a few streams keeps the bins' speed.
//
// The pool also keeps the unmapped address space of its expandable segments, in (stream,
// address) order: expandable segments grow into the lowest-addressed room first. That set
// changes only when pages are mapped or unmapped, so a plain ordered map serves.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "allocator/block.h"
#include "allocator/size_bins.h"

namespace memsnap {

struct PrivatePool;

class BlockPool {
 public:
  // Streams that get bins as soon as they hold a block, while fewer than this many have them.
  static constexpr size_t kStreamsBinnedOnSight = 8;
  // Any other stream gets bins once it holds more blocks than this.
  static constexpr size_t kFewBlocks = 16;

  explicit BlockPool(bool small) : is_small_(small) {}
  BlockPool(const BlockPool&) = delete;
  BlockPool& operator=(const BlockPool&) = delete;

  bool is_small() const { return is_small_; }
  // The private pool these blocks belong to; nullptr for the global pools.
  PrivatePool* owner() const { return owner_; }
  void set_owner(PrivatePool* owner) { owner_ = owner; }

  // `block` must not be in the pool; its stream, size and address fix its place.
  void insert(Block* block);
  // `block` must be in the pool, with the size and address it had when inserted.
  void erase(Block* block);

  // The first block in order at or after (stream, size, 0) when it is on `stream`: the best
  // fit for a request of `size` bytes (before the max_split_size rules), or nullptr.
  Block* lower_bound(StreamId stream, size_t size) const;

  // The block after `block` (which the pool holds) in pool order on its stream, or nullptr.
  Block* next_in_order(const Block* block) const;

  // --- unmapped address space of expandable segments ---
  void insert_unmapped(Block* block);
  void erase_unmapped(Block* block);
  // The lowest-addressed unmapped block on `stream` at or above `address`, or nullptr.
  Block* unmapped_at_or_after(StreamId stream, uintptr_t address) const;
  size_t unmapped_count() const { return unmapped_.size(); }
  bool holds_unmapped(const Block* block) const;

  // Every block in order, copied out, so a caller may release blocks while walking them.
  std::vector<Block*> ordered_blocks() const;
  // The blocks inserted since the last call that the pool still holds, each once, in order
  // (every block on the first call, and whenever more were inserted since the last call than
  // twice the blocks held, so that this record never outgrows the pool). For a caller that
  // acts on blocks by what they are when inserted: a block that stayed since its last look
  // needs no second one (the allocator's release passes, DeviceCachingAllocator::
  // release_cached_blocks).
  std::vector<Block*> take_inserted_since_last_look();
  std::vector<Block*> ordered_blocks(StreamId stream) const;

  size_t size() const { return size_; }
  // Streams with bins of their own (the others' blocks share one ordered set).
  size_t binned_streams() const { return binned_.size(); }
  // For the invariant checker: a real search, and a full check of the structure (bins
  // sorted, entries current and in the right bin, bitmap and count exact).
  bool contains(const Block* block) const;
  std::vector<std::string> structure_problems() const;

  // Searches made while garbage collection is on; a free block's age is the number of
  // searches since it became free.
  void count_search() { ++free_block_searches_; }
  uint64_t age_of(const Block* block) const { return free_block_searches_ - block->gc_count_base; }

 private:
  struct Entry {
    size_t size;
    uintptr_t address;
    Block* block;
  };
  // A bin keeps up to two blocks inline, `front` before `back` in order (most bins hold one,
  // and a bin of two is the next most common), so that finding or dropping one reads one line
  // besides the blocks'; with three or more it keeps them all in a vector sorted by (size,
  // address), and both inline places are empty.
  struct Bin {
    Block* front = nullptr;
    Block* back = nullptr;
    std::vector<Entry> many;  // empty unless the bin holds three or more
    bool empty() const { return front == nullptr && many.empty(); }
    Block* first() const { return front != nullptr ? front : many.front().block; }
  };
  struct StreamBlocks {
    explicit StreamBlocks(StreamId id) : stream(id) {}
    StreamId stream;
    std::vector<Bin> bins;  // grown on demand up to the largest bin used
    // bins.size(), kept apart: a Bin is 40 bytes, so size() would divide on every lookup.
    size_t bin_count = 0;
    SizeBinBitmap non_empty;
  };

  // A block of a stream without bins, in PyTorch's (stream, size, address) order.
  struct FewEntry {
    StreamId stream;
    size_t size;
    uintptr_t address;
    Block* block;
  };
  struct FewOrder {
    bool operator()(const FewEntry& a, const FewEntry& b) const {
      if (a.stream != b.stream) return a.stream < b.stream;
      return a.size != b.size ? a.size < b.size : a.address < b.address;
    }
  };
  using FewBlocks = std::set<FewEntry, FewOrder>;

  // The stream's bins, or nullptr when it has none (its blocks, if any, are in few_).
  StreamBlocks* find_stream(StreamId stream) const {
    if (last_stream_ != nullptr && last_stream_->stream == stream) return last_stream_;
    return find_other_stream(stream);
  }
  StreamBlocks* find_other_stream(StreamId stream) const;
  // Bins for a stream that holds no block yet, when it is one of the first to hold one.
  StreamBlocks* bins_for_new_stream(StreamId stream);
  StreamBlocks& add_binned_stream(StreamId stream);
  void drop_empty_streams();
  // Puts `block` in its stream's bins (in bin `bin_index`), counting it.
  void add_to_bins(StreamBlocks& blocks, Block* block, size_t bin_index);
  // The same for a stream without bins, giving it bins when it holds more than kFewBlocks.
  void insert_few(Block* block);
  void bin_stream(StreamId stream);
  FewBlocks::const_iterator find_few(const Block* block) const;
  FewBlocks::const_iterator first_few(StreamId stream) const {
    return few_.lower_bound(FewEntry{stream, 0, 0, nullptr});
  }
  Block* lower_bound_few(StreamId stream, size_t size) const;
  // (size, address) order, as in PyTorch's block comparator.
  static bool precedes(const Block* a, const Block* b) {
    return a->size != b->size ? a->size < b->size : a->address < b->address;
  }
  // Puts `block` beside the one block `bin` holds inline, the two in order.
  static void add_second(Bin& bin, Block* block) {
    if (precedes(bin.front, block)) {
      bin.back = block;
    } else {
      bin.back = bin.front;
      bin.front = block;
    }
  }
  // The rest of insert, erase and lower_bound, past the common case of a bin with at most two
  // blocks (kept out of line so that the common case inlines into the allocator). `blocks` is
  // the block's stream's bins, or nullptr when it has none.
  void insert_in_order(StreamBlocks* blocks, Block* block, size_t bin_index);
  void erase_in_order(Block* block, size_t bin_index);
  Block* lower_bound_in_bin(const StreamBlocks& blocks, size_t bin_index, size_t size) const;
  static void append_in_order(const StreamBlocks& blocks, std::vector<Block*>& out);

  bool is_small_;
  PrivatePool* owner_ = nullptr;
  size_t size_ = 0;
  std::map<StreamId, std::unique_ptr<StreamBlocks>> binned_;  // the streams with bins
  FewBlocks few_;                                             // the blocks of all the others
  size_t drop_empty_at_ = 2 * kStreamsBinnedOnSight;          // binned streams before a sweep
  mutable StreamBlocks* last_stream_ = nullptr;               // most calls repeat the last stream
  uint64_t free_block_searches_ = 0;
  std::map<std::pair<StreamId, uintptr_t>, Block*> unmapped_;
  // Blocks inserted since the last look (some erased since, some twice), or, with
  // inserted_unrecorded_, too many to keep: the next look takes every block.
  std::vector<Block*> inserted_;
  bool inserted_unrecorded_ = true;
};

static_assert(kSizeBinCount <= 65536, "Block::pool_bin holds a bin index");

inline void BlockPool::insert(Block* block) {
  block->gc_count_base = free_block_searches_;
  if (!inserted_unrecorded_) {
    inserted_.push_back(block);
    if (inserted_.size() > 2 * size_ + 64) {
      inserted_unrecorded_ = true;
      inserted_.clear();
    }
  }
  const size_t bin_index = size_bin(block->size);
  block->pool_bin = static_cast<uint16_t>(bin_index);
  StreamBlocks* blocks = find_stream(block->stream);
  if (blocks != nullptr && bin_index < blocks->bin_count) {
    Bin& bin = blocks->bins[bin_index];
    if (bin.front == nullptr) {
      if (bin.many.empty()) {
        bin.front = block;
        blocks->non_empty.set(bin_index);
        ++size_;
        return;
      }
    } else if (bin.back == nullptr) {
      add_second(bin, block);
      ++size_;
      return;
    }
  }
  insert_in_order(blocks, block, bin_index);
}

inline void BlockPool::erase(Block* block) {
  const size_t bin_index = block->pool_bin;  // (a block the pool does not hold is not found there)
  StreamBlocks* blocks = find_stream(block->stream);
  if (blocks != nullptr && bin_index < blocks->bin_count) {
    Bin& bin = blocks->bins[bin_index];
    if (bin.front == block) {
      bin.front = bin.back;
      bin.back = nullptr;
      if (bin.front == nullptr) blocks->non_empty.clear(bin_index);
      --size_;
      return;
    }
    if (bin.back == block) {
      bin.back = nullptr;
      --size_;
      return;
    }
  }
  erase_in_order(block, bin_index);
}

inline Block* BlockPool::lower_bound(StreamId stream, size_t size) const {
  const StreamBlocks* blocks = find_stream(stream);
  if (blocks == nullptr) return few_.empty() ? nullptr : lower_bound_few(stream, size);
  const size_t bin_index = size_bin(size);
  if (bin_index >= blocks->bin_count) return nullptr;  // no bin this high is in use
  const Bin& bin = blocks->bins[bin_index];
  if (bin.front != nullptr) {
    if (bin.front->size >= size) return bin.front;
    if (bin.back != nullptr && bin.back->size >= size) return bin.back;
  } else if (!bin.many.empty()) {
    return lower_bound_in_bin(*blocks, bin_index, size);
  }
  // Nothing here fits: the first block of the next non-empty bin (the usual way to a block
  // that is split).
  const size_t next = blocks->non_empty.next_set(bin_index + 1);
  return next == kNoSizeBin ? nullptr : blocks->bins[next].first();
}

}  // namespace memsnap
