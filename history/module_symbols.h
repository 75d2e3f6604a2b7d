// A module's ELF symbols sorted by address, for looking functions up by address in
// O(log n). libdwfl's own lookup (dwfl_module_addrinfo) scans the whole symbol table for every
// address: on a library with a million symbols (PyTorch's libtorch_cuda.so) that is
// milliseconds per frame and seconds per snapshot with C++ stacks. The index is built when a
// snapshot first names an address in the module, so it is built in few passes over memory:
// its sort is a radix sort of packed keys, and each field is an array of its own.
#pragma once

#include <cstdint>
#include <vector>

struct Dwfl_Module;

namespace memsnap {

class ModuleSymbols {
 public:
  struct Found {
    const char* name = nullptr;  // owned by libdwfl's module (lives with the session)
    uint64_t offset = 0;         // of the address into the symbol
  };

  explicit ModuleSymbols(::Dwfl_Module* module);

  // The function symbol whose [start, start + size) holds `address` (global before weak before
  // local, then the nearest start); failing that the nearest sizeless symbol before it, as
  // libdwfl answers. A null name when there is none.
  Found at(uint64_t address) const;

 private:
  // By start, then rank (0 global, 1 weak, 2 local), then place in the symbol table.
  std::vector<uint64_t> starts_;
  std::vector<uint64_t> sizes_;
  std::vector<const char*> names_;
  std::vector<uint8_t> ranks_;
  uint64_t largest_ = 0;  // the largest size, bounding how far back a lookup looks
};

}  // namespace memsnap
