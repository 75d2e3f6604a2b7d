// Which compile unit of a module holds an address, from the units' own address ranges.
//
// libdw finds a unit through .debug_aranges, and the libdw of Debian 12 (elfutils 0.188) does
// not look further when that section lacks the unit: it fails, or (when other units are listed)
// returns a neighbouring unit. clang emits no .debug_aranges unless asked (-gdwarf-aranges), so
// for clang-built code frames had neither file nor line. This index is built once per module,
// only when libdw's own answer is wrong, from each unit's DW_AT_ranges or low_pc/high_pc.
#pragma once

#include <elfutils/libdw.h>

#include <vector>

namespace memsnap {

class CompileUnitRanges {
 public:
  // `bias`: what to subtract from a process address to get the module's DWARF address.
  CompileUnitRanges(Dwarf* dwarf, Dwarf_Addr bias);

  // The unit whose ranges hold process address `pc`; false when none does.
  bool find(Dwarf_Addr pc, Dwarf_Die* unit) const;
  Dwarf_Addr bias() const { return bias_; }

 private:
  struct Range {
    Dwarf_Addr start = 0;  // module addresses, [start, end)
    Dwarf_Addr end = 0;
    Dwarf_Off unit = 0;  // the unit DIE's offset
  };
  Dwarf* dwarf_;
  Dwarf_Addr bias_;
  std::vector<Range> ranges_;  // by start
};

}  // namespace memsnap
