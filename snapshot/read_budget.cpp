#include "snapshot/read_budget.h"

namespace memsnap {
namespace {

std::string mib(uint64_t bytes) {
  const uint64_t tenths = (bytes * 10 + (uint64_t{1} << 19)) >> 20;
  return std::to_string(tenths / 10) + "." + std::to_string(tenths % 10) + " MiB";
}

}  // namespace

bool ReadBudget::has_room(uint64_t bytes) {
  if (used_ + bytes > limit_ && input_read_) limit_ = limit_for(input_read_());
  return used_ + bytes <= limit_;
}

void ReadBudget::over() {
  const uint64_t input = input_read_ ? input_read_() : UINT64_MAX;
  if (input_read_) limit_ = limit_for(input);
  if (used_ > limit_) fail(input);
}

void ReadBudget::fail(uint64_t input) const {
  std::string read = input_read_ ? " from the first " + std::to_string(input) + " bytes"
                                 : "";
  throw ReadBudgetExceeded("refused: what it describes" + read + " would take more than " + mib(limit_) +
                           " in memory (the limit is " + std::to_string(kBytesPerInputByte) +
                           " bytes for each byte of input, plus " + mib(base_) +
                           "): not a real snapshot, or a damaged one");
}

}  // namespace memsnap
