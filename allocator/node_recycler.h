// An allocator for node-based containers that keeps freed nodes for reuse.
//
// The block pools insert and erase a tree node on almost every allocation; recycling nodes
// keeps malloc (and std::pmr's bookkeeping, which measured slower) off the hot path. All
// copies of one NodeRecyclingAllocator share one free list, which must outlive the container.
#pragma once

#include <cstddef>
#include <new>
#include <vector>

namespace memsnap {

class NodeFreeList {
 public:
  NodeFreeList() = default;
  NodeFreeList(const NodeFreeList&) = delete;
  NodeFreeList& operator=(const NodeFreeList&) = delete;
  ~NodeFreeList() {
    for (void* node : free_) ::operator delete(node);
  }

  void* take(size_t bytes) {
    if (bytes == node_bytes_ && !free_.empty()) {
      void* node = free_.back();
      free_.pop_back();
      return node;
    }
    if (node_bytes_ == 0) node_bytes_ = bytes;
    return ::operator new(bytes);
  }
  void give_back(void* node, size_t bytes) {
    if (bytes == node_bytes_) free_.push_back(node);
    else ::operator delete(node);
  }

 private:
  size_t node_bytes_ = 0;  // containers allocate one node type; other sizes pass through
  std::vector<void*> free_;
};

template <typename T>
class NodeRecyclingAllocator {
 public:
  using value_type = T;
  explicit NodeRecyclingAllocator(NodeFreeList* list) : list_(list) {}
  template <typename U>
  NodeRecyclingAllocator(const NodeRecyclingAllocator<U>& other) : list_(other.list()) {}  // NOLINT

  T* allocate(size_t n) { return static_cast<T*>(list_->take(n * sizeof(T))); }
  void deallocate(T* p, size_t n) { list_->give_back(p, n * sizeof(T)); }
  NodeFreeList* list() const { return list_; }

  template <typename U>
  bool operator==(const NodeRecyclingAllocator<U>& other) const { return list_ == other.list(); }

 private:
  NodeFreeList* list_;
};

}  // namespace memsnap
