// A pool of free blocks ordered by (stream, size, address).
//
// Best fit is one ordered search: the first block at or after (stream, size, 0) is the
// smallest block on that stream that is large enough, ties going to the lower address —
// the same order PyTorch keeps, which also fixes the order in which cached segments are
// released. Each free block remembers its position, so removing it needs no search, and tree
// nodes are recycled so the hot path does not call malloc.
#pragma once

#include <cstddef>
#include <iterator>

#include "allocator/block.h"

namespace memsnap {

class BlockPool {
 public:
  using Set = BlockSet;

  // Iterates the pool's blocks in order, yielding Block* (the keys stay an internal detail).
  template <typename SetIterator>
  class BasicIterator {
   public:
    using iterator_category = std::bidirectional_iterator_tag;
    using value_type = Block*;
    using difference_type = std::ptrdiff_t;
    using pointer = Block* const*;
    using reference = Block*;

    BasicIterator() = default;
    explicit BasicIterator(SetIterator it) : it_(it) {}
    Block* operator*() const { return it_->block; }
    BasicIterator& operator++() { ++it_; return *this; }
    BasicIterator operator++(int) { BasicIterator old = *this; ++it_; return old; }
    BasicIterator& operator--() { --it_; return *this; }
    BasicIterator operator--(int) { BasicIterator old = *this; --it_; return old; }
    bool operator==(const BasicIterator& other) const { return it_ == other.it_; }
    SetIterator base() const { return it_; }

   private:
    SetIterator it_{};
  };
  using iterator = BasicIterator<Set::iterator>;
  using const_iterator = BasicIterator<Set::const_iterator>;

  explicit BlockPool(bool small)
      : is_small_(small),
        blocks_(FreeBlockOrder{}, NodeRecyclingAllocator<FreeBlockKey>(&node_memory_)) {}
  BlockPool(const BlockPool&) = delete;
  BlockPool& operator=(const BlockPool&) = delete;

  bool is_small() const { return is_small_; }

  void insert(Block* block) {
    block->gc_count_base = free_block_searches_;
    block->pool_position =
        blocks_.insert({block->stream, block->size, block->address, block}).first;
  }
  void erase(Block* block) { blocks_.erase(block->pool_position); }
  iterator erase(iterator it) { return iterator(blocks_.erase(it.base())); }

  // First block in order at or after (stream, size, 0): a best-fit candidate when it is on
  // `stream`.
  iterator lower_bound(StreamId stream, size_t size) {
    return iterator(blocks_.lower_bound({stream, size, 0, nullptr}));
  }

  iterator begin() { return iterator(blocks_.begin()); }
  iterator end() { return iterator(blocks_.end()); }
  const_iterator begin() const { return const_iterator(blocks_.begin()); }
  const_iterator end() const { return const_iterator(blocks_.end()); }
  size_t size() const { return blocks_.size(); }
  // A real search (not the remembered position), for the invariant checker.
  bool contains(Block* block) const {
    auto it = blocks_.find({block->stream, block->size, block->address, block});
    return it != blocks_.end() && it == Set::const_iterator(block->pool_position) &&
           it->block == block;
  }

  // Searches made while garbage collection is on; a free block's age is the number of
  // searches since it became free.
  void count_search() { ++free_block_searches_; }
  uint64_t age_of(const Block* block) const { return free_block_searches_ - block->gc_count_base; }

 private:
  bool is_small_;
  NodeFreeList node_memory_;  // declared before blocks_, so it outlives the tree
  Set blocks_;
  uint64_t free_block_searches_ = 0;
};

}  // namespace memsnap
