#include "history/stack_table.h"

#include <algorithm>

namespace memsnap {
namespace {

uint64_t hash_frames(const uintptr_t* frames, size_t count) {
  uint64_t hash = 0x9E3779B97F4A7C15ull ^ count;
  for (size_t i = 0; i < count; ++i) {
    hash ^= frames[i] + 0x9E3779B97F4A7C15ull + (hash << 6) + (hash >> 2);
    hash *= 0xff51afd7ed558ccdull;
  }
  return hash ^ (hash >> 33);
}

}  // namespace

bool StackTable::same(const Span& span, const uintptr_t* frames, size_t count) const {
  return span.count == count && std::equal(frames, frames + count, frames_.begin() +
                                                                        static_cast<std::ptrdiff_t>(span.offset));
}

StackId StackTable::intern(const uintptr_t* frames, size_t count) {
  const uint64_t hash = hash_frames(frames, count);
  if (index_.empty()) index_.resize(1024);
  const size_t mask = index_.size() - 1;
  size_t slot = hash & mask;
  for (; index_[slot].id != kNoStack; slot = (slot + 1) & mask)
    if (index_[slot].hash == hash && same(spans_[index_[slot].id], frames, count))
      return index_[slot].id;
  if (frames_.size() + count > max_frames_ || spans_.size() >= kNoStack - 1) return kNoStack;
  const auto id = static_cast<StackId>(spans_.size());
  spans_.push_back({frames_.size(), static_cast<uint32_t>(count)});
  frames_.insert(frames_.end(), frames, frames + count);
  index_[slot] = {hash, id};
  if (spans_.size() * 2 > index_.size()) grow_index();
  return id;
}

void StackTable::grow_index() {
  std::vector<Slot> old = std::move(index_);
  index_.assign(old.size() * 2, Slot{});
  const size_t mask = index_.size() - 1;
  for (const Slot& entry : old) {
    if (entry.id == kNoStack) continue;
    size_t slot = entry.hash & mask;
    while (index_[slot].id != kNoStack) slot = (slot + 1) & mask;
    index_[slot] = entry;
  }
}

std::vector<uintptr_t> StackTable::frames(StackId id) const {
  if (id >= spans_.size()) return {};
  const Span& span = spans_[id];
  const auto begin = frames_.begin() + static_cast<std::ptrdiff_t>(span.offset);
  return {begin, begin + span.count};
}

size_t StackTable::size() const {
  return spans_.size();
}

void StackTable::clear() {
  frames_.clear();
  spans_.clear();
  index_.clear();
}

}  // namespace memsnap
