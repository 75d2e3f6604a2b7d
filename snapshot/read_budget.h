// What reading a snapshot may build, measured against the input it is built from. Every
// reader charges what it makes here (containers, tables, strings, records: their bytes, with
// the allocator's rounding and a growing vector's spare room), and the total may not pass
// kBytesPerInputByte for each byte of (decompressed) input read so far, plus kBaseBytes.
//
// A real snapshot needs well under that: its records are smaller than their encoding (a
// PyTorch trace entry is 80-90 pickled bytes and 24 bytes in memory). Input that claims much
// from little, such as 45 million empty JSON objects in a 130 KB gzip file or a pickle of
// `}a` repeated, is refused when it passes the budget, with one line naming the byte it was
// read to, instead of taking the machine's memory. Counts an input states (an array's
// length) are never charged or reserved ahead: only what is actually built.
#pragma once

#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>

namespace memsnap {

// What a reader says when an allocation fails all the same (the machine's memory, or a
// process limit such as ulimit -v, is smaller than the budget).
inline constexpr const char* kNotEnoughMemoryToRead = "not enough memory to read it (the machine's, or this process's limit)";

struct ReadBudgetExceeded : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class ReadBudget {
 public:
  static constexpr uint64_t kBytesPerInputByte = 3;
  static constexpr uint64_t kBaseBytes = uint64_t{32} << 20;

  // Over input still arriving: `input_read()` says how many bytes have been read so far (asked
  // only when the charges near the limit last computed).
  explicit ReadBudget(std::function<uint64_t()> input_read, uint64_t base = kBaseBytes)
      : input_read_(std::move(input_read)), base_(base) {
    limit_ = base_;
  }
  // Over input held whole: `input_bytes` of it.
  explicit ReadBudget(uint64_t input_bytes, uint64_t base = kBaseBytes) : base_(base) {
    limit_ = limit_for(input_bytes);
  }
  ReadBudget(const ReadBudget&) = delete;
  ReadBudget& operator=(const ReadBudget&) = delete;

  // Throws ReadBudgetExceeded when the total passes the limit.
  void charge(uint64_t bytes) {
    used_ += bytes;
    if (used_ > peak_) [[unlikely]] {
      peak_ = used_;
      if (peak_ > limit_) over();
    }
  }
  // Whether `bytes` more could be charged now: for what a reader may leave out (a derived
  // table past its room), where charge would refuse the input.
  bool has_room(uint64_t bytes);
  void refund(uint64_t bytes) { used_ -= bytes < used_ ? bytes : used_; }
  uint64_t used() const { return used_; }
  uint64_t peak() const { return peak_; }

 private:
  uint64_t limit_for(uint64_t input) const {
    return input > (UINT64_MAX - base_) / kBytesPerInputByte ? UINT64_MAX : input * kBytesPerInputByte + base_;
  }
  [[noreturn, gnu::cold]] void fail(uint64_t input) const;
  [[gnu::cold]] void over();

  std::function<uint64_t()> input_read_;  // empty: the input was known whole
  uint64_t base_;
  uint64_t limit_ = 0;
  uint64_t used_ = 0;
  uint64_t peak_ = 0;  // the most charged at once
};

}  // namespace memsnap
