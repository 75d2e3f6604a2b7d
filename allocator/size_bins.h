// Size bins for free blocks, and a bitmap of the bins that hold any.
//
// A block size (a multiple of 512 B) maps to one of 4096 bins whose ranges are increasing
// and disjoint: below 32 KiB one bin per 512 B step, above it 64 bins per power of two (so a
// bin spans at most 1/64 of its size). Because the ranges are ordered, "the smallest block
// of at least N bytes" is either in N's own bin or is the first block of the next non-empty
// bin, which the two-level bitmap finds with two bit scans.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

namespace memsnap {

constexpr size_t kSizeBinCount = 4096;
constexpr size_t kNoSizeBin = kSizeBinCount;

inline size_t size_bin(size_t size) {
  constexpr int kSubBinBits = 6;  // 64 bins per power of two
  constexpr uint64_t kLinearUnits = uint64_t{1} << kSubBinBits;
  const uint64_t units = size >> 9;  // 512-byte units
  if (units < kLinearUnits) return static_cast<size_t>(units);
  const int log2 = 63 - __builtin_clzll(units);  // >= kSubBinBits
  const uint64_t sub = (units >> (log2 - kSubBinBits)) - kLinearUnits;
  // The largest possible size, 2^64 - 512, lands in bin 3199: every bin index fits.
  return static_cast<size_t>(kLinearUnits + static_cast<uint64_t>(log2 - kSubBinBits) * kLinearUnits + sub);
}

class SizeBinBitmap {
 public:
  void set(size_t bin) {
    words_[bin >> 6] |= uint64_t{1} << (bin & 63);
    summary_ |= uint64_t{1} << (bin >> 6);
  }
  void clear(size_t bin) {
    uint64_t& word = words_[bin >> 6];
    word &= ~(uint64_t{1} << (bin & 63));
    if (word == 0) summary_ &= ~(uint64_t{1} << (bin >> 6));
  }
  bool test(size_t bin) const { return (words_[bin >> 6] >> (bin & 63)) & 1; }
  bool none() const { return summary_ == 0; }

  // The first set bin at or after `from`, or kNoSizeBin.
  size_t next_set(size_t from) const {
    if (from >= kSizeBinCount) return kNoSizeBin;
    size_t word_index = from >> 6;
    const uint64_t here = words_[word_index] & (~uint64_t{0} << (from & 63));
    if (here != 0) return (word_index << 6) + static_cast<size_t>(__builtin_ctzll(here));
    if (word_index == 63) return kNoSizeBin;
    const uint64_t later = summary_ & (~uint64_t{0} << (word_index + 1));
    if (later == 0) return kNoSizeBin;
    word_index = static_cast<size_t>(__builtin_ctzll(later));
    return (word_index << 6) + static_cast<size_t>(__builtin_ctzll(words_[word_index]));
  }

 private:
  static_assert(kSizeBinCount == 64 * 64, "a 64-bit summary word covers 64 words of bins");
  std::array<uint64_t, 64> words_{};
  uint64_t summary_ = 0;  // bit w: words_[w] has a set bit
};

}  // namespace memsnap
