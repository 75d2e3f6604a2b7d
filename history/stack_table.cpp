#include "history/stack_table.h"

#include <algorithm>
#include <atomic>

namespace memsnap {
namespace {

// Four independent lanes, mixed at the end: a single chain of multiplies, one per frame,
// made the hash of a 14-frame stack take longer than the rest of interning.
uint64_t hash_frames(const uintptr_t* frames, size_t count) {
  constexpr uint64_t kMultiplier = 0x9E3779B97F4A7C15ull;
  uint64_t lanes[4] = {count, 0x243F6A8885A308D3ull, 0x13198A2E03707344ull, 0xA4093822299F31D0ull};
  size_t i = 0;
  for (; i + 4 <= count; i += 4)
    for (size_t lane = 0; lane < 4; ++lane)
      lanes[lane] = (lanes[lane] ^ frames[i + lane]) * kMultiplier;
  for (size_t lane = 0; i < count; ++i, ++lane) lanes[lane] = (lanes[lane] ^ frames[i]) * kMultiplier;
  uint64_t hash = lanes[0] ^ (lanes[1] >> 17 | lanes[1] << 47) ^ (lanes[2] >> 31 | lanes[2] << 33) ^
                  (lanes[3] >> 43 | lanes[3] << 21);
  // murmur3's finalizer: every bit of the input reaches the low bits the index uses.
  hash ^= hash >> 33;
  hash *= 0xff51afd7ed558ccdull;
  hash ^= hash >> 33;
  hash *= 0xc4ceb9fe1a85ec53ull;
  return hash ^ (hash >> 33);
}

}  // namespace

uint64_t StackTable::next_key() {
  static std::atomic<uint64_t> last{0};
  return last.fetch_add(1, std::memory_order_relaxed) + 1;
}

bool StackTable::same(const Span& span, const uintptr_t* frames, size_t count) const {
  return span.count == count && std::equal(frames, frames + count, frames_.begin() +
                                                                        static_cast<std::ptrdiff_t>(span.offset));
}

StackId StackTable::intern(const uintptr_t* frames, size_t count) {
  // (The low 32 bits: the finalizer mixed every bit of the input into them.)
  const auto hash = static_cast<uint32_t>(hash_frames(frames, count));
  if (index_.empty()) index_.resize(1024);
  const size_t mask = index_.size() - 1;
  size_t slot = hash & mask;
  for (; index_[slot].id != kNoStack; slot = (slot + 1) & mask)
    if (index_[slot].hash == hash && same(index_[slot].span, frames, count))
      return index_[slot].id;
  if (frames_.size() + count > max_frames_ || spans_.size() >= kNoStack - 1) return kNoStack;
  const auto id = static_cast<StackId>(spans_.size());
  const Span span{static_cast<uint32_t>(frames_.size()), static_cast<uint32_t>(count)};
  spans_.push_back(span);
  frames_.insert(frames_.end(), frames, frames + count);
  index_[slot] = {hash, id, span};
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
  std::vector<uintptr_t> out(id < spans_.size() ? spans_[id].count : 0);
  copy_frames(id, out.data(), out.size());
  return out;
}

size_t StackTable::copy_frames(StackId id, uintptr_t* out, size_t max) const {
  if (id >= spans_.size()) return 0;
  const Span& span = spans_[id];
  const size_t count = std::min<size_t>(span.count, max);
  std::copy_n(frames_.begin() + static_cast<std::ptrdiff_t>(span.offset), count, out);
  return count;
}

size_t StackTable::size() const {
  return spans_.size();
}

void StackTable::clear() {
  frames_.clear();
  spans_.clear();
  index_.clear();
  key_ = next_key();
}

}  // namespace memsnap
