// The iterator of a container read by index whose operator[] hands out values, not references
// (DeviceTrace, AnnotationList: compact rows read back as TraceEntry or SnapshotAnnotation).
// Random access; dereferencing gives a value, and -> a value held by the returned proxy.
#pragma once

#include <compare>
#include <cstddef>
#include <iterator>

namespace memsnap {

template <typename Container, typename Value>
class IndexedIterator {
 public:
  using iterator_category = std::random_access_iterator_tag;
  using value_type = Value;
  using difference_type = std::ptrdiff_t;
  using reference = Value;
  struct pointer {
    Value value;
    const Value* operator->() const { return &value; }
  };

  IndexedIterator() = default;
  IndexedIterator(const Container* container, size_t index) : container_(container), index_(index) {}
  Value operator*() const { return (*container_)[index_]; }
  pointer operator->() const { return {**this}; }
  Value operator[](difference_type n) const { return (*container_)[index_ + static_cast<size_t>(n)]; }
  IndexedIterator& operator++() { ++index_; return *this; }
  IndexedIterator operator++(int) { IndexedIterator was = *this; ++index_; return was; }
  IndexedIterator& operator--() { --index_; return *this; }
  IndexedIterator operator--(int) { IndexedIterator was = *this; --index_; return was; }
  IndexedIterator& operator+=(difference_type n) { index_ += static_cast<size_t>(n); return *this; }
  IndexedIterator& operator-=(difference_type n) { index_ -= static_cast<size_t>(n); return *this; }
  friend IndexedIterator operator+(IndexedIterator it, difference_type n) { return it += n; }
  friend IndexedIterator operator+(difference_type n, IndexedIterator it) { return it += n; }
  friend IndexedIterator operator-(IndexedIterator it, difference_type n) { return it -= n; }
  friend difference_type operator-(const IndexedIterator& a, const IndexedIterator& b) {
    return static_cast<difference_type>(a.index_) - static_cast<difference_type>(b.index_);
  }
  friend bool operator==(const IndexedIterator& a, const IndexedIterator& b) { return a.index_ == b.index_; }
  friend auto operator<=>(const IndexedIterator& a, const IndexedIterator& b) { return a.index_ <=> b.index_; }

 private:
  const Container* container_ = nullptr;
  size_t index_ = 0;
};

}  // namespace memsnap
