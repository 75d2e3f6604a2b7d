// Turns return addresses into what people read: demangled function, source file and line,
// with the frames the compiler inlined at that address, from the process's own DWARF debug
// info (elfutils' libdwfl). Each address is resolved once per process and cached.
//
// Degrades rather than fails: without debug info a frame is `function+0xoffset` from the
// symbol table, without a symbol `module+0xoffset`, and without a module the bare address.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "allocator/allocator_mutex.h"

struct Dwfl;  // elfutils' session and module types, kept out of this header
struct Dwfl_Module;

namespace memsnap {

class CompileUnitRanges;
class ModuleSymbols;

struct SourceFrame {
  std::string function;  // demangled; "??" when unknown
  std::string file;      // empty when unknown
  int line = 0;          // 0 when unknown
};

class Symbolizer {
 public:
  Symbolizer();
  ~Symbolizer();
  Symbolizer(const Symbolizer&) = delete;
  Symbolizer& operator=(const Symbolizer&) = delete;

  // The frames at a return address, innermost (inlined) first, then the function that
  // contains them.
  std::vector<SourceFrame> frames_at(uintptr_t return_address);

 private:
  ::Dwfl* session();
  std::vector<SourceFrame> resolve(uintptr_t address);
  // The module's compile unit at `pc` (libdw's lookup, else unit_ranges_); false when none.
  // `unit_die` is a Dwarf_Die*, which this header cannot name (libdw's typedef of an
  // anonymous struct).
  bool find_unit(::Dwfl_Module* module, uint64_t pc, void* unit_die, uint64_t* bias);

  AllocatorMutex mutex_;
  ::Dwfl* dwfl_ = nullptr;
  bool reported_ = false;
  std::unordered_map<uintptr_t, std::vector<SourceFrame>> cache_;
  std::unordered_map<const ::Dwfl_Module*, std::unique_ptr<CompileUnitRanges>> unit_ranges_;
  std::unordered_map<const ::Dwfl_Module*, std::unique_ptr<ModuleSymbols>> module_symbols_;
};

// The process-wide symbolizer (its cache lives as long as the process).
Symbolizer& process_symbolizer();

std::string demangle(const char* symbol);

}  // namespace memsnap
