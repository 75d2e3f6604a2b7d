// A snapshot's annotations (PyTorch's external_annotations: record_function ranges, profiler
// steps, memsnap's annotate), held compactly: a run annotated at every step has hundreds of
// thousands, and each as a SnapshotAnnotation with its two strings is 80 bytes. Here each is
// 24 bytes, its stage and name interned in a table of the texts met. Read back as
// SnapshotAnnotation values, like the std::vector<SnapshotAnnotation> it stands for.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "snapshot/indexed_iterator.h"

namespace memsnap {

struct SnapshotAnnotation {
  int64_t device = 0;
  std::string stage;  // "START" or "END"
  std::string name;
  int64_t time_us = 0;
  bool operator==(const SnapshotAnnotation&) const = default;
};

class AnnotationList {
 public:
  using const_iterator = IndexedIterator<AnnotationList, SnapshotAnnotation>;
  using value_type = SnapshotAnnotation;

  size_t size() const { return rows_.size(); }
  bool empty() const { return rows_.empty(); }
  void reserve(size_t annotations) { rows_.reserve(annotations); }
  void push_back(const SnapshotAnnotation& annotation);
  SnapshotAnnotation operator[](size_t i) const {
    const Row& row = rows_[i];
    return {row.device, texts_[row.stage], texts_[row.name], row.time_us};
  }
  // Without copying the texts.
  int64_t device(size_t i) const { return rows_[i].device; }
  int64_t time_us(size_t i) const { return rows_[i].time_us; }
  const std::string& stage(size_t i) const { return texts_[rows_[i].stage]; }
  const std::string& name(size_t i) const { return texts_[rows_[i].name]; }
  const_iterator begin() const;
  const_iterator end() const;
  bool operator==(const AnnotationList& other) const;

 private:
  struct Row {
    int64_t device;
    int64_t time_us;
    uint32_t stage, name;  // in texts_
  };
  static_assert(sizeof(Row) == 24);
  uint32_t intern(const std::string& text);

  std::vector<Row> rows_;
  std::vector<std::string> texts_;
  std::unordered_map<std::string, uint32_t> text_ids_;
};

inline AnnotationList::const_iterator AnnotationList::begin() const { return {this, 0}; }
inline AnnotationList::const_iterator AnnotationList::end() const { return {this, size()}; }

}  // namespace memsnap
