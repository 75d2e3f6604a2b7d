#include "history/compile_unit_ranges.h"

#include <algorithm>

namespace memsnap {

CompileUnitRanges::CompileUnitRanges(Dwarf* dwarf, Dwarf_Addr bias) : dwarf_(dwarf), bias_(bias) {
  if (dwarf_ == nullptr) return;
  Dwarf_Off offset = 0;
  Dwarf_Off next = 0;
  size_t header_size = 0;
  while (dwarf_nextcu(dwarf_, offset, &next, &header_size, nullptr, nullptr, nullptr) == 0) {
    Dwarf_Die unit;
    if (dwarf_offdie(dwarf_, offset + header_size, &unit) != nullptr) {
      Dwarf_Addr base = 0, start = 0, end = 0;
      for (ptrdiff_t at = 0; (at = dwarf_ranges(&unit, at, &base, &start, &end)) > 0;)
        if (start < end) ranges_.push_back({start, end, offset + header_size});
    }
    offset = next;
  }
  std::sort(ranges_.begin(), ranges_.end(), [](const Range& a, const Range& b) { return a.start < b.start; });
}

bool CompileUnitRanges::find(Dwarf_Addr pc, Dwarf_Die* unit) const {
  if (pc < bias_) return false;
  const Dwarf_Addr address = pc - bias_;
  auto it = std::upper_bound(ranges_.begin(), ranges_.end(), address,
                             [](Dwarf_Addr a, const Range& r) { return a < r.start; });
  // Units' ranges should not overlap in linked code; looking back a few ranges rather than at
  // the nearest only tolerates a unit whose range encloses another's.
  for (int steps = 0; it != ranges_.begin() && steps < 8; ++steps) {
    --it;
    if (address < it->end) return dwarf_offdie(dwarf_, it->unit, unit) != nullptr;
  }
  return false;
}

}  // namespace memsnap
