#include "snapshot/memo_strings.h"

#include <algorithm>
#include <atomic>
#include <cstring>

namespace memsnap::pickle {

MemoStrings::MemoStrings(uint64_t capacity) : capacity_(capacity) {
  const uint64_t words = capacity / 64 + 1;
  is_string_.reset(new uint64_t[words]);  // not zeroed: each word is written before it is read
  strings_before_.reset(new uint32_t[words]);
  offsets_.reset(new uint32_t[capacity]);
}

void MemoStrings::begin_word(uint64_t index) {
  if (index > 0) std::atomic_ref<uint64_t>(is_string_[index / 64 - 1]).store(word_, std::memory_order_relaxed);
  strings_before_[index / 64] = static_cast<uint32_t>(strings_);
  word_ = 0;
}

void MemoStrings::publish(uint64_t count) {
  // The word of the last entry noted, not yet stored whole.
  if (count > 0) std::atomic_ref<uint64_t>(is_string_[(count - 1) / 64]).store(word_, std::memory_order_relaxed);
}

void MemoStrings::append(const MemoStrings& from, uint64_t base, uint64_t count) {
  uint64_t taken = 0;  // of from's strings
  for (uint64_t done = 0; done < count;) {
    // Of from's word holding entry `done` (always its first), the entries that fit in the
    // word being filled here.
    const uint64_t index = base + done;
    const unsigned in_from = static_cast<unsigned>(std::min<uint64_t>(64 - done % 64, count - done));
    const unsigned shift = static_cast<unsigned>(done % 64);
    const unsigned n = std::min<unsigned>(in_from, 64 - static_cast<unsigned>(index % 64));
    const uint64_t word = std::atomic_ref<uint64_t>(from.is_string_[done / 64]).load(std::memory_order_relaxed);
    const uint64_t bits = (word >> shift) & (n == 64 ? ~uint64_t{0} : (uint64_t{1} << n) - 1);
    if (index % 64 == 0) begin_word(index);
    word_ |= bits << (index % 64);
    const auto strings = static_cast<uint64_t>(__builtin_popcountll(bits));
    std::memcpy(offsets_.get() + strings_, from.offsets_.get() + taken, strings * sizeof(uint32_t));
    strings_ += strings;
    taken += strings;
    done += n;
  }
}

uint32_t MemoStrings::offset(uint64_t index) const {
  if (index >= capacity_) return kNotAString;
  const uint64_t word = std::atomic_ref<uint64_t>(is_string_[index / 64]).load(std::memory_order_relaxed);
  if (((word >> (index % 64)) & 1) == 0) return kNotAString;
  const uint64_t below = word & ((uint64_t{1} << (index % 64)) - 1);
  return offsets_[strings_before_[index / 64] + static_cast<uint64_t>(__builtin_popcountll(below))];
}

}  // namespace memsnap::pickle
